DROP TABLE worker_leases;
