//! Storms: other bots mentioning ours, and bridges answering each other,
//! are stopped at intake on the real server.

use crate::support::*;
use crate::testapp::*;
use serde_json::Value;

#[test]
fn another_bot_and_a_quoted_marker_are_recorded_and_never_trigger() {
    let s = TestApp::builder()
        .env("CODEX_BRIDGE_IGNORE_LOGINS", "[\"relaybot\"]")
        .start();
    let post = |delivery: &str, id: i64, author: &str, text: &str| {
        let mut v: Value = serde_json::from_slice(&comment_body(id, text, "widgets", 1)).unwrap();
        v["comment"]["user"]["login"] = author.into();
        v["sender"]["login"] = author.into();
        let body = serde_json::to_vec(&v).unwrap();
        s.webhook(
            &gitea_headers(delivery, "issue_comment", "issue_comment", &body),
            &body,
        )
    };
    let r = post("storm-1", 1, "RelayBot", "@ccbot answer me");
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert_eq!(r.json["reason"], "ignored_login");
    let r = post(
        "storm-2",
        2,
        "bob",
        "@ccbot you said:\n> fixed\n<!-- codex-bridge task=task-9 turn=t-1 -->",
    );
    assert_eq!(r.json["reason"], "quotes_marker", "{:?}", r.json);
    // A person's plain mention still triggers.
    assert_eq!(post("storm-3", 3, "bob", "@ccbot fix it").status, 202);
    let mut c = s.db();
    assert_eq!(count(&mut c, "tasks"), 1);
    assert_eq!(
        count_where(&mut c, "webhook_deliveries", "status = 'ignored'"),
        2
    );
}

/// The circuit breaker on the real app-server: two turns in a row that the
/// provider fails open it; while it is open a new comment's task waits
/// `queued` with no attempt used, and `/readyz`, the overview and
/// `/metrics` say so; once the spell passes the task runs, and its success
/// closes the circuit.
#[test]
fn provider_failures_in_a_row_open_the_circuit_and_queued_work_waits_unharmed() {
    use crate::e2e::Loop;
    use crate::fakemodel::Step;
    use serde_json::json;
    let l = Loop::start_with(|b| {
        b.env("CODEX_BRIDGE_BREAKER_FAILURES", "2")
            .env("CODEX_BRIDGE_BREAKER_OPEN_SECS", "6")
            .env("CODEX_BRIDGE_MAX_ATTEMPTS", "1")
    });
    let n = l.issue;
    for _ in 0..2 {
        l.model().push(Step::HttpError {
            status: 500,
            body: json!({"error": {"type": "server_error", "message": "upstream broke"}}),
        });
    }
    let a = l.comment("bob", n, "@ccbot BREAK-A: first");
    let b = l.comment("bob", n, "@ccbot BREAK-B: second");
    l.wait(&a, "failed");
    l.wait(&b, "failed");
    let readyz = || l.app.get("/readyz", None).json;
    assert_eq!(readyz()["circuit"]["state"], "open", "{}", readyz());
    assert_eq!(readyz()["status"], "degraded");
    assert!(readyz()["circuit"]["until"].as_str().is_some());

    // Taken and kept while it is open: queued, no attempt used.
    l.script_reply(n, "Third one done.");
    let c = l.comment("bob", n, "@ccbot BREAK-C: third");
    let task = &l.detail(&c)["task"];
    assert_eq!(task["state"], "queued", "{task}");
    assert_eq!(task["attempt"], 0, "{task}");
    let overview = l.app.admin_get("/api/gitea-workflow/overview").json;
    assert_eq!(overview["circuit"]["state"], "open");
    assert!(
        overview["blockers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["code"] == "circuit_open"),
        "{overview}"
    );
    let metrics = ureq::get(&l.app.url("/metrics"))
        .set("Authorization", &format!("Bearer {ADMIN_TOKEN}"))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    assert!(metrics.contains("codex_bridge_circuit_open 1"), "{metrics}");
    assert!(metrics.contains("codex_bridge_circuit_trips_total 1"));
    assert_eq!(l.model().asked("BREAK-C"), 0, "no turn started while open");

    // The spell passes: the task runs, and its success closes the circuit.
    l.wait(&c, "succeeded");
    assert_eq!(readyz()["circuit"], json!({"state": "closed"}));
}

/// The storm guard on the real server: an Issue whose comments start more
/// than `session_turns_per_minute` turns in a minute is paused with one
/// notice; what comes meanwhile waits `queued` with no attempt used and no
/// second notice; an operator's resume lets it run.
#[test]
fn a_session_starting_too_many_turns_a_minute_is_paused_once_and_resumed_by_an_operator() {
    let (sim, issue) = crate::giteasim::GiteaSim::widgets_with_bob("Loop", "Two bots.");
    let app = TestApp::builder()
        .scripted()
        .env("CODEX_BRIDGE_SCHEDULER_SWEEP_MS", "100")
        .env("CODEX_BRIDGE_SESSION_TURNS_PER_MINUTE", "2")
        .start_with_gitea(sim);
    let sim = app.gitea();
    let comment = |text: &str| -> String {
        let (status, v) = crate::limits::comment(sim, issue, text);
        assert_eq!(status, 202, "{v}");
        v["taskId"].as_str().unwrap().to_owned()
    };
    let done = |task: &str| {
        let mut c = connect(&app.db_url);
        count_where(
            &mut c,
            "tasks",
            &format!(
                "task_id = '{task}' AND state IN ('succeeded', 'succeeded_with_rest_fallback')"
            ),
        ) == 1
    };
    let turns_of = |task: &str| {
        count_where(
            &mut connect(&app.db_url),
            "turns",
            &format!("task_id = '{task}'"),
        )
    };
    let notices = || {
        sim.comments("acme", "widgets", issue)
            .iter()
            .filter(|c| {
                c["body"]
                    .as_str()
                    .unwrap_or("")
                    .contains("I paused work on this Issue")
            })
            .count()
    };
    let first = comment("@ccbot one");
    app.wait_for("the first turn", || done(&first));
    let second = comment("@ccbot two");
    app.wait_for("the second turn", || done(&second));
    // The third would be the third turn within a minute: paused instead.
    let third = comment("@ccbot three");
    app.wait_for("the notice", || notices() == 1);
    let paused = |c: &mut codex_bridge::store::DbConn| {
        count_where(c, "audit_events", "action = 'session.paused'")
    };
    assert_eq!(paused(&mut app.db()), 1);
    let fourth = comment("@ccbot four");
    app.wait_for("the repository actor's pass over the fourth", || {
        app.repo_actor("default:acme/widgets")
            .is_some_and(|r| r["status"] == "idle")
    });
    for task in [&third, &fourth] {
        assert_eq!(task_state(&mut app.db(), task).as_deref(), Some("queued"));
        assert_eq!(turns_of(task), 0);
        assert_eq!(
            count_where(&mut app.db(), "attempts", &format!("task_id = '{task}'")),
            0,
            "no attempt is used while paused"
        );
    }
    assert_eq!(paused(&mut app.db()), 1, "paused once");
    assert_eq!(notices(), 1, "one notice");

    // An operator resumes it: what waited runs, in order.
    let session = format!("default:acme%2Fwidgets:issue:{issue}");
    let r = app.admin_post(
        &format!("/api/gitea-workflow/sessions/{session}/resume"),
        &serde_json::json!({"requestId": "resume-1", "reason": "the other bot is off"}),
    );
    assert_eq!(r.status, 200, "{:?}", r.json);
    app.wait_for("the waiting turns", || done(&third) && done(&fourth));
    // Neither ran before the resume.
    let resumed = codex_bridge::store::sessions::session(
        &mut app.db(),
        &resource(&format!("default:acme/widgets:issue:{issue}")),
    )
    .unwrap()
    .unwrap()
    .resumed_at
    .expect("resumed");
    for task in [&third, &fourth] {
        use codex_bridge::store::schema::turns;
        use diesel::prelude::*;
        let started: String = codex_bridge::with_conn!(&mut app.db(), |c| turns::table
            .filter(turns::task_id.eq(task.as_str()))
            .select(turns::started_at)
            .first(c))
        .unwrap();
        assert!(
            started >= resumed,
            "{task} started at {started}, before the resume at {resumed}"
        );
    }
    let again = app.admin_post(
        &format!("/api/gitea-workflow/sessions/{session}/resume"),
        &serde_json::json!({"requestId": "resume-2", "reason": "again"}),
    );
    assert_eq!(again.status, 409, "{:?}", again.json);
    assert_eq!(again.json["code"], "not_paused");
}
