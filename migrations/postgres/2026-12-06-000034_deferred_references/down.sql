-- Nothing to undo on PostgreSQL: the SQLite migration of this name makes the
-- foreign keys of the rows an accepted webhook writes checked at commit; on
-- PostgreSQL those rows declare none (each check locked the parent row).
SELECT 1;
