-- A session paused by the storm guard: it started more than
-- session_turns_per_minute turns in a minute (a bot, or two bridges,
-- answering each other). Its queued tasks wait until an operator resumes
-- it; turns started before `resumed_at` no longer count against it.
ALTER TABLE sessions ADD COLUMN paused_reason TEXT;
ALTER TABLE sessions ADD COLUMN paused_at TEXT;
ALTER TABLE sessions ADD COLUMN resumed_at TEXT;
-- Every scheduling pass asks for its repository's paused sessions: few or
-- none, found without reading the others.
CREATE INDEX sessions_paused ON sessions (repo_key) WHERE paused_reason IS NOT NULL;
