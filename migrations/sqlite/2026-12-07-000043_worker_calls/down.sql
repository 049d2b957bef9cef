DROP TABLE worker_call_events;
DROP TABLE worker_calls;
