//! `GET /api/gitea-workflow/repos/{repoKey}/hook` against the Gitea
//! simulator: each repository's webhook judged as `gitea hook` and `doctor`
//! judge it, against `public_url` and the webhook path; a Gitea that cannot
//! be asked gives `unknown` with why (still 200); a key that is no
//! repository key is a 404; the admin token is required; the secret is
//! never shown.

use crate::giteasim::{GiteaSim, Perm};
use crate::support::*;
use crate::testapp::*;

const PUBLIC: &str = "http://bridge.example";
const URL: &str = "http://bridge.example/api/gitea/webhook";
const EVENTS: [&str; 3] = [
    "issue_comment",
    "pull_request_comment",
    "pull_request_review",
];

fn hook_of(app: &TestApp, repo: &str) -> Reply {
    let r = app.admin_get(&format!("/api/gitea-workflow/repos/default:{repo}/hook"));
    assert!(
        !r.json.to_string().contains(SECRET),
        "the webhook secret is never shown: {}",
        r.json
    );
    r
}

#[test]
fn the_hook_state_of_each_repository_is_judged_against_public_url() {
    let sim = GiteaSim::start();
    for repo in ["widgets", "gadgets", "gizmos", "doubled"] {
        sim.create_repo("acme", repo);
        sim.set_permission("acme", repo, BOT, Perm::Admin);
    }
    sim.create_repo("acme", "foreign");
    let right = sim.add_webhook("acme", "widgets", URL, SECRET, &EVENTS, true);
    // A hook elsewhere does not count.
    sim.add_webhook(
        "acme",
        "gadgets",
        "http://ci.example/hook",
        "ci",
        &["push"],
        true,
    );
    let off = sim.add_webhook("acme", "gizmos", URL, SECRET, &["issue_comment"], false);
    let kept = sim.add_webhook("acme", "doubled", URL, SECRET, &EVENTS, true);
    sim.add_webhook("acme", "doubled", URL, SECRET, &EVENTS, true);
    let app = TestApp::builder()
        .env("CODEX_BRIDGE_PUBLIC_URL", PUBLIC)
        .start_with_gitea(sim);

    let ok = hook_of(&app, "acme/widgets");
    assert_eq!(ok.status, 200, "{}", ok.json);
    let j = &ok.json;
    assert_eq!(j["repo"], "default:acme/widgets");
    assert_eq!(j["state"], "ok", "{j}");
    assert_eq!(j["hookId"], right);
    assert_eq!(j["url"], URL);
    assert_eq!(j["contentType"], "json");
    assert_eq!(j["active"], true);
    let mut events: Vec<&str> = j["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    events.sort();
    assert_eq!(events, EVENTS);
    assert!(j["action"].is_null(), "{j}");

    // Percent-encoded as the page sends it, and a name in another case.
    let missing = app.admin_get("/api/gitea-workflow/repos/default:acme%2FGadgets/hook");
    assert_eq!(missing.status, 200, "{}", missing.json);
    assert_eq!(missing.json["state"], "missing", "{}", missing.json);
    assert!(missing.json["hookId"].is_null());
    assert!(
        missing.json["action"]
            .as_str()
            .unwrap()
            .contains("codex-bridge gitea hook --repo acme/gadgets"),
        "{}",
        missing.json
    );

    let drifted = hook_of(&app, "acme/gizmos");
    assert_eq!(drifted.json["state"], "drifted", "{}", drifted.json);
    assert_eq!(drifted.json["hookId"], off);
    assert_eq!(drifted.json["active"], false);
    assert!(
        drifted.json["detail"]
            .as_str()
            .unwrap()
            .contains("it was inactive"),
        "{}",
        drifted.json
    );

    let doubled = hook_of(&app, "acme/doubled");
    assert_eq!(doubled.json["state"], "duplicated", "{}", doubled.json);
    assert_eq!(doubled.json["hookId"], kept);

    // The bot only reads webhooks it administers: Gitea says no, so unknown.
    let foreign = hook_of(&app, "acme/foreign");
    assert_eq!(foreign.status, 200, "{}", foreign.json);
    assert_eq!(foreign.json["state"], "unknown", "{}", foreign.json);
    assert!(
        foreign.json["action"].as_str().unwrap().contains("admin"),
        "{}",
        foreign.json
    );

    for bad in [
        "nonsense",
        "default:acme",
        "default:acme/wid%20gets",
        "other:acme/widgets",
    ] {
        let r = app.admin_get(&format!("/api/gitea-workflow/repos/{bad}/hook"));
        assert_eq!(r.status, 404, "{bad}: {}", r.json);
    }
    let path = "/api/gitea-workflow/repos/default:acme/widgets/hook";
    assert_eq!(app.get(path, None).status, 401);
    assert_eq!(app.get(path, Some("wrong-token-wrong-token")).status, 401);
}

#[test]
fn a_gitea_that_cannot_be_asked_gives_unknown_with_the_reason() {
    // The default rig's gitea_url names a port nothing listens on.
    let app = TestApp::builder()
        .env("CODEX_BRIDGE_PUBLIC_URL", PUBLIC)
        .start();
    let r = hook_of(&app, "acme/widgets");
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["state"], "unknown", "{}", r.json);
    assert_eq!(r.json["url"], URL);
    let detail = r.json["detail"].as_str().unwrap();
    assert!(detail.contains("could not be reached"), "{detail}");
    assert!(
        r.json["action"].as_str().unwrap().contains("gitea_url"),
        "{}",
        r.json
    );

    // Without public_url the URL to judge against is unknown: it says so.
    let app = TestApp::builder().start();
    let r = hook_of(&app, "acme/widgets");
    assert_eq!(r.json["state"], "unknown", "{}", r.json);
    assert!(
        r.json["action"].as_str().unwrap().contains("public_url"),
        "{}",
        r.json
    );
}

/// The actors view shows each repository's hook state, filled in from the
/// route above once the repository's actor appears.
#[test]
fn browser_the_actors_view_shows_each_repositorys_hook_state() {
    use crate::browser::{browser_test, sign_in, text_until, title_until};
    let sim = GiteaSim::start();
    sim.add_user("bob");
    for repo in ["widgets", "gadgets"] {
        sim.create_repo("acme", repo);
        sim.set_permission("acme", repo, BOT, Perm::Admin);
        sim.set_permission("acme", repo, "bob", Perm::Write);
        sim.create_issue("acme", repo, "Flaky", "It flakes.", "bob");
    }
    let right = sim.add_webhook("acme", "widgets", URL, SECRET, &EVENTS, true);
    let s = &TestApp::builder()
        .scripted()
        .env("CODEX_BRIDGE_PUBLIC_URL", PUBLIC)
        .start_with_gitea(sim);
    // Work in each makes its repository actor appear in the tree.
    for repo in ["widgets", "gadgets"] {
        s.gitea()
            .post_comment_as("bob", "acme", repo, 1, "@ccbot quick one");
    }
    browser_test("hook_state", |c| async move {
        sign_in(&c, s, ADMIN_TOKEN).await;
        c.goto(&s.url("/admin#actors")).await.unwrap();
        let badge =
            |repo: &str| format!(r#".repo[data-repo="default:acme/{repo}"] .hook-fact .badge"#);
        text_until(&c, &badge("widgets"), |t| t == "ok").await;
        text_until(&c, &badge("gadgets"), |t| t == "missing").await;
        let hook = format!("webhook {right}");
        title_until(&c, &badge("widgets"), |t| t.contains(&hook)).await;
        title_until(&c, &badge("gadgets"), |t| {
            t.contains("codex-bridge gitea hook --repo acme/gadgets")
        })
        .await;
    });
}
