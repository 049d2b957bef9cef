-- Worker leases: which remote worker runs a repository's agent calls now.
-- One row per repository ever leased (`owner/name`, lower case as the
-- workers' repositories are), taken over in place, so that `fence` (the
-- fencing token) grows with every new holder and is never reused.
--
-- A lease is held while `released_at` is null, `expires_at` (by the clock
-- leases are judged by) is ahead, and its worker is not revoked. Every call
-- and answer names `lease_id`: one made under a lease that has moved on is
-- refused, so a worker cut off past its expiry can never write into the
-- work of the worker that took over.
CREATE TABLE worker_leases (
    repository  TEXT PRIMARY KEY NOT NULL,
    lease_id    TEXT NOT NULL UNIQUE,
    worker_id   TEXT NOT NULL REFERENCES workers (worker_id),
    fence       BIGINT NOT NULL,
    acquired_at TEXT NOT NULL,
    renewed_at  TEXT NOT NULL,
    expires_at  TEXT NOT NULL,
    released_at TEXT
);

CREATE INDEX worker_leases_worker ON worker_leases (worker_id);
