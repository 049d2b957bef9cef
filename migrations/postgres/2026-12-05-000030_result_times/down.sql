ALTER TABLE result_deliveries DROP COLUMN acknowledged_at;
ALTER TABLE result_deliveries DROP COLUMN delivered_at;
