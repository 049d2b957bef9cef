//! Self-test of the Gitea simulator (`crate::giteasim`): its JSON encoder
//! against the fixtures' bytes, its webhook payloads against the fixtures'
//! shapes and signatures, its REST codes and bodies, faults, git serving, and
//! the real PyPI gitea-mcp posting comments through it.

use crate::giteasim::{go_json, GiteaSim, Perm, J};
use crate::support::{fixture, fixtures_dir, TestHttpServer, BOT, GITEA_TOKEN, SECRET};
use actix_web::{web, HttpRequest, HttpResponse};
use hmac::Mac;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

// ---------------------------------------------------------------------------
// Helpers: an HTTP client and a webhook receiver.
// ---------------------------------------------------------------------------

struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    text: String,
}

impl Resp {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.text))
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One request; `auth` is the whole `Authorization` value.
fn call(method: &str, url: &str, auth: Option<&str>, body: Option<Value>) -> Resp {
    let mut req = ureq::request(method, url).timeout(Duration::from_secs(30));
    if let Some(a) = auth {
        req = req.set("Authorization", a);
    }
    let result = match body {
        Some(b) => req
            .set("Content-Type", "application/json")
            .send_string(&b.to_string()),
        None => req.call(),
    };
    let resp = match result {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("{method} {url}: {e}"),
    };
    let status = resp.status();
    let headers = resp
        .headers_names()
        .into_iter()
        .map(|k| {
            let v = resp.header(&k).unwrap_or_default().to_owned();
            (k, v)
        })
        .collect();
    Resp {
        status,
        headers,
        text: resp.into_string().unwrap(),
    }
}

fn bot() -> String {
    format!("token {GITEA_TOKEN}")
}

#[derive(Default)]
struct Received {
    seen: Mutex<Vec<(actix_web::http::header::HeaderMap, Vec<u8>)>>,
    status: AtomicU16,
}

/// The bridge's side of a webhook: records each request, answers
/// `status` with `ok <n>`.
struct Receiver {
    state: Arc<Received>,
    server: TestHttpServer,
}

impl Receiver {
    fn start() -> Receiver {
        let state = Arc::new(Received::default());
        state.status.store(200, Ordering::SeqCst);
        let data = web::Data::from(state.clone());
        let server = TestHttpServer::start("hook-receiver", move |cfg| {
            cfg.app_data(data.clone()).default_service(web::to(
                |req: HttpRequest, body: web::Bytes, st: web::Data<Received>| async move {
                    let n = {
                        let mut seen = st.seen.lock().unwrap();
                        seen.push((req.headers().clone(), body.to_vec()));
                        seen.len()
                    };
                    let code = st.status.load(Ordering::SeqCst);
                    HttpResponse::build(actix_web::http::StatusCode::from_u16(code).unwrap())
                        .body(format!("ok {n}"))
                },
            ));
        });
        Receiver { state, server }
    }

    fn url(&self) -> String {
        format!("http://{}/api/gitea/webhook", self.server.addr)
    }

    fn seen(&self) -> Vec<(actix_web::http::header::HeaderMap, Vec<u8>)> {
        self.state.seen.lock().unwrap().clone()
    }
}

/// For every object in `j`, its keys in order, by path (`[]`: first element).
fn shapes(j: &J, path: &str, out: &mut BTreeMap<String, Vec<String>>) {
    match j {
        J::Obj(fields) => {
            out.insert(
                path.to_owned(),
                fields.iter().map(|(k, _)| k.clone()).collect(),
            );
            for (k, v) in fields {
                shapes(v, &format!("{path}.{k}"), out);
            }
        }
        J::Arr(items) => {
            if let Some(first) = items.first() {
                shapes(first, &format!("{path}[]"), out);
            }
        }
        _ => {}
    }
}

/// `ours` has, for every object both have, exactly the fixture's keys in the
/// fixture's order, and has every object the fixture has but for those that
/// are empty or null in a fresh repository (labels, milestone, reviewers).
fn assert_same_shape(name: &str, ours: &[u8]) {
    let (theirs, _) = fixture(name);
    let theirs: J = serde_json::from_slice(&theirs).unwrap();
    let ours: J = serde_json::from_slice(ours).unwrap();
    let (mut a, mut b) = (BTreeMap::new(), BTreeMap::new());
    shapes(&theirs, "", &mut a);
    shapes(&ours, "", &mut b);
    for (path, keys) in &a {
        let optional = ["labels", "milestone", "requested_reviewers", "assignee"]
            .iter()
            .any(|o| path.contains(&format!(".{o}")));
        match b.get(path) {
            Some(ours) => assert_eq!(ours, keys, "{name}: keys of {path:?}"),
            None => assert!(optional, "{name}: the simulator's payload lacks {path:?}"),
        }
    }
}

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

// ---------------------------------------------------------------------------
// REST
// ---------------------------------------------------------------------------

#[test]
fn giteasim_rest_answers_with_giteas_codes_and_bodies() {
    let sim = GiteaSim::start();
    sim.create_repo("acme", "widgets");
    let bob = sim.add_user("bob");
    let eve = sim.add_user("eve");
    let reader = sim.add_user("rita");
    sim.set_permission("acme", "widgets", "bob", Perm::Write);
    sim.set_permission("acme", "widgets", "rita", Perm::Read);
    let issue = sim.create_issue("acme", "widgets", "Flaky", "It <flakes>", "bob");
    sim.commit("acme", "widgets", "feature/x", "x.txt", "x\n", "x");
    let pull = sim.create_pull("acme", "widgets", "Fix", "", "bob", "feature/x", "main");
    let api = sim.api_url();
    let swagger = format!("{}/api/swagger", sim.base_url());
    let url = |p: &str| format!("{api}{p}");

    // Version is open; everything else needs a token.
    let v = call("GET", &url("/version"), None, None);
    assert_eq!(v.status, 200);
    assert_eq!(
        v.header("content-type"),
        Some("application/json;charset=utf-8")
    );
    assert!(v.text.ends_with("}\n"));
    assert!(v.json()["version"].as_str().unwrap().starts_with("1."));
    let anon = call("GET", &url("/repos/acme/widgets"), None, None);
    assert_eq!(anon.status, 401);
    assert_eq!(
        anon.json(),
        json!({"message": "token is required", "url": swagger})
    );
    let bad = call("GET", &url("/repos/acme/widgets"), Some("token nope"), None);
    assert_eq!(bad.status, 401);
    assert_eq!(
        bad.json(),
        json!({"message": "user does not exist [uid: 0, name: ]", "url": swagger})
    );

    // Every way of presenting the token.
    let basic = format!(
        "Basic {}",
        base64_encode(format!("ccbot:{GITEA_TOKEN}").as_bytes())
    );
    for auth in [
        bot(),
        format!("Bearer {GITEA_TOKEN}"),
        format!("bearer {GITEA_TOKEN}"),
        format!("TOKEN {GITEA_TOKEN}"),
        basic,
    ] {
        let me = call("GET", &url("/user"), Some(&auth), None);
        assert_eq!(me.status, 200, "{auth}");
        assert_eq!(me.json()["login"], BOT);
    }
    let by_query = call(
        "GET",
        &url(&format!("/user?token={GITEA_TOKEN}")),
        None,
        None,
    );
    assert_eq!(by_query.json()["login"], BOT);
    assert_eq!(sim.token_of("bob"), bob);
    let by_query = call(
        "GET",
        &url(&format!("/user?access_token={bob}")),
        None,
        None,
    );
    assert_eq!(by_query.json()["login"], "bob");

    // Repository: the caller's permissions; private repos hide from strangers.
    let repo = call("GET", &url("/repos/acme/widgets"), Some(&bot()), None).json();
    assert_eq!(repo["full_name"], "acme/widgets");
    assert_eq!(repo["private"], true);
    assert_eq!(repo["default_branch"], "main");
    assert_eq!(repo["clone_url"], sim.clone_url("acme", "widgets"));
    assert_eq!(
        repo["permissions"],
        json!({"admin": false, "push": true, "pull": true})
    );
    assert_eq!(repo["owner"]["login"], "acme");
    let hidden = call(
        "GET",
        &url("/repos/acme/widgets"),
        Some(&format!("token {eve}")),
        None,
    );
    assert_eq!(hidden.status, 404);
    assert_eq!(
        hidden.json(),
        json!({"errors": null, "message": "The target couldn't be found.", "url": swagger})
    );
    assert_eq!(
        call("GET", &url("/repos/acme/nope"), Some(&bot()), None).status,
        404
    );
    assert_eq!(call("GET", &url("/nope"), Some(&bot()), None).status, 404);

    // Issue and pull.
    let i = call(
        "GET",
        &url("/repos/acme/widgets/issues/1"),
        Some(&bot()),
        None,
    );
    assert!(
        i.text.contains(r"It \u003cflakes\u003e"),
        "Go escapes HTML: {}",
        i.text
    );
    let i = i.json();
    assert_eq!(
        (i["number"].clone(), i["title"].clone()),
        (json!(issue), json!("Flaky"))
    );
    assert_eq!(i["pull_request"], Value::Null);
    assert_eq!(i["user"]["login"], "bob");
    let as_issue = call(
        "GET",
        &url("/repos/acme/widgets/issues/2"),
        Some(&bot()),
        None,
    )
    .json();
    assert_eq!(
        as_issue["pull_request"]["html_url"],
        format!("{}/acme/widgets/pulls/2", sim.base_url())
    );
    let p = call(
        "GET",
        &url(&format!("/repos/acme/widgets/pulls/{pull}")),
        Some(&bot()),
        None,
    );
    assert_eq!(p.status, 200);
    let p = p.json();
    assert_eq!(p["head"]["ref"], "feature/x");
    assert_eq!(p["head"]["label"], "feature/x");
    assert_eq!(p["base"]["ref"], "main");
    assert_eq!(p["head"]["repo"]["full_name"], "acme/widgets");
    // Head moves with the branch.
    let new_head = sim.commit("acme", "widgets", "feature/x", "y.txt", "y\n", "y");
    let p = call(
        "GET",
        &url("/repos/acme/widgets/pulls/2"),
        Some(&bot()),
        None,
    )
    .json();
    assert_eq!(p["head"]["sha"], new_head.as_str());
    // A deleted head branch: the PR keeps the last known tip.
    sim.delete_branch("acme", "widgets", "feature/x");
    let p = call(
        "GET",
        &url("/repos/acme/widgets/pulls/2"),
        Some(&bot()),
        None,
    )
    .json();
    assert!(p["head"]["sha"].as_str().unwrap().len() == 40);
    assert_eq!(
        call(
            "GET",
            &url("/repos/acme/widgets/pulls/1"),
            Some(&bot()),
            None
        )
        .status,
        404
    );
    assert_eq!(
        call(
            "GET",
            &url("/repos/acme/widgets/issues/9"),
            Some(&bot()),
            None
        )
        .status,
        404
    );

    // Comments: create, list (all, X-Total-Count, since/before), errors.
    let comments = url("/repos/acme/widgets/issues/1/comments");
    let first = call(
        "POST",
        &comments,
        Some(&bot()),
        Some(json!({"body": "one"})),
    );
    assert_eq!(first.status, 201);
    let first = first.json();
    assert_eq!(first["user"]["login"], BOT);
    assert_eq!(first["body"], "one");
    assert_eq!(first["assets"], json!([]));
    sim.advance_clock(Duration::from_secs(120));
    let second = call(
        "POST",
        &comments,
        Some(&format!("token {bob}")),
        Some(json!({"body": "two"})),
    )
    .json();
    assert!(second["id"].as_i64() > first["id"].as_i64());
    sim.add_event_comment("acme", "widgets", 1, "bob");
    let on_pr = call(
        "POST",
        &url("/repos/acme/widgets/issues/2/comments"),
        Some(&bot()),
        Some(json!({"body": "pr"})),
    );
    assert_eq!(on_pr.status, 201);
    assert_eq!(
        on_pr.json()["pull_request_url"],
        format!("{}/acme/widgets/pulls/2", sim.base_url())
    );
    let list = call("GET", &comments, Some(&bot()), None);
    assert_eq!(list.status, 200);
    assert_eq!(
        list.header("x-total-count"),
        Some("2"),
        "only plain comments"
    );
    let bodies: Vec<Value> = list
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["body"].clone())
        .collect();
    assert_eq!(bodies, vec![json!("one"), json!("two")]);
    let since = second["updated_at"].as_str().unwrap();
    let newer = call(
        "GET",
        &format!("{comments}?since={}", since.replace('+', "%2B")),
        Some(&bot()),
        None,
    );
    assert_eq!(newer.header("x-total-count"), Some("1"));
    assert_eq!(newer.json()[0]["body"], "two");
    let before = first["updated_at"].as_str().unwrap();
    let older = call(
        "GET",
        &format!("{comments}?before={before}"),
        Some(&bot()),
        None,
    );
    assert_eq!(older.json().as_array().unwrap().len(), 1);
    assert_eq!(
        call(
            "GET",
            &format!("{comments}?since=yesterday"),
            Some(&bot()),
            None
        )
        .status,
        422
    );
    assert_eq!(sim.comments("acme", "widgets", 1).len(), 2);

    let empty = call("POST", &comments, Some(&bot()), Some(json!({"body": ""})));
    assert_eq!(empty.status, 422);
    assert_eq!(empty.json()["url"], swagger);
    assert_eq!(
        call("POST", &comments, Some(&bot()), Some(json!({}))).status,
        422
    );
    let missing = call(
        "POST",
        &url("/repos/acme/widgets/issues/99/comments"),
        Some(&bot()),
        Some(json!({"body": "x"})),
    );
    assert_eq!(missing.status, 404);
    assert_eq!(missing.json()["message"], "The target couldn't be found.");
    let stranger = call(
        "POST",
        &comments,
        Some(&format!("token {eve}")),
        Some(json!({"body": "x"})),
    );
    assert_eq!(
        stranger.status, 404,
        "no read access looks like no repository"
    );
    let anon = call("POST", &comments, None, Some(json!({"body": "x"})));
    assert_eq!(anon.status, 401);
    // Readers may comment, except on locked issues.
    let rita = format!("token {reader}");
    assert_eq!(
        call("POST", &comments, Some(&rita), Some(json!({"body": "r"}))).status,
        201
    );
    sim.set_locked("acme", "widgets", 1, true);
    let locked = call("POST", &comments, Some(&rita), Some(json!({"body": "r"})));
    assert_eq!(locked.status, 403);
    assert_eq!(locked.json()["url"], swagger);
    assert_eq!(
        call("POST", &comments, Some(&bot()), Some(json!({"body": "w"}))).status,
        201
    );
    sim.set_locked("acme", "widgets", 1, false);

    // One comment: GET / PATCH / DELETE.
    let one = |id: &Value| url(&format!("/repos/acme/widgets/issues/comments/{id}"));
    let got = call("GET", &one(&first["id"]), Some(&bot()), None);
    assert_eq!(got.status, 200);
    assert_eq!(got.json()["body"], "one");
    let event_id = sim.add_event_comment("acme", "widgets", 1, "bob");
    let event = call("GET", &one(&json!(event_id)), Some(&bot()), None);
    assert_eq!((event.status, event.text.as_str()), (204, ""));
    assert_eq!(
        call(
            "PATCH",
            &one(&json!(event_id)),
            Some(&bot()),
            Some(json!({"body": "x"}))
        )
        .status,
        204
    );
    assert_eq!(
        call("GET", &one(&json!(999_999)), Some(&bot()), None).status,
        404
    );
    // A comment of another repository is not found under this one.
    sim.create_repo("acme", "other");
    let elsewhere = sim.create_issue("acme", "other", "t", "b", "acme");
    let foreign = sim.post_comment_as("acme", "acme", "other", elsewhere, "x");
    assert_eq!(
        call("GET", &one(&foreign["id"]), Some(&bot()), None).status,
        404
    );

    let patched = call(
        "PATCH",
        &one(&first["id"]),
        Some(&bot()),
        Some(json!({"body": "uno"})),
    );
    assert_eq!(patched.status, 200);
    assert_eq!(patched.json()["body"], "uno");
    assert_eq!(
        sim.comment(first["id"].as_i64().unwrap()).unwrap()["body"],
        "uno"
    );
    // Rita (reader) cannot edit the bot's comment: 403, empty body.
    let denied = call(
        "PATCH",
        &one(&first["id"]),
        Some(&rita),
        Some(json!({"body": "x"})),
    );
    assert_eq!((denied.status, denied.text.as_str()), (403, ""));
    assert_eq!(
        call("DELETE", &one(&first["id"]), Some(&rita), None).status,
        403
    );
    let deleted = call("DELETE", &one(&second["id"]), Some(&bot()), None);
    assert_eq!(deleted.status, 204);
    assert_eq!(
        call("GET", &one(&second["id"]), Some(&bot()), None).status,
        404
    );
    assert_eq!(
        call("DELETE", &one(&second["id"]), Some(&bot()), None).status,
        404
    );

    // Reactions.
    let reactions = format!("{}/reactions", one(&first["id"]));
    let r = call(
        "POST",
        &reactions,
        Some(&bot()),
        Some(json!({"content": "eyes"})),
    );
    assert_eq!(r.status, 201);
    assert_eq!(r.json()["content"], "eyes");
    assert_eq!(r.json()["user"]["login"], BOT);
    assert_eq!(
        call(
            "POST",
            &reactions,
            Some(&bot()),
            Some(json!({"content": "eyes"}))
        )
        .status,
        200
    );
    let odd = call(
        "POST",
        &reactions,
        Some(&bot()),
        Some(json!({"content": "honeybee"})),
    );
    assert_eq!(odd.status, 403);
    assert_eq!(
        odd.json()["message"],
        "'honeybee' is not an allowed reaction"
    );
    call(
        "POST",
        &reactions,
        Some(&format!("token {bob}")),
        Some(json!({"content": "+1"})),
    );
    let listed = call("GET", &reactions, Some(&bot()), None).json();
    assert_eq!(listed.as_array().unwrap().len(), 2);
    assert_eq!(
        call(
            "DELETE",
            &reactions,
            Some(&bot()),
            Some(json!({"content": "eyes"}))
        )
        .status,
        200
    );
    assert_eq!(
        sim.reactions(first["id"].as_i64().unwrap()),
        vec![("bob".to_owned(), "+1".to_owned())]
    );

    // Collaborator permission: own always; others need repo or site admin.
    let perm = |who: &str, auth: &str| {
        call(
            "GET",
            &url(&format!(
                "/repos/acme/widgets/collaborators/{who}/permission"
            )),
            Some(auth),
            None,
        )
    };
    let own = perm(BOT, &bot());
    assert_eq!(own.status, 200);
    assert_eq!(own.json()["permission"], "write");
    assert_eq!(own.json()["role_name"], "write");
    assert_eq!(own.json()["user"]["login"], BOT);
    let other = perm("bob", &bot());
    assert_eq!(other.status, 403);
    assert!(other.json()["message"]
        .as_str()
        .unwrap()
        .contains("collaborators can query only their own"));
    sim.set_permission("acme", "widgets", BOT, Perm::Admin);
    assert_eq!(perm("bob", &bot()).json()["permission"], "write");
    assert_eq!(perm("rita", &bot()).json()["permission"], "read");
    assert_eq!(perm("eve", &bot()).json()["permission"], "none");
    let owner = perm("acme", &bot()).json();
    assert_eq!(
        (owner["permission"].clone(), owner["role_name"].clone()),
        (json!("admin"), json!("owner"))
    );
    assert_eq!(perm("ghost", &bot()).status, 404);
    sim.set_site_admin("eve", true);
    assert_eq!(perm("bob", &format!("token {eve}")).status, 200);
}

/// Standard base64 with padding (test side of basic auth).
fn base64_encode(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Faults and the request log
// ---------------------------------------------------------------------------

#[test]
fn giteasim_faults_and_request_log() {
    let sim = GiteaSim::start();
    let rx = Receiver::start();
    sim.set_webhook(&rx.url(), SECRET);
    sim.create_repo("acme", "widgets");
    let issue = sim.create_issue("acme", "widgets", "t", "b", "acme");
    let api = sim.api_url();
    let comments = format!("{api}/repos/acme/widgets/issues/{issue}/comments");
    let swagger = format!("{}/api/swagger", sim.base_url());

    // Any request → 500 with Gitea's empty-message body.
    sim.fail_next(1);
    let failed = call("GET", &format!("{api}/version"), None, None);
    assert_eq!(failed.status, 500);
    assert_eq!(failed.json(), json!({"message": "", "url": swagger}));
    assert_eq!(
        call("GET", &format!("{api}/version"), None, None).status,
        200
    );

    // Matching method + path prefix only.
    sim.fail_next_matching(2, Some("POST"), "/api/v1/repos/acme/widgets/issues/");
    assert_eq!(call("GET", &comments, Some(&bot()), None).status, 200);
    assert_eq!(
        call("POST", &comments, Some(&bot()), Some(json!({"body": "a"}))).status,
        500
    );
    assert_eq!(
        call("POST", &comments, Some(&bot()), Some(json!({"body": "b"}))).status,
        500
    );
    assert_eq!(
        call("POST", &comments, Some(&bot()), Some(json!({"body": "c"}))).status,
        201
    );
    assert_eq!(sim.comments("acme", "widgets", issue).len(), 1);

    // Listing failures.
    sim.fail_comment_listings(1);
    assert_eq!(call("GET", &comments, Some(&bot()), None).status, 500);
    assert_eq!(call("GET", &comments, Some(&bot()), None).status, 200);

    // Accepted but never stored: 201, yet absent from GET and listings, no webhook.
    sim.wait_idle();
    let hooks_before = sim.deliveries().len();
    sim.drop_next_comments(1);
    let ghost = call(
        "POST",
        &comments,
        Some(&bot()),
        Some(json!({"body": "ghost"})),
    );
    assert_eq!(ghost.status, 201);
    assert_eq!(ghost.json()["body"], "ghost");
    let ghost_url = format!(
        "{api}/repos/acme/widgets/issues/comments/{}",
        ghost.json()["id"]
    );
    assert_eq!(call("GET", &ghost_url, Some(&bot()), None).status, 404);
    assert_eq!(
        call("GET", &comments, Some(&bot()), None).header("x-total-count"),
        Some("1")
    );
    sim.wait_idle();
    assert_eq!(sim.deliveries().len(), hooks_before);
    assert_eq!(
        call(
            "POST",
            &comments,
            Some(&bot()),
            Some(json!({"body": "real"}))
        )
        .status,
        201
    );
    assert_eq!(sim.comments("acme", "widgets", issue).len(), 2);

    // Permission denied for one user.
    sim.deny_comments_for(BOT, true);
    let blocked = call("POST", &comments, Some(&bot()), Some(json!({"body": "x"})));
    assert_eq!(blocked.status, 403);
    assert_eq!(blocked.json()["message"], "user is blocked");
    sim.deny_comments_for(BOT, false);
    assert_eq!(
        call("POST", &comments, Some(&bot()), Some(json!({"body": "x"}))).status,
        201
    );

    // Slow answers: only the matching request waits.
    sim.delay_next_matching(
        1,
        Some("GET"),
        "/api/v1/version",
        Duration::from_millis(1200),
    );
    let t = std::time::Instant::now();
    call("GET", &format!("{api}/version"), None, None);
    assert!(t.elapsed() >= Duration::from_millis(1200));
    let t = std::time::Instant::now();
    call("GET", &format!("{api}/version"), None, None);
    assert!(t.elapsed() < Duration::from_millis(900));
    sim.set_delay(Duration::from_millis(300));
    let t = std::time::Instant::now();
    call("GET", &format!("{api}/version"), None, None);
    assert!(t.elapsed() >= Duration::from_millis(300));
    sim.set_delay(Duration::ZERO);

    // The log: method, path, query, auth header, body, status.
    call(
        "GET",
        &format!("{comments}?since=2020-01-01T00:00:00Z"),
        Some(&bot()),
        None,
    );
    let log = sim.requests();
    let post = log
        .iter()
        .find(|r| r.method == "POST" && r.body.contains("\"real\""))
        .unwrap();
    assert_eq!(
        post.path,
        format!("/api/v1/repos/acme/widgets/issues/{issue}/comments")
    );
    assert_eq!(post.authorization.as_deref(), Some(bot().as_str()));
    assert_eq!(post.status, 201);
    let last = log.last().unwrap();
    assert_eq!(
        (last.method.as_str(), last.query.as_str()),
        ("GET", "since=2020-01-01T00:00:00Z")
    );
    assert_eq!(log.iter().filter(|r| r.status == 500).count(), 4);
}

// ---------------------------------------------------------------------------
// Git
// ---------------------------------------------------------------------------

#[test]
fn giteasim_serves_git_to_readers_only() {
    let sim = GiteaSim::start();
    sim.create_repo("acme", "widgets");
    let eve = sim.add_user("eve");
    let work = tempfile::tempdir().unwrap();
    let clone = |auth: Option<&str>, dest: &str| {
        let mut cmd = Command::new("git");
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", work.path())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_TERMINAL_PROMPT", "0")
            .current_dir(work.path());
        if let Some(a) = auth {
            cmd.args(["-c", &format!("http.extraHeader=Authorization: {a}")]);
        }
        cmd.args(["clone", "--quiet", &sim.clone_url("acme", "widgets"), dest])
            .output()
            .unwrap()
    };
    let ok = clone(Some(&bot()), "a");
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(work.path().join("a/README.md")).unwrap(),
        "# widgets\n"
    );
    assert!(!clone(None, "b").status.success());
    assert_eq!(sim.requests().last().unwrap().status, 401);
    assert!(!clone(Some(&format!("token {eve}")), "c").status.success());
    assert_eq!(sim.requests().last().unwrap().status, 404);
    sim.set_permission("acme", "widgets", "eve", Perm::Read);
    let basic = format!("Basic {}", base64_encode(format!("eve:{eve}").as_bytes()));
    assert!(clone(Some(&basic), "d").status.success());
    let fetch = sim
        .requests()
        .into_iter()
        .rfind(|r| r.method == "POST")
        .unwrap();
    assert!(fetch.path.ends_with("/git-upload-pack"));
    assert!(fetch
        .headers
        .iter()
        .any(|(k, v)| k == "user-agent" && v.starts_with("git/")));
    // Public repositories: anonymous reads work; pushes need write access.
    sim.set_private("acme", "widgets", false);
    assert!(clone(None, "e").status.success());
    assert!(sim.repo_path("acme", "widgets").join("HEAD").is_file());
    let git = |auth: Option<&str>, args: &[&str]| {
        let mut cmd = Command::new("git");
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", work.path())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .current_dir(work.path().join("e"));
        if let Some(a) = auth {
            cmd.args(["-c", &format!("http.extraHeader=Authorization: {a}")]);
        }
        cmd.args(args).output().unwrap()
    };
    assert!(
        git(None, &["commit", "--allow-empty", "-q", "-m", "pushed"])
            .status
            .success()
    );
    assert!(!git(None, &["push", "-q", "origin", "HEAD:main"])
        .status
        .success());
    assert_eq!(sim.requests().last().unwrap().status, 401);
    let eve_auth = format!("token {eve}");
    assert!(
        !git(Some(&eve_auth), &["push", "-q", "origin", "HEAD:main"])
            .status
            .success()
    );
    assert_eq!(sim.requests().last().unwrap().status, 403);
    let pushed = git(Some(&bot()), &["push", "-q", "origin", "HEAD:main"]);
    assert!(
        pushed.status.success(),
        "{}",
        String::from_utf8_lossy(&pushed.stderr)
    );
    let head = git(None, &["rev-parse", "HEAD"]);
    assert_eq!(
        sim.branch_head("acme", "widgets", "main"),
        String::from_utf8_lossy(&head.stdout).trim()
    );
}

// ---------------------------------------------------------------------------
// The PyPI gitea-mcp against the simulator
// ---------------------------------------------------------------------------

/// A stdio MCP client: newline-delimited JSON-RPC.
struct Mcp {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: mpsc::Receiver<String>,
    stderr: Arc<Mutex<String>>,
}

impl Mcp {
    fn send(&mut self, msg: Value) {
        writeln!(self.stdin, "{msg}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn request(&mut self, id: i64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| {
                    panic!(
                        "gitea-mcp did not answer {method} within 60 s; its stderr:\n{}",
                        self.stderr.lock().unwrap()
                    )
                });
            let Ok(msg) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if msg["id"] == json!(id) {
                assert!(msg.get("error").is_none(), "{method}: {msg}");
                return msg["result"].clone();
            }
        }
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_gitea_mcp(sim: &GiteaSim, home: &std::path::Path) -> Mcp {
    let bin = crate::testapp::gitea_mcp_bin();
    let mut child = Command::new(&bin)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("GITEA_URL", sim.base_url())
        .env("GITEA_TOKEN", GITEA_TOKEN)
        .env("GITEA_MAX_RETRIES", "0")
        .env("GITEA_TIMEOUT", "20")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot run {bin}: {e} (reinstall with scripts/ensure-gitea-mcp)")
        });
    let stdin = child.stdin.take().unwrap();
    let (tx, lines) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let stderr = Arc::new(Mutex::new(String::new()));
    let sink = stderr.clone();
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            sink.lock().unwrap().push_str(&format!("{line}\n"));
        }
    });
    Mcp {
        child,
        stdin,
        lines,
        stderr,
    }
}

#[test]
fn giteasim_pypi_gitea_mcp_posts_comments_as_the_bot() {
    let sim = GiteaSim::start();
    let rx = Receiver::start();
    sim.set_webhook(&rx.url(), SECRET);
    sim.create_repo("acme", "widgets");
    let issue = sim.create_issue("acme", "widgets", "Flaky", "b", "alice");
    sim.commit("acme", "widgets", "feature/x", "x.txt", "x\n", "x");
    let pull = sim.create_pull("acme", "widgets", "Fix", "", "alice", "feature/x", "main");
    let home = tempfile::tempdir().unwrap();
    let mut mcp = spawn_gitea_mcp(&sim, home.path());

    let init = mcp.request(
        1,
        "initialize",
        json!({
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "codex-bridge-tests", "version": "0"}
        }),
    );
    assert!(init["capabilities"]["tools"].is_object(), "{init}");
    mcp.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let tools = mcp.request(2, "tools/list", json!({}));
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"add_comment") && names.contains(&"add_comment_on_pr"),
        "{names:?}"
    );

    let body =
        "Found it: the backoff uses the wall clock.\n\n<!-- codex-bridge task=t1 turn=u1 -->";
    let result = mcp.request(
        3,
        "tools/call",
        json!({"name": "add_comment", "arguments": {
            "owner": "acme", "repo": "widgets", "issue_number": issue, "body": body}}),
    );
    assert_ne!(result["isError"], true, "{result}");
    let stored = sim.comments("acme", "widgets", issue);
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0]["user"]["login"], BOT);
    assert_eq!(
        stored[0]["body"], body,
        "the body arrives byte for byte (LF kept)"
    );
    let text = result["content"][0]["text"].as_str().unwrap_or_default();
    assert!(
        text.contains(&stored[0]["id"].to_string()),
        "the tool returns the comment: {result}"
    );

    let pr_body = "PR note <!-- codex-bridge task=t2 turn=u1 -->";
    let result = mcp.request(
        4,
        "tools/call",
        json!({"name": "add_comment_on_pr", "arguments": {
            "owner": "acme", "repo": "widgets", "pull_number": pull, "body": pr_body}}),
    );
    assert_ne!(result["isError"], true, "{result}");
    let stored = sim.comments("acme", "widgets", pull);
    assert_eq!(
        (stored.len(), stored[0]["body"].as_str()),
        (1, Some(pr_body))
    );
    assert_eq!(stored[0]["user"]["login"], BOT);

    // The requests carried the bot's token as Gitea's `token` scheme.
    let posts: Vec<_> = sim
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST")
        .collect();
    assert_eq!(posts.len(), 2);
    for r in &posts {
        assert_eq!(r.authorization.as_deref(), Some(bot().as_str()));
    }
    assert_eq!(
        posts[1].path,
        format!("/api/v1/repos/acme/widgets/issues/{pull}/comments")
    );

    // Gitea fires webhooks for the bot's own API comments.
    sim.wait_idle();
    let senders: Vec<Value> = sim
        .deliveries()
        .iter()
        .map(|d| d.json()["sender"]["login"].clone())
        .collect();
    assert_eq!(senders, vec![json!(BOT), json!(BOT)]);

    // A 404 becomes a tool error result, not a protocol error.
    let missing = mcp.request(
        5,
        "tools/call",
        json!({"name": "add_comment", "arguments": {
            "owner": "acme", "repo": "widgets", "issue_number": 99, "body": "x"}}),
    );
    assert_eq!(missing["isError"], true, "{missing}");
    assert!(
        missing["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("404"),
        "{missing}"
    );
    // So does a 500 from a faulty server.
    sim.fail_next_matching(1, Some("POST"), "/api/v1/repos/");
    let failed = mcp.request(
        6,
        "tools/call",
        json!({"name": "add_comment", "arguments": {
            "owner": "acme", "repo": "widgets", "issue_number": issue, "body": "x"}}),
    );
    assert_eq!(failed["isError"], true, "{failed}");
    assert_eq!(sim.comments("acme", "widgets", issue).len(), 1);
}
