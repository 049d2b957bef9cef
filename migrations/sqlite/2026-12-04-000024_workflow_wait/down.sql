ALTER TABLE workflows DROP COLUMN denials;
ALTER TABLE workflows DROP COLUMN wait_until;
ALTER TABLE workflows DROP COLUMN wait_reason;
