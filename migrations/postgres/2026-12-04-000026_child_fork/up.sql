-- `forked_from_thread`: the parent's Codex thread a child's thread starts
-- from (`thread/fork`, a copy of the parent's conversation when it asked);
-- null, a child whose thread starts from its instructions alone. Read when
-- the child's thread is first opened; once it has its own thread, the
-- child never forks again.
ALTER TABLE workflows ADD COLUMN forked_from_thread TEXT;
