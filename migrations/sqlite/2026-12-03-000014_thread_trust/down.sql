ALTER TABLE sessions DROP COLUMN thread_trust;
