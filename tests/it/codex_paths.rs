//! The Codex runtime's paths through the whole server, on the real `codex
//! app-server`: decline, approval timeout, an interrupt while a
//! command runs, a stalled model stream hitting the repository's deadline, the
//! app-server killed mid-turn, and an uncertain `turn/start` resolved through
//! the thread's history.

use crate::codexhome::codex_bin;
use crate::e2e::{actions, Loop};
use crate::fakemodel::{find_marker, user_texts, Item, Step};
use crate::support::*;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn pending_approvals(l: &Loop) -> Vec<Value> {
    l.app.admin_get("/api/gitea-workflow/approvals").json["approvals"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn wait_pending_approval(l: &Loop) -> Value {
    let mut pending = None;
    wait_until("an approval pending", Duration::from_secs(60), || {
        pending = pending_approvals(l).pop();
        pending.is_some()
    });
    pending.unwrap()
}

/// The processes under `root`, at any depth.
fn descendants(root: u32) -> Vec<u32> {
    let mut parent = std::collections::HashMap::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        // A process that ended since the listing has no stat any more.
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // After the command's closing parenthesis: state, then the parent's pid.
        let ppid = stat[stat.rfind(')').unwrap() + 2..]
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(ppid) = ppid {
            parent.insert(pid, ppid);
        }
    }
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(parent.iter().filter(|(_, pp)| **pp == p).map(|(c, _)| *c));
        i += 1;
    }
    found.split_off(1)
}

/// Waits until a process under the server runs `argv` (the turn's shell
/// command has started, not merely been asked for).
fn wait_command_running(l: &Loop, argv: &[&str]) {
    wait_until(
        &format!("{argv:?} running under the server"),
        Duration::from_secs(60),
        || {
            descendants(l.app.pid()).into_iter().any(|pid| {
                let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                let args: Vec<String> = raw
                    .split(|b| *b == 0)
                    .filter(|a| !a.is_empty())
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect();
                args.len() == argv.len()
                    && args[0].rsplit('/').next() == Some(argv[0])
                    && args[1..] == argv[1..]
            })
        },
    );
}

/// The task a model request was made for: the reply marker of the newest
/// prompt in its input (a turn's prompt carries its task's marker).
fn request_task(body: &Value) -> Option<String> {
    let marker = user_texts(body)
        .iter()
        .rev()
        .find_map(|t| find_marker(t).map(str::to_owned))?;
    let rest = marker.strip_prefix("<!-- codex-bridge task=")?;
    Some(rest.split_whitespace().next()?.to_owned())
}

/// The operator settles an uncertain `task` as failed; then a later task on
/// the same Issue runs through the same session, on its thread resumed in a
/// new app-server, to the agent's own verified reply (posted through the
/// thread's Gitea MCP server). Returns it.
fn reconcile_and_run_another(l: &Loop, task: &str) -> String {
    let server = &l.app;
    let d = server
        .admin_get(&format!("/api/gitea-workflow/tasks/{task}"))
        .json;
    let attempt = d["attempts"].as_array().unwrap().last().unwrap()["attemptId"].clone();
    let r = server.admin_post(
        &format!("/api/gitea-workflow/tasks/{task}/reconcile"),
        &json!({"requestId": "rc-1", "reason": "checked the thread", "attemptId": attempt,
                "verdict": "failed", "confirmNoActiveTurn": true}),
    );
    assert_eq!(r.status, 200, "{:?}", r.json);
    l.script_reply(l.issue, "The later answer.");
    let later = l.comment("bob", l.issue, "@ccbot and now the next thing");
    wait_task_state(&server.db_url, &later, "succeeded", Duration::from_secs(90));
    let replies = l.bot_comments(l.issue, &format!("codex-bridge task={later}"));
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert!(replies[0]["body"]
        .as_str()
        .unwrap()
        .contains("The later answer."));
    later
}

/// Every model request from index `from` on was made for `task`.
fn assert_requests_only_for(l: &Loop, from: usize, task: &str) {
    let requests = l.model().requests();
    let tasks: Vec<Option<String>> = requests[from..].iter().map(request_task).collect();
    assert!(!tasks.is_empty(), "the later task never reached the model");
    assert!(
        tasks.iter().all(|t| t.as_deref() == Some(task)),
        "requests after {from} were made for {tasks:?}, not only {task}: a replay"
    );
}

fn workspace_file(l: &Loop, name: &str) -> std::path::PathBuf {
    l.app
        .dir()
        .join("ws")
        .join("default")
        .join("acme")
        .join("widgets")
        .join(name)
}

/// Under `untrusted`, a writing command waits for an operator; declined, it
/// never runs and the turn goes on to its answer.
#[test]
fn codex_a_declined_command_never_runs_and_the_turn_goes_on() {
    let l = Loop::start_with(|b| {
        b.env(
            "CODEX_BRIDGE_REPOSITORIES",
            r#"{"acme/widgets": {"approval_policy": "untrusted", "sandbox": "workspace-write"}}"#,
        )
    });
    l.model()
        .push(Step::Reply(vec![Item::shell("touch declined.txt")]));
    l.script_reply(l.issue, "I was not allowed to touch the file.");
    let task = l.comment("bob", l.issue, "@ccbot touch a file");
    let approval = wait_pending_approval(&l);
    assert_eq!(approval["taskId"], task.as_str());
    assert_eq!(approval["kind"], "command");
    assert!(approval["detail"]
        .as_str()
        .unwrap()
        .contains("touch declined.txt"));
    wait_task_state(
        &l.app.db_url,
        &task,
        "awaiting_approval",
        Duration::from_secs(10),
    );
    let id = approval["approvalId"].as_str().unwrap();
    let r = l.app.admin_post(
        &format!("/api/gitea-workflow/approvals/{id}/decide"),
        &json!({"decision": "decline", "requestId": "d-1", "reason": "no writes today"}),
    );
    assert_eq!(r.status, 200, "{:?}", r.json);
    l.wait(&task, "succeeded");
    assert!(!workspace_file(&l, "declined.txt").exists());
    let d = l.detail(&task);
    assert_eq!(d["approvals"][0]["status"], "decided");
    assert_eq!(d["approvals"][0]["decision"], "decline");
}

/// Nobody decides: the approval is declined when its time is up.
#[test]
fn codex_an_approval_nobody_decides_is_declined_on_timeout() {
    let l = Loop::start_with(|b| {
        b.env("CODEX_BRIDGE_APPROVAL_POLICY", "untrusted")
            .env("CODEX_BRIDGE_SANDBOX", "workspace-write")
            .env("CODEX_BRIDGE_APPROVAL_TIMEOUT_SECS", "1")
    });
    l.model()
        .push(Step::Reply(vec![Item::shell("touch forgotten.txt")]));
    l.script_reply(l.issue, "Nobody approved; I left the file alone.");
    let task = l.comment("bob", l.issue, "@ccbot touch a file");
    l.wait(&task, "succeeded");
    assert!(!workspace_file(&l, "forgotten.txt").exists());
    let d = l.detail(&task);
    assert_eq!(d["approvals"][0]["decision"], "decline");
    assert!(d["approvals"][0]["decidedBy"]
        .as_str()
        .unwrap()
        .starts_with("system"));
}

/// An abort while a long command runs: `turn/interrupt`, confirmed, `aborted`
/// long before the command would have ended.
#[test]
fn codex_an_abort_interrupts_a_running_command() {
    let l = Loop::start();
    l.model().push(Step::Reply(vec![Item::shell("sleep 60")]));
    let task = l.comment("bob", l.issue, "@ccbot run the slow suite");
    wait_task_state(&l.app.db_url, &task, "running", Duration::from_secs(60));
    wait_command_running(&l, &["sleep", "60"]);
    let started = Instant::now();
    let r = l.app.admin_post(
        &format!("/api/gitea-workflow/tasks/{task}/abort"),
        &json!({"requestId": "a-1", "reason": "wrong branch"}),
    );
    assert_eq!(r.status, 200, "{:?}", r.json);
    l.wait(&task, "aborted");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    l.expect_one_receipt(&task, "aborted");
}

/// The model's stream stalls: the repository's deadline interrupts the turn.
#[test]
fn codex_a_stalled_model_stream_hits_the_repository_deadline() {
    let l = Loop::start_with(|b| {
        b.env(
            "CODEX_BRIDGE_REPOSITORIES",
            r#"{"acme/widgets": {"turn_timeout_secs": 3}}"#,
        )
    });
    l.model().push(Step::hang());
    let task = l.comment("bob", l.issue, "@ccbot think hard");
    l.wait(&task, "timed_out");
    let d = l.detail(&task);
    assert_eq!(d["task"]["errorCode"], "turn_interrupted", "{d}");
    l.expect_one_receipt(&task, "timed_out");
}

/// The app-server dies mid-turn: never replayed; the history cannot prove an
/// end, so the task waits for an operator.
#[test]
fn codex_an_app_server_killed_mid_turn_needs_reconciliation() {
    let l = Loop::start();
    l.model().push(Step::Reply(vec![Item::shell("sleep 60")]));
    let task = l.comment("bob", l.issue, "@ccbot run the slow suite");
    wait_task_state(&l.app.db_url, &task, "running", Duration::from_secs(60));
    wait_command_running(&l, &["sleep", "60"]);
    // Every request the turn made: it makes no other while its command runs.
    let requests_before = l.model().requests().len();
    // The app-server runs nicer than the bridge (codex_nice, default 10).
    let pgrep = std::process::Command::new("pgrep")
        .args(["-P", &l.app.pid().to_string(), "-f", "app-server"])
        .output()
        .unwrap();
    let pid = String::from_utf8_lossy(&pgrep.stdout)
        .lines()
        .next()
        .expect("an app-server child of the server")
        .trim()
        .to_owned();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command's closing parenthesis; nice is field 19.
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let nice: i32 = after.split_whitespace().nth(16).unwrap().parse().unwrap();
    assert_eq!(nice, 10, "{stat}");
    let killed = std::process::Command::new("pkill")
        .args(["-KILL", "-P", &l.app.pid().to_string(), "-f", "app-server"])
        .status()
        .unwrap();
    assert!(killed.success(), "no app-server child to kill");
    l.wait(&task, "needs_reconciliation");
    let d = l.detail(&task);
    // One turn/start, ever.
    let starts = actions(&d)
        .iter()
        .filter(|a| *a == "turn.start_intent")
        .count();
    assert_eq!(starts, 1);
    // Nothing was replayed, not even once the session ran its next task.
    let later = reconcile_and_run_another(&l, &task);
    assert_requests_only_for(&l, requests_before, &later);
    let starts = actions(&l.detail(&task))
        .iter()
        .filter(|a| *a == "turn.start_intent")
        .count();
    assert_eq!(starts, 1);
}

/// `turn/start`'s answer is lost (the app-server's pipe closes after the
/// request went out): the operation is found in the resumed thread's history,
/// the turn's result is taken from there, and nothing is sent twice.
#[test]
fn codex_an_uncertain_turn_start_is_resolved_through_history() {
    let shim_dir = tempfile::tempdir().unwrap();
    let once = shim_dir.path().join("dropped-once");
    let shim = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/codex/lose_turn_start_answer.py");
    // The runtime gives the app-server a cleared environment: the shim's
    // settings travel in a wrapper script.
    let wrapper = shim_dir.path().join("codex");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nCODEX_SHIM_REAL_BIN='{}' CODEX_SHIM_ONCE_FILE='{}' exec python3 '{}' \"$@\"\n",
            codex_bin().display(),
            once.display(),
            shim.display()
        ),
    )
    .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let l = Loop::start_with(|b| b.env("CODEX_BRIDGE_CODEX_BIN", wrapper.to_str().unwrap()));
    l.script_reply(l.issue, "Answered despite the lost answer.");
    let task = l.comment("bob", l.issue, "@ccbot fix it");
    l.wait(&task, "succeeded");
    assert!(once.exists(), "the shim never dropped an answer");
    let d = l.detail(&task);
    let a = actions(&d);
    assert!(a.contains(&"turn.history_checked".to_owned()), "{a:?}");
    assert_eq!(a.iter().filter(|x| *x == "turn.start_intent").count(), 1);
    let ledger = d["ledger"].as_array().unwrap();
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0]["status"], "sent");
    assert_eq!(
        l.bot_comments(l.issue, &format!("codex-bridge task={task}"))
            .len(),
        1
    );
}

/// The process dies while the one reply-retry turn runs: after the restart
/// the retry's operation is looked up, never sent again, and the task waits
/// for an operator.
#[test]
fn codex_a_reply_retry_turn_cut_by_a_crash_is_never_replayed() {
    // Short leases: the restarted server takes the repository over soon.
    let mut l = Loop::start_with(|b| {
        b.env("CODEX_BRIDGE_LEASE_TTL_SECS", "3")
            .env("CODEX_BRIDGE_LEASE_HEARTBEAT_SECS", "1")
    });
    // The first turn forgets to post; the reply-retry turn hangs.
    l.script_silent("First answer.");
    l.model().push(Step::hang());
    let task = l.comment("bob", l.issue, "@ccbot fix it");
    // A clone, a thread with its MCP server, a whole turn and a verification
    // come first: more than the usual ten seconds on a loaded machine.
    wait_until(
        "the reply-retry turn running",
        Duration::from_secs(60),
        || {
            let d = l
                .app
                .admin_get(&format!("/api/gitea-workflow/tasks/{task}"))
                .json;
            d["task"]["replyAttempt"] == 1 && d["task"]["state"] == "running"
        },
    );
    // The retry turn's request reached the model (and hangs there).
    let requests_before = l
        .model()
        .wait_for_requests(2, Duration::from_secs(30))
        .len();
    // The whole service dies, its app-server with it (as systemd kills the
    // unit's control group).
    let _ = std::process::Command::new("pkill")
        .args(["-KILL", "-P", &l.app.pid().to_string(), "-f", "app-server"])
        .status();
    l.app.kill9();
    // Started again on the same database, workspaces and CODEX_HOME; the
    // simulator's webhook follows it.
    l.app.start_again();
    wait_task_state(
        &l.app.db_url,
        &task,
        "needs_reconciliation",
        Duration::from_secs(90),
    );
    let d = l
        .app
        .admin_get(&format!("/api/gitea-workflow/tasks/{task}"))
        .json;
    let a = actions(&d);
    // Two operations, each sent once: the task's own and the reply retry.
    assert_eq!(
        a.iter().filter(|x| *x == "turn.start_intent").count(),
        2,
        "{a:?}"
    );
    assert!(a.contains(&"turn.history_checked".to_owned()), "{a:?}");
    // Nothing was replayed, not even once the session ran its next task.
    let later = reconcile_and_run_another(&l, &task);
    assert_requests_only_for(&l, requests_before, &later);
    assert!(l
        .bot_comments(l.issue, &format!("codex-bridge task={task}"))
        .is_empty());
}
