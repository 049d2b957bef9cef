-- The IN lists again (see up.sql): a rebuild, with foreign keys off, outside
-- diesel's transaction (metadata.toml).
PRAGMA foreign_keys = OFF;
BEGIN;
CREATE TABLE webhook_deliveries_rebuilt (
    delivery_key  TEXT PRIMARY KEY NOT NULL,
    delivery_id   TEXT NOT NULL,
    event_type    TEXT NOT NULL,
    action        TEXT,
    status        TEXT NOT NULL CHECK (status IN ('accepted', 'ignored', 'duplicate', 'rejected', 'recorded')),
    reason        TEXT,
    repo_key      TEXT,
    resource_key  TEXT,
    comment_id    BIGINT,
    content_key   TEXT UNIQUE,
    duplicate_of  TEXT,
    task_id       TEXT,
    sender        TEXT,
    payload_hash  TEXT NOT NULL,
    received_at   TEXT NOT NULL
);
INSERT INTO webhook_deliveries_rebuilt (delivery_key, delivery_id, event_type, action, status, reason, repo_key, resource_key, comment_id, content_key, duplicate_of, task_id, sender, payload_hash, received_at)
    SELECT delivery_key, delivery_id, event_type, action, status, reason, repo_key, resource_key, comment_id, content_key, duplicate_of, task_id, sender, payload_hash, received_at FROM webhook_deliveries;
DROP TABLE webhook_deliveries;
ALTER TABLE webhook_deliveries_rebuilt RENAME TO webhook_deliveries;
CREATE INDEX webhook_deliveries_received ON webhook_deliveries (received_at);

CREATE TABLE tasks_rebuilt (
    id             INTEGER PRIMARY KEY NOT NULL,
    task_id        TEXT NOT NULL UNIQUE,
    delivery_key   TEXT NOT NULL,
    repo_key       TEXT NOT NULL REFERENCES repositories (repo_key) DEFERRABLE INITIALLY DEFERRED,
    session_key    TEXT NOT NULL REFERENCES sessions (session_key) DEFERRABLE INITIALLY DEFERRED,
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

CREATE TABLE outbox_entries_rebuilt (
    id                  INTEGER PRIMARY KEY NOT NULL,
    queue_id            TEXT NOT NULL UNIQUE,
    session_key         TEXT NOT NULL REFERENCES sessions (session_key) DEFERRABLE INITIALLY DEFERRED,
    task_id             TEXT NOT NULL UNIQUE REFERENCES tasks (task_id) DEFERRABLE INITIALLY DEFERRED,
    operation_id        TEXT NOT NULL UNIQUE,
    fingerprint         TEXT NOT NULL,
    mode                TEXT NOT NULL,
    status              TEXT NOT NULL CHECK (status IN ('queued', 'sending')),
    auto_drain          BOOLEAN NOT NULL,
    hold_reason         TEXT,
    user_text           TEXT NOT NULL,
    created_at          TEXT NOT NULL,
    updated_at          TEXT NOT NULL,
    version             BIGINT NOT NULL DEFAULT 1,
    command             TEXT,
    command_argument    TEXT,
    expected_turn_id    TEXT CHECK ((mode = 'steer-running') = (expected_turn_id IS NOT NULL)),
    accepted_turn_id    TEXT,
    supersedes          TEXT,
    revert_turn_id      TEXT,
    reverted_at         TEXT,
    handoff_phase       TEXT CHECK (handoff_phase IN ('requested', 'interrupting', 'revoked', 'dedicated')),
    handoff_thread_id   TEXT,
    handoff_turn_id     TEXT,
    handoff_run_task_id TEXT
);
INSERT INTO outbox_entries_rebuilt (id, queue_id, session_key, task_id, operation_id, fingerprint, mode, status, auto_drain, hold_reason, user_text, created_at, updated_at, version, command, command_argument, expected_turn_id, accepted_turn_id, supersedes, revert_turn_id, reverted_at, handoff_phase, handoff_thread_id, handoff_turn_id, handoff_run_task_id)
    SELECT id, queue_id, session_key, task_id, operation_id, fingerprint, mode, status, auto_drain, hold_reason, user_text, created_at, updated_at, version, command, command_argument, expected_turn_id, accepted_turn_id, supersedes, revert_turn_id, reverted_at, handoff_phase, handoff_thread_id, handoff_turn_id, handoff_run_task_id FROM outbox_entries;
DROP TABLE outbox_entries;
ALTER TABLE outbox_entries_rebuilt RENAME TO outbox_entries;
CREATE INDEX outbox_send_now ON outbox_entries (id)
    WHERE mode IN ('interrupt-running', 'replace-latest') AND status = 'queued';
CREATE INDEX outbox_handoff ON outbox_entries (session_key)
    WHERE handoff_phase IN ('requested', 'interrupting', 'revoked');

COMMIT;
PRAGMA foreign_keys = ON;
