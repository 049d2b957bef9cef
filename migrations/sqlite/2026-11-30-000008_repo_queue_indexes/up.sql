-- A repository's queue without a per-repository page written by every accept.
--
-- tasks_repo_state (repo_key, state, id) took each new `queued` task on the
-- page of its repository's range: a webhook burst over many repositories
-- dirtied about one page of that index per accepted delivery, written again to
-- the WAL at every group commit (a quarter of the pages an accept wrote).
--
-- Now a `queued` task is found through tasks_queued, ordered by arrival (id)
-- and carrying its repository: every new entry goes to the right-hand end, so a
-- batch of accepts shares one or two pages. A repository's next task is the
-- first entry of its repository in that order. The other states the scheduler
-- asks about per repository (those that hold it, and retry_wait) stay in a
-- per-repository index that only tasks past `queued` enter, and that a task
-- leaves when it ends.
--
-- Both are partial indexes: a query must contain their exact condition
-- (store/scheduling.rs: QUEUED, REPO_ACTIVE_STATES) for SQLite to use them.
-- tasks_queued leads with `state` although it holds only one: without it,
-- SQLite's planner (which has no statistics here) prefers an equality search
-- of tasks_state to a scan of this index, and reads every candidate's row.
DROP INDEX tasks_repo_state;
CREATE INDEX tasks_queued ON tasks (state, id, repo_key) WHERE state = 'queued';
CREATE INDEX tasks_repo_active ON tasks (repo_key, state, id)
    WHERE state IN ('leased', 'running', 'awaiting_approval', 'verifying_reply', 'cancel_requested', 'needs_reconciliation', 'blocked_workspace', 'retry_wait');
