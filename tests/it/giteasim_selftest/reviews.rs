//! Pull request reviews: what Gitea accepts and answers, the webhooks a
//! submitted review fires, the listing (order, paging, hidden pending
//! reviews), and a review whose answer is lost.

use super::*;
use crate::giteasim::TEST_HOOK;

fn reviews_url(sim: &GiteaSim, number: i64) -> String {
    format!(
        "{}/repos/acme/widgets/pulls/{number}/reviews",
        sim.api_url()
    )
}

fn post_review(sim: &GiteaSim, auth: &str, number: i64, body: Value) -> Resp {
    call("POST", &reviews_url(sim, number), Some(auth), Some(body))
}

fn ids(r: &Resp) -> Vec<i64> {
    r.json()
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["id"].as_i64().unwrap())
        .collect()
}

fn keys(text: &str) -> Vec<String> {
    match serde_json::from_str::<J>(text).unwrap() {
        J::Obj(fields) => fields.into_iter().map(|(k, _)| k).collect(),
        _ => panic!("not an object: {text}"),
    }
}

/// `acme/widgets` with a pull request by alice (returned with its head)
/// and one by the bot itself.
fn setup(sim: &GiteaSim) -> (i64, String, i64) {
    sim.create_repo("acme", "widgets");
    sim.commit("acme", "widgets", "topic", "x.txt", "x\n", "x");
    let pull = sim.create_pull("acme", "widgets", "Fix", "", "alice", "topic", "main");
    sim.commit("acme", "widgets", "mine", "y.txt", "y\n", "y");
    let own = sim.create_pull("acme", "widgets", "Mine", "", BOT, "mine", "main");
    let head = sim.resolve_pull_head("acme", "widgets", pull);
    (pull, head, own)
}

#[test]
fn giteasim_pull_request_reviews_as_gitea_makes_them() {
    let sim = GiteaSim::start();
    let rx = Receiver::start();
    sim.set_webhook(&rx.url(), SECRET);
    let (pull, head, own) = setup(&sim);
    let issue = sim.create_issue("acme", "widgets", "Bug", "", "alice");
    let reviews_hook = sim.add_webhook(
        "acme",
        "widgets",
        &rx.url(),
        "s1",
        &["pull_request_review"],
        true,
    );
    let comments_hook =
        sim.add_webhook("acme", "widgets", &rx.url(), "s2", &["issue_comment"], true);
    let swagger = format!("{}/api/swagger", sim.base_url());
    let page = format!("{}/acme/widgets/pulls/{pull}", sim.base_url());

    // A comment review: 200 with `api.PullReview`, on the PR's head.
    let commented = post_review(
        &sim,
        &bot(),
        pull,
        json!({"body": "Looks fine, @alice", "event": "COMMENT"}),
    );
    assert_eq!(commented.status, 200, "{}", commented.text);
    assert_eq!(
        keys(&commented.text),
        [
            "id",
            "user",
            "team",
            "state",
            "body",
            "commit_id",
            "stale",
            "official",
            "dismissed",
            "comments_count",
            "submitted_at",
            "updated_at",
            "html_url",
            "pull_request_url"
        ]
    );
    let c = commented.json();
    assert_eq!(c["user"]["login"], BOT);
    assert_eq!(c["team"], Value::Null);
    assert_eq!(c["state"], "COMMENT");
    assert_eq!(c["body"], "Looks fine, @alice");
    assert_eq!(c["commit_id"], head.as_str());
    assert_eq!(
        (&c["stale"], &c["official"], &c["dismissed"]),
        (&json!(false), &json!(false), &json!(false))
    );
    assert_eq!(c["comments_count"], 0);
    assert_eq!(c["submitted_at"], c["updated_at"]);
    assert_eq!(c["pull_request_url"], page.as_str());
    // `html_url` names the review's timeline entry, which is no plain
    // comment: Gitea answers 204 for it and lists it nowhere.
    let entry = c["html_url"]
        .as_str()
        .unwrap()
        .strip_prefix(&format!("{page}#issuecomment-"))
        .unwrap()
        .parse::<i64>()
        .unwrap();
    assert_ne!(entry, c["id"].as_i64().unwrap());
    let entry_url = format!(
        "{}/repos/acme/widgets/issues/comments/{entry}",
        sim.api_url()
    );
    assert_eq!(call("GET", &entry_url, Some(&bot()), None).status, 204);
    assert!(sim.comments("acme", "widgets", pull).is_empty());

    // Its webhook: to the review subscription and the test's hook only.
    sim.wait_idle();
    let deliveries = sim.deliveries();
    let hooks: Vec<i64> = deliveries.iter().map(|d| d.hook_id).collect();
    assert_eq!(hooks, [reviews_hook, TEST_HOOK]);
    assert!(!hooks.contains(&comments_hook));
    for d in &deliveries {
        assert_eq!(
            (d.event.as_str(), d.event_type.as_str()),
            ("pull_request_comment", "pull_request_review_comment")
        );
        assert_eq!(d.status, Some(200), "{d:?}");
    }
    let body = &deliveries[1].body;
    assert_eq!(
        keys(std::str::from_utf8(body).unwrap()),
        [
            "action",
            "number",
            "pull_request",
            "requested_reviewer",
            "repository",
            "sender",
            "commit_id",
            "review"
        ]
    );
    assert_eq!(
        go_json(&serde_json::from_slice::<J>(body).unwrap(), true),
        *body,
        "json.MarshalIndent bytes"
    );
    let p = deliveries[1].json();
    assert_eq!(p["action"], "reviewed");
    assert_eq!(p["number"], pull);
    assert_eq!(p["pull_request"]["number"], pull);
    assert_eq!(p["pull_request"]["head"]["sha"], head.as_str());
    assert_eq!(p["requested_reviewer"]["login"], BOT);
    assert_eq!(p["sender"]["login"], BOT);
    assert_eq!(p["repository"]["full_name"], "acme/widgets");
    assert_eq!(p["commit_id"], "");
    assert_eq!(
        p["review"],
        json!({"type": "pull_request_review_comment", "content": "Looks fine, @alice"})
    );
    let seen = rx.seen();
    let (headers, _) = seen.last().unwrap();
    assert_eq!(
        headers.get("x-gitea-event").unwrap(),
        "pull_request_comment"
    );
    assert_eq!(
        headers.get("x-gitea-event-type").unwrap(),
        "pull_request_review_comment"
    );

    // An approval needs no body; by a writer it is official.
    let approved = post_review(&sim, &bot(), pull, json!({"event": "APPROVED"}));
    assert_eq!(approved.status, 200, "{}", approved.text);
    assert_eq!(approved.json()["state"], "APPROVED");
    assert_eq!(approved.json()["official"], true);
    sim.wait_idle();
    let last = sim.deliveries().pop().unwrap();
    assert_eq!(
        (last.event.as_str(), last.event_type.as_str()),
        ("pull_request_approved", "pull_request_review_approved")
    );
    assert_eq!(last.json()["review"]["content"], "");

    // What Gitea refuses, with its messages.
    let refused = |number: i64, body: Value, message: &str| {
        let r = post_review(&sim, &bot(), number, body.clone());
        assert_eq!(r.status, 422, "{body}: {}", r.text);
        assert_eq!(
            r.json(),
            json!({"message": message, "url": swagger}),
            "{body}"
        );
    };
    refused(
        own,
        json!({"event": "APPROVED"}),
        "approve your own pull is not allowed",
    );
    refused(
        own,
        json!({"event": "REQUEST_CHANGES", "body": "no"}),
        "reject your own pull is not allowed",
    );
    refused(
        pull,
        json!({"event": "REQUEST_CHANGES", "body": "  \n"}),
        "review event REQUEST_CHANGES requires a body",
    );
    refused(
        pull,
        json!({"event": "COMMENT", "body": " "}),
        "review event COMMENT requires a body or a comment",
    );
    refused(pull, json!({}), "review event  requires a body");
    refused(
        pull,
        json!({"event": "PENDING", "comments": [{"path": "x.txt", "body": "n", "new_position": 1}]}),
        "review event PENDING requires a body",
    );
    let malformed = post_review(&sim, &bot(), pull, json!({"comments": "x"}));
    assert_eq!(malformed.status, 422);
    // Only a pull request has reviews.
    let not_found =
        json!({"errors": null, "message": "The target couldn't be found.", "url": swagger});
    for number in [issue, 99] {
        let r = post_review(
            &sim,
            &bot(),
            number,
            json!({"event": "COMMENT", "body": "x"}),
        );
        assert_eq!((r.status, r.json()), (404, not_found.clone()), "#{number}");
        let r = call("GET", &reviews_url(&sim, number), Some(&bot()), None);
        assert_eq!(r.status, 404, "#{number}");
    }

    // Inline comments alone make a comment review; an explicit commit is
    // kept as sent; read access suffices; a reader's review is not official.
    let bob = format!("token {}", sim.add_user("bob"));
    sim.set_permission("acme", "widgets", "bob", Perm::Read);
    let inline = post_review(
        &sim,
        &bob,
        pull,
        json!({
            "event": "COMMENT",
            "commit_id": "0123abcd",
            "comments": [
                {"path": "x.txt", "body": "why?", "new_position": 1},
                {"path": "x.txt", "body": "gone", "old_position": 1}
            ]
        }),
    );
    assert_eq!(inline.status, 200, "{}", inline.text);
    let i = inline.json();
    assert_eq!(
        (i["body"].clone(), i["comments_count"].clone()),
        (json!(""), json!(2))
    );
    assert_eq!(i["commit_id"], "0123abcd");
    assert_eq!(i["user"]["login"], "bob");
    let rejected = post_review(
        &sim,
        &bob,
        pull,
        json!({"event": "REQUEST_CHANGES", "body": "please split"}),
    );
    assert_eq!(rejected.json()["official"], false, "bob only reads");
    sim.wait_idle();
    let last = sim.deliveries().pop().unwrap();
    assert_eq!(
        (last.event.as_str(), last.event_type.as_str()),
        ("pull_request_rejected", "pull_request_review_rejected")
    );
    assert_eq!(last.json()["sender"]["login"], "bob");

    // A later approval or request for changes dismisses the reviewer's
    // earlier ones and takes over the official flag.
    let blocked = post_review(
        &sim,
        &bot(),
        pull,
        json!({"event": "REQUEST_CHANGES", "body": "tests fail"}),
    );
    assert_eq!(blocked.json()["official"], true);
    let stored = sim.reviews("acme", "widgets", pull);
    let approval = stored
        .iter()
        .find(|r| r["id"] == approved.json()["id"])
        .unwrap();
    assert_eq!(
        (approval["dismissed"].clone(), approval["official"].clone()),
        (json!(true), json!(false))
    );
    let comment = stored.iter().find(|r| r["id"] == c["id"]).unwrap();
    assert_eq!(comment["dismissed"], false, "comments are never dismissed");

    // Strangers get the private repository's 404.
    let eve = format!("token {}", sim.add_user("eve"));
    let r = post_review(&sim, &eve, pull, json!({"event": "COMMENT", "body": "hi"}));
    assert_eq!(r.status, 404);
}

#[test]
fn giteasim_lists_reviews_hides_pending_ones_and_can_lose_an_answer() {
    let sim = GiteaSim::start();
    let rx = Receiver::start();
    sim.set_webhook(&rx.url(), SECRET);
    let (pull, _head, _own) = setup(&sim);
    let bob = format!("token {}", sim.add_user("bob"));
    sim.set_permission("acme", "widgets", "bob", Perm::Write);
    let id = |r: &Resp| {
        assert_eq!(r.status, 200, "{}", r.text);
        r.json()["id"].as_i64().unwrap()
    };
    let first = id(&post_review(
        &sim,
        &bot(),
        pull,
        json!({"event": "COMMENT", "body": "one"}),
    ));
    sim.advance_clock(Duration::from_secs(60));
    let second = id(&post_review(
        &sim,
        &bob,
        pull,
        json!({"event": "COMMENT", "body": "two"}),
    ));
    sim.wait_idle();
    let before = sim.deliveries().len();
    assert_eq!(before, 2);

    // A pending review: stored, no webhook, hidden from everyone else.
    let pending = post_review(
        &sim,
        &bob,
        pull,
        json!({"body": "draft", "event": "PENDING"}),
    );
    let third = id(&pending);
    assert_eq!(pending.json()["state"], "PENDING");
    assert_eq!(pending.json()["official"], false);
    sim.wait_idle();
    assert_eq!(
        sim.deliveries().len(),
        before,
        "a pending review fires nothing"
    );
    let stored = sim.reviews("acme", "widgets", pull);
    assert_eq!(stored.len(), 3);
    assert_eq!(stored[2]["state"], "PENDING");

    let list = |auth: &str, query: &str| {
        call(
            "GET",
            &format!("{}{query}", reviews_url(&sim, pull)),
            Some(auth),
            None,
        )
    };
    let as_bot = list(&bot(), "");
    assert_eq!(as_bot.status, 200);
    assert_eq!(
        ids(&as_bot),
        [first, second],
        "oldest first, bob's draft hidden"
    );
    assert_eq!(
        as_bot.header("x-total-count"),
        Some("3"),
        "the count includes it"
    );
    assert_eq!(as_bot.header("link"), None);
    assert_eq!(ids(&list(&bob, "")), [first, second, third]);
    let adele = format!("token {}", sim.add_user("adele"));
    sim.set_site_admin("adele", true);
    assert_eq!(ids(&list(&adele, "")), [first, second, third]);
    // Paged only with `page`, and before the pending ones are left out.
    assert_eq!(ids(&list(&bot(), "?limit=1")), [first, second]);
    assert_eq!(ids(&list(&bot(), "?page=2&limit=1")), [second]);
    let short = list(&bot(), "?page=2&limit=2");
    assert_eq!(ids(&short), Vec::<i64>::new(), "only bob's draft was there");
    assert_eq!(short.header("x-total-count"), Some("3"));
    assert_eq!(ids(&list(&bob, "?page=2&limit=2")), [third]);

    // Bob's next review is his draft, submitted: same id and creation time.
    sim.advance_clock(Duration::from_secs(60));
    let submitted = post_review(
        &sim,
        &bob,
        pull,
        json!({"event": "COMMENT", "body": "done"}),
    );
    assert_eq!(id(&submitted), third);
    let s = submitted.json();
    assert_eq!(
        (s["state"].clone(), s["body"].clone()),
        (json!("COMMENT"), json!("done"))
    );
    assert_eq!(s["submitted_at"], stored[2]["submitted_at"]);
    assert_ne!(s["updated_at"], s["submitted_at"]);
    assert_eq!(ids(&list(&bot(), "")), [first, second, third]);
    sim.wait_idle();
    let last = sim.deliveries().pop().unwrap();
    assert_eq!(last.event_type, "pull_request_review_comment");
    assert_eq!(last.json()["review"]["content"], "done");

    // A lost answer: the review landed and its webhook went out, yet the
    // client saw a 500 with Gitea's empty-message body; a look at the
    // listing finds it, and the next review is answered as usual.
    sim.wait_idle();
    let hooks_before = sim.deliveries().len();
    sim.drop_next_review_answer();
    let lost = post_review(
        &sim,
        &bot(),
        pull,
        json!({"event": "COMMENT", "body": "once"}),
    );
    assert_eq!(lost.status, 500);
    assert_eq!(
        lost.json(),
        json!({"message": "", "url": format!("{}/api/swagger", sim.base_url())})
    );
    let landed: Vec<Value> = sim
        .reviews("acme", "widgets", pull)
        .into_iter()
        .filter(|r| r["body"] == "once")
        .collect();
    assert_eq!(landed.len(), 1);
    let found = list(&bot(), "").json();
    assert_eq!(found.as_array().unwrap().last().unwrap()["body"], "once");
    sim.wait_idle();
    let deliveries = sim.deliveries();
    assert_eq!(deliveries.len(), hooks_before + 1);
    assert_eq!(
        deliveries.last().unwrap().json()["review"]["content"],
        "once"
    );
    let logged = sim
        .requests()
        .into_iter()
        .rfind(|r| r.method == "POST")
        .unwrap();
    assert_eq!(logged.status, 500);
    let next = post_review(
        &sim,
        &bot(),
        pull,
        json!({"event": "COMMENT", "body": "twice"}),
    );
    assert_eq!(next.status, 200);
    assert_eq!(sim.reviews("acme", "widgets", pull).len(), 5);
}
