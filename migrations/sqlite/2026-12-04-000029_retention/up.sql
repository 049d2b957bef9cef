-- Retention finds the deliveries no task was made from without reading
-- every task (ended turns are found by turns_completed).
CREATE INDEX tasks_delivery ON tasks (delivery_key);
