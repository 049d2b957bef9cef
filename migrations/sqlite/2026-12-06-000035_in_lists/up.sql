-- The CHECK constraints and partial-index conditions of the rows an accepted
-- webhook writes (deliveries, tasks, outbox entries) name their values as
-- chains of `=` joined by OR instead of IN lists. SQLite evaluates an IN list
-- of more than two constants through a temporary index of its values, and in
-- a CHECK constraint or an index's condition it builds that index again for
-- every row written: 34 temporary inserts and 3 temporary tables for each new
-- task, 7 and 2 for its outbox entry, 5 and 1 for its delivery, about a tenth
-- of what the writer spent on a webhook. A chain of comparisons allows the
-- same values and builds nothing.
--
-- SQLite uses a partial index only for a query that holds its condition as
-- written, so the queries spell the same chains (store::sessions and
-- store::queue). An UPDATE's trigger keeps its IN list: a trigger builds it
-- once per statement.
--
-- A CHECK constraint changes with a rebuild of its table, outside diesel's
-- transaction with foreign keys off (metadata.toml), as in 000034; safe to run
-- again should the process stop between its commit and diesel's note.
PRAGMA foreign_keys = OFF;
BEGIN;
CREATE TABLE webhook_deliveries_rebuilt (
    delivery_key  TEXT PRIMARY KEY NOT NULL,
    delivery_id   TEXT NOT NULL,
    event_type    TEXT NOT NULL,
    action        TEXT,
    status        TEXT NOT NULL CHECK (status = 'accepted' OR status = 'ignored' OR
        status = 'duplicate' OR status = 'rejected' OR status = 'recorded'),
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
    state          TEXT NOT NULL CHECK (state = 'received' OR state = 'queued' OR
        state = 'leased' OR state = 'running' OR state = 'awaiting_approval' OR
        state = 'waiting_user' OR state = 'verifying_reply' OR state = 'retry_wait' OR
        state = 'blocked_workspace' OR state = 'cancel_requested' OR
        state = 'needs_reconciliation' OR state = 'succeeded' OR
        state = 'succeeded_with_rest_fallback' OR state = 'failed' OR state = 'failed_reply' OR
        state = 'cancelled' OR state = 'aborted' OR state = 'timed_out' OR state = 'ignored' OR
        state = 'duplicate' OR state = 'rejected'),
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
    WHERE (state = 'leased' OR state = 'running' OR state = 'awaiting_approval' OR
        state = 'verifying_reply' OR state = 'cancel_requested');
CREATE INDEX tasks_queued ON tasks (state, id, repo_key) WHERE state = 'queued';
CREATE INDEX tasks_repo_active ON tasks (repo_key, state, id)
    WHERE (state = 'leased' OR state = 'running' OR state = 'awaiting_approval' OR
        state = 'verifying_reply' OR state = 'cancel_requested' OR
        state = 'needs_reconciliation' OR state = 'blocked_workspace' OR state = 'retry_wait');
CREATE INDEX tasks_queued_commands ON tasks (session_key, id)
    WHERE state = 'queued' AND command IS NOT NULL;
CREATE UNIQUE INDEX tasks_live_continuation ON tasks (workflow_id)
    WHERE continuation IS NOT NULL AND (state = 'received' OR state = 'queued' OR
        state = 'leased' OR state = 'running' OR state = 'awaiting_approval' OR
        state = 'waiting_user' OR state = 'verifying_reply' OR state = 'retry_wait' OR
        state = 'blocked_workspace' OR state = 'cancel_requested' OR
        state = 'needs_reconciliation');
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
    handoff_phase       TEXT CHECK (handoff_phase = 'requested' OR
        handoff_phase = 'interrupting' OR handoff_phase = 'revoked' OR
        handoff_phase = 'dedicated'),
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
    WHERE (handoff_phase = 'requested' OR handoff_phase = 'interrupting' OR
        handoff_phase = 'revoked');

COMMIT;
PRAGMA foreign_keys = ON;
