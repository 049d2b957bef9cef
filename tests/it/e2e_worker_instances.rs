//! Remote workers behind several server instances on one PostgreSQL: a
//! worker may poll any instance. Instance A runs the repository's sessions
//! (`agent_runtime = "remote"`); instance B runs none (`none`: it takes
//! webhooks and serves the worker API). The worker holding the
//! repository's lease polls B only; a second worker given the same
//! repository polls A and never gets it. A mention's turn, whose session
//! runs on A, reaches the worker through B, runs on the real `codex
//! app-server` against the fake model, and its reply lands in the Gitea
//! simulator and is verified by A: once, the model asked for one turn only.

use crate::e2e::Loop;
use crate::support::*;
use crate::testapp::*;
use crate::workerproc::{lease_holder, WorkerEnv, WorkerProc};
use std::time::Duration;

/// Registers a worker `name` given `acme/widgets` (through `admin`, any
/// instance) and starts its process against the instance at `server`.
pub fn start_worker(l: &Loop, admin: &TestApp, name: &str, server: &str) -> WorkerProc {
    let env = WorkerEnv {
        server: server.to_owned(),
        ..WorkerEnv::of(&l.app)
    };
    WorkerProc::start(admin, name, &["acme/widgets"], env)
}

/// The `serverId` of the process `app` runs now.
fn server_id(app: &TestApp) -> String {
    let tree = app.admin_get("/api/gitea-workflow/actors");
    assert_eq!(tree.status, 200, "{:?}", tree.json);
    tree.json["registry"]["serverId"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn e2e_worker_instances_a_turn_whose_session_runs_on_one_instance_reaches_a_worker_polling_another()
{
    let l = Loop::start_with(|b| b.postgres().env("CODEX_BRIDGE_AGENT_RUNTIME", "remote"));
    let b = l
        .app
        .another_instance_with(|b| b.env("CODEX_BRIDGE_AGENT_RUNTIME", "none"));
    let a_id = server_id(&l.app);

    let polling_b = start_worker(&l, &b, "build-b", &b.base);
    wait_until(
        "the worker polling B to lease the repository",
        Duration::from_secs(60),
        || lease_holder(&l.app).as_deref() == Some(polling_b.id.as_str()),
    );
    // Given the same repository, polling A: it never gets the lease.
    let polling_a = start_worker(&l, &l.app, "build-a", &l.app.base);
    wait_until(
        "the second worker to register",
        Duration::from_secs(60),
        || {
            polling_a
                .logs()
                .contains("worker registered with the server")
        },
    );

    l.script_reply(l.issue, "Fixed through another instance.");
    // The webhook reaches B (the instance started last); A runs the turn.
    let task = l.comment("bob", l.issue, "@ccbot fix the flaky parser test");
    let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_task_state(&l.app.db_url, &task, "succeeded", Duration::from_secs(120))
    }));
    if let Err(panic) = waited {
        eprintln!("task: {}", l.detail(&task));
        eprintln!("worker polling B:\n{}", polling_b.logs());
        eprintln!("worker polling A:\n{}", polling_a.logs());
        eprintln!("instance A:\n{}", l.app.logs());
        eprintln!("instance B:\n{}", b.logs());
        std::panic::resume_unwind(panic);
    }

    let mut c = l.app.db();
    // A held the repository: its session ran the turn.
    assert_eq!(
        count_where(
            &mut c,
            "leases",
            &format!("owner = '{a_id}' AND repo_key = 'default:acme/widgets'")
        ),
        1
    );
    // Once: one turn started, the model asked for that turn only (its
    // comment tool call and its final), one reply.
    let actions = crate::e2e::actions(&l.detail(&task));
    let starts = actions.iter().filter(|a| *a == "turn.start_intent").count();
    assert_eq!(starts, 1, "{actions:?}");
    assert_eq!(l.model().requests().len(), 2);
    let replies = l.bot_comments(l.issue, &format!("codex-bridge task={task} turn="));
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert!(replies[0]["body"]
        .as_str()
        .unwrap()
        .contains("Fixed through another instance"));
    assert_eq!(lease_holder(&l.app).as_deref(), Some(polling_b.id.as_str()));
    assert!(
        !polling_a.logs().contains("lease taken"),
        "only one worker holds the repository: {}",
        polling_a.logs()
    );
    // What was answered is not kept: the caller deletes it.
    wait_until(
        "the answered calls to leave the store",
        Duration::from_secs(30),
        || count(&mut l.app.db(), "worker_calls") == 0,
    );
    assert_eq!(count(&mut c, "worker_call_events"), 0);
}
