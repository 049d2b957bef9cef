-- The outbox's capacity (DESIGN §6: at most 256 unfinished entries a session)
-- is kept as a counter on the session row instead of being counted through an
-- index of outbox entries by session. That index took one entry per accepted
-- webhook on the page of its session, and a burst over many Issues dirtied one
-- page per delivery (written again to the WAL at every commit); session rows
-- are few and small, so a batch's counter updates share a handful of pages.
--
-- The accept that creates an entry adds one; the transition that ends its task
-- (tasks.rs) takes one away, in the same transaction.
ALTER TABLE sessions ADD COLUMN open_entries BIGINT NOT NULL DEFAULT 0;
UPDATE sessions SET open_entries = (
    SELECT count(*) FROM outbox_entries o JOIN tasks t ON t.task_id = o.task_id
    WHERE o.session_key = sessions.session_key
      AND t.state NOT IN ('succeeded','succeeded_with_rest_fallback','failed','failed_reply','cancelled','aborted','timed_out','ignored','duplicate','rejected')
);
DROP INDEX outbox_entries_session;
