//! The topology test's rig: three server processes on one PostgreSQL, each
//! in its slot of the shipped nginx site's upstream, the Gitea simulator
//! they work against, the webhooks the test sends through nginx, and what
//! the store and Gitea must show after every phase ([`Rig::check`]).

use crate::deploy::request_lines;
use crate::giteasim::{Delivery, GiteaSim, Perm, TEST_HOOK};
use crate::nginx::*;
use crate::support::*;
use crate::testapp::*;
use codex_bridge::store::DbConn;
use diesel::prelude::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

pub const LONG: Duration = Duration::from_secs(60);
/// The servers' body limit; nginx gets the same.
const LIMIT: usize = 64 * 1024;
const SITE: &str = "codex-bridge-instances.nginx.conf";
const WEBHOOK: &str = "/api/gitea/webhook";
/// Several repositories, so that their leases, and so the work, spread over
/// the instances.
pub const REPOS: [&str; 4] = ["alpha", "beta", "gamma", "delta"];
/// The repository with the pull request, whose tasks set commit statuses.
pub const PR_REPO: &str = "alpha";

/// A comment made in Gitea whose webhook the test has not sent yet.
pub struct Pending {
    repo: String,
    number: i64,
    pub delivery: Delivery,
}

/// A webhook nginx answered 202, and the task it named.
pub struct Accepted {
    pub delivery: String,
    pub task: String,
    pub repo: String,
    pub number: i64,
}

pub struct Rig {
    /// The instances, each in its slot of the site's upstream; an instance
    /// keeps its `listen` address across restarts, so nginx finds it again.
    pub apps: Vec<TestApp>,
    pub addrs: Vec<String>,
    pub nginx: Nginx,
    pub db_url: String,
    /// The pull request in [`PR_REPO`], and its head commit.
    pub pr: i64,
    head: String,
    pub accepted: Vec<Accepted>,
    /// The state each accepted task must end in.
    pub expected: BTreeMap<String, &'static str>,
    /// How many repositories [`Rig::fresh_repo`] made.
    fresh: usize,
}

impl Rig {
    pub fn start() -> Rig {
        let sim = GiteaSim::start();
        sim.add_user("bob");
        for repo in REPOS {
            sim.create_repo("acme", repo);
            // Gitea lets only repository admins read others' permissions.
            sim.set_permission("acme", repo, BOT, Perm::Admin);
            sim.set_permission("acme", repo, "bob", Perm::Write);
        }
        let head = sim.commit(
            "acme",
            PR_REPO,
            "fix",
            "parser.rs",
            "fn parse() {}\n",
            "wip",
        );
        let pr = sim.create_pull("acme", PR_REPO, "Fix parser", "", "bob", "fix", "main");
        // Gitea's webhooks are sent by the test (`deliver`): its one delivery
        // worker gives up after 5 s, and a webhook that nginx passed to a
        // stopped (SIGSTOP) instance waits longer than that for its answer.
        sim.set_auto_deliver(false);
        let addrs: Vec<String> = (0..3)
            .map(|_| format!("127.0.0.1:{}", free_port()))
            .collect();
        let first = TestApp::builder()
            .scripted()
            .postgres()
            .env("CODEX_BRIDGE_LISTEN", &addrs[0])
            .env("CODEX_BRIDGE_LEASE_TTL_SECS", "3")
            .env("CODEX_BRIDGE_LEASE_HEARTBEAT_SECS", "1")
            .env("CODEX_BRIDGE_SCHEDULER_SWEEP_MS", "100")
            .env("CODEX_BRIDGE_MAX_BODY_BYTES", &LIMIT.to_string())
            .env("CODEX_BRIDGE_TRUSTED_PROXIES", Nginx::PROXY_ADDR)
            // Every comment reaches the bridge by its webhook: a catch-up
            // racing it would take the comment first, and the webhook
            // would be answered as a duplicate.
            .env("CODEX_BRIDGE_CATCHUP_INTERVAL_SECS", "0")
            // One commenter, bob, asks for all of the test's work.
            .env("CODEX_BRIDGE_USER_TRIGGERS_PER_HOUR", "0")
            .start_with_gitea(sim);
        let mut apps = vec![first];
        for addr in &addrs[1..] {
            let app = apps[0].another_instance_with(|b| b.env("CODEX_BRIDGE_LISTEN", addr));
            apps.push(app);
        }
        let upstreams: Vec<&str> = addrs.iter().map(String::as_str).collect();
        let nginx = Nginx::start_site(&deploy_file(SITE), &upstreams, LIMIT);
        let db_url = apps[0].db_url.clone();
        Rig {
            apps,
            addrs,
            nginx,
            db_url,
            pr,
            head,
            accepted: Vec::new(),
            expected: BTreeMap::new(),
            fresh: 0,
        }
    }

    pub fn sim(&self) -> &GiteaSim {
        self.apps[0].gitea()
    }

    pub fn db(&self) -> DbConn {
        connect(&self.db_url)
    }

    /// A new Issue in `repo`, opened by bob.
    pub fn issue(&self, repo: &str) -> i64 {
        self.sim()
            .create_issue("acme", repo, "Topology", "Work for any instance.", "bob")
    }

    /// Bob comments on `repo`#`number`; Gitea's webhook for it, unsent.
    pub fn comment(&self, repo: &str, number: i64, text: &str) -> Pending {
        let c = self
            .sim()
            .post_comment_as("bob", "acme", repo, number, text);
        let delivery = self
            .sim()
            .deliveries()
            .into_iter()
            .find(|d| d.hook_id == TEST_HOOK && d.json()["comment"]["id"] == c["id"])
            .expect("Gitea made a webhook for the comment");
        Pending {
            repo: repo.to_owned(),
            number,
            delivery,
        }
    }

    /// Records nginx's answer to `p`'s webhook, which must be 202 with a
    /// task; the task, expected to succeed.
    pub fn accept(&mut self, p: Pending, r: RawReply) -> String {
        assert_eq!(
            r.status,
            202,
            "webhook {}: {}\n{}",
            p.delivery.id,
            r.text(),
            self.nginx.error_log()
        );
        let task = r.json()["taskId"].as_str().unwrap().to_owned();
        self.expected.insert(task.clone(), "succeeded");
        self.accepted.push(Accepted {
            delivery: p.delivery.id,
            task: task.clone(),
            repo: p.repo,
            number: p.number,
        });
        task
    }

    /// Bob comments, and Gitea's webhook goes through nginx; the task.
    pub fn send(&mut self, repo: &str, number: i64, text: &str) -> String {
        let p = self.comment(repo, number, text);
        let r = deliver(&self.nginx, &p.delivery);
        self.accept(p, r)
    }

    /// A comment on a new Issue in each of `repos`; their tasks.
    pub fn send_each(&mut self, repos: &[&str], text: &str) -> Vec<String> {
        repos
            .iter()
            .map(|repo| {
                let n = self.issue(repo);
                self.send(repo, n, text)
            })
            .collect()
    }

    pub fn wait(&self, task: &str, state: &str) {
        wait_task_state(&self.db_url, task, state, LONG);
    }

    pub fn repo_of(&self, task: &str) -> String {
        let a = self.accepted.iter().find(|a| a.task == task).unwrap();
        a.repo.clone()
    }

    /// The serverId that ran the task's latest attempt.
    pub fn ran_on(&self, task: &str) -> String {
        codex_bridge::store::tasks::detail(&mut self.db(), &task.parse().unwrap())
            .unwrap()
            .unwrap()
            .attempts
            .last()
            .and_then(|a| a.owner.clone())
            .expect("the task has an attempt with an owner")
    }

    /// The slot of the instance whose serverId is `server_id` (it names
    /// the process id).
    pub fn slot_of(&self, server_id: &str) -> usize {
        self.apps
            .iter()
            .position(|a| server_id.contains(&format!(":{}:", a.pid())))
            .unwrap_or_else(|| panic!("{server_id} is none of the instances"))
    }

    /// How many webhooks each instance answered since its last start.
    pub fn served(&self) -> Vec<usize> {
        self.apps
            .iter()
            .map(|a| request_lines(&a.logs(), WEBHOOK).len())
            .collect()
    }

    /// A new repository, with bob a writer: no instance held its lease
    /// before, so none is preferred for its work.
    pub fn fresh_repo(&mut self) -> String {
        self.fresh += 1;
        let repo = format!("fresh-{}", self.fresh);
        self.sim().create_repo("acme", &repo);
        self.sim().set_permission("acme", &repo, BOT, Perm::Admin);
        self.sim().set_permission("acme", &repo, "bob", Perm::Write);
        repo
    }

    /// Comments on new repositories, one for each instance at a time (back
    /// to back, so nginx's round robin passes one to each), until a task
    /// runs on the instance in `slot`. Which instance leases a repository
    /// nobody held before is a race; the one that stored the task is woken
    /// first.
    pub fn until_one_runs_on(&mut self, slot: usize) {
        for _ in 0..8 {
            let pending: Vec<Pending> = (0..self.apps.len())
                .map(|_| {
                    let repo = self.fresh_repo();
                    let n = self.issue(&repo);
                    self.comment(&repo, n, "@ccbot quick one")
                })
                .collect();
            let tasks: Vec<String> = pending
                .into_iter()
                .map(|p| {
                    let r = deliver(&self.nginx, &p.delivery);
                    self.accept(p, r)
                })
                .collect();
            for t in &tasks {
                self.wait(t, "succeeded");
            }
            if tasks.iter().any(|t| self.slot_of(&self.ran_on(t)) == slot) {
                return;
            }
        }
        panic!("no task of 24 on new repositories ran on instance {slot}");
    }

    /// The newest audit event's id: a phase's own events come after it.
    pub fn mark(&self) -> i64 {
        texts(
            &mut self.db(),
            "SELECT CAST(COALESCE(MAX(id), 0) AS TEXT) AS v FROM audit_events",
        )[0]
        .parse()
        .unwrap()
    }

    /// The metadata of every `action` event after `mark`.
    pub fn audit_after(&self, mark: i64, action: &str) -> Vec<Value> {
        texts(
            &mut self.db(),
            &format!(
                "SELECT metadata AS v FROM audit_events WHERE id > {mark} AND action = '{action}' ORDER BY id"
            ),
        )
        .iter()
        .map(|m| serde_json::from_str(m).unwrap())
        .collect()
    }

    /// The metadata of the task's `action` events.
    pub fn task_audit(&self, task: &str, action: &str) -> Vec<Value> {
        texts(
            &mut self.db(),
            &format!(
                "SELECT metadata AS v FROM audit_events WHERE task_id = '{task}' AND action = '{action}' ORDER BY id"
            ),
        )
        .iter()
        .map(|m| serde_json::from_str(m).unwrap())
        .collect()
    }

    /// The actions of the task's audit, oldest first.
    pub fn task_actions(&self, task: &str) -> Vec<String> {
        texts(
            &mut self.db(),
            &format!("SELECT action AS v FROM audit_events WHERE task_id = '{task}' ORDER BY id"),
        )
    }

    /// Every session of the database but this one, with what it waits on:
    /// what a failure report needs when nothing seems to move.
    pub fn activity(&self) -> Vec<String> {
        texts(
            &mut self.db(),
            "SELECT pid || ' ' || COALESCE(state, '-') || ' for ' \
             || COALESCE(CAST(now() - state_change AS TEXT), '-') || ', waits on ' \
             || COALESCE(wait_event_type, '-') || '/' || COALESCE(wait_event, '-') || ': ' \
             || left(COALESCE(query, ''), 120) AS v \
             FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )
    }

    /// The database's clock, which leases expire by.
    pub fn db_now(&self) -> String {
        texts(&mut self.db(), "SELECT CAST(now() AS TEXT) AS v").remove(0)
    }

    /// The lease row of the task's repository.
    pub fn lease_of(&self, task: &str) -> codex_bridge::store::leases::Lease {
        let repo = &self.accepted.iter().find(|a| a.task == task).unwrap().repo;
        let key = codex_bridge::domain::RepoKey::parse(&format!("default:acme/{repo}")).unwrap();
        codex_bridge::store::leases::find(&mut self.db(), &key)
            .unwrap()
            .expect("the repository was leased")
    }

    /// The states of the task's commit statuses on the pull request's head
    /// in Gitea, oldest first.
    pub fn statuses_of(&self, task: &str) -> Vec<String> {
        self.sim()
            .statuses("acme", PR_REPO, &self.head)
            .iter()
            .filter(|s| s["description"].as_str().is_some_and(|d| d.contains(task)))
            .map(|s| s["status"].as_str().unwrap().to_owned())
            .collect()
    }

    /// What must hold after every phase: every webhook answered 202 has its
    /// task, and each task reached the state the rules give it; no task's
    /// turn was started twice; Gitea shows every receipt and every commit
    /// status once.
    pub fn check(&self, phase: &str) {
        for a in &self.accepted {
            self.wait(&a.task, self.expected[&a.task]);
        }
        let mut c = self.db();
        assert_eq!(
            count(&mut c, "tasks"),
            self.accepted.len() as i64,
            "{phase}: tasks other than the accepted webhooks' exist"
        );
        for a in &self.accepted {
            let t = &a.task;
            let of_delivery = format!(
                "delivery_id = '{}' AND task_id = '{t}' AND status = 'accepted'",
                a.delivery
            );
            // A turn is started once: its intent is written before the
            // request leaves, the runtime's answer is recorded once, and the
            // ledger has one operation for it. A blind replay adds to each.
            let started = [
                ("webhook_deliveries", of_delivery),
                (
                    "audit_events",
                    format!("action = 'turn.start_intent' AND task_id = '{t}'"),
                ),
                ("operation_ledger", format!("task_id = '{t}'")),
                ("turns", format!("task_id = '{t}'")),
            ];
            for (table, clause) in started {
                assert_eq!(
                    count_where(&mut c, table, &clause),
                    1,
                    "{phase}: {table} WHERE {clause}"
                );
            }
        }
        self.check_gitea(phase, &mut c);
    }

    /// No receipt and no commit status twice in Gitea, and each one the
    /// store says was posted is there.
    fn check_gitea(&self, phase: &str, c: &mut DbConn) {
        wait_until(
            &format!("{phase}: the receipts and statuses to be written"),
            LONG,
            || {
                count_where(c, "comments", "status IN ('pending', 'posting')") == 0
                    && count_where(c, "commit_statuses", "progress IN ('pending', 'posting')") == 0
            },
        );
        let issues: BTreeSet<(&str, i64)> = self
            .accepted
            .iter()
            .map(|a| (a.repo.as_str(), a.number))
            .collect();
        let mut markers: BTreeMap<String, usize> = BTreeMap::new();
        for (repo, number) in issues {
            for comment in self.sim().comments("acme", repo, number) {
                if comment["user"]["login"] == BOT {
                    for m in bridge_markers(comment["body"].as_str().unwrap_or("")) {
                        *markers.entry(m).or_default() += 1;
                    }
                }
            }
        }
        let twice: Vec<_> = markers.iter().filter(|(_, n)| **n > 1).collect();
        assert!(
            twice.is_empty(),
            "{phase}: written twice in Gitea: {twice:?}"
        );
        let posted = texts(
            c,
            "SELECT comment_key AS v FROM comments WHERE kind = 'receipt' AND status = 'posted'",
        );
        for key in posted {
            assert_eq!(
                markers.get(&format!("receipt={key}")),
                Some(&1),
                "{phase}: receipt {key}, posted, in Gitea"
            );
        }

        let mut statuses: BTreeMap<(String, String), usize> = BTreeMap::new();
        for s in self.sim().statuses("acme", PR_REPO, &self.head) {
            if s["context"] == "codex-bridge" {
                let key = (
                    s["description"].as_str().unwrap().to_owned(),
                    s["status"].as_str().unwrap().to_owned(),
                );
                *statuses.entry(key).or_default() += 1;
            }
        }
        let twice: Vec<_> = statuses.iter().filter(|(_, n)| **n > 1).collect();
        assert!(
            twice.is_empty(),
            "{phase}: a commit status set twice: {twice:?}"
        );
        let posted = texts(
            c,
            "SELECT task_id || ' ' || state AS v FROM commit_statuses WHERE progress = 'posted'",
        );
        for row in posted {
            let (task, state) = row.split_once(' ').unwrap();
            let found = statuses
                .keys()
                .filter(|(d, s)| d.contains(task) && s == state)
                .count();
            assert_eq!(
                found, 1,
                "{phase}: status {state} of {task} in Gitea: {statuses:?}"
            );
        }
    }
}

/// Gitea's webhook for a comment, sent as Gitea sends it (the body it made,
/// signed with the secret) to the site, which passes it to an instance.
pub fn deliver(nginx: &Nginx, d: &Delivery) -> RawReply {
    let headers = gitea_headers(&d.id, &d.event, &d.event_type, &d.body);
    nginx.http_request("POST", WEBHOOK, &headers, &d.body)
}

/// What the bridge's hidden markers in a comment say (`receipt=…`,
/// `task=… turn=…`, `status=…`).
fn bridge_markers(body: &str) -> Vec<String> {
    body.split("<!-- codex-bridge ")
        .skip(1)
        .filter_map(|rest| rest.split_once(" -->"))
        .map(|(marker, _)| marker.to_owned())
        .collect()
}

/// One text column (`v`) of each row of trusted test SQL.
fn texts(c: &mut DbConn, sql: &str) -> Vec<String> {
    #[derive(QueryableByName)]
    struct Row {
        #[diesel(sql_type = diesel::sql_types::Text)]
        v: String,
    }
    codex_bridge::with_conn!(c, |conn| diesel::sql_query(sql).load::<Row>(conn))
        .unwrap()
        .into_iter()
        .map(|r| r.v)
        .collect()
}
