ALTER TABLE tasks DROP COLUMN steered_into;
ALTER TABLE outbox_entries DROP COLUMN accepted_turn_id;
ALTER TABLE outbox_entries DROP COLUMN expected_turn_id;
