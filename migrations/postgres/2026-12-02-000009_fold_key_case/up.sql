-- Gitea compares owner and repository names without regard to case, so
-- `ACME/widgets` and `acme/widgets` are one repository. Keys are folded to
-- lower case from now on (the instance id already is); this merges the rows
-- that an older build stored under two spellings, so that one repository has
-- one lease, one queue and one session per Issue/PR. A row already under the
-- folded key is kept as it is; otherwise the spelling registered (or created)
-- first gives the merged row its displayed names and its session's thread.


-- Terminal tasks are immutable; only their keys are folded here.
ALTER TABLE tasks DISABLE TRIGGER tasks_terminal_immutable;

-- 1. One folded repository row per group (a disabled spelling disables it).
INSERT INTO repositories (repo_key, instance_id, owner, name, clone_url, default_branch,
                          status, registered_at, updated_at, version)
SELECT lower(r.repo_key), r.instance_id, r.owner, r.name, r.clone_url, r.default_branch,
       CASE WHEN EXISTS (SELECT 1 FROM repositories d
                         WHERE lower(d.repo_key) = lower(r.repo_key) AND d.status = 'disabled')
            THEN 'disabled' ELSE r.status END,
       r.registered_at, r.updated_at, r.version
FROM repositories r
WHERE r.repo_key <> lower(r.repo_key)
  AND r.repo_key = (SELECT f.repo_key FROM repositories f
                    WHERE lower(f.repo_key) = lower(r.repo_key)
                    ORDER BY f.registered_at, f.repo_key LIMIT 1)
ON CONFLICT (repo_key) DO NOTHING;
UPDATE repositories SET status = 'disabled'
WHERE repo_key = lower(repo_key) AND status <> 'disabled'
  AND EXISTS (SELECT 1 FROM repositories d
              WHERE lower(d.repo_key) = repositories.repo_key AND d.status = 'disabled');

-- 2. One folded session row per group (the first created keeps its thread).
INSERT INTO sessions (session_key, repo_key, kind, number, thread_id, status, last_task_id,
                      created_at, updated_at, version, open_entries)
SELECT lower(s.session_key), lower(s.repo_key), s.kind, s.number, s.thread_id, s.status,
       s.last_task_id, s.created_at, s.updated_at, s.version, 0
FROM sessions s
WHERE s.session_key <> lower(s.session_key)
  AND s.session_key = (SELECT f.session_key FROM sessions f
                       WHERE lower(f.session_key) = lower(s.session_key)
                       ORDER BY f.created_at, f.session_key LIMIT 1)
ON CONFLICT (session_key) DO NOTHING;

-- 3. Every row that names a key names the folded one.
UPDATE tasks SET repo_key = lower(repo_key), session_key = lower(session_key),
                 resource_key = lower(resource_key)
WHERE repo_key <> lower(repo_key) OR session_key <> lower(session_key)
   OR resource_key <> lower(resource_key);
UPDATE outbox_entries SET session_key = lower(session_key)
WHERE session_key <> lower(session_key);
UPDATE comments SET resource_key = lower(resource_key)
WHERE resource_key <> lower(resource_key);
UPDATE webhook_deliveries SET repo_key = lower(repo_key), resource_key = lower(resource_key)
WHERE repo_key <> lower(repo_key) OR resource_key <> lower(resource_key);
-- A lease is held only while a scheduling pass runs; its holder takes the
-- folded key's lease on its next pass.
DELETE FROM leases WHERE repo_key <> lower(repo_key);

-- 4. The merged sessions count their unfinished entries again.
UPDATE sessions SET open_entries = (
    SELECT count(*) FROM outbox_entries o JOIN tasks t ON t.task_id = o.task_id
    WHERE o.session_key = sessions.session_key
      AND t.state NOT IN ('succeeded','succeeded_with_rest_fallback','failed','failed_reply','cancelled','aborted','timed_out','ignored','duplicate','rejected')
)
WHERE session_key IN (SELECT lower(session_key) FROM sessions WHERE session_key <> lower(session_key));

-- 5. The other spellings go.
DELETE FROM sessions WHERE session_key <> lower(session_key);
DELETE FROM repositories WHERE repo_key <> lower(repo_key);

ALTER TABLE tasks ENABLE TRIGGER tasks_terminal_immutable;
