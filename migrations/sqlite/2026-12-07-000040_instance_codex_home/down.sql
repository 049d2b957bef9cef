ALTER TABLE server_instances DROP COLUMN codex_home;
