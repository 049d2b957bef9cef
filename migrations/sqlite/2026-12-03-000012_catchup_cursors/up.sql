-- The catch-up of comments whose webhook never came (Gitea does not retry a
-- failed delivery): per repository, where the next listing of its comments
-- starts, and which process lists it now.
--
-- `since` is Gitea's own `updated_at` of the newest comment a finished pass
-- saw (at first the time the repository was first seen here), so the two
-- clocks are never compared; `last_comment_id` is that comment. The lease
-- (`lease_owner` until `lease_expires_at`) keeps two instances from listing
-- one repository at once; after a pass it stays until the next pass is due,
-- so that instances sharing the database list each repository once per
-- interval between them.
CREATE TABLE catchup_cursors (
    repo_key          TEXT PRIMARY KEY NOT NULL REFERENCES repositories (repo_key),
    since             TEXT NOT NULL,
    last_comment_id   BIGINT,
    updated_at        TEXT NOT NULL,
    lease_owner       TEXT,
    lease_expires_at  TEXT
);
