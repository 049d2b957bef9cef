-- Nothing to undo on PostgreSQL (see up.sql).
SELECT 1;
