-- The rows an accepted webhook writes name their parents without foreign
-- keys on PostgreSQL: a task its repository and session, an outbox entry its
-- session and task, a receipt and a transition their task. PostgreSQL checks
-- a foreign key by locking the parent row (FOR KEY SHARE): six row locks per
-- accept, each a WAL record and a dirtied page, which took a fifth of the
-- group commit's throughput. Tasks, sessions and repositories are never
-- deleted, and each of these rows is written in the transaction that creates
-- or reads its parent. SQLite, whose check is only a read of the parent's
-- key, keeps these constraints, so the test suite still checks every write
-- path against them.
ALTER TABLE tasks DROP CONSTRAINT tasks_repo_key_fkey;
ALTER TABLE tasks DROP CONSTRAINT tasks_session_key_fkey;
ALTER TABLE outbox_entries DROP CONSTRAINT outbox_entries_session_key_fkey;
ALTER TABLE outbox_entries DROP CONSTRAINT outbox_entries_task_id_fkey;
ALTER TABLE comments DROP CONSTRAINT comments_task_id_fkey;
ALTER TABLE task_transitions DROP CONSTRAINT task_transitions_task_id_fkey;
