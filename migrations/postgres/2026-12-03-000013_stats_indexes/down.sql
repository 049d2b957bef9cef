DROP INDEX turn_token_usage_updated;
DROP INDEX turns_completed;
DROP INDEX task_transitions_at;
