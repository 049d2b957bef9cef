DROP INDEX sessions_paused;
ALTER TABLE sessions DROP COLUMN resumed_at;
ALTER TABLE sessions DROP COLUMN paused_at;
ALTER TABLE sessions DROP COLUMN paused_reason;
