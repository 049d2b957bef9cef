-- Why an open workflow waits to continue, and until when: the model's
-- provider turned its turn away for capacity (a usage or rate limit, an
-- overload, a policy on capacity). Cleared once its next turn is admitted.
-- `denials`: such refusals in a row (each doubles the wait); any other step
-- of the workflow starts it over.
ALTER TABLE workflows ADD COLUMN wait_reason TEXT;
ALTER TABLE workflows ADD COLUMN wait_until TEXT;
ALTER TABLE workflows ADD COLUMN denials BIGINT NOT NULL DEFAULT 0;
