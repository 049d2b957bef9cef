-- Repository leases (DESIGN §2, §7): the lock that lets one instance's repo actor
-- run a repository's work. Release and renewal check lease_id, so an old owner
-- can never release or extend a new owner's lease.
CREATE TABLE leases (
    repo_key      TEXT PRIMARY KEY NOT NULL REFERENCES repositories (repo_key),
    lease_id      TEXT NOT NULL UNIQUE,
    owner         TEXT NOT NULL,
    acquired_at   TEXT NOT NULL,
    renewed_at    TEXT NOT NULL,
    expires_at    TEXT NOT NULL
);
CREATE INDEX tasks_repo_state ON tasks (repo_key, state, id);
