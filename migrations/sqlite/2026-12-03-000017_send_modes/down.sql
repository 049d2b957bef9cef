DROP INDEX outbox_send_now;
ALTER TABLE outbox_entries DROP COLUMN reverted_at;
ALTER TABLE outbox_entries DROP COLUMN revert_turn_id;
ALTER TABLE outbox_entries DROP COLUMN supersedes;
ALTER TABLE tasks DROP COLUMN steered_into;
ALTER TABLE outbox_entries DROP COLUMN accepted_turn_id;
ALTER TABLE outbox_entries DROP COLUMN expected_turn_id;
