-- The agent calls a server process hands to remote workers, and the events
-- of the turns they start: kept here rather than in the process's memory,
-- so that a worker polling any server process of the deployment finds the
-- calls of the repositories it leases, and its answers and events reach
-- the process that waits for them, wherever they were posted.
--
-- `state`: `queued` (no worker took it: nothing reached any runtime),
-- `delivered` (the worker holding `lease_id` took it: it may have reached
-- Codex), `answered` (`outcome` holds the worker's answer), `lost` (the
-- lease it was delivered under ended: `outcome` says it is uncertain). A
-- call is taken only while its caller (`caller`, a server process) still
-- beats and before `deadline_at`, so the calls of a process that died are
-- never handed out. The caller deletes its rows once it has read them; a
-- sweep deletes what a dead caller left.
CREATE TABLE worker_calls (
    call_id      TEXT PRIMARY KEY NOT NULL,
    repository   TEXT NOT NULL,
    caller       TEXT NOT NULL,
    kind         TEXT NOT NULL,
    body         TEXT NOT NULL,
    stream       BOOLEAN NOT NULL,
    state        TEXT NOT NULL,
    lease_id     TEXT,
    outcome      TEXT,
    created_at   TEXT NOT NULL,
    deadline_at  TEXT NOT NULL,
    delivered_at TEXT,
    answered_at  TEXT
);

CREATE INDEX worker_calls_waiting ON worker_calls (repository, state);
CREATE INDEX worker_calls_caller ON worker_calls (caller);

-- A turn's events, each at its place in the call's stream (from 0): a
-- batch sent again finds its places taken and adds nothing.
CREATE TABLE worker_call_events (
    call_id   TEXT NOT NULL REFERENCES worker_calls (call_id),
    place     BIGINT NOT NULL,
    event     TEXT NOT NULL,
    ends_turn BOOLEAN NOT NULL,
    PRIMARY KEY (call_id, place)
);
