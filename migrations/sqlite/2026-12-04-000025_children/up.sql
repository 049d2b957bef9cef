-- A delegated child is a workflow of its own, in a session of its own (key
-- `<resource>:child:<n>`, with its own thread and worktree), about the same
-- Issue or pull request as its parent (`parent_workflow_id`).
-- `child_mode`: assign (the parent goes on) or handoff (it waits).
-- `assignment_key`: the parent's request, as the same logical effect: asked
-- again, it is the same child, never a second one.
-- `child_number`: the `<n>` of its session key, counted per resource.
-- `created_by_task`: the parent's logical turn that asked for it; its result
-- is bound to that workflow and that turn.
-- `sandbox`, `approval_policy`: the most it was delegated (its parent's).
-- `recovered`: turns it was asked again for a result it did not record.
ALTER TABLE workflows ADD COLUMN child_mode TEXT;
ALTER TABLE workflows ADD COLUMN assignment_key TEXT;
ALTER TABLE workflows ADD COLUMN child_number BIGINT;
ALTER TABLE workflows ADD COLUMN instructions TEXT;
ALTER TABLE workflows ADD COLUMN created_by_task TEXT;
ALTER TABLE workflows ADD COLUMN sandbox TEXT;
ALTER TABLE workflows ADD COLUMN approval_policy TEXT;
ALTER TABLE workflows ADD COLUMN recovered BIGINT NOT NULL DEFAULT 0;
CREATE UNIQUE INDEX workflows_assignment ON workflows (parent_workflow_id, assignment_key)
    WHERE assignment_key IS NOT NULL;
CREATE INDEX workflows_parent ON workflows (parent_workflow_id)
    WHERE parent_workflow_id IS NOT NULL;

-- A child's result: written once, never changed. `incomplete`: the bridge
-- wrote it for a child that exited without one and whose recovery is spent.
CREATE TABLE workflow_results (
    id               INTEGER PRIMARY KEY NOT NULL,
    result_id        TEXT NOT NULL UNIQUE,
    workflow_id      TEXT NOT NULL UNIQUE REFERENCES workflows (workflow_id),
    summary          TEXT NOT NULL,
    files_changed    TEXT NOT NULL,
    checks_run       TEXT NOT NULL,
    risks            TEXT NOT NULL,
    blockers         TEXT NOT NULL,
    incomplete       BOOLEAN NOT NULL,
    branch           TEXT,
    recorded_by_task TEXT REFERENCES tasks (task_id),
    created_at       TEXT NOT NULL
);

-- A result on its way to the parent workflow it is bound to (never another):
-- pending -> delivered (a turn of that workflow carried it) -> acknowledged,
-- or terminalised once that workflow is no longer open. FIFO by `id`.
CREATE TABLE result_deliveries (
    id              INTEGER PRIMARY KEY NOT NULL,
    result_id       TEXT NOT NULL UNIQUE REFERENCES workflow_results (result_id),
    workflow_id     TEXT NOT NULL REFERENCES workflows (workflow_id),
    created_by_task TEXT,
    state           TEXT NOT NULL,
    version         BIGINT NOT NULL DEFAULT 1,
    deliveries      BIGINT NOT NULL DEFAULT 0,
    carried_by_task TEXT,
    acked_by_task   TEXT,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL
);
CREATE INDEX result_deliveries_workflow ON result_deliveries (workflow_id, state);
