//! The encoder against the fixtures' bytes; webhook payloads, headers,
//! signatures, replay and delivery faults.

use super::*;

// ---------------------------------------------------------------------------
// Encoder
// ---------------------------------------------------------------------------

#[test]
fn giteasim_go_encoder_reproduces_every_fixture_byte_for_byte() {
    let mut checked = 0;
    for entry in std::fs::read_dir(fixtures_dir()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".json") || name.ends_with(".headers.json") || name == "manifest.json" {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        let parsed: J = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(
            String::from_utf8(go_json(&parsed, true)).unwrap(),
            String::from_utf8(bytes).unwrap(),
            "{name}"
        );
        checked += 1;
    }
    assert!(checked >= 7, "only {checked} fixtures found");
    let escaped = go_json(&J::from("<a> & \u{2028}é\n\"x\""), false);
    assert_eq!(
        String::from_utf8(escaped).unwrap(),
        r#""\u003ca\u003e \u0026 \u2028é\n\"x\"""#
    );
}

// ---------------------------------------------------------------------------
// Webhooks
// ---------------------------------------------------------------------------

#[test]
fn giteasim_webhooks_match_gitea_shapes_signatures_and_replay() {
    let sim = GiteaSim::start();
    let rx = Receiver::start();
    sim.set_webhook(&rx.url(), SECRET);
    sim.create_repo("acme", "widgets");
    sim.add_user("bob");
    sim.set_permission("acme", "widgets", "bob", Perm::Write);
    let issue = sim.create_issue("acme", "widgets", "Flaky", "It flakes", "alice");
    let head = sim.commit("acme", "widgets", "feature/x", "x.txt", "x\n", "x");
    let pull = sim.create_pull(
        "acme",
        "widgets",
        "Fix",
        "Fixes #1",
        "carol",
        "feature/x",
        "main",
    );
    assert_eq!((issue, pull), (1, 2), "issues and PRs share one index");

    let c1 = sim.post_comment_as("bob", "acme", "widgets", issue, "@ccbot look\nplease");
    assert_eq!(c1["body"], "@ccbot look\r\nplease", "the web UI sends CRLF");
    let c2 = sim.post_comment_as("alice", "acme", "widgets", pull, "@ccbot run the tests");
    let c1_id = c1["id"].as_i64().unwrap();
    sim.edit_comment_as("bob", c1_id, "@ccbot look again");
    // The bot's own reply through the API fires a webhook too (loop risk).
    let reply = call(
        "POST",
        &format!(
            "{}/repos/acme/widgets/issues/{issue}/comments",
            sim.api_url()
        ),
        Some(&bot()),
        Some(json!({"body": "Done <!-- codex-bridge task=t1 -->"})),
    );
    assert_eq!(reply.status, 201, "{}", reply.text);
    sim.delete_comment_as("alice", c1_id);
    sim.wait_idle();
    assert_eq!(sim.deliveries().len(), 5);

    let deliveries = sim.deliveries();
    let kinds: Vec<(&str, &str, String)> = deliveries
        .iter()
        .map(|d| {
            (
                d.event.as_str(),
                d.event_type.as_str(),
                d.json()["action"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("issue_comment", "issue_comment", "created".to_owned()),
            (
                "issue_comment",
                "pull_request_comment",
                "created".to_owned()
            ),
            ("issue_comment", "issue_comment", "edited".to_owned()),
            ("issue_comment", "issue_comment", "created".to_owned()),
            ("issue_comment", "issue_comment", "deleted".to_owned()),
        ]
    );
    for (i, d) in deliveries.iter().enumerate() {
        assert!(d.delivered);
        assert_eq!(d.status, Some(200), "{d:?}");
        assert_eq!(d.response_body, format!("ok {}", i + 1));
        assert_eq!(uuid::Uuid::parse_str(&d.id).unwrap().get_version_num(), 4);
    }

    // Bodies: the fixtures' shapes, byte-exact pretty JSON without trailing newline.
    assert_same_shape("issue_comment.created.issue.mention", &deliveries[0].body);
    assert_same_shape("issue_comment.created.pr.mention", &deliveries[1].body);
    assert_same_shape("issue_comment.edited.issue", &deliveries[2].body);
    assert_same_shape("issue_comment.created.issue.by_bot", &deliveries[3].body);
    assert_same_shape("issue_comment.deleted.issue", &deliveries[4].body);
    for d in &deliveries {
        let reencoded = go_json(&serde_json::from_slice::<J>(&d.body).unwrap(), true);
        assert_eq!(reencoded, d.body);
        assert!(d.body.starts_with(b"{\n  \"action\": ") && !d.body.ends_with(b"\n"));
    }
    let created = deliveries[0].json();
    assert_eq!(created["comment"]["user"]["login"], "bob");
    assert_eq!(created["sender"]["login"], "bob");
    assert_eq!(created["is_pull"], false);
    assert_eq!(created["issue"]["pull_request"], Value::Null);
    assert!(created.get("pull_request").is_none());
    assert_eq!(created["repository"]["full_name"], "acme/widgets");
    assert_eq!(created["repository"]["private"], true);
    let base = sim.base_url();
    assert_eq!(
        created["comment"]["html_url"],
        format!("{base}/acme/widgets/issues/1#issuecomment-{c1_id}")
    );
    assert_eq!(
        created["comment"]["issue_url"],
        format!("{base}/acme/widgets/issues/1")
    );
    assert_eq!(created["comment"]["pull_request_url"], "");
    let on_pr = deliveries[1].json();
    assert_eq!(on_pr["is_pull"], true);
    assert_eq!(on_pr["comment"]["id"], c2["id"]);
    assert_eq!(on_pr["comment"]["issue_url"], "");
    assert_eq!(on_pr["issue"]["pull_request"]["merged"], false);
    assert_eq!(on_pr["pull_request"]["head"]["ref"], "feature/x");
    assert_eq!(on_pr["pull_request"]["head"]["sha"], head.as_str());
    assert_eq!(on_pr["pull_request"]["base"]["ref"], "main");
    assert_eq!(
        on_pr["pull_request"]["base"]["sha"],
        sim.branch_head("acme", "widgets", "main").as_str()
    );
    let edited = deliveries[2].json();
    assert_eq!(edited["changes"]["body"]["from"], "@ccbot look\r\nplease");
    assert_eq!(edited["comment"]["body"], "@ccbot look again");
    let by_bot = deliveries[3].json();
    assert_eq!(by_bot["sender"]["login"], BOT);
    assert_eq!(
        by_bot["comment"]["body"],
        "Done <!-- codex-bridge task=t1 -->"
    );
    assert!(String::from_utf8_lossy(&deliveries[3].body).contains(r"Done \u003c!-- codex-bridge"));
    let deleted = deliveries[4].json();
    assert_eq!(deleted["sender"]["login"], "alice");
    assert_eq!(deleted["comment"]["user"]["login"], "bob");
    assert_eq!(deleted["comment"]["body"], "@ccbot look again");

    // Headers: the fixture's set, signatures the bridge's verifier accepts.
    let seen = rx.seen();
    assert_eq!(seen.len(), 5);
    let (_, fixture_headers) = fixture("issue_comment.created.pr.mention");
    let mut expected: Vec<String> = fixture_headers
        .iter()
        .map(|(k, _)| k.to_ascii_lowercase())
        .collect();
    expected.sort();
    for (i, (headers, body)) in seen.iter().enumerate() {
        assert_eq!(body, &deliveries[i].body);
        let mut names: Vec<String> = headers
            .keys()
            .map(|k| k.as_str().to_owned())
            // ureq always adds `Accept: */*`, which Go's client does not send.
            .filter(|k| k != "host" && k != "content-length" && k != "accept")
            .collect();
        names.sort();
        assert_eq!(names, expected);
        codex_bridge::webhook::verify::verify(SECRET.as_bytes(), body, headers).unwrap();
        let h = |n: &str| headers.get(n).unwrap().to_str().unwrap().to_owned();
        assert_eq!(h("x-gitea-delivery"), deliveries[i].id);
        assert_eq!(h("x-github-delivery"), deliveries[i].id);
        assert_eq!(h("x-gitea-event-type"), deliveries[i].event_type);
        assert_eq!(h("user-agent"), "Go-http-client/1.1");
        let mut mac = <hmac::Hmac<sha1::Sha1> as Mac>::new_from_slice(SECRET.as_bytes()).unwrap();
        mac.update(body);
        assert_eq!(
            h("x-hub-signature"),
            format!("sha1={}", hex::encode(mac.finalize().into_bytes()))
        );
        assert_eq!(
            h("x-hub-signature-256"),
            format!("sha256={}", h("x-gitea-signature"))
        );
    }
    // The fixture's own headers check out with the same verifier.
    let (fbody, fheaders) = fixture("issue_comment.created.pr.mention");
    let mut map = actix_web::http::header::HeaderMap::new();
    for (k, v) in fheaders {
        map.insert(k.parse().unwrap(), v.parse().unwrap());
    }
    codex_bridge::webhook::verify::verify(SECRET.as_bytes(), &fbody, &map).unwrap();

    // Replay: same bytes and signature, new delivery id.
    let replay = sim.redeliver(&deliveries[1].id);
    sim.wait_idle();
    assert_ne!(replay, deliveries[1].id);
    let seen = rx.seen();
    let (headers, body) = seen.last().unwrap();
    assert_eq!(body, &deliveries[1].body);
    assert_eq!(headers.get("x-gitea-delivery").unwrap(), replay.as_str());
    assert_eq!(
        headers.get("x-gitea-signature").unwrap(),
        seen[1].0.get("x-gitea-signature").unwrap()
    );

    // A failed delivery is recorded and not retried.
    rx.state.status.store(500, Ordering::SeqCst);
    sim.post_comment_as("bob", "acme", "widgets", issue, "again");
    sim.wait_idle();
    let last = sim.deliveries().pop().unwrap();
    assert_eq!(last.status, Some(500));
    assert_eq!(last.response_body, "ok 7");
    // Not retried: every delivery (a retry would be one) goes through the
    // one queue and worker that `wait_idle` waited for to be empty and idle.
    assert_eq!(rx.seen().len(), 7);
    rx.state.status.store(200, Ordering::SeqCst);

    // Auto-delivery off: tasks wait until delivered by hand.
    sim.set_auto_deliver(false);
    sim.post_comment_as("bob", "acme", "widgets", issue, "held back");
    sim.wait_idle();
    let held = sim.deliveries().pop().unwrap();
    assert!(!held.delivered && held.status.is_none());
    assert_eq!(rx.seen().len(), 7);
    sim.deliver_pending();
    sim.wait_idle();
    assert_eq!(sim.deliveries().pop().unwrap().status, Some(200));
    assert_eq!(rx.seen().len(), 8);
    sim.set_auto_deliver(true);

    // Edits and deletions through the API fire webhooks too, sent by the caller.
    let reply_id = reply.json()["id"].clone();
    let one = format!(
        "{}/repos/acme/widgets/issues/comments/{reply_id}",
        sim.api_url()
    );
    let patched = call(
        "PATCH",
        &one,
        Some(&bot()),
        Some(json!({"body": "Done, edited"})),
    );
    assert_eq!(patched.status, 200);
    assert_eq!(call("DELETE", &one, Some(&bot()), None).status, 204);
    sim.wait_idle();
    let tail: Vec<Value> = sim
        .deliveries()
        .iter()
        .rev()
        .take(2)
        .map(|d| d.json())
        .collect();
    assert_eq!(tail[1]["action"], "edited");
    assert_eq!(
        tail[1]["changes"]["body"]["from"],
        "Done <!-- codex-bridge task=t1 -->"
    );
    assert_eq!(tail[1]["sender"]["login"], BOT);
    assert_eq!(tail[0]["action"], "deleted");
    assert_eq!(tail[0]["comment"]["body"], "Done, edited");

    // `issues` events, when subscribed: the fixture's shape.
    sim.set_issue_events(true);
    let opened = sim.create_issue("acme", "widgets", "New", "@ccbot hi", "bob");
    sim.wait_idle();
    let d = sim.deliveries().pop().unwrap();
    assert_eq!(
        (d.event.as_str(), d.event_type.as_str()),
        ("issues", "issues")
    );
    assert_same_shape("issues.opened", &d.body);
    assert_eq!(d.json()["number"], opened);
    assert_eq!(d.json()["issue"]["user"]["email"], "bob@example.com");
    assert_eq!(d.status, Some(200));

    // Nobody listening: a transport error, no status.
    sim.set_webhook("http://127.0.0.1:9/hook", SECRET);
    sim.post_comment_as("bob", "acme", "widgets", issue, "into the void");
    sim.wait_idle();
    let lost = sim.deliveries().pop().unwrap();
    assert!(
        lost.delivered && lost.status.is_none() && lost.error.is_some(),
        "{lost:?}"
    );
}
