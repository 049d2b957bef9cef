ALTER TABLE comment_changes DROP COLUMN attachments;
ALTER TABLE sessions DROP COLUMN thread_generation;
