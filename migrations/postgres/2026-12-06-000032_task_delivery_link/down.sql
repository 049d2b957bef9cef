ALTER TABLE tasks ADD CONSTRAINT tasks_delivery_key_fkey
    FOREIGN KEY (delivery_key) REFERENCES webhook_deliveries (delivery_key);
CREATE INDEX tasks_delivery ON tasks (delivery_key);
