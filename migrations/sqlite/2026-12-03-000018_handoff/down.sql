DROP INDEX outbox_handoff;
ALTER TABLE outbox_entries DROP COLUMN handoff_run_task_id;
ALTER TABLE outbox_entries DROP COLUMN handoff_turn_id;
ALTER TABLE outbox_entries DROP COLUMN handoff_thread_id;
ALTER TABLE outbox_entries DROP COLUMN handoff_phase;
