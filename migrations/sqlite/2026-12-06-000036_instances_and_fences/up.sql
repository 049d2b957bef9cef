-- A repository's lease row stays once written. Releasing it marks it
-- released; whoever takes it next writes its own lease id and the next
-- fencing token, a number that grows with every new holder, so that a write
-- made under an older holding can be told apart and refused.
ALTER TABLE leases ADD COLUMN fence BIGINT NOT NULL DEFAULT 0;
ALTER TABLE leases ADD COLUMN released_at TEXT;

-- Every server process on this database: its heartbeat, and whether an
-- operator asked it to drain (take no new lease, hand its repositories over
-- once its turns settle).
CREATE TABLE server_instances (
    server_id           TEXT PRIMARY KEY NOT NULL,
    instance_id         TEXT NOT NULL,
    version             TEXT NOT NULL,
    started_at          TEXT NOT NULL,
    heartbeat_at        TEXT NOT NULL,
    draining            BOOLEAN NOT NULL DEFAULT FALSE,
    drain_requested_at  TEXT,
    stopped_at          TEXT
);
