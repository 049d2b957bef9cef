DROP INDEX tasks_repo_active;
DROP INDEX tasks_queued;
CREATE INDEX tasks_repo_state ON tasks (repo_key, state, id);
