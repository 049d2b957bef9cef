-- "Stop and send now" of a held entry, one durable phase at a time:
-- `requested` (the entry pins the run, thread and turn it may have reached),
-- `interrupting` (that run is being stopped), `revoked` (the ledger's claim
-- for exactly that thread and turn is withdrawn, never once `sent`),
-- `dedicated` (back in the queue with auto-drain on, the same operation id,
-- to start a turn of its own).
ALTER TABLE outbox_entries ADD COLUMN handoff_phase TEXT
    CHECK (handoff_phase IN ('requested', 'interrupting', 'revoked', 'dedicated'));
ALTER TABLE outbox_entries ADD COLUMN handoff_thread_id TEXT;
ALTER TABLE outbox_entries ADD COLUMN handoff_turn_id TEXT;
ALTER TABLE outbox_entries ADD COLUMN handoff_run_task_id TEXT;
-- The sessions with a handoff under way: the sweep finds them after a
-- restart (nearly always empty).
CREATE INDEX outbox_handoff ON outbox_entries (session_key)
    WHERE handoff_phase IN ('requested', 'interrupting', 'revoked');
