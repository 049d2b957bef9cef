-- Remote workers: machines that run `codex-bridge worker` and lease tasks
-- over the worker API. Each authenticates with its own bearer token, minted
-- when an operator registers it and shown once.
--
-- `token_hash` is the lower-case hex SHA-256 of that token; the token itself
-- is never stored. The token is 32 random bytes, so nobody can guess it and
-- a plain SHA-256 is enough to keep a leaked copy of this table from
-- authenticating: a slow password hash only helps against guessable
-- secrets. UNIQUE gives the index a request's token is looked up by.
--
-- `repositories` is a JSON array of "owner/name" folded to lower case (Gitea
-- compares them without regard to case, as the repository keys do): the
-- repositories whose tasks the worker may lease. `revoked_at` set: the
-- token is refused from then on; the row stays, for the audit trail and for
-- the attempts that name the worker. `last_seen_at` and `version` are what
-- its last heartbeat said.
CREATE TABLE workers (
    worker_id    TEXT PRIMARY KEY NOT NULL,
    name         TEXT NOT NULL,
    token_hash   TEXT NOT NULL UNIQUE,
    repositories TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    revoked_at   TEXT,
    last_seen_at TEXT,
    version      TEXT
);
