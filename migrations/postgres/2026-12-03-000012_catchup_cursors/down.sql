DROP TABLE catchup_cursors;
