CREATE UNIQUE INDEX outbox_session_operation ON outbox_entries (session_key, operation_id);
