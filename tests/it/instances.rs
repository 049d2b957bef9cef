//! The registry of server processes: registration, heartbeats, what each
//! process holds, the actor tree each reports, the operator's drain request
//! (the store, on SQLite and PostgreSQL), and `GET /instances`,
//! `POST /instances/{serverId}/drain` and the other processes' trees in
//! `GET /actors` against running servers.

use crate::browser::{browser_test, el, sign_in, text_until};
use crate::support::*;
use crate::testapp::*;
use codex_bridge::store::control::ControlRequest;
use codex_bridge::store::instances::{self, Heartbeat};
use codex_bridge::store::{format_time, run_migrations, DbConn, StoreError};
use fantoccini::Locator;
use serde_json::{json, Value};
use std::time::Duration;

const A: &str = "default:host-a:11:aaaaaaaa";
const B: &str = "default:host-b:22:bbbbbbbb";

/// A stored time `secs` seconds from now (negative: in the past).
fn in_secs(secs: i64) -> String {
    format_time(chrono::Utc::now() + chrono::Duration::seconds(secs))
}

/// A lease row on `default:acme/<repo>` as the lease code leaves it.
fn lease(c: &mut DbConn, repo: &str, owner: &str, expires_at: &str, released_at: Option<&str>) {
    exec(c, &format!(
        "INSERT INTO repositories (repo_key, instance_id, owner, name, status, registered_at, updated_at, version) \
         VALUES ('default:acme/{repo}', 'default', 'acme', '{repo}', 'active', 't', 't', 1)"
    ))
    .unwrap();
    let released = released_at.map_or("NULL".to_owned(), |t| format!("'{t}'"));
    exec(c, &format!(
        "INSERT INTO leases (repo_key, lease_id, owner, acquired_at, renewed_at, expires_at, fence, released_at) \
         VALUES ('default:acme/{repo}', 'lease-{repo}', '{owner}', 't', 't', '{expires_at}', 1, {released})"
    ))
    .unwrap();
}

fn request(id: &str) -> ControlRequest {
    ControlRequest {
        request_id: id.into(),
        reason: "moving to the new host".into(),
        actor: "admin:alice".into(),
    }
}

fn registry_rules(mut c: DbConn) {
    run_migrations(&mut c).unwrap();
    for id in [A, B] {
        c.write_transaction(|c| instances::register(c, id, "default", "1.2.3"))
            .unwrap();
    }
    let listed = c.write_transaction(instances::list).unwrap();
    assert_eq!(listed.len(), 2);
    for i in &listed {
        assert_eq!(
            (i.instance_id.as_str(), i.version.as_str()),
            ("default", "1.2.3")
        );
        assert_eq!(i.started_at, i.heartbeat_at);
        assert!(!i.draining && i.drain_requested_at.is_none() && i.stopped_at.is_none());
        assert_eq!((i.leases, i.repositories.len()), (0, 0));
    }

    // A heartbeat moves the beat on, and says nobody asked for a drain.
    let before = listed.iter().find(|i| i.server_id == A).unwrap().clone();
    wait_until("the clock to move on", Duration::from_secs(1), || {
        codex_bridge::store::now() > before.heartbeat_at
    });
    let beat = c
        .write_transaction(|c| instances::heartbeat(c, A, "default", "1.2.3", None))
        .unwrap();
    assert_eq!(
        beat,
        Heartbeat {
            draining: false,
            registered_again: false
        }
    );
    let after = c
        .write_transaction(|c| instances::find(c, A))
        .unwrap()
        .unwrap();
    assert!(after.heartbeat_at > before.heartbeat_at);
    assert_eq!(after.started_at, before.started_at);

    // Only a lease held now counts: not an expired one, not a released one,
    // not another holder's.
    lease(&mut c, "held", A, &in_secs(3600), None);
    lease(&mut c, "expired", A, &in_secs(-3600), None);
    lease(&mut c, "released", A, &in_secs(3600), Some(&in_secs(-10)));
    lease(&mut c, "other", B, &in_secs(3600), None);
    let listed = c.write_transaction(instances::list).unwrap();
    let of = |id: &str| listed.iter().find(|i| i.server_id == id).unwrap();
    assert_eq!(of(A).leases, 1);
    assert_eq!(of(A).repositories[0].as_str(), "default:acme/held");
    assert_eq!(of(B).leases, 1);
    assert_eq!(of(B).repositories[0].as_str(), "default:acme/other");
    assert_eq!(
        c.write_transaction(|c| instances::find(c, A))
            .unwrap()
            .unwrap()
            .repositories,
        of(A).repositories
    );

    // A drain request is set once: a second one changes nothing.
    let drained = c
        .write_transaction(|c| instances::request_drain(c, A))
        .unwrap()
        .unwrap();
    assert!(drained.draining);
    let at = drained.drain_requested_at.clone().unwrap();
    wait_until("the clock to move on", Duration::from_secs(1), || {
        codex_bridge::store::now() > at
    });
    let again = c
        .write_transaction(|c| instances::request_drain(c, A))
        .unwrap()
        .unwrap();
    assert_eq!(again.drain_requested_at, Some(at));
    assert!(c
        .write_transaction(|c| instances::request_drain(c, "default:nobody:1:x"))
        .unwrap()
        .is_none());
    assert!(c
        .write_transaction(|c| instances::is_draining(c, A))
        .unwrap());
    assert!(!c
        .write_transaction(|c| instances::is_draining(c, B))
        .unwrap());
    // The heartbeat tells the process.
    let beat_a = c
        .write_transaction(|c| instances::heartbeat(c, A, "default", "1.2.3", None))
        .unwrap();
    assert!(beat_a.draining);
    let beat_b = c
        .write_transaction(|c| instances::heartbeat(c, B, "default", "1.2.3", None))
        .unwrap();
    assert!(!beat_b.draining);

    // The operator's control: audited once per requestId.
    let first = c
        .write_transaction(|c| instances::drain(c, &request("drain-b"), B))
        .unwrap();
    assert_eq!(first.action, "instance.drain");
    assert_eq!(first.metadata["serverId"], B);
    assert_eq!(first.metadata["wasDraining"], false);
    let repeat = c
        .write_transaction(|c| instances::drain(c, &request("drain-b"), B))
        .unwrap();
    assert_eq!(repeat.event_id, first.event_id);
    assert_eq!(
        count_where(&mut c, "audit_events", "action = 'instance.drain'"),
        1
    );
    let unknown = c.write_transaction(|c| instances::drain(c, &request("drain-x"), "nope"));
    assert!(
        matches!(unknown, Err(StoreError::NotFound(_))),
        "{unknown:?}"
    );
    assert_eq!(
        count_where(&mut c, "control_requests", "request_id = 'drain-x'"),
        0
    );

    // A clean stop is recorded; a process whose row went missing is
    // registered again by its next heartbeat.
    assert!(c
        .write_transaction(|c| instances::mark_stopped(c, A))
        .unwrap());
    assert!(c
        .write_transaction(|c| instances::find(c, A))
        .unwrap()
        .unwrap()
        .stopped_at
        .is_some());
    exec(
        &mut c,
        &format!("DELETE FROM server_instances WHERE server_id = '{B}'"),
    )
    .unwrap();
    let back = c
        .write_transaction(|c| instances::heartbeat(c, B, "default", "1.2.4", None))
        .unwrap();
    assert!(back.registered_again && !back.draining);
    let b = c
        .write_transaction(|c| instances::find(c, B))
        .unwrap()
        .unwrap();
    assert_eq!((b.version.as_str(), b.leases), ("1.2.4", 1));
}

#[test]
fn registry_rules_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    registry_rules(connect(&format!(
        "sqlite://{}",
        dir.path().join("i.db").display()
    )));
}

#[test]
fn registry_rules_postgres() {
    let db = PgDb::create();
    registry_rules(connect(&db.url));
}

/// Each heartbeat writes the tree it is given; a beat without one keeps the
/// last; only live processes other than the reader's are read back.
fn actor_trees(mut c: DbConn) {
    run_migrations(&mut c).unwrap();
    for id in [A, B] {
        c.write_transaction(|c| instances::register(c, id, "default", "1.2.3"))
            .unwrap();
    }
    let alive = |c: &mut DbConn, except: &str| {
        let since = in_secs(-60);
        c.write_transaction(|c| instances::find_alive_actors(c, &since, except))
            .unwrap()
    };
    // Nothing reported yet: listed, with no tree.
    let read = alive(&mut c, "default:reader:1:x");
    assert_eq!(read.len(), 2, "{read:?}");
    assert!(read
        .iter()
        .all(|i| i.actors_at.is_none() && i.repositories == json!([]) && !i.draining));

    let tree = json!([{"repoKey": "default:acme/widgets", "status": "busy",
        "sessions": [{"sessionKey": "default:acme/widgets:issue:1", "status": "busy"}]}]);
    c.write_transaction(|c| instances::heartbeat(c, B, "default", "1.2.3", Some(&tree)))
        .unwrap();
    // The reader's own row is not among the others.
    let read = alive(&mut c, A);
    assert_eq!(read.len(), 1, "{read:?}");
    assert_eq!(read[0].server_id, B);
    assert_eq!(read[0].repositories, tree);
    let at = read[0].actors_at.clone().expect("the tree's time");
    assert_eq!(at, read[0].heartbeat_at);

    // A beat without a tree keeps the last one, and its time.
    wait_until("the clock to move on", Duration::from_secs(1), || {
        codex_bridge::store::now() > at
    });
    c.write_transaction(|c| instances::heartbeat(c, B, "default", "1.2.3", None))
        .unwrap();
    let read = alive(&mut c, A);
    assert_eq!(read[0].repositories, tree);
    assert_eq!(read[0].actors_at.as_deref(), Some(at.as_str()));
    assert!(read[0].heartbeat_at > at);

    // A process that stopped beating is not read, nor one that stopped.
    exec(
        &mut c,
        &format!(
            "UPDATE server_instances SET heartbeat_at = '{}' WHERE server_id = '{B}'",
            in_secs(-3600)
        ),
    )
    .unwrap();
    assert!(alive(&mut c, A).is_empty());
    c.write_transaction(|c| instances::heartbeat(c, B, "default", "1.2.3", Some(&tree)))
        .unwrap();
    assert_eq!(alive(&mut c, A).len(), 1);
    assert!(c
        .write_transaction(|c| instances::mark_stopped(c, B))
        .unwrap());
    assert!(alive(&mut c, A).is_empty());
    assert_eq!(
        count_where(&mut c, "server_instances", "actors IS NOT NULL"),
        0,
        "a stopped process keeps no tree"
    );
}

#[test]
fn actor_trees_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    actor_trees(connect(&format!(
        "sqlite://{}",
        dir.path().join("i.db").display()
    )));
}

#[test]
fn actor_trees_postgres() {
    let db = PgDb::create();
    actor_trees(connect(&db.url));
}

fn instances_of(s: &TestApp) -> Vec<Value> {
    let r = s.admin_get("/api/gitea-workflow/instances");
    assert_eq!(r.status, 200, "{:?}", r.json);
    r.json["instances"].as_array().unwrap().clone()
}

fn instances_over_http(db: Db) {
    let mut s = TestApp::builder()
        .db(db)
        .env("CODEX_BRIDGE_LEASE_HEARTBEAT_SECS", "1")
        .start();
    let route = "/api/gitea-workflow/instances";
    assert_eq!(s.get(route, None).status, 401);
    let listed = instances_of(&s);
    assert_eq!(listed.len(), 1, "{listed:?}");
    let me = &listed[0];
    let server_id = me["serverId"].as_str().unwrap().to_owned();
    assert!(server_id.starts_with("default:"), "{server_id}");
    assert!(
        server_id.contains(&format!(":{}:", s.server_pid())),
        "{server_id}"
    );
    assert_eq!(me["instanceId"], "default");
    assert_eq!(me["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(me["alive"], true);
    assert_eq!(me["draining"], false);
    assert_eq!(me["leases"], 0);
    assert_eq!(me["repositories"], json!([]));
    assert_eq!(me["drainRequestedAt"], Value::Null);
    assert_eq!(me["stoppedAt"], Value::Null);
    assert!(me["startedAt"].is_string());
    // The actor tree names the same process.
    let tree = s.admin_get("/api/gitea-workflow/actors");
    assert_eq!(tree.json["registry"]["serverId"], server_id.as_str());

    // It keeps beating.
    let first_beat = me["heartbeatAt"].as_str().unwrap().to_owned();
    wait_until(
        "a heartbeat after start-up",
        Duration::from_secs(15),
        || instances_of(&s)[0]["heartbeatAt"].as_str().unwrap() > first_beat.as_str(),
    );

    // A process that stopped beating long ago is listed, not alive.
    let stale = in_secs(-3600);
    exec(&mut s.db(), &format!(
        "INSERT INTO server_instances (server_id, instance_id, version, started_at, heartbeat_at, draining) \
         VALUES ('default:gone:1:deadbeef', 'default', '0.0.1', '{stale}', '{stale}', FALSE)"
    ))
    .unwrap();
    let listed = instances_of(&s);
    let gone = listed
        .iter()
        .find(|i| i["serverId"] == "default:gone:1:deadbeef")
        .unwrap();
    assert_eq!(gone["alive"], false);
    // Nor is it among the actor trees of the other processes.
    assert_eq!(
        s.admin_get("/api/gitea-workflow/actors").json["instances"],
        json!([])
    );

    // Drain: the token is required, the answer is the audit event, a repeat
    // returns it again, and the list shows the request.
    let drain = format!("/api/gitea-workflow/instances/{server_id}/drain");
    let body = json!({"requestId": "drain-1", "reason": "moving hosts", "operator": "alice"});
    let r = ureq::post(&s.url(&drain)).send_json(body.clone());
    assert_eq!(
        r.err().and_then(|e| e.into_response()).map(|r| r.status()),
        Some(401)
    );
    let first = s.admin_post(&drain, &body);
    assert_eq!(first.status, 200, "{:?}", first.json);
    assert_eq!(first.json["action"], "instance.drain");
    assert_eq!(first.json["actor"], "admin:alice");
    assert_eq!(first.json["metadata"]["serverId"], server_id.as_str());
    let again = s.admin_post(&drain, &body);
    assert_eq!(again.status, 200);
    assert_eq!(again.json["eventId"], first.json["eventId"]);
    let listed = instances_of(&s);
    let me = listed
        .iter()
        .find(|i| i["serverId"] == server_id.as_str())
        .unwrap();
    assert_eq!(me["draining"], true);
    assert!(me["drainRequestedAt"].is_string());
    assert_eq!(me["alive"], true);
    assert_eq!(
        count_where(&mut s.db(), "audit_events", "action = 'instance.drain'"),
        1
    );

    // An unknown process: 404, nothing recorded.
    let unknown = s.admin_post(
        "/api/gitea-workflow/instances/default:nobody:1:x/drain",
        &json!({"requestId": "drain-2", "reason": "typo"}),
    );
    assert_eq!(unknown.status, 404, "{:?}", unknown.json);
    assert_eq!(unknown.json["code"], "not_found");
    assert!(
        unknown.json["message"]
            .as_str()
            .unwrap()
            .contains("default:nobody:1:x"),
        "{:?}",
        unknown.json
    );
    assert_eq!(
        count_where(&mut s.db(), "control_requests", "request_id = 'drain-2'"),
        0
    );

    // A graceful stop says so.
    s.stop();
    let mut c = s.db();
    assert_eq!(
        count_where(
            &mut c,
            "server_instances",
            &format!("server_id = '{server_id}' AND stopped_at IS NOT NULL")
        ),
        1
    );
}

#[test]
fn instances_over_http_sqlite() {
    instances_over_http(Db::Sqlite);
}

#[test]
fn instances_over_http_postgres() {
    instances_over_http(Db::Postgres);
}

/// The owner of the task's latest attempt: the server that ran it.
fn ran_on(c: &mut DbConn, task: &str) -> String {
    codex_bridge::store::tasks::detail(c, &task.parse().unwrap())
        .unwrap()
        .unwrap()
        .attempts
        .last()
        .and_then(|a| a.owner.clone())
        .expect("the task has an attempt with an owner")
}

#[test]
fn a_drained_instance_finishes_its_turn_and_hands_its_repository_over() {
    const LONG: Duration = Duration::from_secs(60);
    let a = TestApp::builder()
        .git_sim()
        .scripted()
        .postgres()
        .env("CODEX_BRIDGE_LEASE_TTL_SECS", "30")
        .env("CODEX_BRIDGE_LEASE_HEARTBEAT_SECS", "1")
        // Sweeps a minute apart: only A's signal that it gave the
        // repository back can wake B in time.
        .env("CODEX_BRIDGE_SCHEDULER_SWEEP_MS", "60000")
        .start();
    a.git().create_repo("acme", "widgets");
    let mut c = connect(&a.db_url);
    let first = a.task_comment("drain-1", 601, "@ccbot first [sleep:4000]", "widgets", 1);
    wait_task_state(&a.db_url, &first, "running", LONG);
    let a_id = ran_on(&mut c, &first);
    let b = a.another_instance();
    let second = b.task_comment("drain-2", 602, "@ccbot second", "widgets", 2);
    // Any instance serves the view: A is drained through B's.
    let r = b.admin_post(
        &format!("/api/gitea-workflow/instances/{a_id}/drain"),
        &json!({"requestId": "drain-a", "reason": "moving A to a new host"}),
    );
    assert_eq!(r.status, 200, "{:?}", r.json);
    // A's turn under way finishes there; the next task runs on B, well
    // before B's sweep would have looked.
    wait_task_state(&a.db_url, &first, "succeeded", LONG);
    wait_task_state(&a.db_url, &second, "succeeded", Duration::from_secs(20));
    assert_eq!(ran_on(&mut c, &first), a_id);
    let b_id = ran_on(&mut c, &second);
    assert_ne!(b_id, a_id, "the drained instance took new work");
    // The lease moved from A to B, audited with both.
    assert!(
        count_where(
            &mut c,
            "audit_events",
            &format!(
                "action = 'lease.handed_over' AND metadata LIKE '%\"previousOwner\":\"{a_id}\"%' AND metadata LIKE '%\"owner\":\"{b_id}\"%'"
            )
        ) >= 1,
        "no handover from A to B audited"
    );
    // A shows draining and holds nothing.
    let listed = instances_of(&b);
    let a_row = listed
        .iter()
        .find(|i| i["serverId"] == a_id.as_str())
        .expect("A is listed");
    assert_eq!(a_row["draining"], true, "{a_row}");
    wait_until("A to hold no lease", LONG, || {
        instances_of(&b)
            .iter()
            .find(|i| i["serverId"] == a_id.as_str())
            .is_some_and(|i| i["leases"] == 0)
    });
}

fn server_id_of(s: &TestApp) -> String {
    let tree = s.admin_get("/api/gitea-workflow/actors");
    assert_eq!(tree.status, 200, "{:?}", tree.json);
    tree.json["registry"]["serverId"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The other processes' trees in `reader`'s `GET /actors`.
fn other_trees(reader: &TestApp) -> Vec<Value> {
    let tree = reader.admin_get("/api/gitea-workflow/actors");
    assert_eq!(tree.status, 200, "{:?}", tree.json);
    tree.json["instances"].as_array().unwrap().clone()
}

/// Whether a tree's `repositories` hold the session actor `session` under
/// the repository `repo`.
fn has_session(repositories: &Value, repo: &str, session: &str) -> bool {
    repositories
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["repoKey"] == repo)
        .flat_map(|r| r["sessions"].as_array().into_iter().flatten())
        .any(|s| s["sessionKey"] == session)
}

#[test]
fn every_instance_shows_the_actors_of_the_others_in_the_api_and_the_page() {
    const LONG: Duration = Duration::from_secs(60);
    let mut apps = vec![TestApp::builder()
        .git_sim()
        .scripted()
        .postgres()
        .env("CODEX_BRIDGE_LEASE_HEARTBEAT_SECS", "1")
        .start()];
    apps[0].git().create_repo("acme", "widgets");
    apps.push(apps[0].another_instance());
    let ids: Vec<String> = apps.iter().map(server_id_of).collect();
    // Each lists the other, alive, and not itself.
    for (me, other) in [(0, 1), (1, 0)] {
        wait_until("the other instance's first heartbeat", LONG, || {
            let trees = other_trees(&apps[me]);
            trees.len() == 1 && trees[0]["serverId"] == ids[other].as_str()
        });
    }

    // Whichever process wins the repository's lease runs the turn; the
    // other shows that process's session actor, under its serverId.
    let task = apps[1].task_comment("tree-1", 801, "@ccbot hello [sleep:3000]", "widgets", 1);
    wait_task_state(&apps[1].db_url, &task, "running", LONG);
    let runner_id = ran_on(&mut apps[1].db(), &task);
    let runner = ids.iter().position(|id| *id == runner_id).unwrap();
    let reader = 1 - runner;
    let mut seen = None;
    wait_until("the runner's tree in the reader's view", LONG, || {
        seen = other_trees(&apps[reader])
            .into_iter()
            .find(|i| i["serverId"] == runner_id.as_str())
            .filter(|i| {
                has_session(
                    &i["repositories"],
                    "default:acme/widgets",
                    "default:acme/widgets:issue:1",
                )
            });
        seen.is_some()
    });
    let seen = seen.unwrap();
    assert!(seen["actorsAt"].is_string(), "{seen}");
    assert!(seen["heartbeatAt"].is_string(), "{seen}");
    assert_eq!(seen["draining"], false, "{seen}");
    // The reader's own tree stays where it was.
    let own = apps[reader].admin_get("/api/gitea-workflow/actors").json;
    assert_eq!(own["registry"]["serverId"], ids[reader].as_str());
    assert!(own["repositories"].is_array());

    // The reader's page shows the runner's tree under its serverId; once
    // the runner stopped, its tree is gone from the API at once and from
    // the page with the next live update.
    browser_test("instances", |c| async move {
        sign_in(&c, &apps[reader], ADMIN_TOKEN).await;
        c.goto(&apps[reader].url("/admin#actors")).await.unwrap();
        let section = format!(r#".instance[data-server="{runner_id}"]"#);
        text_until(&c, &format!("{section} .registry"), |t| {
            t.contains(runner_id.as_str())
        })
        .await;
        el(
            &c,
            &format!(r#"{section} .session[data-session="default:acme/widgets:issue:1"]"#),
        )
        .await;
        wait_task_state(&apps[1].db_url, &task, "succeeded", LONG);
        apps[runner].stop();
        let trees = other_trees(&apps[reader]);
        assert!(
            trees.iter().all(|i| i["serverId"] != runner_id.as_str()),
            "{trees:?}"
        );
        wait_until_async("the stopped instance to leave the page", LONG, || async {
            c.find(Locator::Css(&section)).await.is_err()
        })
        .await;
    });
}

// ------------------------------------------------------------------ signing out

/// Signs in to `s`'s web view over plain HTTP, as its form does; the value
/// of the session cookie.
fn cookie_of_sign_in(s: &TestApp) -> String {
    let r = ureq::AgentBuilder::new()
        .redirects(0)
        .build()
        .post(&s.url("/admin/login"))
        .set("Origin", &s.base)
        .send_form(&[("token", ADMIN_TOKEN)])
        .unwrap();
    assert_eq!(r.status(), 303);
    let set = r.header("set-cookie").unwrap().to_owned();
    set.split(';')
        .next()
        .and_then(|c| c.strip_prefix("cb_admin="))
        .unwrap()
        .to_owned()
}

/// What `s` answers an admin read made with the session cookie alone.
fn read_with_cookie(s: &TestApp, cookie: &str) -> u16 {
    match ureq::get(&s.url("/api/gitea-workflow/actors"))
        .set("Cookie", &format!("cb_admin={cookie}"))
        .call()
    {
        Ok(r) => r.status(),
        Err(ureq::Error::Status(code, _)) => code,
        Err(e) => panic!("{e}"),
    }
}

/// Whether `s`'s page shows the app (not the sign-in form) to the cookie.
fn page_signed_in(s: &TestApp, cookie: &str) -> bool {
    let page = ureq::get(&s.url("/admin"))
        .set("Cookie", &format!("cb_admin={cookie}"))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    !page.contains(r#"action="/admin/login""#)
}

/// Signs the admin session `cookie` out (303).
pub(crate) fn sign_out(s: &TestApp, cookie: &str) {
    let r = ureq::AgentBuilder::new()
        .redirects(0)
        .build()
        .post(&s.url("/admin/logout"))
        .set("Origin", &s.base)
        .set("Cookie", &format!("cb_admin={cookie}"))
        .call()
        .unwrap();
    assert_eq!(r.status(), 303);
}

/// A sign-out through one process holds on every process of the database at
/// once, and on the one that took it after it restarts; other sign-ins stay.
fn a_sign_out_holds_everywhere(db: Db) {
    let mut first = TestApp::start(db);
    // SQLite has one process; a restart is what it can show.
    let other = matches!(db, Db::Postgres).then(|| first.another_instance());
    let cookie = cookie_of_sign_in(&first);
    let kept = cookie_of_sign_in(&first);
    for s in std::iter::once(&first).chain(other.as_ref()) {
        assert_eq!(read_with_cookie(s, &cookie), 200, "{}", s.base);
        assert!(page_signed_in(s, &cookie), "{}", s.base);
    }
    sign_out(&first, &cookie);
    for s in std::iter::once(&first).chain(other.as_ref()) {
        assert_eq!(read_with_cookie(s, &cookie), 401, "{}", s.base);
        assert!(!page_signed_in(s, &cookie), "{}", s.base);
        assert_eq!(read_with_cookie(s, &kept), 200, "{}", s.base);
    }
    first.stop();
    first.start_again();
    assert_eq!(read_with_cookie(&first, &cookie), 401, "after a restart");
    assert!(!page_signed_in(&first, &cookie), "after a restart");
    assert_eq!(read_with_cookie(&first, &kept), 200);
    // Signing out again (another tab, a retry) is no error.
    sign_out(&first, &cookie);
    assert_eq!(read_with_cookie(&first, &cookie), 401);
}

#[test]
fn a_sign_out_holds_everywhere_sqlite() {
    a_sign_out_holds_everywhere(Db::Sqlite);
}

#[test]
fn a_sign_out_holds_everywhere_postgres() {
    a_sign_out_holds_everywhere(Db::Postgres);
}
