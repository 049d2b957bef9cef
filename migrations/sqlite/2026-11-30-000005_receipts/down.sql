DROP INDEX comments_open;
ALTER TABLE comments DROP COLUMN last_error;
ALTER TABLE comments DROP COLUMN next_attempt_at;
ALTER TABLE comments DROP COLUMN attempts;
