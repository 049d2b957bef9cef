DROP INDEX commit_statuses_open;
DROP INDEX commit_statuses_commit;
DROP INDEX commit_statuses_task;
DROP TABLE commit_statuses;
DROP TABLE task_heads;
