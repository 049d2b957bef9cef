-- The overview's charts read time ranges of the task history, of ended turns
-- and of token reports. Each index takes its rows in time order, so a write
-- adds to its last page only (the webhook's new task adds one entry for its
-- creation row there, beside the page the table itself appends to).
CREATE INDEX task_transitions_at ON task_transitions (at);
CREATE INDEX turns_completed ON turns (completed_at);
CREATE INDEX turn_token_usage_updated ON turn_token_usage (updated_at);
