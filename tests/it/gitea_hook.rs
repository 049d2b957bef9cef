//! `codex-bridge gitea hook`, run as the real binary against the Gitea
//! simulator: it creates the webhook, leaves it alone the second time,
//! brings a drifted one back, covers exactly the repositories the bot
//! administers with `--all`, fails a repository it may not touch with a
//! line saying what to do, and the hook it made carries a comment to a
//! running server, where it becomes a task.

use crate::giteasim::{GiteaSim, Perm, TEST_HOOK};
use crate::support::*;
use crate::testapp::*;
use serde_json::Value;
use std::process::{Command, Output};

const URL: &str = "http://bridge.example/api/gitea/webhook";
const EVENTS: &str = "issue_comment, pull_request_comment, pull_request_review";

/// Runs `codex-bridge gitea hook ARGS` with only the given configuration.
fn hook_cmd(sim: &GiteaSim, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_codex-bridge"));
    for (k, _) in std::env::vars() {
        if k.starts_with("CODEX_BRIDGE_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("CODEX_BRIDGE_GITEA_URL", sim.base_url())
        .env("CODEX_BRIDGE_GITEA_TOKEN", GITEA_TOKEN)
        .env("CODEX_BRIDGE_WEBHOOK_SECRET", SECRET)
        .env("CODEX_BRIDGE_LOG_FILTER", "warn");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.args(["gitea", "hook"]).args(args).output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn everything(o: &Output) -> String {
    format!("{}{}", stdout(o), String::from_utf8_lossy(&o.stderr))
}

/// The hooks of a repository that point at `url`.
fn hooks_at(sim: &GiteaSim, repo: &str, url: &str) -> Vec<Value> {
    sim.webhooks("acme", repo)
        .into_iter()
        .filter(|h| h["config"]["url"] == url)
        .collect()
}

/// The one hook at `url`, checked to be the bridge's; its id.
fn the_bridges_hook(sim: &GiteaSim, repo: &str, url: &str) -> i64 {
    let hooks = hooks_at(sim, repo, url);
    assert_eq!(hooks.len(), 1, "acme/{repo}: {hooks:?}");
    let h = &hooks[0];
    let mut events: Vec<&str> = h["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    events.sort();
    assert_eq!(
        events,
        [
            "issue_comment",
            "pull_request_comment",
            "pull_request_review"
        ]
    );
    assert_eq!(h["type"], "gitea");
    assert_eq!(h["active"], true);
    assert_eq!(h["config"]["content_type"], "json");
    let id = h["id"].as_i64().unwrap();
    assert_eq!(sim.webhook_secret(id).as_deref(), Some(SECRET));
    id
}

#[test]
fn gitea_hook_creates_then_changes_nothing_and_mends_a_drifted_hook() {
    let sim = GiteaSim::start();
    for repo in ["widgets", "gadgets"] {
        sim.create_repo("acme", repo);
        sim.set_permission("acme", repo, BOT, Perm::Admin);
    }
    // Someone made gadgets' hook by hand: comments only, and switched off.
    let drifted = sim.add_webhook("acme", "gadgets", URL, SECRET, &["issue_comment"], false);
    let other = sim.add_webhook(
        "acme",
        "gadgets",
        "http://ci.example/hook",
        "ci",
        &["push"],
        true,
    );
    let args = [
        "--repo",
        "acme/widgets",
        "--repo",
        "acme/gadgets",
        "--url",
        URL,
    ];

    let first = hook_cmd(&sim, &[], &args);
    assert!(first.status.success(), "{}", everything(&first));
    let made = the_bridges_hook(&sim, "widgets", URL);
    assert_eq!(
        the_bridges_hook(&sim, "gadgets", URL),
        drifted,
        "edited, not replaced"
    );
    let lines: Vec<String> = stdout(&first).lines().map(str::to_owned).collect();
    assert_eq!(
        lines[..2],
        [
            format!("acme/widgets: created webhook {made}: sends {EVENTS} to {URL}"),
            format!(
                "acme/gadgets: updated webhook {drifted} (it was inactive; it lacked \
                 pull_request_comment, pull_request_review)"
            ),
        ]
    );
    assert!(
        lines[2].starts_with("note: Gitea never shows a webhook's secret"),
        "{lines:?}"
    );
    assert_eq!(
        sim.webhooks("acme", "gadgets").len(),
        2,
        "the CI hook stays"
    );
    assert_eq!(sim.webhooks("acme", "gadgets")[1]["id"], other);

    // Twice: still one hook each, and it says so.
    let second = hook_cmd(&sim, &[], &args);
    assert!(second.status.success(), "{}", everything(&second));
    assert_eq!(the_bridges_hook(&sim, "widgets", URL), made);
    assert_eq!(the_bridges_hook(&sim, "gadgets", URL), drifted);
    let out = stdout(&second);
    assert!(
        out.contains(&format!(
            "acme/widgets: unchanged: webhook {made} already sends {EVENTS} to {URL}"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("acme/gadgets: unchanged: webhook {drifted}")),
        "{out}"
    );

    // A duplicate made by hand goes; --recreate brings a new hook (and so
    // the current secret), the old one deleted.
    let dup = sim.add_webhook(
        "acme",
        "widgets",
        URL,
        "old-secret",
        &["issue_comment"],
        true,
    );
    let third = hook_cmd(
        &sim,
        &[],
        &["--repo", "acme/widgets", "--url", URL, "--recreate"],
    );
    assert!(third.status.success(), "{}", everything(&third));
    let new = the_bridges_hook(&sim, "widgets", URL);
    assert!(new != made && new != dup, "{new}");
    assert_eq!(
        stdout(&third).lines().next().unwrap(),
        format!(
            "acme/widgets: replaced webhook {made} with webhook {new} (--recreate); \
             removed duplicate webhook {dup}"
        )
    );

    for o in [&first, &second, &third] {
        assert!(
            !everything(o).contains(SECRET),
            "the secret is never printed"
        );
    }
    // Every edit sent the events (an edit without them would reset the
    // hook to push only), and no hook was ever made twice by one run.
    for r in sim.requests() {
        if r.method == "PATCH" && r.path.contains("/hooks/") {
            assert!(r.body.contains("\"events\""), "{}", r.body);
        }
    }
}

#[test]
fn gitea_hook_all_covers_the_repositories_the_bot_administers() {
    let sim = GiteaSim::start();
    for repo in ["alpha", "bravo", "charlie"] {
        sim.create_repo("acme", repo);
    }
    sim.set_permission("acme", "alpha", BOT, Perm::Admin);
    sim.set_permission("acme", "charlie", BOT, Perm::Admin);
    // bravo: the bot only writes there.
    let o = hook_cmd(&sim, &[], &["--all", "--url", URL]);
    assert!(o.status.success(), "{}", everything(&o));
    let out = stdout(&o);
    let repos: Vec<&str> = out
        .lines()
        .filter(|l| !l.starts_with("note:"))
        .map(|l| l.split(':').next().unwrap())
        .collect();
    assert_eq!(repos, ["acme/alpha", "acme/charlie"], "{out}");
    the_bridges_hook(&sim, "alpha", URL);
    the_bridges_hook(&sim, "charlie", URL);
    assert!(sim.webhooks("acme", "bravo").is_empty());
    assert!(
        !out.contains("--recreate"),
        "nothing kept, nothing to note about secrets: {out}"
    );
    // No database here: the hooks stand, and it says they are not registered.
    assert!(
        out.contains("note: not registered as known repositories"),
        "{out}"
    );

    // --repo and --all are one or the other, and one is needed.
    let both = hook_cmd(&sim, &[], &["--all", "--repo", "acme/alpha", "--url", URL]);
    assert!(!both.status.success());
    let neither = hook_cmd(&sim, &[], &["--url", URL]);
    assert!(!neither.status.success());
    let bad = hook_cmd(&sim, &[], &["--repo", "acme", "--url", URL]);
    assert!(
        everything(&bad).contains("OWNER/NAME"),
        "{}",
        everything(&bad)
    );
}

#[test]
fn gitea_hook_fails_where_the_bot_is_no_admin_and_says_what_to_do() {
    let sim = GiteaSim::start();
    sim.create_repo("acme", "widgets");
    sim.create_repo("acme", "gadgets");
    sim.set_permission("acme", "gadgets", BOT, Perm::Admin);
    let o = hook_cmd(
        &sim,
        &[],
        &[
            "--repo",
            "acme/widgets",
            "--repo",
            "acme/gadgets",
            "--repo",
            "acme/nothing",
            "--url",
            URL,
        ],
    );
    assert!(!o.status.success(), "{}", everything(&o));
    let out = stdout(&o);
    let widgets = out
        .lines()
        .find(|l| l.starts_with("acme/widgets:"))
        .unwrap();
    assert!(
        widgets.starts_with("acme/widgets: failed: Gitea answered 403"),
        "{widgets}"
    );
    assert!(
        widgets.contains("the bot must administer acme/widgets"),
        "{widgets}"
    );
    let nothing = out
        .lines()
        .find(|l| l.starts_with("acme/nothing:"))
        .unwrap();
    assert!(
        nothing.contains("404") && nothing.contains("check the name"),
        "{nothing}"
    );
    assert!(
        out.contains("acme/gadgets: created webhook"),
        "the others still get theirs: {out}"
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("2 of 3 repositories failed"),
        "{}",
        everything(&o)
    );
    assert!(sim.webhooks("acme", "widgets").is_empty());

    // A token Gitea does not know.
    let o = hook_cmd(
        &sim,
        &[("CODEX_BRIDGE_GITEA_TOKEN", "nope")],
        &["--repo", "acme/gadgets", "--url", URL],
    );
    assert!(!o.status.success());
    assert!(
        stdout(&o).contains("401") && stdout(&o).contains("check gitea_token"),
        "{}",
        everything(&o)
    );

    // Each missing key is named.
    for key in ["GITEA_URL", "GITEA_TOKEN", "WEBHOOK_SECRET"] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_codex-bridge"));
        for (k, _) in std::env::vars() {
            if k.starts_with("CODEX_BRIDGE_") {
                cmd.env_remove(k);
            }
        }
        for (k, v) in [
            ("GITEA_URL", sim.base_url()),
            ("GITEA_TOKEN", GITEA_TOKEN.to_owned()),
            ("WEBHOOK_SECRET", SECRET.to_owned()),
        ] {
            if k != key {
                cmd.env(format!("CODEX_BRIDGE_{k}"), v);
            }
        }
        let o = cmd
            .args(["gitea", "hook", "--repo", "acme/gadgets", "--url", URL])
            .output()
            .unwrap();
        assert!(!o.status.success());
        let text = everything(&o);
        assert!(
            text.contains(&format!("`{}`", key.to_ascii_lowercase()))
                && text.contains(&format!("CODEX_BRIDGE_{key}")),
            "{key}: {text}"
        );
    }
}

#[test]
fn a_comment_reaches_the_server_through_the_hook_gitea_hook_made() {
    let sim = GiteaSim::start();
    sim.create_repo("acme", "widgets");
    sim.set_permission("acme", "widgets", BOT, Perm::Admin);
    sim.add_user("bob");
    sim.set_permission("acme", "widgets", "bob", Perm::Write);
    let issue = sim.create_issue("acme", "widgets", "Flaky", "It flakes.", "bob");
    let app = TestApp::builder().start_with_gitea(sim);
    let sim = app.gitea();
    // Only the hook the command makes may carry the comment.
    sim.clear_webhook();
    let url = app.url("/api/gitea/webhook");
    let o = hook_cmd(sim, &[], &["--repo", "acme/widgets", "--url", &url]);
    assert!(o.status.success(), "{}", everything(&o));
    let hook = the_bridges_hook(sim, "widgets", &url);

    let comment = sim.post_comment_as("bob", "acme", "widgets", issue, "@ccbot please look");
    sim.wait_idle();
    let ours = sim
        .deliveries()
        .into_iter()
        .find(|d| d.json()["comment"]["id"] == comment["id"])
        .unwrap();
    assert_eq!(ours.hook_id, hook);
    assert_ne!(ours.hook_id, TEST_HOOK);
    assert_eq!(ours.status, Some(202), "{}", ours.response_body);
    let task: Value = serde_json::from_str(&ours.response_body).unwrap();
    let task_id = task["taskId"].as_str().unwrap();
    let detail = app.admin_get(&format!("/api/gitea-workflow/tasks/{task_id}"));
    assert_eq!(detail.status, 200, "{:?}", detail.json);
    assert_eq!(detail.json["task"]["commentId"], comment["id"]);
    assert_eq!(detail.json["task"]["author"], "bob");
}

#[test]
fn gitea_hook_defaults_the_url_to_public_url_and_names_both_without_it() {
    let sim = GiteaSim::start();
    sim.create_repo("acme", "widgets");
    sim.set_permission("acme", "widgets", BOT, Perm::Admin);
    let o = hook_cmd(
        &sim,
        &[("CODEX_BRIDGE_PUBLIC_URL", "http://bridge.example/")],
        &["--repo", "acme/widgets"],
    );
    assert!(o.status.success(), "{}", everything(&o));
    let id = the_bridges_hook(&sim, "widgets", URL);
    assert!(
        stdout(&o).contains(&format!("created webhook {id}: sends {EVENTS} to {URL}")),
        "{}",
        everything(&o)
    );

    let o = hook_cmd(&sim, &[], &["--repo", "acme/widgets"]);
    assert!(!o.status.success(), "{}", everything(&o));
    let text = everything(&o);
    assert!(
        text.contains("--url")
            && text.contains("public_url")
            && text.contains("CODEX_BRIDGE_PUBLIC_URL"),
        "{text}"
    );
    let help = Command::new(env!("CARGO_BIN_EXE_codex-bridge"))
        .args(["gitea", "hook", "--help"])
        .output()
        .unwrap();
    assert!(stdout(&help).contains("public_url"), "{}", stdout(&help));
}

#[test]
fn gitea_hook_registers_the_repository_so_the_catch_up_covers_it_from_then_on() {
    let sim = GiteaSim::start();
    sim.create_repo("acme", "widgets");
    sim.set_permission("acme", "widgets", BOT, Perm::Admin);
    sim.add_user("bob");
    sim.set_permission("acme", "widgets", "bob", Perm::Write);
    let issue = sim.create_issue("acme", "widgets", "Flaky", "It flakes.", "bob");
    // A mention from long before the repository was known: the catch-up
    // starts where the registration did, never at the beginning of time.
    sim.rewind_clock(std::time::Duration::from_secs(3 * 3600));
    let old = sim.post_comment_without_webhook("bob", "acme", "widgets", issue, "@ccbot old news");
    sim.advance_clock(std::time::Duration::from_secs(3 * 3600));
    let app = TestApp::builder()
        .env("CODEX_BRIDGE_CATCHUP_INTERVAL_SECS", "1")
        .start_with_gitea(sim);
    let sim = app.gitea();
    sim.clear_webhook();
    let mut db = app.db();
    assert_eq!(count_where(&mut db, "repositories", "1 = 1"), 0);

    let url = app.url("/api/gitea/webhook");
    let with_db = [("CODEX_BRIDGE_DATABASE_URL", app.db_url.as_str())];
    let o = hook_cmd(sim, &with_db, &["--repo", "acme/widgets", "--url", &url]);
    assert!(o.status.success(), "{}", everything(&o));
    assert!(
        stdout(&o)
            .contains("acme/widgets: registered: the catch-up reads its comments from now on"),
        "{}",
        everything(&o)
    );
    let row = "repo_key = 'default:acme/widgets' AND status = 'active' AND clone_url IS NOT NULL \
               AND default_branch = 'main'";
    assert_eq!(count_where(&mut db, "repositories", row), 1);
    assert_eq!(
        count_where(
            &mut db,
            "audit_events",
            "action = 'repository.registered' AND actor = 'cli:gitea-hook'"
        ),
        1
    );

    // No webhook carries this one: only the catch-up can make its task.
    let new =
        sim.post_comment_without_webhook("bob", "acme", "widgets", issue, "@ccbot please look");
    let key = format!("default:catchup:{}", new["id"]);
    app.wait_for("the catch-up to make the comment's task", || {
        count_where(&mut db, "tasks", &format!("delivery_key = '{key}'")) == 1
    });
    assert_eq!(
        count_where(&mut db, "tasks", &format!("comment_id = {}", old["id"])),
        0,
        "a comment from before the registration is not caught up"
    );

    // Again: the repository is known already; nothing new is said or stored.
    let again = hook_cmd(sim, &with_db, &["--repo", "acme/widgets", "--url", &url]);
    assert!(again.status.success(), "{}", everything(&again));
    assert!(!stdout(&again).contains("registered"), "{}", stdout(&again));
    assert_eq!(count_where(&mut db, "repositories", "1 = 1"), 1);
}

#[test]
fn gitea_hook_has_help() {
    for args in [vec!["gitea", "--help"], vec!["gitea", "hook", "--help"]] {
        let o = Command::new(env!("CARGO_BIN_EXE_codex-bridge"))
            .args(&args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{args:?}: {}", everything(&o));
        let out = stdout(&o);
        assert!(out.contains("Usage") && out.contains("webhook"), "{out}");
    }
}
