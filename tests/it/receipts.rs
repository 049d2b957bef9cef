//! The receipts worker wakes on what matters instead of polling: the commit
//! that queues a receipt (the webhook's group commit, a task's abnormal end)
//! and the earliest retry falling due. Each test gives the worker a safety
//! interval of an hour, so a receipt written within the test's wait was
//! written because the worker was woken, not because it looked again. That
//! interval is no configuration key, so the worker runs here on a store of
//! its own rather than inside a `crate::testapp` server.

use crate::giteasim::{GiteaSim, LoggedRequest, Perm};
use crate::support::{connect, count_where, open_store, poll_until_async, PgDb, BOT, GITEA_TOKEN};
use codex_bridge::config::DatabaseUrl;
use codex_bridge::domain::TaskId;
use codex_bridge::gitea::receipts::ReceiptMode;
use codex_bridge::gitea::{GiteaClient, GiteaForge, TriggerPolicy};
use codex_bridge::jobs::receipts::ReceiptWorker;
use codex_bridge::lifecycle::TaskState;
use codex_bridge::store::{attempts, comments, ingest, Store};
use std::sync::Arc;
use std::time::Duration;

/// Longer than any test runs: the worker never looks at the store by itself.
const NEVER: Duration = Duration::from_secs(3600);

struct Setup {
    sim: GiteaSim,
    store: Store,
    issue: i64,
    worker: Option<ReceiptWorker>,
    running: Option<tokio::task::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Setup {
    /// Starts the worker: its first pass looks at the store once, as it starts.
    fn start_worker(&mut self) {
        if let Some(worker) = self.worker.take() {
            self.running = Some(tokio::spawn(worker.run()));
        }
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        if let Some(running) = &self.running {
            running.abort();
        }
    }
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let url = DatabaseUrl::Sqlite(dir.path().join("r.db"));
    setup_on(url, dir)
}

fn setup_on(url: DatabaseUrl, dir: tempfile::TempDir) -> Setup {
    let sim = GiteaSim::start();
    sim.create_repo("acme", "widgets");
    sim.set_permission("acme", "widgets", BOT, Perm::Admin);
    sim.add_user("bob");
    sim.set_permission("acme", "widgets", "bob", Perm::Write);
    let issue = sim.create_issue("acme", "widgets", "t", "b", "bob");
    let store = open_store(url);
    let worker = worker(&sim, &store);
    Setup {
        sim,
        store,
        issue,
        worker: Some(worker),
        running: None,
        _dir: dir,
    }
}

fn worker(sim: &GiteaSim, store: &Store) -> ReceiptWorker {
    let client = GiteaClient::new(&sim.base_url(), GITEA_TOKEN.to_owned().into());
    ReceiptWorker {
        store: store.clone(),
        client: client.clone(),
        forge: Arc::new(GiteaForge::new(client, BOT, TriggerPolicy::default())),
        bot_login: BOT.into(),
        mode: ReceiptMode::Comment,
        safety_interval: NEVER,
    }
}

/// Accepts a comment through the webhook's path (the group commit).
async fn accept(s: &Setup, comment_id: i64) -> TaskId {
    let req = crate::actors::request("widgets", s.issue, comment_id, "@ccbot hi");
    match s.store.ingest(req).await.unwrap() {
        ingest::IngestOutcome::Accepted { task_id, .. } => task_id,
        other => panic!("{other:?}"),
    }
}

/// The comment POSTs that carry the marker of `task`'s receipt for `state`.
fn receipt_posts(sim: &GiteaSim, task: &TaskId, state: &str) -> Vec<LoggedRequest> {
    let marker = comments::receipt_key(task, state.parse().unwrap());
    sim.requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/comments"))
        .filter(|r| r.body.contains(&marker))
        .collect()
}

/// Waits (60 s at most: a receipt may queue behind a hundred others on a
/// loaded machine) until the simulator has a 201 for that receipt.
async fn wait_posted(sim: &GiteaSim, task: &TaskId, state: &str) -> Vec<LoggedRequest> {
    let posted = poll_until_async(Duration::from_secs(60), || async {
        receipt_posts(sim, task, state)
            .iter()
            .any(|r| r.status == 201)
    })
    .await;
    assert!(
        posted,
        "no {state} receipt of {task} was posted; requests: {:?}",
        sim.requests()
            .iter()
            .map(|r| format!("{} {} {}", r.method, r.path, r.status))
            .collect::<Vec<_>>()
    );
    receipt_posts(sim, task, state)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_commit_that_queues_a_receipt_wakes_the_worker() {
    let mut s = setup();
    // Queued before the worker starts: its first pass writes this receipt,
    // which shows that pass is over.
    let first = accept(&s, 1).await;
    s.start_worker();
    wait_posted(&s.sim, &first, "received").await;

    // Everything after this is written only because a commit woke the worker:
    // a new task accepted by the webhook's group commit ...
    let second = accept(&s, 2).await;
    wait_posted(&s.sim, &second, "received").await;

    // ... and a task's abnormal end, which queues a receipt in the
    // transition's own commit.
    let t = second.clone();
    s.store
        .write(move |c| {
            let (_, version) = attempts::task_version(c, &t)?.expect("the task exists");
            attempts::decide_move(
                c,
                &t,
                version,
                TaskState::Rejected,
                "a test ends it",
                Some("permission_denied"),
                None,
            )
            .map(|_| ())
        })
        .await
        .unwrap();
    wait_posted(&s.sim, &second, "rejected").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_receipt_is_retried_when_its_backoff_ends_without_a_poll() {
    let mut s = setup();
    // The first POST of the receipt fails as Gitea fails (500: worth a retry).
    s.sim.fail_next_matching(
        1,
        Some("POST"),
        &format!("/api/v1/repos/acme/widgets/issues/{}/comments", s.issue),
    );
    // Queued before the worker starts: its first pass makes the first
    // attempt, and only the retry's timer can make the second.
    let task = accept(&s, 1).await;
    s.start_worker();
    let posts = wait_posted(&s.sim, &task, "received").await;
    let status: Vec<u16> = posts.iter().map(|r| r.status).collect();
    assert_eq!(status, [500, 201], "one failure, then one retry");
    // The retry waited for its backoff (a second after the first failure).
    let waited = posts[1].received - posts[0].received;
    assert!(
        waited >= Duration::from_millis(900),
        "retried after {waited:?}"
    );
    // Recorded once: two attempts, posted.
    let row = || async {
        let key = comments::receipt_key(&task, "received".parse().unwrap());
        s.store
            .read(move |c| comments::find(c, &key))
            .await
            .unwrap()
            .unwrap()
    };
    poll_until_async(Duration::from_secs(20), || async {
        row().await.status.as_str() == "posted"
    })
    .await;
    let row = row().await;
    assert_eq!(
        (row.status.as_str(), row.attempts),
        ("posted", 2),
        "{row:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_comment_past_the_outbox_limit_gets_one_receipt_naming_the_limit() {
    let mut s = setup();
    s.start_worker();
    let cap = ingest::OUTBOX_CAPACITY;
    for n in 0..cap {
        accept(&s, 1_000 + n).await;
    }
    let over = crate::actors::request("widgets", s.issue, 9_999, "@ccbot one more");
    let refused = match s.store.ingest(over.clone()).await.unwrap() {
        ingest::IngestOutcome::OutboxFull {
            task_id: Some(t), ..
        } => t,
        other => panic!("{other:?}"),
    };
    let posts = wait_posted(&s.sim, &refused, "rejected").await;
    assert!(
        posts[0].body.contains(&format!("{cap} requests")),
        "{}",
        posts[0].body
    );
    // Gitea's replay of the refused comment is the same refusal: no second
    // receipt (the receipt row is the one the worker already posted).
    let mut replay = over;
    replay.delivery_key = "default:replay-of-9999".into();
    let again = s.store.ingest(replay).await.unwrap();
    assert!(
        matches!(again, ingest::IngestOutcome::Duplicate { task_id: Some(ref t), .. } if *t == refused),
        "{again:?}"
    );
    // The simulator holds the post before the worker records it: wait for
    // the record, then check it is the one row, posted.
    let db_row = || async {
        let t = refused.clone();
        s.store
            .read(move |c| comments::find(c, &comments::receipt_key(&t, TaskState::Rejected)))
            .await
            .unwrap()
    };
    let recorded = poll_until_async(Duration::from_secs(20), || async {
        db_row()
            .await
            .is_some_and(|r| r.status.as_str() == "posted")
    })
    .await;
    assert!(recorded, "{:?}", db_row().await);
    assert_eq!(db_row().await.map(|r| r.attempts), Some(1));
    assert_eq!(receipt_posts(&s.sim, &refused, "rejected").len(), 1);
}

/// Two processes on one PostgreSQL, each with its receipts worker, both
/// started on the same due receipts: each receipt is written once. Every
/// comment POST is slowed, so that without the claim the second worker's
/// marker lookup runs while the first one's POST is still on its way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_write_each_receipt_once_postgres() {
    let db = PgDb::create();
    let mut s = setup_on(
        DatabaseUrl::Postgres(db.url.clone()),
        tempfile::tempdir().unwrap(),
    );
    let other = open_store(DatabaseUrl::Postgres(db.url.clone()));
    let mut tasks = Vec::new();
    for id in 1..=8 {
        tasks.push(accept(&s, id).await);
    }
    s.sim.delay_next_matching(
        64,
        Some("POST"),
        "/api/v1/repos/acme/widgets/issues/",
        Duration::from_millis(300),
    );
    let second = tokio::spawn(worker(&s.sim, &other).run());
    s.start_worker();
    for t in &tasks {
        wait_posted(&s.sim, t, "received").await;
    }
    let keys: Vec<String> = tasks
        .iter()
        .map(|t| comments::receipt_key(t, TaskState::Received))
        .collect();
    let settled = poll_until_async(Duration::from_secs(60), || async {
        let keys = keys.clone();
        s.store
            .read(move |c| {
                let mut all = true;
                for k in &keys {
                    all &= comments::find(c, k)?.is_some_and(|r| r.status.as_str() == "posted");
                }
                Ok(all)
            })
            .await
            .unwrap()
    })
    .await;
    second.abort();
    assert!(settled, "not every receipt was recorded posted");
    for t in &tasks {
        let posts: Vec<_> = receipt_posts(&s.sim, t, "received")
            .into_iter()
            .filter(|r| r.status == 201)
            .collect();
        assert_eq!(
            posts.len(),
            1,
            "receipt of {t} posted {} times",
            posts.len()
        );
    }
    // The intents: one per receipt, whichever process wrote it.
    let intents = count_where(
        &mut connect(&db.url),
        "audit_events",
        "action = 'receipt.intent'",
    );
    assert_eq!(intents, tasks.len() as i64);
}
