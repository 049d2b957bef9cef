-- Refused webhooks (a bad signature, an unreadable payload), counted per
-- kind and minute: every one of them, whether or not the audit log kept a
-- sample of it. Rows are added to in place; a flood of refusals costs one
-- row per kind and minute, never one per request.
CREATE TABLE refusal_counts (
    action TEXT NOT NULL,
    minute TEXT NOT NULL,
    count  BIGINT NOT NULL,
    PRIMARY KEY (action, minute)
);
