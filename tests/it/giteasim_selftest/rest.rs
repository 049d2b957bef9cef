//! REST codes and bodies of the comment, issue, pull, repository and
//! permission routes.

use super::*;

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
