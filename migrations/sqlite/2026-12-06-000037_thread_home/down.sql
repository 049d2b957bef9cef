ALTER TABLE sessions DROP COLUMN conversation_since;
ALTER TABLE sessions DROP COLUMN thread_home;
