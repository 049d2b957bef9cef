ALTER TABLE workflows DROP COLUMN ended_by_task;
