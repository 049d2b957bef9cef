DROP TABLE server_instances;
ALTER TABLE leases DROP COLUMN released_at;
ALTER TABLE leases DROP COLUMN fence;
