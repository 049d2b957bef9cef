-- A session's own git worktree, and the state its last turn left in it:
-- a later turn runs only on that same state (anything else is someone
-- else's change, `blocked_workspace`). No state (`head`, `tree` NULL)
-- means "take it as it is": before the first turn ends, or after an
-- operator cleared the workspace.
CREATE TABLE worktrees (
    session_key  TEXT PRIMARY KEY NOT NULL REFERENCES sessions (session_key),
    repo_key     TEXT NOT NULL REFERENCES repositories (repo_key),
    head         TEXT,
    tree         TEXT,
    -- Last made ready for a turn.
    prepared_at  TEXT NOT NULL,
    -- When a turn's end last recorded `head` and `tree`.
    recorded_at  TEXT,
    -- Retired (removed from disk) after `worktree_retention_hours`; a new
    -- turn makes it again.
    removed_at   TEXT
);
CREATE INDEX worktrees_repo_live ON worktrees (repo_key) WHERE removed_at IS NULL;
