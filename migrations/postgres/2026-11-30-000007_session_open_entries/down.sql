CREATE INDEX outbox_entries_session ON outbox_entries (session_key, id);
ALTER TABLE sessions DROP COLUMN open_entries;
