-- What a session's thread was created to be trusted with: `trusted` (the
-- repository's policy and the Gitea tools) or `untrusted` (read-only, no
-- Gitea write tool, the bridge posts the answer), fixed when the thread is
-- created. A later task whose trust differs starts a new thread. NULL: a
-- thread made before this column, which had every tool (`trusted`).
ALTER TABLE sessions ADD COLUMN thread_trust TEXT CHECK (thread_trust IN ('trusted', 'untrusted'));
