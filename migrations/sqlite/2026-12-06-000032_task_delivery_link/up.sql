-- SQLite changes a column's constraints by rebuilding its table, and a
-- rebuild needs foreign keys off (dropping the old table would otherwise
-- delete what the history, outbox and receipts point at), which no
-- transaction can do: so this migration runs outside diesel's transaction
-- (metadata.toml) in one of its own, and is safe to run again should the
-- process stop between its commit and diesel's note that it ran.
PRAGMA foreign_keys = OFF;
BEGIN;
-- A task's delivery stays linked both ways (the task names the delivery it was
-- made from, the delivery row names its task), but no longer as a foreign key
-- from tasks to deliveries: enforcing it needed an index on tasks by delivery
-- key, and a delivery key is Gitea's random UUID, so every accept wrote that
-- index at a random place: a fifth of the pages each accept wrote. Retention,
-- the one reader of that index, now asks the delivery row for its task.
--
-- Every delivery a task was made from names the task already; an older row
-- that does not is given it first, while the index still answers.
UPDATE webhook_deliveries
SET task_id = (SELECT t.task_id FROM tasks t WHERE t.delivery_key = webhook_deliveries.delivery_key)
WHERE task_id IS NULL
  AND EXISTS (SELECT 1 FROM tasks t WHERE t.delivery_key = webhook_deliveries.delivery_key);
DROP INDEX IF EXISTS tasks_delivery;

CREATE TABLE tasks_rebuilt (
    id             INTEGER PRIMARY KEY NOT NULL,
    task_id        TEXT NOT NULL UNIQUE,
    delivery_key   TEXT NOT NULL,
    repo_key       TEXT NOT NULL REFERENCES repositories (repo_key),
    session_key    TEXT NOT NULL REFERENCES sessions (session_key),
    resource_key   TEXT NOT NULL,
    -- One task per triggering comment (or review), ever: replays and edits of the
    -- same comment can never create a second one.
    trigger_key    TEXT NOT NULL UNIQUE,
    comment_id     BIGINT,
    author         TEXT NOT NULL,
    state          TEXT NOT NULL CHECK (state IN ('received','queued','leased','running','awaiting_approval','waiting_user','verifying_reply','retry_wait','blocked_workspace','cancel_requested','needs_reconciliation','succeeded','succeeded_with_rest_fallback','failed','failed_reply','cancelled','aborted','timed_out','ignored','duplicate','rejected')),
    state_version  BIGINT NOT NULL,
    attempt        BIGINT NOT NULL DEFAULT 0,
    reply_attempt  BIGINT NOT NULL DEFAULT 0,
    thread_id      TEXT,
    turn_id        TEXT,
    lease_id       TEXT,
    next_retry_at  TEXT,
    error_code     TEXT,
    head_ref       TEXT,
    base_ref       TEXT,
    created_at     TEXT NOT NULL,
    updated_at     TEXT NOT NULL,
    command        TEXT,
    steered_into   TEXT,
    workflow_id    TEXT,
    continuation   BIGINT
);
INSERT INTO tasks_rebuilt (id, task_id, delivery_key, repo_key, session_key, resource_key, trigger_key, comment_id, author, state, state_version, attempt, reply_attempt, thread_id, turn_id, lease_id, next_retry_at, error_code, head_ref, base_ref, created_at, updated_at, command, steered_into, workflow_id, continuation)
    SELECT id, task_id, delivery_key, repo_key, session_key, resource_key, trigger_key, comment_id, author, state, state_version, attempt, reply_attempt, thread_id, turn_id, lease_id, next_retry_at, error_code, head_ref, base_ref, created_at, updated_at, command, steered_into, workflow_id, continuation FROM tasks;
DROP TABLE tasks;
ALTER TABLE tasks_rebuilt RENAME TO tasks;
CREATE INDEX tasks_state ON tasks (state);
CREATE INDEX tasks_session_driven ON tasks (session_key, id)
    WHERE state IN ('leased', 'running', 'awaiting_approval', 'verifying_reply', 'cancel_requested');
CREATE INDEX tasks_queued ON tasks (state, id, repo_key) WHERE state = 'queued';
CREATE INDEX tasks_repo_active ON tasks (repo_key, state, id)
    WHERE state IN ('leased', 'running', 'awaiting_approval', 'verifying_reply', 'cancel_requested', 'needs_reconciliation', 'blocked_workspace', 'retry_wait');
CREATE INDEX tasks_queued_commands ON tasks (session_key, id)
    WHERE state = 'queued' AND command IS NOT NULL;
CREATE UNIQUE INDEX tasks_live_continuation ON tasks (workflow_id)
    WHERE continuation IS NOT NULL AND state IN ('received', 'queued', 'leased', 'running',
        'awaiting_approval', 'waiting_user', 'verifying_reply', 'retry_wait',
        'blocked_workspace', 'cancel_requested', 'needs_reconciliation');
CREATE TRIGGER tasks_terminal_immutable BEFORE UPDATE ON tasks
WHEN OLD.state IN ('succeeded','succeeded_with_rest_fallback','failed','failed_reply','cancelled','aborted','timed_out','ignored','duplicate','rejected')
BEGIN
    SELECT RAISE(ABORT, 'task is in a terminal state and can never change');
END;
COMMIT;
PRAGMA foreign_keys = ON;
