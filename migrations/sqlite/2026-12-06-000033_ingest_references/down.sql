-- Nothing to undo on SQLite: the PostgreSQL migration of this name drops the
-- foreign keys of the rows an accepted webhook writes, whose checks lock the
-- parent rows there. Here a check is a read of the parent's key, and these
-- constraints stay, so the test suite checks every write path against them.
SELECT 1;
