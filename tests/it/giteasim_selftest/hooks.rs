//! Repository webhooks: the API's codes, shapes and pitfalls, and the
//! deliveries each hook gets (its events, its secret, its content type).

use super::*;
use crate::giteasim::{Delivery, TEST_HOOK};

const NOT_ADMIN: &str =
    "user should be an owner or a collaborator with admin write of a repository";

fn hook_form(url: &str, secret: &str, events: &[&str]) -> Value {
    json!({
        "type": "gitea",
        "config": {"url": url, "content_type": "json", "secret": secret},
        "events": events,
        "active": true,
        "branch_filter": "*",
    })
}

fn events_of(hook: &Value) -> Vec<String> {
    let mut events: Vec<String> = hook["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap().to_owned())
        .collect();
    events.sort();
    events
}

#[test]
fn giteasim_hooks_api_keeps_giteas_codes_shapes_and_pitfalls() {
    let sim = GiteaSim::start();
    sim.create_repo("acme", "widgets");
    sim.create_repo("acme", "gadgets");
    let bob = format!("token {}", sim.add_user("bob"));
    sim.set_permission("acme", "widgets", "bob", Perm::Write);
    let swagger = format!("{}/api/swagger", sim.base_url());
    let hooks = format!("{}/repos/acme/widgets/hooks", sim.api_url());
    let one = |id: &Value| format!("{hooks}/{id}");

    // Admin only: a writer gets 403, someone without access the 404 of a
    // private repository. The bot writes on what create_repo makes.
    for (who, auth) in [("bot", bot()), ("bob", bob.clone())] {
        let r = call("GET", &hooks, Some(&auth), None);
        assert_eq!(r.status, 403, "{who}: {}", r.text);
        assert_eq!(r.json(), json!({"message": NOT_ADMIN, "url": swagger}));
        let r = call(
            "POST",
            &hooks,
            Some(&auth),
            Some(hook_form("http://x/h", "s", &[])),
        );
        assert_eq!(r.status, 403, "{who}");
    }
    let eve = format!("token {}", sim.add_user("eve"));
    assert_eq!(call("GET", &hooks, Some(&eve), None).status, 404);
    sim.set_permission("acme", "widgets", BOT, Perm::Admin);

    // Created: 201, the 1.24 field order, the secret nowhere.
    let created = call(
        "POST",
        &hooks,
        Some(&bot()),
        Some(hook_form(
            "http://bridge.example/api/gitea/webhook",
            "s3cr3t",
            &[
                "issue_comment",
                "pull_request_comment",
                "pull_request_review",
            ],
        )),
    );
    assert_eq!(created.status, 201, "{}", created.text);
    let keys: Vec<String> = serde_json::from_str::<J>(&created.text)
        .map(|j| match j {
            J::Obj(fields) => fields.into_iter().map(|(k, _)| k).collect(),
            _ => panic!("not an object"),
        })
        .unwrap();
    assert_eq!(
        keys,
        [
            "id",
            "type",
            "branch_filter",
            "config",
            "events",
            "authorization_header",
            "active",
            "updated_at",
            "created_at"
        ]
    );
    let hook = created.json();
    assert!(!created.text.contains("s3cr3t"), "{}", created.text);
    assert_eq!(
        hook["config"],
        json!({"content_type": "json", "url": "http://bridge.example/api/gitea/webhook"})
    );
    assert!(created
        .text
        .contains(r#""config":{"content_type":"json","url":"#));
    assert_eq!(
        events_of(&hook),
        [
            "issue_comment",
            "pull_request_comment",
            "pull_request_review"
        ]
    );
    assert_eq!(
        (hook["type"].clone(), hook["active"].clone()),
        (json!("gitea"), json!(true))
    );
    assert_eq!(hook["branch_filter"], "*");
    assert_eq!(
        sim.webhook_secret(hook["id"].as_i64().unwrap()).as_deref(),
        Some("s3cr3t")
    );

    // Pitfalls: inactive unless told, `push` when no events, families,
    // and a second hook with the same URL is just made.
    let mut lazy = hook_form("http://bridge.example/api/gitea/webhook", "x", &[]);
    lazy.as_object_mut().unwrap().remove("active");
    lazy.as_object_mut().unwrap().remove("events");
    let lazy = call("POST", &hooks, Some(&bot()), Some(lazy));
    assert_eq!(lazy.status, 201);
    assert_eq!(lazy.json()["active"], false);
    assert_eq!(events_of(&lazy.json()), ["push"]);
    let family = call(
        "POST",
        &hooks,
        Some(&bot()),
        Some(hook_form(
            "http://other.example/h",
            "x",
            &["issues", "PULL_REQUEST_only"],
        )),
    );
    assert_eq!(
        events_of(&family.json()),
        [
            "issue_assign",
            "issue_comment",
            "issue_label",
            "issue_milestone",
            "issues",
            "pull_request"
        ]
    );
    assert_eq!(sim.webhooks("acme", "widgets").len(), 3);

    // Refused forms.
    for (form, message) in [
        (
            json!({"config": {"url": "http://x/", "content_type": "json"}}),
            "[Type]: Required",
        ),
        (json!({"type": "gitea"}), "[Config]: Required"),
        (
            json!({"type": "bogus", "config": {"url": "http://x/", "content_type": "json"}}),
            "Invalid hook type: bogus",
        ),
        (
            json!({"type": "gitea", "config": {"content_type": "json"}}),
            "Missing config option: url",
        ),
        (
            json!({"type": "gitea", "config": {"url": "http://x/"}}),
            "Missing config option: content_type",
        ),
        (
            json!({"type": "gitea", "config": {"url": "http://x/", "content_type": "xml"}}),
            "Invalid content type",
        ),
        (
            json!({"type": "gitea", "config": {"url": "ftp://x/", "content_type": "json"}}),
            "Invalid url",
        ),
    ] {
        let r = call("POST", &hooks, Some(&bot()), Some(form));
        assert_eq!(r.status, 422, "{message}: {}", r.text);
        assert_eq!(r.json()["message"], message);
    }
    assert_eq!(sim.webhooks("acme", "widgets").len(), 3);

    // Listing: paged, X-Total-Count, no Link.
    let all = call("GET", &hooks, Some(&bot()), None);
    assert_eq!(all.status, 200);
    assert_eq!(all.json().as_array().unwrap().len(), 3);
    assert_eq!(all.header("x-total-count"), Some("3"));
    assert_eq!(all.header("link"), None);
    let second = call(
        "GET",
        &format!("{hooks}?limit=1&page=2"),
        Some(&bot()),
        None,
    );
    assert_eq!(second.json().as_array().unwrap().len(), 1);
    assert_eq!(second.json()[0]["id"], lazy.json()["id"]);
    assert_eq!(second.header("x-total-count"), Some("3"));

    // One hook; another repository's hook id is not found here.
    assert_eq!(
        call("GET", &one(&hook["id"]), Some(&bot()), None).json(),
        hook
    );
    let missing = call("GET", &format!("{hooks}/999"), Some(&bot()), None);
    assert_eq!(missing.status, 404);
    assert_eq!(
        missing.json(),
        json!({"errors": null, "message": "The target couldn't be found.", "url": swagger})
    );
    sim.set_permission("acme", "gadgets", BOT, Perm::Admin);
    let elsewhere = format!("{}/repos/acme/gadgets/hooks/{}", sim.api_url(), hook["id"]);
    assert_eq!(call("GET", &elsewhere, Some(&bot()), None).status, 404);

    // Edit: events left out fall back to `push`, the secret cannot change,
    // the branch filter is rewritten, `active` kept when not sent.
    let edited = call(
        "PATCH",
        &one(&hook["id"]),
        Some(&bot()),
        Some(json!({"config": {"url": "http://moved.example/h", "secret": "new"}})),
    );
    assert_eq!(edited.status, 200, "{}", edited.text);
    let edited = edited.json();
    assert_eq!(events_of(&edited), ["push"]);
    assert_eq!(edited["config"]["url"], "http://moved.example/h");
    assert_eq!(edited["branch_filter"], "");
    assert_eq!(edited["active"], true);
    assert_eq!(
        sim.webhook_secret(hook["id"].as_i64().unwrap()).as_deref(),
        Some("s3cr3t")
    );
    let fixed = call(
        "PATCH",
        &one(&hook["id"]),
        Some(&bot()),
        Some(json!({"events": ["issue_comment"], "active": false})),
    );
    assert_eq!(events_of(&fixed.json()), ["issue_comment"]);
    assert_eq!(fixed.json()["active"], false);
    assert_eq!(fixed.json()["config"]["url"], "http://moved.example/h");
    let bad = call(
        "PATCH",
        &one(&hook["id"]),
        Some(&bot()),
        Some(json!({"config": {"content_type": "xml"}})),
    );
    assert_eq!(
        (bad.status, bad.json()["message"].clone()),
        (422, json!("Invalid content type"))
    );
    assert_eq!(
        call(
            "PATCH",
            &format!("{hooks}/999"),
            Some(&bot()),
            Some(json!({}))
        )
        .status,
        404
    );

    // Delete: 204, then 404.
    assert_eq!(
        call("DELETE", &one(&hook["id"]), Some(&bot()), None).status,
        204
    );
    assert_eq!(
        call("DELETE", &one(&hook["id"]), Some(&bot()), None).status,
        404
    );
    assert_eq!(sim.webhooks("acme", "widgets").len(), 2);
}

#[test]
fn giteasim_hooks_deliver_what_they_subscribe_signed_with_their_secret() {
    let sim = GiteaSim::start();
    sim.create_repo("acme", "widgets");
    sim.create_repo("acme", "gadgets");
    let issue = sim.create_issue("acme", "widgets", "Flaky", "", "bob");
    sim.commit("acme", "widgets", "feature/x", "x.txt", "x\n", "x");
    let pull = sim.create_pull("acme", "widgets", "Fix", "", "bob", "feature/x", "main");
    let other = sim.create_issue("acme", "gadgets", "Elsewhere", "", "bob");
    let (comments, prs, form, idle, test) = (
        Receiver::start(),
        Receiver::start(),
        Receiver::start(),
        Receiver::start(),
        Receiver::start(),
    );
    sim.set_webhook(&test.url(), SECRET);
    let h_comments = sim.add_webhook(
        "acme",
        "widgets",
        &comments.url(),
        "one",
        &["issue_comment"],
        true,
    );
    let h_prs = sim.add_webhook(
        "acme",
        "widgets",
        &prs.url(),
        "two",
        &["pull_request"],
        true,
    );
    sim.add_webhook(
        "acme",
        "widgets",
        &idle.url(),
        "three",
        &["issue_comment"],
        false,
    );
    // A form hook, made through the API as an administrator would.
    sim.set_permission("acme", "widgets", BOT, Perm::Admin);
    let mut f = hook_form(&form.url(), "four", &["issue_comment"]);
    f["config"]["content_type"] = json!("form");
    f["authorization_header"] = json!("Bearer relay-token");
    let h_form = call(
        "POST",
        &format!("{}/repos/acme/widgets/hooks", sim.api_url()),
        Some(&bot()),
        Some(f),
    )
    .json()["id"]
        .as_i64()
        .unwrap();

    sim.post_comment_as("bob", "acme", "widgets", issue, "on the issue");
    sim.post_comment_as("bob", "acme", "widgets", pull, "on the pull request");
    sim.post_comment_as("bob", "acme", "gadgets", other, "another repository");
    sim.wait_idle();

    // Per event, the repository's matching active hooks, then the test's.
    let d: Vec<Delivery> = sim.deliveries();
    let routed: Vec<(i64, &str)> = d
        .iter()
        .map(|t| (t.hook_id, t.event_type.as_str()))
        .collect();
    assert_eq!(
        routed,
        vec![
            (h_comments, "issue_comment"),
            (h_form, "issue_comment"),
            (TEST_HOOK, "issue_comment"),
            (h_prs, "pull_request_comment"),
            (TEST_HOOK, "pull_request_comment"),
            (TEST_HOOK, "issue_comment"),
        ]
    );
    assert_eq!(d[0].body, d[2].body, "one payload, every hook");
    assert!(d.iter().all(|t| t.status == Some(200)), "{d:?}");
    assert_eq!(d[0].url, comments.url());
    assert_eq!(idle.seen().len(), 0, "an inactive hook hears nothing");

    // Each hook signs with its own secret.
    for (rx, secret) in [(&comments, "one"), (&prs, "two"), (&test, SECRET)] {
        for (headers, body) in rx.seen() {
            codex_bridge::webhook::verify::verify(secret.as_bytes(), &body, &headers).unwrap();
            assert!(codex_bridge::webhook::verify::verify(b"wrong", &body, &headers).is_err());
        }
    }
    assert_eq!(test.seen().len(), 3);

    // The form hook: `payload=<JSON>`, signed over the JSON, with its
    // Authorization header.
    let (headers, body) = form.seen().pop().unwrap();
    assert_eq!(
        headers.get("content-type").unwrap(),
        "application/x-www-form-urlencoded"
    );
    assert_eq!(headers.get("authorization").unwrap(), "Bearer relay-token");
    let payload = form_urlencoded::parse(&body)
        .find(|(k, _)| k == "payload")
        .map(|(_, v)| v.into_owned())
        .unwrap();
    assert_eq!(payload.as_bytes(), d[1].body.as_slice());
    codex_bridge::webhook::verify::verify(b"four", payload.as_bytes(), &headers).unwrap();

    // Lost events make no task; a comment stored without its webhook is in
    // the API only.
    let before = sim.deliveries().len();
    sim.lose_webhooks(true);
    sim.post_comment_as("bob", "acme", "widgets", issue, "lost");
    sim.lose_webhooks(false);
    let quiet = sim.post_comment_without_webhook("bob", "acme", "widgets", issue, "quiet\nplease");
    sim.wait_idle();
    assert_eq!(sim.deliveries().len(), before);
    assert_eq!(quiet["body"], "quiet\r\nplease");
    assert_eq!(sim.comments("acme", "widgets", issue).len(), 3);

    // A hook deleted before its task ran: the task fails, nothing is sent.
    sim.set_auto_deliver(false);
    sim.post_comment_as("bob", "acme", "widgets", issue, "held");
    let url = format!("{}/repos/acme/widgets/hooks/{h_comments}", sim.api_url());
    assert_eq!(call("DELETE", &url, Some(&bot()), None).status, 204);
    sim.deliver_pending();
    sim.wait_idle();
    let gone = sim
        .deliveries()
        .into_iter()
        .find(|t| t.hook_id == h_comments && t.status.is_none())
        .unwrap();
    assert!(gone.delivered && gone.error.unwrap().contains("no longer exists"));
    assert_eq!(comments.seen().len(), 1);

    // Without the test's hook, only repository hooks hear anything.
    sim.set_auto_deliver(true);
    sim.clear_webhook();
    sim.post_comment_as("bob", "acme", "widgets", issue, "only hooks");
    sim.wait_idle();
    assert_eq!(
        test.seen().len(),
        4,
        "the held comment reached the test hook, nothing after"
    );
    assert_eq!(sim.deliveries().last().unwrap().hook_id, h_form);
}
