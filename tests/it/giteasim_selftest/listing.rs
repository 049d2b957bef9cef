//! Listings across a repository or a user: the repository's comments
//! (`GET /issues/comments`) and the caller's repositories (`GET
//! /user/repos`), with Gitea's order, filters and paging headers.

use super::*;

fn ids(r: &Resp) -> Vec<i64> {
    r.json()
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_i64().unwrap())
        .collect()
}

#[test]
fn giteasim_lists_a_repositorys_comments_as_gitea_orders_them() {
    let sim = GiteaSim::start();
    sim.create_repo("acme", "widgets");
    sim.create_repo("acme", "gadgets");
    let issue = sim.create_issue("acme", "widgets", "One", "", "bob");
    sim.commit("acme", "widgets", "topic", "x.txt", "x\n", "x");
    let pull = sim.create_pull("acme", "widgets", "Two", "", "bob", "topic", "main");
    let elsewhere = sim.create_issue("acme", "gadgets", "Other", "", "bob");
    let id = |v: Value| v["id"].as_i64().unwrap();

    let a = id(sim.post_comment_as("bob", "acme", "widgets", issue, "a"));
    sim.advance_clock(Duration::from_secs(60));
    let b = id(sim.post_comment_as("bob", "acme", "widgets", pull, "b"));
    sim.add_event_comment("acme", "widgets", issue, "bob");
    sim.post_comment_as("bob", "acme", "gadgets", elsewhere, "not here");
    sim.advance_clock(Duration::from_secs(60));
    let c = id(sim.post_comment_without_webhook("bob", "acme", "widgets", issue, "c"));
    let b_time = sim.comment(b).unwrap()["updated_at"]
        .as_str()
        .unwrap()
        .to_owned();
    sim.advance_clock(Duration::from_secs(60));
    // An edit moves `updated_at`, not the comment's place in the order.
    sim.edit_comment_as("bob", a, "a, edited");
    let edited_at = sim.comment(a).unwrap()["updated_at"]
        .as_str()
        .unwrap()
        .to_owned();

    let list = |query: &str| {
        call(
            "GET",
            &format!(
                "{}/repos/acme/widgets/issues/comments{query}",
                sim.api_url()
            ),
            Some(&bot()),
            None,
        )
    };
    let all = list("");
    assert_eq!(all.status, 200);
    assert_eq!(
        ids(&all),
        [a, b, c],
        "by creation, plain comments of this repository"
    );
    assert_eq!(all.header("x-total-count"), Some("3"));
    assert_eq!(all.header("link"), None, "Gitea sets no Link here");
    assert_eq!(
        all.json()[1]["pull_request_url"],
        format!("{}/acme/widgets/pulls/{pull}", sim.base_url())
    );

    // `since`/`before` on the updated time, both inclusive.
    let since = list(&format!("?since={b_time}"));
    assert_eq!(ids(&since), [a, b, c], "a was edited after b's time");
    assert_eq!(since.header("x-total-count"), Some("3"));
    let since_edit = list(&format!("?since={edited_at}"));
    assert_eq!(ids(&since_edit), [a]);
    let before = list(&format!("?before={b_time}"));
    assert_eq!(ids(&before), [b]);
    let plus = edited_at.replace('Z', "+00:00");
    assert_eq!(
        ids(&list(&format!(
            "?since={}",
            form_urlencoded::byte_serialize(plus.as_bytes()).collect::<String>()
        ))),
        [a]
    );
    let bad = list("?since=yesterday");
    assert_eq!(bad.status, 422);
    assert!(bad.json()["message"]
        .as_str()
        .unwrap()
        .contains("yesterday"));

    // Paged only when `page` is given; `limit` alone changes nothing.
    assert_eq!(ids(&list("?limit=1")), [a, b, c]);
    let page2 = list("?page=2&limit=2");
    assert_eq!(ids(&page2), [c]);
    assert_eq!(page2.header("x-total-count"), Some("3"));
    assert_eq!(page2.header("link"), None);
    assert_eq!(
        ids(&list("?page=1&limit=100")),
        [a, b, c],
        "limit capped at 50"
    );
    assert_eq!(ids(&list("?page=9")), Vec::<i64>::new());

    // Readers may list; strangers get the private repository's 404.
    let rita = format!("token {}", sim.add_user("rita"));
    let url = format!("{}/repos/acme/widgets/issues/comments", sim.api_url());
    assert_eq!(call("GET", &url, Some(&rita), None).status, 404);
    sim.set_permission("acme", "widgets", "rita", Perm::Read);
    assert_eq!(call("GET", &url, Some(&rita), None).status, 200);
}

#[test]
fn giteasim_lists_the_callers_repositories_with_its_permissions() {
    let sim = GiteaSim::start();
    for name in ["delta", "alpha", "charlie", "bravo"] {
        sim.create_repo("acme", name);
    }
    sim.create_repo("other", "hidden");
    sim.set_permission("other", "hidden", BOT, Perm::None);
    sim.set_permission("acme", "bravo", BOT, Perm::Admin);
    sim.set_permission("acme", "charlie", BOT, Perm::Read);
    sim.create_repo(BOT, "own");

    let url = format!("{}/user/repos", sim.api_url());
    let all = call("GET", &url, Some(&bot()), None);
    assert_eq!(all.status, 200);
    let seen: Vec<(String, bool, bool)> = all
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["full_name"].as_str().unwrap().to_owned(),
                r["permissions"]["admin"].as_bool().unwrap(),
                r["permissions"]["push"].as_bool().unwrap(),
            )
        })
        .collect();
    let own = format!("{BOT}/own");
    assert_eq!(
        seen,
        [
            ("acme/alpha".to_owned(), false, true),
            ("acme/bravo".to_owned(), true, true),
            ("acme/charlie".to_owned(), false, false),
            ("acme/delta".to_owned(), false, true),
            (own, true, true),
        ]
    );
    assert_eq!(all.header("x-total-count"), Some("5"));
    assert_eq!(all.header("link"), None);

    let page = call("GET", &format!("{url}?limit=2"), Some(&bot()), None);
    assert_eq!(page.json().as_array().unwrap().len(), 2);
    assert_eq!(
        page.header("link").unwrap(),
        format!("<{url}?limit=2&page=2>; rel=\"next\",<{url}?limit=2&page=3>; rel=\"last\"")
    );
    let last = call("GET", &format!("{url}?limit=2&page=3"), Some(&bot()), None);
    assert_eq!(last.json()[0]["full_name"], format!("{BOT}/own"));
    assert_eq!(
        last.header("link").unwrap(),
        format!("<{url}?limit=2&page=1>; rel=\"first\",<{url}?limit=2&page=2>; rel=\"prev\"")
    );
    assert_eq!(call("GET", &url, None, None).status, 401);
}
