-- An outbox entry's operation id is unique across every session already
-- (the column's own UNIQUE constraint), so the pair (session, operation) can
-- never collide where the column alone does not. Its index put each accepted
-- delivery's entry at its session's place in one more B-tree: one more page
-- written per accept, spread over every session, for no rule the column's
-- index does not keep.
DROP INDEX outbox_session_operation;
