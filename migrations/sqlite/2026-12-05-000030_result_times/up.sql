-- When a result first reached its parent's turn, and when the parent
-- acknowledged it: the workflow page and API show both.
ALTER TABLE result_deliveries ADD COLUMN delivered_at TEXT;
ALTER TABLE result_deliveries ADD COLUMN acknowledged_at TEXT;
