-- The task store of DESIGN §4. Times are RFC 3339 UTC text with microseconds
-- (`2026-11-30T11:27:46.000000Z`), which sorts correctly as text on both backends.

CREATE TABLE repositories (
    repo_key        TEXT PRIMARY KEY NOT NULL,
    instance_id     TEXT NOT NULL,
    owner           TEXT NOT NULL,
    name            TEXT NOT NULL,
    clone_url       TEXT,
    default_branch  TEXT,
    status          TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'disabled', 'blocked')),
    registered_at   TEXT NOT NULL,
    updated_at      TEXT NOT NULL,
    version         BIGINT NOT NULL DEFAULT 1
);

CREATE TABLE sessions (
    session_key   TEXT PRIMARY KEY NOT NULL,
    repo_key      TEXT NOT NULL REFERENCES repositories (repo_key),
    kind          TEXT NOT NULL CHECK (kind IN ('issue', 'pull')),
    number        BIGINT NOT NULL,
    thread_id     TEXT,
    status        TEXT NOT NULL DEFAULT 'active',
    last_task_id  TEXT,
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL,
    version       BIGINT NOT NULL DEFAULT 1
);
CREATE INDEX sessions_repo ON sessions (repo_key);

-- One row per webhook request that passed the signature check. `content_key`
-- (comment id + action + updated_at) is claimed only by accepted and recorded
-- deliveries, so Gitea's manual replay (same bytes, new delivery id) finds it.
CREATE TABLE webhook_deliveries (
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
CREATE INDEX webhook_deliveries_received ON webhook_deliveries (received_at);

CREATE TABLE tasks (
    id             INTEGER PRIMARY KEY NOT NULL,
    task_id        TEXT NOT NULL UNIQUE,
    delivery_key   TEXT NOT NULL REFERENCES webhook_deliveries (delivery_key),
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
    updated_at     TEXT NOT NULL
);
CREATE INDEX tasks_state ON tasks (state);
CREATE INDEX tasks_repo ON tasks (repo_key, id);
CREATE INDEX tasks_session ON tasks (session_key, id);

-- History: one row per transition, written in the same transaction as the
-- compare-and-swap. `from_state` is NULL for the creation row.
CREATE TABLE task_transitions (
    id             INTEGER PRIMARY KEY NOT NULL,
    task_id        TEXT NOT NULL REFERENCES tasks (task_id),
    from_state     TEXT,
    to_state       TEXT NOT NULL,
    state_version  BIGINT NOT NULL,
    actor          TEXT NOT NULL,
    reason         TEXT,
    error_code     TEXT,
    at             TEXT NOT NULL,
    UNIQUE (task_id, state_version)
);

CREATE TABLE attempts (
    attempt_id  TEXT PRIMARY KEY NOT NULL,
    task_id     TEXT NOT NULL REFERENCES tasks (task_id),
    number      BIGINT NOT NULL,
    lease_id    TEXT,
    owner       TEXT,
    status      TEXT NOT NULL,
    outcome     TEXT,
    started_at  TEXT NOT NULL,
    ended_at    TEXT,
    UNIQUE (task_id, number)
);

-- The session's durable outbox (DESIGN §6): a visible entry (queue_id) with an
-- immutable operation identity and the fingerprint of what it asks.
CREATE TABLE outbox_entries (
    id            INTEGER PRIMARY KEY NOT NULL,
    queue_id      TEXT NOT NULL UNIQUE,
    session_key   TEXT NOT NULL REFERENCES sessions (session_key),
    task_id       TEXT NOT NULL UNIQUE REFERENCES tasks (task_id),
    operation_id  TEXT NOT NULL UNIQUE,
    fingerprint   TEXT NOT NULL,
    mode          TEXT NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('queued', 'sending')),
    auto_drain    BOOLEAN NOT NULL,
    hold_reason   TEXT,
    user_text     TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL,
    version       BIGINT NOT NULL DEFAULT 1
);
CREATE INDEX outbox_entries_session ON outbox_entries (session_key, id);

CREATE TABLE turns (
    turn_id       TEXT PRIMARY KEY NOT NULL,
    task_id       TEXT NOT NULL REFERENCES tasks (task_id),
    thread_id     TEXT NOT NULL,
    kind          TEXT NOT NULL,
    status        TEXT NOT NULL,
    event_seq     BIGINT NOT NULL DEFAULT 0,
    final_text    TEXT,
    started_at    TEXT NOT NULL,
    completed_at  TEXT
);
CREATE INDEX turns_task ON turns (task_id);

CREATE TABLE comments (
    comment_key   TEXT PRIMARY KEY NOT NULL,
    task_id       TEXT NOT NULL REFERENCES tasks (task_id),
    kind          TEXT NOT NULL,
    resource_key  TEXT NOT NULL,
    turn_id       TEXT,
    comment_id    BIGINT,
    html_url      TEXT,
    body_hash     TEXT,
    status        TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL
);
CREATE INDEX comments_task ON comments (task_id);

CREATE TABLE approvals (
    approval_id  TEXT PRIMARY KEY NOT NULL,
    task_id      TEXT NOT NULL REFERENCES tasks (task_id),
    kind         TEXT NOT NULL,
    detail       TEXT NOT NULL,
    status       TEXT NOT NULL,
    decision     TEXT,
    decided_by   TEXT,
    created_at   TEXT NOT NULL,
    decided_at   TEXT
);
CREATE INDEX approvals_task ON approvals (task_id);

-- Append-only: corrections are new events (a trigger refuses UPDATE and DELETE).
CREATE TABLE audit_events (
    id           INTEGER PRIMARY KEY NOT NULL,
    event_id     TEXT NOT NULL UNIQUE,
    task_id      TEXT,
    action       TEXT NOT NULL,
    actor        TEXT NOT NULL,
    from_state   TEXT,
    to_state     TEXT,
    delivery_id  TEXT,
    turn_id      TEXT,
    comment_id   BIGINT,
    error_code   TEXT,
    metadata     TEXT NOT NULL,
    at           TEXT NOT NULL
);
CREATE INDEX audit_events_task ON audit_events (task_id, id);
CREATE INDEX audit_events_at ON audit_events (at);

-- Global switches; exactly one row.
CREATE TABLE control (
    id             BIGINT PRIMARY KEY NOT NULL CHECK (id = 1),
    global_paused  BOOLEAN NOT NULL,
    pause_reason   TEXT,
    updated_by     TEXT,
    updated_at     TEXT NOT NULL,
    version        BIGINT NOT NULL
);
INSERT INTO control (id, global_paused, pause_reason, updated_by, updated_at, version)
VALUES (1, FALSE, NULL, NULL, '1970-01-01T00:00:00.000000Z', 1);

-- Idempotency of operator requests: a repeated requestId returns the first result.
CREATE TABLE control_requests (
    request_id  TEXT PRIMARY KEY NOT NULL,
    action      TEXT NOT NULL,
    target      TEXT NOT NULL,
    result      TEXT NOT NULL,
    created_at  TEXT NOT NULL
);

-- Terminal tasks never change, whatever code path tries (the store's UPDATE also
-- says `state NOT IN (terminal)` in its WHERE clause).
CREATE TRIGGER tasks_terminal_immutable BEFORE UPDATE ON tasks
WHEN OLD.state IN ('succeeded','succeeded_with_rest_fallback','failed','failed_reply','cancelled','aborted','timed_out','ignored','duplicate','rejected')
BEGIN
    SELECT RAISE(ABORT, 'task is in a terminal state and can never change');
END;

CREATE TRIGGER audit_events_no_update BEFORE UPDATE ON audit_events
BEGIN
    SELECT RAISE(ABORT, 'audit events are append-only');
END;

CREATE TRIGGER audit_events_no_delete BEFORE DELETE ON audit_events
BEGIN
    SELECT RAISE(ABORT, 'audit events are append-only');
END;

CREATE TRIGGER task_transitions_no_update BEFORE UPDATE ON task_transitions
BEGIN
    SELECT RAISE(ABORT, 'task history is append-only');
END;

