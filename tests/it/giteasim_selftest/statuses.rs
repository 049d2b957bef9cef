//! Commit statuses: who may set them, their shape, listing, the combined
//! state.

use super::*;

#[test]
fn giteasim_commit_statuses_as_gitea_keeps_them() {
    let sim = GiteaSim::start();
    let first = sim.create_repo("acme", "widgets");
    let head = sim.commit("acme", "widgets", "topic", "x.txt", "x\n", "x");
    let rita = format!("token {}", sim.add_user("rita"));
    sim.set_permission("acme", "widgets", "rita", Perm::Read);
    let api = format!("{}/repos/acme/widgets", sim.api_url());
    let swagger = format!("{}/api/swagger", sim.base_url());
    let status = |state: &str, context: &str| {
        json!({
            "state": state,
            "target_url": " https://bridge.example/tasks/t1 ",
            "description": "  running  ",
            "context": context,
        })
    };

    // Setting one needs write; reading, read.
    let refused = call(
        "POST",
        &format!("{api}/statuses/{head}"),
        Some(&rita),
        Some(status("pending", "codex-bridge")),
    );
    assert_eq!(refused.status, 403);
    assert_eq!(
        refused.json(),
        json!({"message": "user should have a permission to write to a repo", "url": swagger})
    );
    let set = call(
        "POST",
        &format!("{api}/statuses/{head}"),
        Some(&bot()),
        Some(status("pending", "codex-bridge")),
    );
    assert_eq!(set.status, 201, "{}", set.text);
    let keys: Vec<String> = match serde_json::from_str::<J>(&set.text).unwrap() {
        J::Obj(fields) => fields.into_iter().map(|(k, _)| k).collect(),
        _ => panic!("not an object"),
    };
    assert_eq!(
        keys,
        [
            "id",
            "status",
            "target_url",
            "description",
            "url",
            "context",
            "creator",
            "created_at",
            "updated_at"
        ]
    );
    let s = set.json();
    assert_eq!(s["id"], 1, "the per-commit index");
    assert_eq!(s["status"], "pending", "the state is under `status`");
    assert_eq!(s["target_url"], "https://bridge.example/tasks/t1");
    assert_eq!(s["description"], "running");
    assert_eq!(s["url"], format!("{api}/statuses/{head}"));
    assert_eq!(s["creator"]["login"], BOT);
    assert_eq!(s["created_at"], s["updated_at"]);

    // A short id and a branch name reach the same commit; an unknown one is
    // Gitea's bare 500; an unknown state word is kept as sent.
    let short = &head[..10];
    let by_short = call(
        "POST",
        &format!("{api}/statuses/{short}"),
        Some(&bot()),
        Some(status("success", "codex-bridge")),
    );
    assert_eq!(
        (by_short.status, by_short.json()["id"].clone()),
        (201, json!(2))
    );
    assert_eq!(by_short.json()["url"], format!("{api}/statuses/{head}"));
    let by_branch = call(
        "POST",
        &format!("{api}/statuses/main"),
        Some(&bot()),
        Some(status("success", "ci")),
    );
    assert_eq!(by_branch.json()["url"], format!("{api}/statuses/{first}"));
    let unknown = call(
        "POST",
        &format!("{api}/statuses/{}", "0".repeat(40)),
        Some(&bot()),
        Some(status("success", "ci")),
    );
    assert_eq!(unknown.status, 500);
    assert_eq!(unknown.json()["message"], "");
    let odd = call(
        "POST",
        &format!("{api}/statuses/{head}"),
        Some(&bot()),
        Some(status("bogus", "odd")),
    );
    assert_eq!(
        (odd.status, odd.json()["status"].clone()),
        (201, json!("bogus"))
    );
    let lint = call(
        "POST",
        &format!("{api}/statuses/{head}"),
        Some(&bot()),
        Some(status("failure", "lint")),
    );
    assert_eq!(lint.json()["id"], 4);

    // The test's view: oldest first.
    let kept: Vec<(i64, String)> = sim
        .statuses("acme", "widgets", &head)
        .iter()
        .map(|s| {
            (
                s["id"].as_i64().unwrap(),
                s["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        kept,
        [
            (1, "pending".to_owned()),
            (2, "success".to_owned()),
            (3, "bogus".to_owned()),
            (4, "failure".to_owned())
        ]
    );

    // Listing: newest first, by sha or by ref, paged with Link.
    let listed = call("GET", &format!("{api}/statuses/{head}"), Some(&rita), None);
    assert_eq!(listed.status, 200);
    let ids: Vec<i64> = listed
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [4, 3, 2, 1]);
    assert_eq!(listed.header("x-total-count"), Some("4"));
    assert_eq!(listed.header("link"), None, "one page, no links");
    let by_ref = call(
        "GET",
        &format!("{api}/commits/{short}/statuses"),
        Some(&rita),
        None,
    );
    assert_eq!(by_ref.json(), listed.json());
    let paged = call(
        "GET",
        &format!("{api}/statuses/{head}?limit=1&page=2&sort=oldest"),
        Some(&rita),
        None,
    );
    assert_eq!(paged.json()[0]["id"], 2);
    let link = format!("{api}/statuses/{head}");
    assert_eq!(
        paged.header("link").unwrap(),
        format!(
            "<{link}?limit=1&page=3&sort=oldest>; rel=\"next\",\
             <{link}?limit=1&page=4&sort=oldest>; rel=\"last\",\
             <{link}?limit=1&page=1&sort=oldest>; rel=\"first\",\
             <{link}?limit=1&page=1&sort=oldest>; rel=\"prev\""
        )
    );
    assert_eq!(
        paged.header("access-control-expose-headers"),
        Some("Link, X-Total-Count")
    );
    let failures = call(
        "GET",
        &format!("{api}/statuses/{head}?state=failure"),
        Some(&rita),
        None,
    );
    assert_eq!(failures.json().as_array().unwrap().len(), 1);

    // Combined: the latest per context, the worst wins, `error` shown as
    // `failure`, unknown words never win.
    let combined = |reference: &str| {
        call(
            "GET",
            &format!("{api}/commits/{reference}/status"),
            Some(&rita),
            None,
        )
        .json()
    };
    let c = combined(&head);
    assert_eq!(c["state"], "failure");
    assert_eq!(c["sha"], head.as_str());
    assert_eq!(c["total_count"], 3);
    let contexts: Vec<&str> = c["statuses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["context"].as_str().unwrap())
        .collect();
    assert_eq!(contexts, ["lint", "odd", "codex-bridge"]);
    assert_eq!(
        c["statuses"][2]["status"], "success",
        "the latest of its context"
    );
    assert_eq!(c["repository"]["full_name"], "acme/widgets");
    assert_eq!(
        c["repository"]["permissions"]["push"], false,
        "the reader's view"
    );
    for state in ["success", "error"] {
        call(
            "POST",
            &format!("{api}/statuses/{head}"),
            Some(&bot()),
            Some(status(state, "lint")),
        );
        let expected = if state == "error" {
            "failure"
        } else {
            "success"
        };
        assert_eq!(combined("topic")["state"], expected, "after lint {state}");
    }
    let none = combined(&"f".repeat(40));
    assert_eq!(
        none,
        json!({"state": "", "sha": "", "total_count": 0, "statuses": null,
               "repository": null, "commit_url": "", "url": ""})
    );
}
