DROP TABLE turn_events;
DROP TABLE operation_ledger;
