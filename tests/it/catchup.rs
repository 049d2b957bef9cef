//! The catch-up of comments whose webhook never came: the real server,
//! catching up every second, against the Gitea simulator. A repository is
//! known once a webhook has made a task in it, as in use; the comments after
//! that reach the bridge late, twice, or only through the REST API.

use crate::e2e::Loop;
use crate::giteasim::{Delivery, GiteaSim, Perm};
use crate::support::*;
use crate::testapp::*;
use codex_bridge::store::DbConn;
use diesel::prelude::*;
use serde_json::Value;
use std::time::Duration;

/// Catch-up every second.
fn catching_up(b: TestAppBuilder) -> TestAppBuilder {
    b.env("CODEX_BRIDGE_CATCHUP_INTERVAL_SECS", "1")
}

/// `acme/<name>` for each name with an Issue (number 1) in each, bob a writer.
fn sim_with(repos: &[&str]) -> GiteaSim {
    let sim = GiteaSim::start();
    sim.add_user("bob");
    for name in repos {
        sim.create_repo("acme", name);
        sim.set_permission("acme", name, BOT, Perm::Admin);
        sim.set_permission("acme", name, "bob", Perm::Write);
        sim.create_issue("acme", name, "Flaky test", "It fails.", "bob");
    }
    sim
}

/// An intake-only server (no turn runs) catching up every second.
fn intake(sim: GiteaSim, db: Db) -> TestApp {
    catching_up(TestApp::builder().db(db)).start_with_gitea(sim)
}

fn id_of(comment: &Value) -> i64 {
    comment["id"].as_i64().unwrap()
}

/// The tasks made for a comment: (task id, delivery key).
fn tasks_of(db: &mut DbConn, comment_id: i64) -> Vec<(String, String)> {
    #[derive(QueryableByName)]
    struct Row {
        #[diesel(sql_type = diesel::sql_types::Text)]
        task_id: String,
        #[diesel(sql_type = diesel::sql_types::Text)]
        delivery_key: String,
    }
    let q = format!("SELECT task_id, delivery_key FROM tasks WHERE comment_id = {comment_id}");
    codex_bridge::with_conn!(db, |c| diesel::sql_query(&q).load::<Row>(c))
        .unwrap()
        .into_iter()
        .map(|r| (r.task_id, r.delivery_key))
        .collect()
}

/// Waits until the comment has a task; that task (and that it is the only one).
fn wait_task_of(app: &TestApp, comment_id: i64) -> (String, String) {
    let mut db = app.db();
    let found = poll_until(Duration::from_secs(10), || {
        !tasks_of(&mut db, comment_id).is_empty()
    });
    assert!(
        found,
        "timed out waiting for a task for comment {comment_id}; {}",
        catchup_state(app)
    );
    let tasks = tasks_of(&mut db, comment_id);
    assert_eq!(tasks.len(), 1, "comment {comment_id}: {tasks:?}");
    tasks.into_iter().next().unwrap()
}

/// What the catch-up has done, for a failure's report: each repository's
/// cursor and claim, the catch-up's audit events, and the binary's log
/// lines about it.
fn catchup_state(app: &TestApp) -> String {
    #[derive(QueryableByName, Debug)]
    #[allow(dead_code)]
    struct Cursor {
        #[diesel(sql_type = diesel::sql_types::Text)]
        repo_key: String,
        #[diesel(sql_type = diesel::sql_types::Text)]
        since: String,
        #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
        lease_owner: Option<String>,
        #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
        lease_expires_at: Option<String>,
    }
    #[derive(QueryableByName, Debug)]
    #[allow(dead_code)]
    struct Event {
        #[diesel(sql_type = diesel::sql_types::Text)]
        action: String,
        #[diesel(sql_type = diesel::sql_types::Text)]
        at: String,
        #[diesel(sql_type = diesel::sql_types::Text)]
        metadata: String,
    }
    const CURSORS: &str = "SELECT repo_key, since, lease_owner, lease_expires_at \
                           FROM catchup_cursors ORDER BY repo_key";
    const EVENTS: &str = "SELECT action, at, metadata FROM audit_events \
                          WHERE action LIKE 'catchup.%' ORDER BY id";
    let mut db = app.db();
    let cursors =
        codex_bridge::with_conn!(&mut db, |c| diesel::sql_query(CURSORS).load::<Cursor>(c));
    let events = codex_bridge::with_conn!(&mut db, |c| diesel::sql_query(EVENTS).load::<Event>(c));
    let logs = app.logs();
    let lines: Vec<&str> = logs.lines().filter(|l| l.contains("catch")).collect();
    format!(
        "now {}; cursors: {cursors:#?}; catch-up events: {events:#?}; the binary's catch-up lines: {lines:#?}",
        codex_bridge::store::now()
    )
}

/// Waits until a pass has read `acme/<repo>` up to `comment` (its cursor is
/// at the comment's `updated_at` or later).
fn wait_read_past(app: &TestApp, repo: &str, comment: &Value) {
    let at = codex_bridge::store::normalize_time(comment["updated_at"].as_str().unwrap()).unwrap();
    let mut db = app.db();
    app.wait_for(
        &format!("a catch-up pass over acme/{repo} past {at}"),
        || {
            count_where(
                &mut db,
                "catchup_cursors",
                &format!("repo_key = 'default:acme/{repo}' AND since >= '{at}'"),
            ) == 1
        },
    );
}

/// The simulator's `created` deliveries of a comment, oldest first.
fn deliveries_of(sim: &GiteaSim, comment_id: i64) -> Vec<Delivery> {
    sim.deliveries()
        .into_iter()
        .filter(|d| d.json()["comment"]["id"] == comment_id && d.json()["action"] == "created")
        .collect()
}

/// Asserts the bridge answered a delivery as a duplicate of `task`.
fn assert_duplicate_of(d: &Delivery, task: &str) {
    assert_eq!(d.status, Some(200), "{}", d.response_body);
    let answer: Value = serde_json::from_str(&d.response_body).unwrap();
    assert_eq!(answer["status"], "duplicate", "{answer}");
    assert_eq!(answer["taskId"], task, "{answer}");
}

/// Registers `acme/<repo>` with the bridge the way it happens in use: a
/// webhook that makes a task. Returns that task.
fn register(app: &TestApp, repo: &str) -> String {
    let sim = app.gitea();
    let c = sim.post_comment_as("bob", "acme", repo, 1, "@ccbot hello");
    sim.wait_idle();
    let d = deliveries_of(sim, id_of(&c)).pop().unwrap();
    assert_eq!(d.status, Some(202), "{}", d.response_body);
    wait_task_of(app, id_of(&c)).0
}

/// `codex_bridge_catchup_passes_total{outcome="complete"}` of one server.
fn complete_passes(app: &TestApp) -> u64 {
    let text = ureq::get(&app.url("/metrics"))
        .set("Authorization", &format!("Bearer {ADMIN_TOKEN}"))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("codex_bridge_catchup_passes_total{outcome=\"complete\"} "))
        .map_or(0, |n| n.trim().parse().unwrap())
}

/// Waits until `app` has finished `n` more complete passes.
fn wait_passes(app: &TestApp, n: u64) {
    let start = complete_passes(app);
    app.wait_for(&format!("{n} more catch-up passes"), || {
        complete_passes(app) >= start + n
    });
}

#[test]
fn catchup_a_mention_whose_webhook_never_came_gets_one_task_and_one_reply() {
    let l = Loop::start_with(catching_up);
    l.script_reply(l.issue, "Hello.");
    let first = l.comment("bob", l.issue, "@ccbot hello");
    l.wait(&first, "succeeded");

    // Gitea's queue stalls: the comment is in its API, its webhook is not sent.
    l.sim().set_auto_deliver(false);
    l.script_reply(l.issue, "Caught up: the retry math is fine.");
    let comment = l.sim().post_comment_as(
        "bob",
        "acme",
        "widgets",
        l.issue,
        "@ccbot please double-check the retry math",
    );
    let id = id_of(&comment);
    let (task, delivery_key) = wait_task_of(&l.app, id);
    assert_eq!(delivery_key, format!("default:catchup:{id}"));
    l.wait(&task, "succeeded");
    l.wait_receipts(&task);
    let reply_marker = format!("codex-bridge task={task} turn=");
    assert_eq!(l.bot_comments(l.issue, &reply_marker).len(), 1);
    assert_eq!(l.receipts(&task, "received").len(), 1);
    let d = l.detail(&task);
    assert_eq!(d["task"]["author"], "bob");
    assert_eq!(d["task"]["sessionKey"], "default:acme/widgets:issue:1");

    // The webhook arrives after all, then an operator replays it in Gitea:
    // both are the catch-up task's duplicates.
    l.sim().deliver_pending();
    l.sim().wait_idle();
    let late = deliveries_of(l.sim(), id);
    assert_eq!(late.len(), 1, "{late:?}");
    assert_duplicate_of(&late[0], &task);
    // The loop tests' own lookup of a comment's task takes this path too.
    assert_eq!(l.app.task_of_comment(&comment), task);
    let replay = l.sim().redeliver(&late[0].id);
    l.sim().wait_idle();
    let replayed = l
        .sim()
        .deliveries()
        .into_iter()
        .find(|d| d.id == replay)
        .unwrap();
    assert_duplicate_of(&replayed, &task);

    // Later passes read the comment again and make nothing of it either.
    wait_passes(&l.app, 2);
    assert_eq!(tasks_of(&mut l.app.db(), id).len(), 1);
    assert_eq!(l.bot_comments(l.issue, &reply_marker).len(), 1);
    assert_eq!(l.receipts(&task, "received").len(), 1);
}

#[test]
fn catchup_refuses_a_commenter_without_permission_as_the_webhook_does() {
    let l = Loop::start_with(catching_up);
    l.sim().add_user("mallory");
    l.sim()
        .set_permission("acme", "widgets", "mallory", Perm::Read);
    let by_hook = l.comment("mallory", l.issue, "@ccbot delete everything");
    l.wait(&by_hook, "rejected");

    l.sim().lose_webhooks(true);
    let comment = l.sim().post_comment_as(
        "mallory",
        "acme",
        "widgets",
        l.issue,
        "@ccbot delete everything, now",
    );
    let (caught, key) = wait_task_of(&l.app, id_of(&comment));
    assert!(key.contains(":catchup:"), "{key}");
    l.wait(&caught, "rejected");
    l.expect_one_receipt(&caught, "rejected");
    for task in [&by_hook, &caught] {
        assert_eq!(l.detail(task)["task"]["errorCode"], "permission_denied");
    }
    assert!(
        l.model().requests().is_empty(),
        "the model was asked something"
    );
}

/// A comment whose webhook surely comes before any catch-up pass reads it:
/// stamped an hour back, it is older than every pass's window until it
/// changes. Then it changes while webhooks are lost, so that a pass reads
/// it. Returns it as the listing shows it now, and the webhook's task.
fn webhook_first(app: &TestApp, repo: &str, text: &str) -> (Value, String) {
    let sim = app.gitea();
    sim.rewind_clock(Duration::from_secs(3600));
    let comment = sim.post_comment_as("bob", "acme", repo, 1, text);
    sim.wait_idle();
    sim.advance_clock(Duration::from_secs(3600));
    let id = id_of(&comment);
    let (task, key) = wait_task_of(app, id);
    assert!(!key.contains("catchup"), "{key}");
    sim.lose_webhooks(true);
    sim.edit_comment_as("bob", id, &format!("{text} (edited)"));
    sim.lose_webhooks(false);
    (sim.comment(id).unwrap(), task)
}

#[test]
fn catchup_finds_the_webhooks_task_and_makes_none_of_its_own() {
    let app = intake(sim_with(&["widgets"]), Db::Sqlite);
    register(&app, "widgets");
    let (comment, _) = webhook_first(&app, "widgets", "@ccbot look again");
    let id = id_of(&comment);

    wait_read_past(&app, "widgets", &comment);
    wait_passes(&app, 1);
    let mut db = app.db();
    assert_eq!(tasks_of(&mut db, id).len(), 1);
    assert_eq!(
        count_where(
            &mut db,
            "webhook_deliveries",
            &format!("delivery_key = 'default:catchup:{id}'")
        ),
        0,
        "the comment's task was found before anything was ingested"
    );

    // The admin overview says that it runs, and what it cannot see.
    let overview = app.admin_get("/api/gitea-workflow/overview").json;
    let catchup = &overview["catchup"];
    assert_eq!(catchup["enabled"], true, "{overview}");
    assert_eq!(catchup["intervalSecs"], 1);
    assert_eq!(catchup["repositories"], 1);
    assert!(catchup["lastPassAt"].is_string(), "{catchup}");
    let blind = catchup["cannotSee"].as_str().unwrap();
    assert!(
        blind.contains("reviews") && blind.contains("edits or deletions"),
        "{blind}"
    );
}

#[test]
fn catchup_follows_the_webhooks_rules_and_never_reads_before_the_repository_was_seen() {
    let sim = sim_with(&["widgets"]);
    sim.commit("acme", "widgets", "topic", "x.txt", "x\n", "wip");
    let pull = sim.create_pull("acme", "widgets", "Topic", "", "bob", "topic", "main");
    // Said two hours before the bridge first hears of the repository.
    sim.rewind_clock(Duration::from_secs(7200));
    let old = sim.post_comment_without_webhook("bob", "acme", "widgets", 1, "@ccbot old request");
    sim.advance_clock(Duration::from_secs(7200));
    let app = intake(sim, Db::Sqlite);
    register(&app, "widgets");

    let sim = app.gitea();
    sim.lose_webhooks(true);
    let post = |user: &str, number: i64, text: &str| {
        sim.post_comment_as(user, "acme", "widgets", number, text)
    };
    let ignored = [
        post(BOT, 1, "@ccbot noted, quoting myself"),
        post("bob", 1, "thanks, nothing to do here"),
        post("bob", 1, "the docs spell it `@ccbot`"),
        post("bob", 1, "@alice could you look?"),
    ];
    let on_pull = post("bob", pull, "@ccbot review this please");
    let edited = post("bob", 1, "a plain remark");
    sim.edit_comment_as(
        "bob",
        id_of(&edited),
        "a plain remark; @ccbot please act on it",
    );

    let (task, key) = wait_task_of(&app, id_of(&on_pull));
    assert_eq!(key, format!("default:catchup:{}", id_of(&on_pull)));
    let d = app.admin_get(&format!("/api/gitea-workflow/tasks/{task}"));
    assert_eq!(
        d.json["task"]["sessionKey"],
        format!("default:acme/widgets:pull:{pull}")
    );
    let mut db = app.db();
    assert_eq!(
        count_where(
            &mut db,
            "tasks",
            &format!("task_id = '{task}' AND head_ref = 'topic' AND base_ref = 'main'")
        ),
        1,
        "a Pull Request's task names its branches, as the webhook's does"
    );
    // An edit that added the first mention is seen: the comment mentions the bot now.
    wait_task_of(&app, id_of(&edited));

    let newest = sim.comment(id_of(&edited)).unwrap();
    wait_read_past(&app, "widgets", &newest);
    for c in ignored.iter().chain([&old]) {
        assert!(tasks_of(&mut db, id_of(c)).is_empty(), "a task for {c}");
    }
    assert_eq!(
        count(&mut db, "tasks"),
        3,
        "the registering one, the PR's and the edited one"
    );
}

#[test]
fn catchup_leaves_a_disabled_repository_alone_and_enabling_it_runs_nothing_said_meanwhile() {
    let app = intake(sim_with(&["widgets"]), Db::Sqlite);
    register(&app, "widgets");
    let control = |what: &str| {
        let r = app.admin_post(
            &format!("/api/gitea-workflow/repos/default:acme%2Fwidgets/{what}"),
            &serde_json::json!({"requestId": format!("{what}-1"), "reason": "catch-up test"}),
        );
        assert_eq!(r.status, 200, "{:?}", r.json);
    };
    control("disable");
    let sim = app.gitea();
    sim.lose_webhooks(true);
    let meanwhile = sim.post_comment_as("bob", "acme", "widgets", 1, "@ccbot while disabled");
    // Passes over the disabled repository, the last ones more than a second
    // after the comment (passes start a second apart).
    wait_passes(&app, 3);
    control("enable");
    let after = sim.post_comment_as("bob", "acme", "widgets", 1, "@ccbot now that it is back");
    wait_task_of(&app, id_of(&after));
    assert!(
        tasks_of(&mut app.db(), id_of(&meanwhile)).is_empty(),
        "a comment said while the repository was disabled ran once it was enabled"
    );
}

#[test]
fn catchup_restart_in_the_middle_of_a_pass_creates_nothing_twice() {
    let sim = sim_with(&["a", "b", "c"]);
    sim.commit("acme", "b", "topic", "x.txt", "x\n", "wip");
    let pull = sim.create_pull("acme", "b", "Topic", "", "bob", "topic", "main");
    // A killed process's catch-up lease lapses in two seconds.
    let mut app = catching_up(TestApp::builder())
        .env("CODEX_BRIDGE_LEASE_TTL_SECS", "2")
        .env("CODEX_BRIDGE_LEASE_HEARTBEAT_SECS", "1")
        .start_with_gitea(sim);
    for repo in ["a", "b", "c"] {
        register(&app, repo);
    }
    // The bridge goes down; what is said meanwhile only Gitea's API has
    // (its deliveries fail and are never retried).
    app.stop();
    let sim = app.gitea();
    let m_a = sim.post_comment_as("bob", "acme", "a", 1, "@ccbot one");
    let m_b1 = sim.post_comment_as("bob", "acme", "b", 1, "@ccbot two");
    let m_b2 = sim.post_comment_as("bob", "acme", "b", pull, "@ccbot three");
    // Later by more than a listing reaches back from its cursor: had the
    // cursor moved past it, b's Pull Request comment would never be read.
    sim.advance_clock(Duration::from_secs(120));
    let m_b3 = sim.post_comment_as("bob", "acme", "b", 1, "@ccbot four");
    let m_c = sim.post_comment_as("bob", "acme", "c", 1, "@ccbot five");
    sim.wait_idle();
    assert!(
        deliveries_of(sim, id_of(&m_c))[0].status.is_none(),
        "the bridge was down"
    );
    // On the first pass after the restart, b's Pull Request cannot be read
    // (after b's first comment became a task) and c's listing hangs.
    sim.fail_next_matching(
        3,
        Some("GET"),
        &format!("/api/v1/repos/acme/b/pulls/{pull}"),
    );
    sim.delay_next_matching(
        1,
        Some("GET"),
        "/api/v1/repos/acme/c/issues/comments",
        Duration::from_secs(30),
    );

    app.start_again();
    wait_task_of(&app, id_of(&m_a));
    wait_task_of(&app, id_of(&m_b1));
    let mut db = app.db();
    app.wait_for("b's failed pass audited", || {
        count_where(&mut db, "audit_events", "action = 'catchup.failed'") >= 1
    });
    assert!(
        tasks_of(&mut db, id_of(&m_c)).is_empty(),
        "c's listing is still hanging"
    );
    // Killed in the middle of the pass.
    app.kill9();

    app.start_again();
    wait_task_of(&app, id_of(&m_b2));
    wait_task_of(&app, id_of(&m_c));
    wait_read_past(&app, "a", &m_a);
    wait_read_past(&app, "b", &m_b3);
    wait_read_past(&app, "c", &m_c);
    wait_passes(&app, 2);
    let mut db = app.db();
    for c in [&m_a, &m_b1, &m_b2, &m_b3, &m_c] {
        let tasks = tasks_of(&mut db, id_of(c));
        assert_eq!(tasks.len(), 1, "comment {}: {tasks:?}", id_of(c));
        assert_eq!(tasks[0].1, format!("default:catchup:{}", id_of(c)));
    }
    assert_eq!(count(&mut db, "tasks"), 3 + 5);
    assert_eq!(
        count_where(
            &mut db,
            "tasks",
            &format!("comment_id = {} AND head_ref = 'topic'", id_of(&m_b2))
        ),
        1
    );
}

#[test]
fn catchup_on_postgres_two_instances_make_one_task_per_comment_either_way() {
    let app = intake(sim_with(&["widgets"]), Db::Postgres);
    let other = app.another_instance();
    // The webhook now goes to `other`.
    register(&other, "widgets");
    let sim = app.gitea();

    // The webhook first, then both instances' passes.
    let (hooked, hooked_task) = webhook_first(&other, "widgets", "@ccbot by webhook");

    // The catch-up first, then the late webhooks and a replay.
    sim.set_auto_deliver(false);
    let lost: Vec<Value> = (0..3)
        .map(|n| sim.post_comment_as("bob", "acme", "widgets", 1, &format!("@ccbot lost {n}")))
        .collect();
    let caught: Vec<String> = lost
        .iter()
        .map(|c| wait_task_of(&app, id_of(c)).0)
        .collect();
    // Both instances have passed over every comment since.
    wait_read_past(&app, "widgets", &hooked);
    wait_read_past(&app, "widgets", lost.last().unwrap());
    wait_passes(&app, 2);
    wait_passes(&other, 2);

    sim.deliver_pending();
    sim.wait_idle();
    for (c, task) in lost.iter().zip(&caught) {
        let late = deliveries_of(sim, id_of(c));
        assert_eq!(late.len(), 1);
        assert_duplicate_of(&late[0], task);
    }
    let replay = sim.redeliver(&deliveries_of(sim, id_of(&lost[0]))[0].id);
    sim.wait_idle();
    let replayed = sim
        .deliveries()
        .into_iter()
        .find(|d| d.id == replay)
        .unwrap();
    assert_duplicate_of(&replayed, &caught[0]);

    let mut db = app.db();
    for c in lost.iter().chain([&hooked]) {
        assert_eq!(tasks_of(&mut db, id_of(c)).len(), 1, "comment {}", id_of(c));
    }
    assert_eq!(tasks_of(&mut db, id_of(&hooked))[0].0, hooked_task);
    assert_eq!(count(&mut db, "tasks"), 1 + 1 + 3);
}
