DROP TABLE signed_out;
