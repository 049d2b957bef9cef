ALTER TABLE workers DROP COLUMN uncertain_turns;
