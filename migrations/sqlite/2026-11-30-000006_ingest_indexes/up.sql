-- Fewer index entries per accepted webhook: every index keyed by repository or
-- session takes a new task's entry on its own page (a webhook burst spreads over
-- many repositories and Issues), and each such page is written again at commit.
--
-- tasks_repo (repo_key, id) is covered by the prefix of tasks_repo_state
-- (repo_key, state, id).
DROP INDEX tasks_repo;
-- A session's tasks are looked up only in the states a session actor drives, and
-- a new task is `queued`: a partial index over those states is never written by
-- the webhook. Queries name exactly this IN list (store/scheduling.rs,
-- SESSION_DRIVEN_STATES) so that both backends use it.
DROP INDEX tasks_session;
CREATE INDEX tasks_session_driven ON tasks (session_key, id)
    WHERE state IN ('leased', 'running', 'awaiting_approval', 'verifying_reply', 'cancel_requested');
