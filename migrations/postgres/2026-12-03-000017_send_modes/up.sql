-- The run a steer was admitted against: `turn/steer` names it as the turn
-- it expects to be active, and only a `steer-running` entry names one.
ALTER TABLE outbox_entries ADD COLUMN expected_turn_id TEXT;
ALTER TABLE outbox_entries ADD CONSTRAINT outbox_steer_expects_run
    CHECK ((mode = 'steer-running') = (expected_turn_id IS NOT NULL));
-- The turn that took the steer in, once Codex accepted it (the ledger keeps
-- the same; the entry shows it without a join).
ALTER TABLE outbox_entries ADD COLUMN accepted_turn_id TEXT;
-- The task whose running turn a steer joined: its answer covers the steer.
ALTER TABLE tasks ADD COLUMN steered_into TEXT;
-- `/interrupt` and `/replace`: the task whose run the message stopped, and
-- for `/replace` the turn dropped from the thread's history before the
-- message is sent (and when that was done: never twice).
ALTER TABLE outbox_entries ADD COLUMN supersedes TEXT;
ALTER TABLE outbox_entries ADD COLUMN revert_turn_id TEXT;
ALTER TABLE outbox_entries ADD COLUMN reverted_at TEXT;
-- Messages that go before the queue once the run they stopped has settled:
-- the repository looks here first (nearly always empty).
CREATE INDEX outbox_send_now ON outbox_entries (id)
    WHERE mode IN ('interrupt-running', 'replace-latest') AND status = 'queued';
