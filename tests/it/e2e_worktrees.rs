//! A worktree per session, on real parts: the real `codex app-server` runs
//! the fake model's shell commands in each session's own worktree. Two
//! Issues of one repository keep their own uncommitted changes between
//! turns; a worktree changed behind the bridge's back holds only its own
//! session until an operator clears it; a worktree past its retention is
//! removed with its uncommitted work kept under a ref, and made again when
//! the session is mentioned again.

use crate::e2e::Loop;
use crate::fakemodel::{tool_outputs, Step};
use crate::support::*;
use crate::workspace::git;
use serde_json::json;
use std::path::PathBuf;
use std::time::Duration;

/// One comment per turn, each turn ending with its answer: no workflow
/// continues on its own.
fn turns_only() -> Loop {
    Loop::start_with(|b| b.env("CODEX_BRIDGE_WORKFLOWS", "false"))
}

fn worktree(l: &Loop, number: i64) -> PathBuf {
    l.app
        .dir()
        .join(format!("ws/.worktrees/default/acme/widgets/issue-{number}"))
}

/// A turn on `number` that runs `cmd` in its worktree, then answers.
fn turn(l: &Loop, number: i64, cmd: &str, ask: &str) -> String {
    l.model().push(Step::shell(cmd));
    l.script_reply(number, &format!("Ran `{cmd}`."));
    l.comment("bob", number, &format!("@ccbot {ask}"))
}

/// Every shell output the model was shown that contains `mark`.
fn outputs_with(l: &Loop, mark: &str) -> Vec<String> {
    l.model()
        .requests()
        .iter()
        .flat_map(tool_outputs)
        .map(|(_, v)| v.to_string())
        .filter(|o| o.contains(mark) && o.contains("Process exited"))
        .collect()
}

#[test]
fn e2e_two_sessions_of_one_repository_keep_their_own_uncommitted_changes_between_turns() {
    let l = turns_only();
    let a = l.issue;
    let b = l
        .sim()
        .create_issue("acme", "widgets", "Docs", "Write the docs.", "bob");

    let t = turn(&l, a, "printf one > a.txt", "start the parser fix");
    l.wait(&t, "succeeded");
    let t = turn(&l, b, "printf two > b.txt", "start the docs");
    l.wait(&t, "succeeded");
    // Each next turn finds its own session's file, and not the other's.
    let t = turn(&l, a, "echo MARK-A; ls; cat a.txt", "go on with the parser");
    l.wait(&t, "succeeded");
    let t = turn(&l, b, "echo MARK-B; ls; cat b.txt", "go on with the docs");
    l.wait(&t, "succeeded");

    let seen_a = outputs_with(&l, "MARK-A");
    assert!(
        !seen_a.is_empty(),
        "the model never saw the second turn of A"
    );
    assert!(
        seen_a
            .iter()
            .all(|o| o.contains("a.txt") && o.contains("one") && !o.contains("b.txt")),
        "{seen_a:?}"
    );
    let seen_b = outputs_with(&l, "MARK-B");
    assert!(
        !seen_b.is_empty(),
        "the model never saw the second turn of B"
    );
    assert!(
        seen_b
            .iter()
            .all(|o| o.contains("b.txt") && o.contains("two") && !o.contains("a.txt")),
        "{seen_b:?}"
    );
    // Uncommitted, on each session's own branch.
    assert_eq!(
        git(&worktree(&l, a), &["status", "--porcelain"]),
        "?? a.txt"
    );
    assert_eq!(
        git(&worktree(&l, b), &["symbolic-ref", "--short", "HEAD"]),
        format!("codex/issue-{b}")
    );
    // The repository's own checkout was never worked in.
    let clone = l.app.dir().join("ws/default/acme/widgets");
    assert_eq!(git(&clone, &["status", "--porcelain"]), "");
}

#[test]
fn e2e_a_worktree_changed_behind_the_bridge_holds_only_its_session_until_cleared() {
    let l = turns_only();
    let a = l.issue;
    let b = l
        .sim()
        .create_issue("acme", "widgets", "Docs", "Write the docs.", "bob");
    let t = turn(&l, a, "printf one > a.txt", "start");
    l.wait(&t, "succeeded");

    // Someone edits A's worktree after its turn ended.
    std::fs::write(worktree(&l, a).join("a.txt"), "edited by hand\n").unwrap();
    let blocked = l.comment("bob", a, "@ccbot go on");
    l.wait(&blocked, "blocked_workspace");
    assert_eq!(
        l.detail(&blocked)["task"]["errorCode"],
        "workspace_dirty",
        "{}",
        l.detail(&blocked)
    );
    // Another session of the repository is not held up by it.
    let t = turn(&l, b, "printf two > b.txt", "start the docs");
    l.wait(&t, "succeeded");
    assert_eq!(
        std::fs::read_to_string(worktree(&l, a).join("a.txt")).unwrap(),
        "edited by hand\n",
        "nothing in the worktree was reset"
    );

    // The operator looked and clears it: the task runs on what is there.
    l.model().push(Step::shell("echo MARK-CLEARED; cat a.txt"));
    l.script_reply(a, "Went on.");
    let r = l.app.admin_post(
        &format!("/api/gitea-workflow/tasks/{blocked}/clear-workspace"),
        &json!({"requestId": "clear-a", "reason": "the edit is wanted"}),
    );
    assert_eq!(r.status, 200, "{:?}", r.json);
    wait_until("the cleared task ends", Duration::from_secs(60), || {
        l.detail(&blocked)["task"]["state"]
            .as_str()
            .is_some_and(|s| s.starts_with("succeeded") || s == "failed")
    });
    let d = l.detail(&blocked);
    assert_eq!(d["task"]["state"], "succeeded", "{d:#}");
    let seen = outputs_with(&l, "MARK-CLEARED");
    assert!(
        seen.iter().any(|o| o.contains("edited by hand")),
        "{seen:?}"
    );
}

#[test]
fn e2e_a_worktree_past_its_retention_is_removed_keeping_its_uncommitted_work() {
    let l = Loop::start_with(|b| {
        b.env("CODEX_BRIDGE_WORKFLOWS", "false")
            .env("CODEX_BRIDGE_WORKTREE_RETENTION_HOURS", "1")
    });
    let a = l.issue;
    let t = turn(&l, a, "printf one > a.txt", "start");
    l.wait(&t, "succeeded");
    let wt = worktree(&l, a);
    assert!(wt.join("a.txt").exists());

    // Kept while used; two hours later (as the store sees it) it goes.
    let mut c = connect(&l.app.db_url);
    assert_eq!(
        count_where(&mut c, "worktrees", "removed_at IS NULL"),
        1,
        "the session's worktree is recorded"
    );
    exec(
        &mut c,
        "UPDATE worktrees SET prepared_at = '2000-01-01T00:00:00.000000Z', \
         recorded_at = '2000-01-01T00:00:00.000000Z'",
    )
    .unwrap();
    wait_until("the worktree retired", Duration::from_secs(30), || {
        !wt.exists() && count_where(&mut c, "worktrees", "removed_at IS NOT NULL") == 1
    });
    assert_eq!(
        count_where(&mut c, "audit_events", "action = 'worktree.retired'"),
        1
    );
    let clone = l.app.dir().join("ws/default/acme/widgets");
    let kept = format!("refs/codex-bridge/retired/issue-{a}");
    assert_eq!(git(&clone, &["show", &format!("{kept}:a.txt")]), "one");

    // Mentioned again: made again from its branch.
    let t = turn(&l, a, "echo MARK-AGAIN; ls", "go on");
    l.wait(&t, "succeeded");
    assert!(wt.join(".git").is_file());
    let seen = outputs_with(&l, "MARK-AGAIN");
    assert!(
        !seen.is_empty() && seen.iter().all(|o| !o.contains("a.txt")),
        "{seen:?}"
    );
}
