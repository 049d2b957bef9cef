DROP INDEX tasks_repo_state;
DROP TABLE leases;
