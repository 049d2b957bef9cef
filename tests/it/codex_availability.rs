//! Codex by default, and a server that waits for Codex instead of dying
//! without it: a `codex_bin` that is not there, an app-server that fails to
//! start, or one that is not signed in never stops the server. Webhooks are
//! taken, tasks stay `queued` with no attempt used, `/readyz` (200,
//! `degraded`), the admin overview and the actor tree say why and what to
//! do; once the operator fixes it, the queued task runs and gets its reply,
//! without a restart. All on real parts: the binary, the pinned
//! `codex app-server`, the fake model, gitea-mcp and the Gitea simulator.

use crate::codexhome::codex_bin;
use crate::e2e::Loop;
use crate::support::*;
use serde_json::{json, Value};
use std::path::Path;

const REPO: &str = "default:acme/widgets";

/// The codes of the overview's blockers.
fn blocker_codes(l: &Loop) -> Vec<String> {
    let overview = l.app.admin_get("/api/gitea-workflow/overview");
    assert_eq!(overview.status, 200, "{:?}", overview.json);
    overview.json["blockers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["code"].as_str().unwrap().to_owned())
        .collect()
}

/// Waits until `/readyz` says `dependency` is in `state`; its body then.
fn wait_ready_state(l: &Loop, dependency: &str, state: &str) -> Value {
    let mut last = Value::Null;
    let seen = poll_until(std::time::Duration::from_secs(30), || {
        last = l.app.get("/readyz", None).json;
        last[dependency]["state"] == state
    });
    assert!(seen, "/readyz never said {dependency} {state}: {last}");
    last
}

/// A mention while Codex cannot run: 202, and the task waits `queued` with
/// no attempt used and no lease taken while the repository's actor says
/// why; the overview and the actor tree name `code` with what to do.
fn mention_waits_for_codex(l: &Loop, code: &str) -> String {
    l.script_reply(l.issue, "Answered once Codex could run.");
    let task = l.comment("bob", l.issue, "@ccbot fix the flaky parser test");
    let repo = l.app.wait_repo_passes(REPO, "agent_unavailable");
    assert_eq!(repo["leaseHolder"], Value::Null, "{repo}");
    let d = l.detail(&task);
    assert_eq!(d["task"]["state"], "queued", "{}", d["task"]);
    assert_eq!(d["task"]["attempt"], 0, "{}", d["task"]);
    assert_eq!(
        count_where(&mut l.app.db(), "attempts", &format!("task_id = '{task}'")),
        0
    );
    assert!(l.model().requests().is_empty(), "no turn reached the model");

    let overview = l.app.admin_get("/api/gitea-workflow/overview");
    let blockers = overview.json["blockers"].as_array().unwrap();
    assert_eq!(blockers.len(), 1, "{blockers:?}");
    assert_eq!(blockers[0]["code"], code);
    assert!(
        !blockers[0]["message"].as_str().unwrap().is_empty()
            && !blockers[0]["action"].as_str().unwrap().is_empty(),
        "{blockers:?}"
    );
    assert_eq!(overview.json["queueDepth"], 1);
    let tree = l.app.admin_get("/api/gitea-workflow/actors");
    assert_eq!(
        tree.json["registry"]["held"][0]["code"], code,
        "{}",
        tree.json
    );
    task
}

/// After the fix: the queued task runs on its first attempt and gets its
/// one reply; `/readyz` is ready and nothing blocks any more.
fn runs_once_codex_can(l: &Loop, task: &str) {
    l.wait(task, "succeeded");
    let replies = l.bot_comments(l.issue, &format!("codex-bridge task={task} turn="));
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert_eq!(l.detail(task)["task"]["attempt"], 1);
    let ready = l.app.get("/readyz", None);
    assert_eq!(ready.status, 200);
    assert_eq!(ready.json["status"], "ready", "{}", ready.json);
    assert_eq!(blocker_codes(l), Vec::<String>::new());
}

/// `codex_bin` is left as `break_it` made it (the server starts anyway and
/// reports `code`); then the real codex is put at that path.
fn codex_bin_broken_then_fixed(break_it: impl FnOnce(&Path), code: &str) {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("codex");
    break_it(&bin);
    let l = Loop::start_with(|b| b.env("CODEX_BRIDGE_CODEX_BIN", bin.to_str().unwrap()));

    let ready = wait_ready_state(&l, "codex", "unavailable");
    let r = l.app.get("/readyz", None);
    assert_eq!(r.status, 200, "intake goes on: {ready}");
    assert_eq!(r.json["status"], "degraded");
    assert_eq!(r.json["store"], json!({"state": "ok"}));
    assert_eq!(r.json["gitea"], json!({"state": "ok"}));
    assert_eq!(r.json["codexAccount"], json!({"state": "unknown"}));
    assert!(r.json["codex"]["reason"]
        .as_str()
        .unwrap()
        .contains("codex"));
    assert!(r.json["codex"]["action"].as_str().is_some(), "{}", r.json);
    let dir_text = dir.path().to_str().unwrap();
    assert!(
        !r.json.to_string().contains(dir_text),
        "/readyz answers without a token: no paths: {}",
        r.json
    );

    let task = mention_waits_for_codex(&l, code);

    // The operator installs codex where `codex_bin` points: replaced in one
    // step, as a package manager does. No restart.
    let staged = dir.path().join("codex.new");
    std::os::unix::fs::symlink(codex_bin(), &staged).unwrap();
    std::fs::rename(&staged, &bin).unwrap();
    runs_once_codex_can(&l, &task);
}

#[test]
fn codex_by_default_a_server_without_agent_runtime_answers_a_mention() {
    let l = Loop::start_with(|b| b.codex_by_default());
    l.script_reply(l.issue, "The parser test raced on a temp dir; fixed.");
    let task = l.comment("bob", l.issue, "@ccbot fix the flaky parser test");
    l.wait(&task, "succeeded");
    let replies = l.bot_comments(l.issue, &format!("codex-bridge task={task} turn="));
    assert_eq!(replies.len(), 1, "{replies:?}");
    let tree = l.app.admin_get("/api/gitea-workflow/actors");
    assert_eq!(tree.json["registry"]["runtime"], "codex", "{}", tree.json);
    let ready = l.app.get("/readyz", None);
    assert_eq!(ready.status, 200);
    assert_eq!(ready.json["status"], "ready", "{}", ready.json);
    assert_eq!(ready.json["codex"], json!({"state": "ok"}));
    assert_eq!(ready.json["codexAccount"], json!({"state": "not_required"}));
}

#[test]
fn codex_a_missing_binary_keeps_tasks_queued_until_it_is_installed() {
    codex_bin_broken_then_fixed(|_| {}, "codex_not_installed");
}

#[test]
fn codex_an_app_server_that_fails_to_start_keeps_tasks_queued_until_fixed() {
    codex_bin_broken_then_fixed(
        |bin| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::write(bin, "#!/bin/sh\necho 'codex: broken install' >&2\nexit 3\n").unwrap();
            std::fs::set_permissions(bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        },
        "codex_failed_to_start",
    );
}

/// A model provider that needs an OpenAI account, and none signed in: the
/// app-server runs, `account/read` says so, and tasks wait until the
/// operator runs `codex login` for the server's CODEX_HOME.
#[test]
fn codex_signed_out_keeps_tasks_queued_until_codex_login() {
    let l = Loop::start_with(|b| b.codex_config("requires_openai_auth = true\n"));
    let ready = wait_ready_state(&l, "codexAccount", "signed_out");
    assert_eq!(ready["status"], "degraded", "{ready}");
    assert_eq!(ready["codex"], json!({"state": "ok"}));
    assert!(
        ready["codexAccount"]["action"]
            .as_str()
            .unwrap()
            .contains("codex login"),
        "{ready}"
    );
    let task = mention_waits_for_codex(&l, "codex_signed_out");

    // As the action says: an API key on stdin, for the server's CODEX_HOME.
    let home = tempfile::tempdir().unwrap();
    let mut login = std::process::Command::new(codex_bin())
        .args(["login", "--with-api-key"])
        .env_clear()
        .env("CODEX_HOME", l.app.codex_home())
        .env("HOME", home.path())
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = login.stdin.take().unwrap();
        stdin.write_all(b"sk-test-not-a-real-key\n").unwrap();
    }
    let out = login.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "codex login: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    runs_once_codex_can(&l, &task);
    let ready = l.app.get("/readyz", None).json;
    assert_eq!(ready["codexAccount"], json!({"state": "signed_in"}));
}
