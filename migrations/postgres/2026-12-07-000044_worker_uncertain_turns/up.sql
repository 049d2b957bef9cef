-- What a worker's last heartbeat said of its own journal: how many turns it
-- sent to Codex with no end recorded (uncertain: it takes no new lease
-- until an operator settles them). Shown beside the uncertain tasks the
-- server knows of, which can differ: a start whose answer never reached
-- the server, or a task reconciled on the server whose journal was not
-- settled yet. NULL: no heartbeat has said it yet.
ALTER TABLE workers ADD COLUMN uncertain_turns BIGINT;
