-- Nothing changes on PostgreSQL: the SQLite migration of this name writes the
-- CHECK constraints and partial-index conditions of the ingest's rows as
-- chains of `=`, because SQLite builds a temporary index of an IN list for
-- every row it checks. PostgreSQL evaluates an IN list in place, and proves
-- its partial indexes from the queries' chains as from IN lists.
SELECT 1;
