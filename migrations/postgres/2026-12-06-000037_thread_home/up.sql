-- Where the session's thread lives: the id of the Codex home (CODEX_HOME)
-- whose app-server created it. Another process, with a home of its own,
-- cannot resume it there and rebuilds the conversation on a new thread.
ALTER TABLE sessions ADD COLUMN thread_home TEXT;
-- When the conversation the session's thread carries began: a new thread
-- (the first, one after a reset, one made for another trust) begins one; a
-- thread rebuilt elsewhere goes on with it, from the turns since then.
ALTER TABLE sessions ADD COLUMN conversation_since TEXT;
