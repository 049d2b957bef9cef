//! The crash loop: the real server (binary, real `codex app-server` against
//! the fake model, PyPI gitea-mcp, the Gitea simulator) under a steady load
//! (`load.rs`), SIGKILLed at a random moment and started again on the same
//! database, over and over. After every restart the promises are checked
//! (`checks.rs`); when the kills are done the load stops, the test acts as
//! the operator until every task has settled, and checks once more.
//!
//! CI runs a short loop; the long one is
//! `CODEX_BRIDGE_TEST_CRASHLOOP_KILLS=200 scripts/test --test it -- crashloop::crash_loop_on_sqlite --nocapture`
//! (`CODEX_BRIDGE_TEST_CRASHLOOP_SEED` repeats a run's choices; the timing of
//! the kills against the server's work cannot be repeated).

pub(crate) mod checks;
pub(crate) mod load;

use crate::giteasim::{GiteaSim, Perm};
use crate::support::*;
use crate::testapp::{TestApp, TestAppBuilder};
use checks::Checks;
use diesel::prelude::*;
use load::Load;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const OWNER: &str = "acme";
const REPO: &str = "widgets";

/// One message sent to the agent, named by a nonce only it carries.
#[derive(Debug, Clone)]
pub struct Op {
    nonce: String,
    kind: OpKind,
    issue: i64,
    /// The Gitea comment that carried it.
    comment: i64,
}

#[derive(Debug, Clone, Copy)]
pub enum OpKind {
    Mention,
    MentionWithApproval,
    Steer,
}

mod rng {
    /// SplitMix64: a run's choices follow from its seed alone.
    pub struct Rng(u64);

    impl Rng {
        pub fn new(seed: u64) -> Rng {
            Rng(seed)
        }

        pub fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }

        /// Uniform in `0..n` (n > 0).
        pub fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }

        /// Uniform in `lo..hi`.
        pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
            lo + self.below(hi - lo)
        }
    }
}

fn env_number(key: &str) -> Option<u64> {
    std::env::var(key).ok().map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{key}={v:?} is not a number"))
    })
}

/// The server of the loop: approvals asked for shell commands, short leases
/// (a restart takes over the dead process's lease within seconds), no storm
/// guard or rate limits (the load is one person asking often, on purpose).
pub(crate) fn start(db: Db) -> (TestApp, Vec<i64>) {
    let sim = GiteaSim::start();
    sim.create_repo(OWNER, REPO);
    sim.set_permission(OWNER, REPO, BOT, Perm::Admin);
    sim.add_user("bob");
    sim.set_permission(OWNER, REPO, "bob", Perm::Write);
    let issues = (1..=4)
        .map(|n| sim.create_issue(OWNER, REPO, &format!("Chore {n}"), "Do things.", "bob"))
        .collect();
    let builder: TestAppBuilder = match db {
        Db::Sqlite => TestApp::builder(),
        Db::Postgres => TestApp::builder().postgres(),
    };
    let app = builder
        .codex()
        .gitea_mcp()
        .env("CODEX_BRIDGE_SCHEDULER_SWEEP_MS", "100")
        .env("CODEX_BRIDGE_APPROVAL_POLICY", "untrusted")
        .env("CODEX_BRIDGE_SANDBOX", "workspace-write")
        .env("CODEX_BRIDGE_LEASE_TTL_SECS", "3")
        .env("CODEX_BRIDGE_LEASE_HEARTBEAT_SECS", "1")
        .env("CODEX_BRIDGE_SESSION_TURNS_PER_MINUTE", "10000")
        .env("CODEX_BRIDGE_USER_TRIGGERS_PER_HOUR", "100000")
        .env("CODEX_BRIDGE_REPO_TURNS_PER_DAY", "100000")
        .env("CODEX_BRIDGE_MAX_PARALLEL_TURNS_PER_REPO", "4")
        .start_with_gitea(sim);
    app.model()
        .set_default(crate::fakemodel::Step::message("Done.\n\n{{marker}}"));
    (app, issues)
}

#[derive(Clone, Copy)]
pub(crate) enum Db {
    Sqlite,
    Postgres,
}

#[derive(QueryableByName)]
struct LastState {
    #[diesel(sql_type = diesel::sql_types::Text)]
    state: String,
}

/// What a run did, printed at its end.
struct Counts {
    kills: u64,
    accepted: usize,
    undelivered: usize,
    replies: usize,
    reconciliations: i64,
    operator_reconciled: usize,
    released: usize,
    cleared: usize,
    ops: usize,
    replays: usize,
    approvals: usize,
    violations: usize,
    elapsed: Duration,
}

fn run(db: Db, kills: u64) {
    let seed = env_number("CODEX_BRIDGE_TEST_CRASHLOOP_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    });
    eprintln!("crashloop: seed {seed}, {kills} kills");
    let began = Instant::now();
    let (mut app, issues) = start(db);
    let peers = app.shared_peers();
    let db_url = app.db_url.clone();
    let load = Load::start(peers.clone(), db_url.clone(), issues.clone(), seed);
    let mut rng = rng::Rng::new(seed);
    let mut checks = Checks::default();
    let mut operator = Operator::default();
    for k in 1..=kills {
        // A random moment: during start-up and recovery as well as later.
        std::thread::sleep(Duration::from_millis(rng.between(200, 8_000)));
        app.kill9();
        if rng.below(3) == 0 {
            // Down for a while: Gitea's deliveries meanwhile fail, as they
            // do, and some come back as replays.
            std::thread::sleep(Duration::from_millis(rng.between(100, 1_500)));
        }
        app.start_again();
        checks.run(
            &format!("after kill {k}"),
            &db_url,
            &peers,
            &issues,
            &load.ops(),
        );
        operator.reconcile(&app);
        if k % 10 == 0 {
            eprintln!(
                "crashloop: {k}/{kills} kills, {} accepted, {} replies, {} violations, {:.0?}",
                checks.accepted,
                checks.replies,
                checks.violations.len(),
                began.elapsed()
            );
        }
    }
    let mut record = load.finish();
    // After all the kills the server still does its work: one more
    // mention, which must end with its reply.
    let last = load::mention(&peers, issues[0], seed, 999_999, false, Duration::ZERO);
    record.ops.push(last.clone());
    peers.gitea().wait_idle();
    settle(&app, &mut operator);
    let last_state: Vec<String> = {
        let rows: Vec<LastState> = codex_bridge::with_conn!(&mut app.db(), |c| {
            diesel::sql_query(format!(
                "SELECT state FROM tasks WHERE comment_id = {}",
                last.comment
            ))
            .load(c)
        })
        .unwrap();
        rows.into_iter().map(|r| r.state).collect()
    };
    checks.run("settled", &db_url, &peers, &issues, &record.ops);
    checks.settled(&db_url, &peers, &issues);
    let counts = Counts {
        kills,
        accepted: checks.accepted,
        undelivered: checks.undelivered,
        replies: checks.replies,
        reconciliations: checks.reconciliations,
        operator_reconciled: operator.reconciled,
        released: operator.released,
        cleared: operator.cleared,
        ops: record.ops.len(),
        replays: record.replays,
        approvals: record.approvals + operator.approvals,
        violations: checks.violations.len(),
        elapsed: began.elapsed(),
    };
    eprintln!(
        "crashloop: kills {} accepted {} (webhooks undelivered {}) replies {} reconciliations {} (operator {}) \
         released {} workspaces cleared {} operations {} replays {} approvals {} violations {} in {:.0?} \
         ({:.1} kills/min)",
        counts.kills,
        counts.accepted,
        counts.undelivered,
        counts.replies,
        counts.reconciliations,
        counts.operator_reconciled,
        counts.released,
        counts.cleared,
        counts.ops,
        counts.replays,
        counts.approvals,
        counts.violations,
        counts.elapsed,
        counts.kills as f64 * 60.0 / counts.elapsed.as_secs_f64(),
    );
    let mut answers: BTreeMap<String, usize> = BTreeMap::new();
    for d in peers.gitea().deliveries() {
        let body: serde_json::Value =
            serde_json::from_str(&d.response_body).unwrap_or(serde_json::Value::Null);
        let outcome = body["outcome"]
            .as_str()
            .or(body["status"].as_str())
            .unwrap_or("-");
        *answers
            .entry(format!("{:?} {outcome}", d.status))
            .or_default() += 1;
    }
    eprintln!("crashloop: Gitea's deliveries by answer: {answers:?}");
    assert!(
        checks.violations.is_empty(),
        "{} violations (seed {seed}):\n{}",
        checks.violations.len(),
        checks.violations.join("\n")
    );
    assert_eq!(
        last_state,
        ["succeeded"],
        "the mention after the last kill did not end with its reply"
    );
    assert!(
        counts.accepted > 0 && counts.replies > 0,
        "the load did nothing"
    );
}

/// The operator's part: an uncertain task is decided by a person, here
/// always as failed (nothing is re-run), so its session goes on.
#[derive(Default)]
pub(crate) struct Operator {
    reconciled: usize,
    released: usize,
    cleared: usize,
    approved: BTreeMap<String, Instant>,
    approvals: usize,
}

#[derive(QueryableByName)]
struct Uncertain {
    #[diesel(sql_type = diesel::sql_types::Text)]
    task_id: String,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
    attempt_id: Option<String>,
}

impl Operator {
    fn reconcile(&mut self, app: &TestApp) {
        let mut conn = app.db();
        let uncertain: Vec<Uncertain> = codex_bridge::with_conn!(&mut conn, |c| {
            diesel::sql_query(
                "SELECT t.task_id, (SELECT a.attempt_id FROM attempts a \
                 WHERE a.task_id = t.task_id ORDER BY a.number DESC LIMIT 1) AS attempt_id \
                 FROM tasks t WHERE t.state = 'needs_reconciliation'",
            )
            .load(c)
        })
        .unwrap();
        self.release_held(app);
        self.clear_blocked(app);
        for u in uncertain {
            let Some(attempt) = u.attempt_id else {
                continue;
            };
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_codex-bridge"))
                .env("CODEX_BRIDGE_DATABASE_URL", &app.db_url)
                .args([
                    "reconcile",
                    &u.task_id,
                    &attempt,
                    "failed",
                    "--confirm-no-active-turn",
                ])
                .output()
                .unwrap();
            if out.status.success() {
                self.reconciled += 1;
                continue;
            }
            // Refused only because the task moved on meanwhile is no failure.
            let now = task_state(&mut app.db(), &u.task_id);
            assert_ne!(
                now.as_deref(),
                Some("needs_reconciliation"),
                "reconcile {} refused: {}",
                u.task_id,
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

#[derive(QueryableByName)]
struct Held {
    #[diesel(sql_type = diesel::sql_types::Text)]
    queue_id: String,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    version: i64,
}

impl Operator {
    /// A message held after two restarts cut it before it reached the
    /// agent waits for a person: here, "send now" (nothing of it was sent).
    fn release_held(&mut self, app: &TestApp) {
        let held: Vec<Held> = codex_bridge::with_conn!(&mut app.db(), |c| {
            diesel::sql_query(
                "SELECT queue_id, version FROM outbox_entries WHERE status = 'queued' \
                 AND auto_drain = false AND hold_reason = 'interrupted_by_restart'",
            )
            .load(c)
        })
        .unwrap();
        for h in held {
            let r = app.admin_post(
                &format!("/api/gitea-workflow/outbox/{}/send-now", h.queue_id),
                &serde_json::json!({
                    "requestId": format!("release-{}-{}", h.queue_id, h.version),
                    "reason": "the crash loop's operator releases it",
                }),
            );
            // 409: the entry moved on meanwhile (it is no longer held).
            assert!(r.status == 200 || r.status == 409, "{:?}", r.json);
            self.released += 1;
        }
    }
}

#[derive(QueryableByName)]
struct Blocked {
    #[diesel(sql_type = diesel::sql_types::Text)]
    task_id: String,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    state_version: i64,
}

impl Operator {
    /// A turn killed mid-way leaves its worktree changed with no state
    /// recorded at its end, so the session's next task waits in
    /// `blocked_workspace` for a person to look (the bridge never takes
    /// such changes over by itself). Here the person accepts the worktree
    /// as it is, as `clear-workspace` does.
    fn clear_blocked(&mut self, app: &TestApp) {
        let blocked: Vec<Blocked> = codex_bridge::with_conn!(&mut app.db(), |c| {
            diesel::sql_query(
                "SELECT task_id, state_version FROM tasks WHERE state = 'blocked_workspace'",
            )
            .load(c)
        })
        .unwrap();
        for b in blocked {
            let r = app.admin_post(
                &format!("/api/gitea-workflow/tasks/{}/clear-workspace", b.task_id),
                &serde_json::json!({
                    "requestId": format!("clear-{}-{}", b.task_id, b.state_version),
                    "reason": "the crash loop's operator accepts the worktree as it is",
                }),
            );
            // 409: the task moved on meanwhile (it is no longer blocked).
            assert!(r.status == 200 || r.status == 409, "{:?}", r.json);
            self.cleared += 1;
        }
    }
}

/// How long settling may go without one task transition or comment
/// write before it is called stuck: longer than a turn takes on a busy
/// machine, so a slow machine is never mistaken for a stuck server.
const STALL: Duration = Duration::from_secs(240);

/// With the load stopped: approve what waits, reconcile what is uncertain,
/// until every task has ended and every receipt is written. It waits as
/// long as the work moves (a 200-kill run leaves hundreds of tasks queued),
/// and fails once nothing moved for [`STALL`].
pub(crate) fn settle(app: &TestApp, operator: &mut Operator) {
    let peers = app.shared_peers();
    let terminal: Vec<String> = codex_bridge::lifecycle::TaskState::TERMINAL
        .iter()
        .map(|s| format!("'{}'", s.as_str()))
        .collect();
    let open = format!("state NOT IN ({})", terminal.join(", "));
    let began = Instant::now();
    let mut moved = (Instant::now(), -1);
    loop {
        operator.approvals += load::approve_pending(&peers, &app.db_url, &mut operator.approved);
        operator.reconcile(app);
        let mut c = app.db();
        let tasks_open = count_where(&mut c, "tasks", &open);
        let writing = count_where(&mut c, "comments", "status IN ('pending', 'posting')");
        if tasks_open == 0 && writing == 0 {
            peers.gitea().wait_idle();
            return;
        }
        let progress = count(&mut c, "task_transitions")
            + count_where(&mut c, "comments", "status = 'posted'");
        if progress != moved.1 {
            moved = (Instant::now(), progress);
        } else if moved.0.elapsed() > STALL {
            report_unsettled(app, &open);
            panic!(
                "not settled: nothing moved for {STALL:?} ({:?} settling): {tasks_open} tasks open, \
                 {writing} comments being written",
                began.elapsed()
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[derive(QueryableByName, Debug)]
#[allow(dead_code)] // read through Debug
struct OpenTask {
    #[diesel(sql_type = diesel::sql_types::Text)]
    task_id: String,
    #[diesel(sql_type = diesel::sql_types::Text)]
    state: String,
    #[diesel(sql_type = diesel::sql_types::Text)]
    session_key: String,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
    command: Option<String>,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
    paused_reason: Option<String>,
}

/// What was left open, and the server's last words, for the failure report.
fn report_unsettled(app: &TestApp, open: &str) {
    let sql = format!(
        "SELECT t.task_id, t.state, t.session_key, t.command, s.paused_reason FROM tasks t \
         LEFT JOIN sessions s ON s.session_key = t.session_key WHERE t.{open}"
    );
    let rows: Vec<OpenTask> =
        codex_bridge::with_conn!(&mut app.db(), |c| diesel::sql_query(&sql).load(c)).unwrap();
    for r in &rows {
        eprintln!("crashloop open: {r:?}");
        let d = app.admin_get(&format!("/api/gitea-workflow/tasks/{}", r.task_id));
        eprintln!("crashloop open detail: {}", d.json["audit"]);
    }
    let logs = app.logs();
    let tail: Vec<&str> = logs.lines().rev().take(60).collect();
    eprintln!("server log (newest first):\n{}", tail.join("\n"));
}

#[test]
fn crash_loop_on_sqlite() {
    run(
        Db::Sqlite,
        env_number("CODEX_BRIDGE_TEST_CRASHLOOP_KILLS").unwrap_or(6),
    );
}

#[test]
fn crash_loop_on_postgres() {
    run(
        Db::Postgres,
        env_number("CODEX_BRIDGE_TEST_CRASHLOOP_PG_KILLS").unwrap_or(3),
    );
}
