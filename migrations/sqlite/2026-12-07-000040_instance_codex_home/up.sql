-- The id of the Codex home each server process runs its threads in (the
-- file codex-bridge-home-id in that home). A session whose thread lives in
-- the home of another process that still serves waits a moment for that
-- process to take its next task, so the thread is resumed there instead of
-- rebuilt. NULL: the process runs no Codex, or has not reported it yet.
ALTER TABLE server_instances ADD COLUMN codex_home TEXT;
