-- The rows an accepted webhook writes check their parents when the
-- transaction commits instead of at each statement: a task its repository and
-- session, an outbox entry its session and task, a receipt and a transition
-- their task. SQLite undoes a failed statement from a copy of every page the
-- statement touched (its statement journal), and keeps one for each
-- multi-row INSERT that an immediate foreign key could abort. The ingest
-- writes these tables with one multi-row INSERT per table and batch, so
-- those copies were 7% of the writer's instructions. A deferred check
-- reads the same parent key; an orphan row still fails its transaction, at
-- its commit. (The ingest's INSERTs also resolve their other constraints
-- without aborting, and count the rows they wrote: see store/ingest/rows.rs.)
--
-- SQLite changes a column's constraints by rebuilding its table, and a
-- rebuild needs foreign keys off (dropping the old table would otherwise
-- delete what other tables point at), which no transaction can do: so this
-- migration runs outside diesel's transaction (metadata.toml) in one of its
-- own, and is safe to run again should the process stop between its commit
-- and diesel's note that it ran.
PRAGMA foreign_keys = OFF;
BEGIN;
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

CREATE TABLE task_transitions_rebuilt (
    id             INTEGER PRIMARY KEY NOT NULL,
    task_id        TEXT NOT NULL REFERENCES tasks (task_id) DEFERRABLE INITIALLY DEFERRED,
    from_state     TEXT,
    to_state       TEXT NOT NULL,
    state_version  BIGINT NOT NULL,
    actor          TEXT NOT NULL,
    reason         TEXT,
    error_code     TEXT,
    at             TEXT NOT NULL,
    UNIQUE (task_id, state_version)
);
INSERT INTO task_transitions_rebuilt (id, task_id, from_state, to_state, state_version, actor, reason, error_code, at)
    SELECT id, task_id, from_state, to_state, state_version, actor, reason, error_code, at FROM task_transitions;
DROP TABLE task_transitions;
ALTER TABLE task_transitions_rebuilt RENAME TO task_transitions;
CREATE INDEX task_transitions_at ON task_transitions (at);
CREATE TRIGGER task_transitions_no_update BEFORE UPDATE ON task_transitions
BEGIN
    SELECT RAISE(ABORT, 'task history is append-only');
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

CREATE TABLE comments_rebuilt (
    comment_key      TEXT PRIMARY KEY NOT NULL,
    task_id          TEXT NOT NULL REFERENCES tasks (task_id) DEFERRABLE INITIALLY DEFERRED,
    kind             TEXT NOT NULL,
    resource_key     TEXT NOT NULL,
    turn_id          TEXT,
    comment_id       BIGINT,
    html_url         TEXT,
    body_hash        TEXT,
    status           TEXT NOT NULL,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL,
    attempts         BIGINT NOT NULL DEFAULT 0,
    next_attempt_at  TEXT,
    last_error       TEXT,
    body             TEXT
);
INSERT INTO comments_rebuilt (comment_key, task_id, kind, resource_key, turn_id, comment_id, html_url, body_hash, status, created_at, updated_at, attempts, next_attempt_at, last_error, body)
    SELECT comment_key, task_id, kind, resource_key, turn_id, comment_id, html_url, body_hash, status, created_at, updated_at, attempts, next_attempt_at, last_error, body FROM comments;
DROP TABLE comments;
ALTER TABLE comments_rebuilt RENAME TO comments;
CREATE INDEX comments_task ON comments (task_id);
CREATE INDEX comments_open ON comments (next_attempt_at) WHERE status IN ('pending', 'posting');
COMMIT;
PRAGMA foreign_keys = ON;
