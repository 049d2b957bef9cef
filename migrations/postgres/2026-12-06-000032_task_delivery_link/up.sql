-- A task's delivery stays linked both ways (the task names the delivery it was
-- made from, the delivery row names its task), but no longer as a foreign key
-- from tasks to deliveries: enforcing it needed an index on tasks by delivery
-- key, and a delivery key is Gitea's random UUID, so every accept wrote that
-- index at a random place. Retention, the one reader of that index, now asks
-- the delivery row for its task.
--
-- Every delivery a task was made from names the task already; an older row
-- that does not is given it first, while the index still answers.
UPDATE webhook_deliveries d
SET task_id = t.task_id
FROM tasks t
WHERE t.delivery_key = d.delivery_key AND d.task_id IS NULL;
ALTER TABLE tasks DROP CONSTRAINT tasks_delivery_key_fkey;
DROP INDEX tasks_delivery;
