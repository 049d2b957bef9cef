-- The command a comment gave the bot (`@bot /stop`: `stop`), on its task and
-- its outbox entry; NULL for an instruction. Names as `Command::as_str`.
ALTER TABLE tasks ADD COLUMN command TEXT;
ALTER TABLE outbox_entries ADD COLUMN command TEXT;
