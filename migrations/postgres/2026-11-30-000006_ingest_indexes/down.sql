DROP INDEX tasks_session_driven;
CREATE INDEX tasks_session ON tasks (session_key, id);
CREATE INDEX tasks_repo ON tasks (repo_key, id);
