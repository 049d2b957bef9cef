-- What a command's word is followed by (`/approve ap-1`: `ap-1`), as typed,
-- on its outbox entry; NULL for an instruction.
ALTER TABLE outbox_entries ADD COLUMN command_argument TEXT;
-- The text of a comment the bridge posts that is decided once and kept
-- (a command's answer): posted as stored, never rendered again.
ALTER TABLE comments ADD COLUMN body TEXT;
-- Queued commands, by session: the session's command lane and the registry's
-- sweep look here instead of through every queued task. Instructions (command
-- NULL) never enter it, so an ordinary accept writes nothing to it.
CREATE INDEX tasks_queued_commands ON tasks (session_key, id)
    WHERE state = 'queued' AND command IS NOT NULL;
-- A session claims an operation once: the operation id is derived from the
-- comment, so the pair is what a second claim of it would collide on.
CREATE UNIQUE INDEX outbox_session_operation ON outbox_entries (session_key, operation_id);
-- An edit or a deletion of a comment that has a task, waiting for its
-- session to decide what it means (rewrite or cancel an entry not yet
-- admitted; after admission: nothing, audited and answered once).
CREATE TABLE comment_changes (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id       TEXT NOT NULL,
    session_key   TEXT NOT NULL,
    kind          TEXT NOT NULL,
    body          TEXT,
    command       TEXT,
    command_argument TEXT,
    written_at    TEXT NOT NULL,
    status        TEXT NOT NULL,
    outcome       TEXT,
    created_at    TEXT NOT NULL,
    decided_at    TEXT
);
CREATE INDEX comment_changes_pending ON comment_changes (session_key, id)
    WHERE status = 'pending';
