//! The Gitea client's webhook, commit status and listing methods against the
//! simulator: listings read to their end across pages, hooks made and
//! edited as Gitea needs them, statuses set and read back.

use crate::giteasim::{GiteaSim, Perm};
use crate::support::{BOT, GITEA_TOKEN};
use codex_bridge::gitea::hooks::{HookContentType, HookEdit, HookEvent, NewHook};
use codex_bridge::gitea::paging::PAGE_LIMIT;
use codex_bridge::gitea::statuses::{CommitState, NewStatus};
use codex_bridge::gitea::GiteaClient;
use secrecy::SecretString;
use std::time::Duration;

fn client(sim: &GiteaSim) -> GiteaClient {
    GiteaClient::new(&sim.base_url(), GITEA_TOKEN.to_owned().into())
        .with_read_backoff(vec![Duration::from_millis(10)])
}

fn pages_read(sim: &GiteaSim, path: &str) -> Vec<String> {
    sim.requests()
        .into_iter()
        .filter(|r| r.method == "GET" && r.path == path)
        .map(|r| r.query)
        .collect()
}

#[test]
fn repository_comments_are_read_across_pages_and_since_a_time() {
    let sim = GiteaSim::start();
    sim.create_repo("acme", "widgets");
    let issue = sim.create_issue("acme", "widgets", "One", "", "bob");
    sim.commit("acme", "widgets", "topic", "x.txt", "x\n", "x");
    let pull = sim.create_pull("acme", "widgets", "Two", "", "bob", "topic", "main");
    let total = 2 * PAGE_LIMIT + 3;
    for i in 0..total {
        let number = if i % 2 == 0 { issue } else { pull };
        sim.post_comment_without_webhook("bob", "acme", "widgets", number, &format!("c{i}"));
    }
    let c = client(&sim);
    let all = c.list_repo_comments("acme", "widgets", None, None).unwrap();
    assert_eq!(all.len(), total);
    let bodies: Vec<String> = all.iter().map(|c| c.body.clone()).collect();
    let expected: Vec<String> = (0..total).map(|i| format!("c{i}")).collect();
    assert_eq!(bodies, expected, "every comment once, in Gitea's order");
    assert_eq!((all[0].number(), all[0].is_pull()), (Some(issue), false));
    assert_eq!((all[1].number(), all[1].is_pull()), (Some(pull), true));
    let path = "/api/v1/repos/acme/widgets/issues/comments";
    assert_eq!(
        pages_read(&sim, path),
        ["page=1&limit=50", "page=2&limit=50", "page=3&limit=50"],
        "pages until X-Total-Count is reached"
    );

    // Since a time: only what was updated then or later, edits included.
    sim.advance_clock(Duration::from_secs(120));
    let later = chrono::Utc::now() + chrono::Duration::seconds(60);
    let first_id = all[0].id;
    sim.edit_comment_as("bob", first_id, "c0, edited");
    let fresh = sim.post_comment_without_webhook("bob", "acme", "widgets", issue, "new");
    let since = c
        .list_repo_comments("acme", "widgets", Some(later), None)
        .unwrap();
    let ids: Vec<i64> = since.iter().map(|c| c.id).collect();
    assert_eq!(ids, [first_id, fresh["id"].as_i64().unwrap()]);
    assert_eq!(since[0].body, "c0, edited");
    let query = pages_read(&sim, path).pop().unwrap();
    assert!(
        query.starts_with("since=") && query.contains("Z&page=1"),
        "{query}"
    );
    assert!(since[0].updated().unwrap() > since[0].created().unwrap());
}

#[test]
fn hooks_are_made_listed_edited_and_deleted_as_gitea_needs() {
    let sim = GiteaSim::start();
    sim.create_repo("acme", "widgets");
    sim.set_permission("acme", "widgets", BOT, Perm::Admin);
    let c = client(&sim);
    let secret = SecretString::from("hook-secret-for-tests");
    let url = "http://bridge.example/api/gitea/webhook";
    let events = [HookEvent::IssueComment, HookEvent::PullRequestReview];

    let made = c
        .create_hook(
            "acme",
            "widgets",
            &NewHook {
                url,
                content_type: HookContentType::Json,
                secret: &secret,
                events: &events,
            },
        )
        .unwrap();
    assert!(made.active, "made active, not Gitea's default");
    assert_eq!(made.kind, "gitea");
    assert_eq!(made.config.url, url);
    assert_eq!(made.config.content_type, Some(HookContentType::Json));
    assert_eq!(
        sim.webhook_secret(made.id).as_deref(),
        Some("hook-secret-for-tests")
    );
    // The secret went in the request body only, never in a URL or header.
    let post = sim
        .requests()
        .into_iter()
        .find(|r| r.method == "POST" && r.path.ends_with("/hooks"))
        .unwrap();
    assert!(!post.query.contains("hook-secret") && !post.path.contains("hook-secret"));

    // Many hooks: the listing is read to its end.
    for i in 0..(PAGE_LIMIT + 2) {
        sim.add_webhook(
            "acme",
            "widgets",
            &format!("http://other.example/{i}"),
            "x",
            &["push"],
            true,
        );
    }
    let listed = c.list_hooks("acme", "widgets").unwrap();
    assert_eq!(listed.len(), PAGE_LIMIT + 3);
    assert_eq!(listed[0], made);

    // An edit sends the events (Gitea would reset them to push otherwise).
    let edited = c
        .edit_hook(
            "acme",
            "widgets",
            made.id,
            &HookEdit {
                url,
                content_type: HookContentType::Json,
                events: &[HookEvent::IssueComment, HookEvent::PullRequestComment],
                branch_filter: "*",
                active: false,
            },
        )
        .unwrap();
    let mut got = edited.events.clone();
    got.sort();
    assert_eq!(
        got,
        [HookEvent::IssueComment, HookEvent::PullRequestComment]
    );
    assert!(!edited.active);
    assert_eq!(edited.branch_filter, "*");

    c.delete_hook("acme", "widgets", made.id).unwrap();
    c.delete_hook("acme", "widgets", made.id)
        .expect("a hook already gone counts as deleted");
    assert_eq!(
        c.list_hooks("acme", "widgets").unwrap().len(),
        PAGE_LIMIT + 2
    );

    // A writer is refused with Gitea's 403, its message kept.
    sim.set_permission("acme", "widgets", BOT, Perm::Write);
    let e = c.list_hooks("acme", "widgets").unwrap_err();
    assert_eq!(e.status(), Some(403));
    assert!(e.to_string().contains("admin write"), "{e}");
}

#[test]
fn statuses_are_set_and_read_back() {
    let sim = GiteaSim::start();
    sim.create_repo("acme", "widgets");
    let head = sim.commit("acme", "widgets", "topic", "x.txt", "x\n", "x");
    let c = client(&sim);
    let status = |state: CommitState, description: &'static str| NewStatus {
        state,
        target_url: "https://bridge.example/tasks/t1",
        description,
        context: "codex-bridge",
    };
    let pending = c
        .create_status(
            "acme",
            "widgets",
            &head,
            &status(CommitState::Pending, "queued"),
        )
        .unwrap();
    assert_eq!(
        (pending.id, pending.state.clone()),
        (1, CommitState::Pending)
    );
    let done = c
        .create_status(
            "acme",
            "widgets",
            &head,
            &status(CommitState::Failure, "failed"),
        )
        .unwrap();
    assert_eq!(done.id, 2);
    let kept = sim.statuses("acme", "widgets", &head);
    assert_eq!(kept.len(), 2);
    assert_eq!(kept[1]["description"], "failed");
    assert_eq!(kept[1]["creator"]["login"], BOT);

    let listed = c.list_statuses("acme", "widgets", &head).unwrap();
    assert_eq!(listed, [done.clone(), pending]);
    let combined = c.combined_status("acme", "widgets", "topic").unwrap();
    assert_eq!(combined.state, Some(CommitState::Failure));
    assert_eq!(combined.sha, head);
    assert_eq!(combined.statuses, [done]);
    let none = c
        .combined_status("acme", "widgets", &"0".repeat(40))
        .unwrap();
    assert_eq!((none.state, none.statuses.len()), (None, 0));

    // An unknown commit: Gitea's bare 500, not retried (a write).
    let e = c
        .create_status(
            "acme",
            "widgets",
            &"0".repeat(40),
            &status(CommitState::Success, "x"),
        )
        .unwrap_err();
    assert_eq!(e.status(), Some(500));
    assert_eq!(sim.statuses("acme", "widgets", &"0".repeat(40)).len(), 0);
    let posts = sim
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path.contains("/statuses/"))
        .count();
    assert_eq!(posts, 3);
}

#[test]
fn the_bots_repositories_are_listed_with_its_permissions() {
    let sim = GiteaSim::start();
    for i in 0..(PAGE_LIMIT + 1) {
        sim.create_repo("acme", &format!("r{i:03}"));
    }
    sim.set_permission("acme", "r007", BOT, Perm::Admin);
    let repos = client(&sim).list_my_repos().unwrap();
    assert_eq!(repos.len(), PAGE_LIMIT + 1, "read past the first page");
    let admin: Vec<&str> = repos
        .iter()
        .filter(|r| r.permissions.admin)
        .map(|r| r.full_name.as_str())
        .collect();
    assert_eq!(admin, ["acme/r007"]);
    assert!(repos
        .iter()
        .all(|r| r.permissions.push && r.owner.login == "acme"));
}
