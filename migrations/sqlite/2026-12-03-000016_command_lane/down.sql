DROP TABLE comment_changes;
DROP INDEX outbox_session_operation;
DROP INDEX tasks_queued_commands;
ALTER TABLE comments DROP COLUMN body;
ALTER TABLE outbox_entries DROP COLUMN command_argument;
