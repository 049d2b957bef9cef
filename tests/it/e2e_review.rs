//! `/review` on real parts: the Gitea simulator sends the webhook of a
//! comment on a pull request, the workspace checks out the pull request's
//! head, the real `codex app-server` runs its own review (`review/start`)
//! against the base branch on a thread of its own, the fake model answers
//! it, and the bridge posts the result as one review of the pull request,
//! found again by its marker.

use crate::e2e::Loop;
use crate::fakemodel::{user_texts, Step};
use serde_json::Value;

/// A pull request `topic` → `main` with one changed file; its number.
fn pull(l: &Loop) -> i64 {
    let sim = l.sim();
    sim.commit(
        "acme",
        "widgets",
        "topic",
        "src/parse.rs",
        "fn parse() { retry(3) }\n",
        "retry the parse",
    );
    sim.create_pull(
        "acme",
        "widgets",
        "Retry the parse",
        "The parser test is flaky.",
        "bob",
        "topic",
        "main",
    )
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

/// The bot's reviews of the pull request (pending ones included).
fn bot_reviews(l: &Loop, number: i64) -> Vec<Value> {
    l.sim()
        .reviews("acme", "widgets", number)
        .into_iter()
        .filter(|r| r["user"]["login"] == crate::support::BOT)
        .collect()
}

#[test]
fn e2e_a_review_runs_codexs_own_review_and_posts_one_pull_request_review() {
    let l = Loop::start();
    let pr = pull(&l);
    let base = l.sim().branch_head("acme", "widgets", "main");
    l.model().push(Step::message(
        "The retry hides the flaky test instead of fixing it.",
    ));
    let review = l.comment("bob", pr, "@ccbot /review");
    l.wait(&review, "succeeded");

    // Codex's review prompt names the merge base with the base branch: the
    // workspace had the pull request's head checked out and `main` fetched.
    let asked = l
        .model()
        .requests()
        .iter()
        .flat_map(user_texts)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(asked.contains("origin/main"), "{asked}");
    assert!(asked.contains(&base), "the merge base {base}: {asked}");

    let found = bot_reviews(&l, pr);
    assert_eq!(found.len(), 1, "{found:?}");
    let body = text(&found[0]["body"]);
    assert!(body.contains("The retry hides the flaky test"), "{body}");
    assert!(body.contains(&format!("task={review}")), "{body}");
    assert_eq!(found[0]["state"], "COMMENT", "neither approves nor blocks");
    let d = l.detail(&review);
    assert_eq!(d["task"]["command"], "review", "{d}");
    assert!(
        l.bot_comments(pr, &format!("task={review}")).is_empty(),
        "the result is a review, not a comment"
    );

    // The review ran on a thread of its own: the next instruction starts
    // the session's thread, and its first turn carries the pull request.
    l.script_reply(pr, "Done.");
    let next = l.comment("bob", pr, "@ccbot make the retry count configurable");
    l.wait(&next, "succeeded");
    let n = l.detail(&next);
    assert_ne!(n["task"]["threadId"], d["task"]["threadId"], "{n}");
    let prompt = l
        .model()
        .requests()
        .iter()
        .map(user_texts)
        .find_map(|t| t.last().filter(|t| t.contains("configurable")).cloned())
        .unwrap_or_default();
    assert!(prompt.contains("Title: Retry the parse"), "{prompt}");
}

#[test]
fn e2e_a_review_whose_post_answer_is_lost_is_found_and_never_posted_twice() {
    let l = Loop::start();
    let pr = pull(&l);
    l.model().push(Step::message("Looks right to me."));
    l.sim().drop_next_review_answer();
    let review = l.comment("bob", pr, "@ccbot /review");
    l.wait(&review, "succeeded");
    let found = bot_reviews(&l, pr);
    assert_eq!(found.len(), 1, "{found:?}");
    let posts = l
        .sim()
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path.ends_with(&format!("/pulls/{pr}/reviews")))
        .count();
    assert_eq!(posts, 1, "one post, then only lookups");
}

#[test]
fn e2e_a_review_on_an_issue_is_answered_once_and_runs_nothing() {
    let l = Loop::start();
    let review = l.comment("bob", l.issue, "@ccbot /review");
    l.wait(&review, "succeeded");
    let db = l.app.db_url.clone();
    l.app.wait_for("the answer posted", || {
        let mut c = crate::support::connect(&db);
        crate::support::count_where(&mut c, "comments", "status IN ('pending', 'posting')") == 0
    });
    let said = l.bot_comments(l.issue, &format!("receipt={review}:answer"));
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        text(&said[0]["body"]).contains("This is an Issue"),
        "{said:?}"
    );
    assert!(l.model().requests().is_empty(), "no review of an issue");
}
