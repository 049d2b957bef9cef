-- When the turn's thread settled to idle without a `turn/completed` the
-- bridge saw: a candidate final, confirmed from the thread's history
-- unless activity follows (then cleared).
ALTER TABLE turns ADD COLUMN idle_at TEXT;
