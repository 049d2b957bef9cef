ALTER TABLE worker_leases DROP COLUMN codex_home;
