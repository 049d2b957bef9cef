ALTER TABLE server_instances DROP COLUMN actors_at;
ALTER TABLE server_instances DROP COLUMN actors;
