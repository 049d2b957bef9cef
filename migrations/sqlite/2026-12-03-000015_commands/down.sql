ALTER TABLE outbox_entries DROP COLUMN command;
ALTER TABLE tasks DROP COLUMN command;
