-- Receipts and replies are written to Gitea by a worker that retries with
-- backoff: how often it tried, when it may try next, and why it last failed.
ALTER TABLE comments ADD COLUMN attempts BIGINT NOT NULL DEFAULT 0;
ALTER TABLE comments ADD COLUMN next_attempt_at TEXT;
ALTER TABLE comments ADD COLUMN last_error TEXT;
-- The worker's queue: only unfinished receipts are indexed.
CREATE INDEX comments_open ON comments (next_attempt_at) WHERE status IN ('pending', 'posting');
