-- The commit a pull request task's workspace was checked out at (the PR's
-- head when its attempt was prepared): the commit its statuses are set on.
CREATE TABLE task_heads (
    task_id      TEXT PRIMARY KEY NOT NULL REFERENCES tasks (task_id),
    sha          TEXT NOT NULL,
    recorded_at  TEXT NOT NULL
);

-- The commit statuses (context codex-bridge) the bridge owes Gitea: one row
-- per status a task's transition asks for, written in that transition's
-- commit, then posted by a worker in order (`id`) per repository and
-- commit. `progress` is pending, posting (the intent: the POST may have
-- reached Gitea), posted, superseded (a newer status of the same commit made
-- it stale before it was posted) or failed (refused, or retries exhausted).
CREATE TABLE commit_statuses (
    id               BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id          TEXT NOT NULL REFERENCES tasks (task_id),
    repo_key         TEXT NOT NULL,
    resource_key     TEXT NOT NULL,
    sha              TEXT NOT NULL,
    state            TEXT NOT NULL,
    description      TEXT NOT NULL,
    task_state       TEXT NOT NULL,
    progress         TEXT NOT NULL,
    attempts         BIGINT NOT NULL DEFAULT 0,
    next_attempt_at  TEXT,
    last_error       TEXT,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL
);
CREATE INDEX commit_statuses_task ON commit_statuses (task_id, id);
CREATE INDEX commit_statuses_commit ON commit_statuses (repo_key, sha, id);
-- The worker's queue: only unfinished rows are indexed, in queue order.
CREATE INDEX commit_statuses_open ON commit_statuses (id, next_attempt_at) WHERE progress IN ('pending', 'posting');
