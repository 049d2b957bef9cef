DROP TABLE turn_token_usage;
DROP TABLE transcript_items;
