DROP INDEX tasks_delivery;
