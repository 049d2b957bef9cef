DROP TABLE workflow_gates;
DROP INDEX tasks_live_continuation;
ALTER TABLE tasks DROP COLUMN continuation;
ALTER TABLE tasks DROP COLUMN workflow_id;
DROP TABLE workflows;
ALTER TABLE sessions DROP COLUMN thread_tools;
