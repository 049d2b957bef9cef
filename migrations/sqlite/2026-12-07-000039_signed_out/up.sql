-- Admin web sign-ins that were signed out, until their cookie would have
-- expired anyway (`expires_at`, unix seconds). The cookie itself is signed,
-- not stored; this table is what makes a sign-out hold on every process of
-- the database and after a restart. `signin_id` is the random id inside the
-- cookie, useless without the signing key. Rows past their expiry are
-- deleted as new sign-outs are recorded.
CREATE TABLE signed_out (
    signin_id  TEXT PRIMARY KEY NOT NULL,
    expires_at BIGINT NOT NULL
);
