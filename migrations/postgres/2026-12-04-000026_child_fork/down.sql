ALTER TABLE workflows DROP COLUMN forked_from_thread;
