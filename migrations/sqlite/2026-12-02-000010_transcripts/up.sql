-- What a turn did, for the admin view: the prompt as sent, then each item the
-- runtime reported (message, command, file change, MCP tool call, approval…)
-- as bounded JSON. One row per item: a repeated item/completed is a no-op.
CREATE TABLE transcript_items (
    turn_id       TEXT NOT NULL,
    seq           BIGINT NOT NULL,
    item_id       TEXT NOT NULL,
    kind          TEXT NOT NULL,
    status        TEXT NOT NULL,
    started_at    TEXT NOT NULL,
    completed_at  TEXT,
    payload       TEXT NOT NULL,
    PRIMARY KEY (turn_id, item_id)
);
-- Pages of a turn's items go by seq.
CREATE INDEX transcript_items_turn_seq ON transcript_items (turn_id, seq);

-- A turn's token usage: the thread's cumulative totals before its first model
-- request (start_*) and after its latest one (end_*); the turn used end - start.
CREATE TABLE turn_token_usage (
    turn_id                    TEXT PRIMARY KEY NOT NULL,
    thread_id                  TEXT NOT NULL,
    start_input_tokens         BIGINT NOT NULL,
    start_cached_input_tokens  BIGINT NOT NULL,
    start_output_tokens        BIGINT NOT NULL,
    start_reasoning_tokens     BIGINT NOT NULL,
    start_total_tokens         BIGINT NOT NULL,
    end_input_tokens           BIGINT NOT NULL,
    end_cached_input_tokens    BIGINT NOT NULL,
    end_output_tokens          BIGINT NOT NULL,
    end_reasoning_tokens       BIGINT NOT NULL,
    end_total_tokens           BIGINT NOT NULL,
    updated_at                 TEXT NOT NULL
);
