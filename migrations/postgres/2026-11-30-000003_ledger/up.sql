-- The operation ledger (DESIGN §6, seed: outbox): `sending` is written before
-- turn/start leaves, the turn id and accepted_at when it answers, and `sent`
-- only when the user message with our operation id is seen live or in history.
CREATE TABLE operation_ledger (
    operation_id  TEXT PRIMARY KEY NOT NULL,
    task_id       TEXT NOT NULL REFERENCES tasks (task_id),
    queue_id      TEXT NOT NULL,
    attempt_id    TEXT,
    status        TEXT NOT NULL CHECK (status IN ('sending', 'accepted', 'sent')),
    thread_id     TEXT,
    turn_id       TEXT,
    sending_at    TEXT NOT NULL,
    accepted_at   TEXT,
    sent_at       TEXT
);
CREATE INDEX operation_ledger_task ON operation_ledger (task_id);

-- A turn's events in sequence; the unique key makes a repeated event a no-op.
CREATE TABLE turn_events (
    turn_id  TEXT NOT NULL,
    seq      BIGINT NOT NULL,
    kind     TEXT NOT NULL,
    at       TEXT NOT NULL,
    PRIMARY KEY (turn_id, seq)
);
