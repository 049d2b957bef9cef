DROP INDEX approvals_status;
ALTER TABLE approvals DROP COLUMN request_key;
