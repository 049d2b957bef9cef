-- The id of the Codex home the worker holding the lease runs its threads
-- in, as it said when it leased (NULL: it did not say). A thread lives in
-- the home that made it: a session whose thread was made under another
-- worker's home rebuilds its conversation on a new thread rather than ask
-- this worker to resume one it does not have.
ALTER TABLE worker_leases ADD COLUMN codex_home TEXT;
