-- How many times the session's thread was started over (`/reset`, or a new
-- thread because the pull request's trust changed): part of a message's
-- fingerprint, so the same words asked of another conversation are
-- another request.
ALTER TABLE sessions ADD COLUMN thread_generation BIGINT NOT NULL DEFAULT 0;
-- An edited comment's attachments (a JSON array of Gitea asset ids), for the
-- rewritten message's fingerprint.
ALTER TABLE comment_changes ADD COLUMN attachments TEXT NOT NULL DEFAULT '[]';
