//! A session's conversation outlives the process whose Codex home holds its
//! thread. Two server processes on one PostgreSQL, each with a Codex home of
//! its own, the real `codex app-server` and the fake model: the first
//! answers a comment and dies; a follow-up on the same Issue runs on the
//! second, which cannot open the first one's thread, so it starts a new one
//! given the stored exchange and records it as the session's next
//! generation. The model's request for the follow-up carries the earlier
//! question and answer. While the first one lives, a follow-up that reaches
//! the second runs on the first, on the same thread.

use crate::e2e::Loop;
use crate::fakemodel::{assistant_texts, user_texts};
use crate::support::*;
use std::time::Duration;

pub const ASKED: &str = "@ccbot why does the parser test flake?";
pub const ANSWERED: &str = "The parser test races on a shared temp dir.";
pub const FOLLOW_UP: &str = "@ccbot then give each run its own dir";
const LOST: &str = "Each run now gets its own temp dir, posted again.";

#[test]
fn e2e_a_follow_up_after_the_threads_instance_died_goes_on_with_the_conversation_elsewhere() {
    let (mut l, _) = first_exchange();
    let mut c = connect(&l.app.db_url);
    let session = format!("default:acme/widgets:issue:{}", l.issue);
    let (old_thread, old_home, generation) = session_thread(&mut c, &session);
    assert!(old_home.is_some(), "the thread's Codex home was recorded");

    // The first process dies; the second (its own Codex home) takes the
    // webhooks, and the repository once the first one's lease runs out.
    l.app.kill9();
    let second_app = l.app.another_instance();
    let asked_before = l.model().requests().len();
    let follow_up = follow_up(&l);

    // The follow-up ran on a new thread in the second home, as the
    // session's next generation, once.
    let (new_thread, new_home, new_generation) = session_thread(&mut c, &session);
    assert_ne!(new_thread, old_thread);
    assert_ne!(new_home, old_home);
    assert_eq!(new_generation, generation + 1);
    rebuilt_on_the_earlier_exchange(&l, &mut c, &follow_up, asked_before);
    // One reply per comment, each by its own task.
    assert_eq!(l.bot_comments(l.issue, "codex-bridge task=").len(), 2);
    drop(second_app);
}

#[test]
fn e2e_a_follow_up_that_reaches_another_instance_runs_where_its_thread_lives() {
    let (l, first) = first_exchange();
    let mut c = connect(&l.app.db_url);
    let session = format!("default:acme/widgets:issue:{}", l.issue);
    let before = session_thread(&mut c, &session);
    let holder = attempt_owner(&mut c, &first);

    // The second instance receives the follow-up's webhook (and is woken
    // first), its Codex ready to run it; the first one, alive and holding
    // the thread, runs it.
    let second_app = l.app.another_instance();
    let ready = poll_until(Duration::from_secs(60), || {
        second_app.get("/readyz", None).json["codex"]["state"] == "ok"
    });
    assert!(ready, "the second instance's Codex never became ready");
    let follow_up = follow_up(&l);
    resumed_by(&mut c, &follow_up, &holder, &session, &before);
    drop(second_app);
}

#[test]
fn e2e_a_reply_retry_after_the_threads_instance_died_runs_on_a_new_thread_elsewhere() {
    let (mut l, _) = first_exchange();
    let mut c = connect(&l.app.db_url);
    let session = format!("default:acme/widgets:issue:{}", l.issue);
    let before = session_thread(&mut c, &session);

    // The follow-up's turn ends with a final it did not post; the first
    // process is checking Gitea for it (the check hangs) when it dies.
    l.script_silent(LOST);
    l.script_reply(l.issue, LOST);
    l.sim().delay_next_matching(
        1000,
        Some("GET"),
        &format!("/api/v1/repos/acme/widgets/issues/{}/comments", l.issue),
        Duration::from_secs(120),
    );
    let task = l.comment("bob", l.issue, FOLLOW_UP);
    wait_task_state(
        &l.app.db_url,
        &task,
        "verifying_reply",
        Duration::from_secs(120),
    );
    l.app.kill9();
    l.sim().clear_faults();
    let second_app = l.app.another_instance();

    // The second process finds the reply missing and runs the one
    // reply-retry turn on a thread of its own home: the task's thread is
    // in the dead one's.
    wait_task_state(&l.app.db_url, &task, "succeeded", Duration::from_secs(120));
    let replies = l.bot_comments(l.issue, &format!("codex-bridge task={task}"));
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert!(replies[0]["body"].as_str().unwrap().contains(LOST));
    assert_eq!(
        count_where(
            &mut c,
            "audit_events",
            &format!("action = 'turn.start_intent' AND task_id = '{task}' AND metadata LIKE '%reply_retry%'")
        ),
        1
    );
    // The session keeps its thread: the next ordinary turn goes on with
    // the conversation from what the bridge stored.
    assert_eq!(session_thread(&mut c, &session), before);
    drop(second_app);
}

#[test]
fn e2e_a_follow_up_goes_to_the_process_whose_home_holds_its_thread_not_to_the_last_holder() {
    let (mut l, _) = first_exchange();
    let mut c = connect(&l.app.db_url);
    let session = format!("default:acme/widgets:issue:{}", l.issue);
    let before = session_thread(&mut c, &session);

    // The first process dies; the second one takes the repository, for
    // another Issue, and is its last holder from then on.
    l.app.kill9();
    let second_app = l.app.another_instance();
    let other = l
        .sim()
        .create_issue("acme", "widgets", "Another", "Look at this too", "bob");
    l.script_reply(other, "Looked at it.");
    let elsewhere = l.comment("bob", other, "@ccbot look at this one");
    wait_task_state(
        &l.app.db_url,
        &elsewhere,
        "succeeded",
        Duration::from_secs(120),
    );

    // The first process comes back on its Codex home, where the first
    // Issue's thread lives, and says so.
    l.app.start_again();
    let first_id = server_id(&l.app);
    wait_until(
        "the first process's Codex home to be reported",
        Duration::from_secs(60),
        || {
            l.app.get("/readyz", None).json["codex"]["state"] == "ok"
                && second_app.admin_get("/api/gitea-workflow/instances").json["instances"]
                    .as_array()
                    .is_some_and(|all| {
                        all.iter().any(|i| {
                            i["serverId"] == first_id.as_str() && i["codexHome"].is_string()
                        })
                    })
        },
    );

    // The follow-up reaches the repository's last holder, which leaves it
    // to the process whose home holds the thread: resumed there, not rebuilt.
    second_app.point_webhook_here();
    let follow_up = follow_up(&l);
    resumed_by(&mut c, &follow_up, &first_id, &session, &before);
    drop(second_app);
}

/// The follow-up `follow_up` ran on a thread rebuilt once from the stored
/// exchange: audited once, and every model request for it (those after the
/// first `asked_before`) carries the earlier question before the follow-up
/// and the earlier answer.
pub fn rebuilt_on_the_earlier_exchange(
    l: &Loop,
    c: &mut codex_bridge::store::DbConn,
    follow_up: &str,
    asked_before: usize,
) {
    assert_eq!(
        count_where(
            c,
            "audit_events",
            &format!("action = 'thread.rebuilt' AND task_id = '{follow_up}'")
        ),
        1
    );
    // The model saw the earlier exchange before the follow-up.
    let asked: Vec<_> = l.model().requests()[asked_before..]
        .iter()
        .filter(|r| user_texts(r).iter().any(|t| t.contains(FOLLOW_UP)))
        .cloned()
        .collect();
    assert!(!asked.is_empty(), "the follow-up never reached the model");
    for r in &asked {
        let users = user_texts(r);
        let earlier = users.iter().position(|t| t.contains(ASKED));
        let now = users.iter().position(|t| t.contains(FOLLOW_UP));
        assert!(
            matches!((earlier, now), (Some(e), Some(n)) if e < n),
            "the earlier question is not before the follow-up: {users:?}"
        );
        assert!(
            assistant_texts(r).iter().any(|t| t.contains(ANSWERED)),
            "the earlier answer is missing: {:?}",
            assistant_texts(r)
        );
    }
}

/// The task ran on `owner`, on the session's thread as it was (`before`),
/// and no thread was rebuilt.
fn resumed_by(
    c: &mut codex_bridge::store::DbConn,
    task: &str,
    owner: &str,
    session: &str,
    before: &(String, Option<String>, i64),
) {
    assert_eq!(attempt_owner(c, task), owner);
    assert_eq!(
        &session_thread(c, session),
        before,
        "the same thread, resumed"
    );
    assert_eq!(
        count_where(c, "audit_events", "action = 'thread.rebuilt'"),
        0
    );
}

/// The `serverId` of the process `app` runs now.
fn server_id(app: &crate::testapp::TestApp) -> String {
    let tree = app.admin_get("/api/gitea-workflow/actors");
    assert_eq!(tree.status, 200, "{:?}", tree.json);
    tree.json["registry"]["serverId"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// One process on PostgreSQL (short leases) that has answered the first
/// comment; the loop and that comment's task.
fn first_exchange() -> (Loop, String) {
    let l = Loop::start_with(|b| {
        b.postgres()
            .env("CODEX_BRIDGE_LEASE_TTL_SECS", "3")
            .env("CODEX_BRIDGE_LEASE_HEARTBEAT_SECS", "1")
    });
    l.script_reply(l.issue, ANSWERED);
    let first = l.comment("bob", l.issue, ASKED);
    l.wait(&first, "succeeded");
    l.wait_receipts(&first);
    (l, first)
}

/// The follow-up comment, answered; its task.
fn follow_up(l: &Loop) -> String {
    l.script_reply(l.issue, "Each run now gets its own temp dir.");
    let task = l.comment("bob", l.issue, FOLLOW_UP);
    wait_task_state(&l.app.db_url, &task, "succeeded", Duration::from_secs(120));
    task
}

/// The process that ran the task's (only) attempt.
fn attempt_owner(c: &mut codex_bridge::store::DbConn, task: &str) -> String {
    #[derive(diesel::QueryableByName)]
    struct Row {
        #[diesel(sql_type = diesel::sql_types::Text)]
        owner: String,
    }
    use diesel::RunQueryDsl;
    let rows: Vec<Row> = match c {
        codex_bridge::store::DbConn::Pg(c) => diesel::sql_query(format!(
            "SELECT owner FROM attempts WHERE task_id = '{task}' AND owner IS NOT NULL"
        ))
        .load(c)
        .unwrap(),
        codex_bridge::store::DbConn::Sqlite(_) => panic!("a PostgreSQL test"),
    };
    assert_eq!(rows.len(), 1, "attempts of {task}");
    rows.into_iter().next().unwrap().owner
}

/// The session's thread, the Codex home it lives in, and its generation.
pub fn session_thread(
    c: &mut codex_bridge::store::DbConn,
    session: &str,
) -> (String, Option<String>, i64) {
    let s = codex_bridge::store::sessions::session(c, &resource(session))
        .unwrap()
        .expect("the session exists");
    (
        s.thread_id.expect("the session has a thread"),
        s.thread_home,
        s.thread_generation,
    )
}
