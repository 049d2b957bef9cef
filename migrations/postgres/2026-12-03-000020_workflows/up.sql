-- A session's workflow: the work of an Issue or pull request that outlives
-- a turn. It stays open until the agent completes it, its owner cancels it,
-- the Issue closes or its recovery is exhausted; an ordinary final only
-- continues it.
CREATE TABLE workflows (
    id                 BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workflow_id        TEXT NOT NULL UNIQUE,
    session_key        TEXT NOT NULL REFERENCES sessions (session_key),
    parent_workflow_id TEXT REFERENCES workflows (workflow_id),
    state              TEXT NOT NULL,
    title              TEXT NOT NULL,
    -- The author of the comment that started it: the one who may resume it
    -- (besides holders of `gate_permission`).
    owner              TEXT NOT NULL,
    -- Finals in a row without durable progress.
    idle_finals        BIGINT NOT NULL DEFAULT 0,
    -- Continuation tasks created so far (the next one's number is this + 1).
    continuations      BIGINT NOT NULL DEFAULT 0,
    end_code           TEXT,
    summary            TEXT,
    created_at         TEXT NOT NULL,
    updated_at         TEXT NOT NULL,
    version            BIGINT NOT NULL DEFAULT 1
);
-- A session has at most one top-level workflow that has not ended.
CREATE UNIQUE INDEX workflows_session_live ON workflows (session_key)
    WHERE parent_workflow_id IS NULL AND state IN ('open', 'waiting_owner', 'waiting_child');

-- The session's thread was started with the bridge's tools: only such a
-- thread can complete its workflow, so only its workflow is continued
-- (a thread cannot be given tools when it is resumed).
ALTER TABLE sessions ADD COLUMN thread_tools BOOLEAN NOT NULL DEFAULT FALSE;

-- The workflow a task is a logical input of, and the number of a
-- continuation task (NULL: the task of a comment).
ALTER TABLE tasks ADD COLUMN workflow_id TEXT REFERENCES workflows (workflow_id);
ALTER TABLE tasks ADD COLUMN continuation BIGINT;
-- At most one continuation of a workflow has not ended.
CREATE UNIQUE INDEX tasks_live_continuation ON tasks (workflow_id)
    WHERE continuation IS NOT NULL AND state IN ('received', 'queued', 'leased', 'running',
        'awaiting_approval', 'waiting_user', 'verifying_reply', 'retry_wait',
        'blocked_workspace', 'cancel_requested', 'needs_reconciliation');

-- An owner gate: a bot comment with the question; the owner's next
-- mentioning comment resumes the workflow, once.
CREATE TABLE workflow_gates (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    gate_id         TEXT NOT NULL UNIQUE,
    workflow_id     TEXT NOT NULL REFERENCES workflows (workflow_id),
    kind            TEXT NOT NULL,
    question        TEXT NOT NULL,
    -- open | resumed | closed (the workflow ended while it waited)
    status          TEXT NOT NULL,
    opened_by_task  TEXT REFERENCES tasks (task_id),
    resumed_by_task TEXT REFERENCES tasks (task_id),
    resumed_by      TEXT,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL
);
-- A workflow waits behind at most one open gate.
CREATE UNIQUE INDEX workflow_gates_open ON workflow_gates (workflow_id) WHERE status = 'open';
