-- Each server process's actor tree as of its last heartbeat (JSON: its
-- repositories with their session actors), so that the admin view of any
-- process can show the actors of all of them. NULL: the process runs no
-- actors, or has not reported them yet.
ALTER TABLE server_instances ADD COLUMN actors TEXT;
ALTER TABLE server_instances ADD COLUMN actors_at TEXT;
