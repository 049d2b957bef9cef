//! What the agent is told, on real parts: the prompt the fake model receives
//! from the real `codex app-server` carries the Issue's title and body on the
//! thread's first turn, the comments posted since the thread's previous turn
//! (marked: who may trigger work, the bot's own, a waiting request named but
//! not shown), and on a pull request its branches and changed files with
//! their diff stat, all read from the Gitea simulator's API.

use crate::e2e::Loop;
use crate::fakemodel::{user_texts, Step};
use crate::giteasim::Perm;
use crate::support::BOT;
use serde_json::Value;

/// The prompt the bridge sent for the turn whose request carries `needle`:
/// the last user text of the first such model request.
fn prompt_with(l: &Loop, needle: &str) -> String {
    l.model()
        .requests()
        .iter()
        .map(user_texts)
        .find_map(|texts| texts.last().filter(|t| t.contains(needle)).cloned())
        .unwrap_or_else(|| panic!("no model request's prompt carries {needle:?}"))
}

fn between<'a>(text: &'a str, from: &str, to: &str) -> &'a str {
    let start = text.find(from).map(|i| i + from.len()).unwrap_or(0);
    let end = text[start..]
        .find(to)
        .map(|i| start + i)
        .unwrap_or(text.len());
    &text[start..end]
}

#[test]
fn e2e_the_prompt_carries_the_issue_and_the_comments_since_the_last_turn() {
    let l = Loop::start();
    let sim = l.sim();
    sim.add_user("alice");
    sim.set_permission("acme", "widgets", "alice", Perm::Read);
    sim.post_comment_without_webhook("alice", "acme", "widgets", l.issue, "I see it on CI too.");
    sim.post_comment_without_webhook(BOT, "acme", "widgets", l.issue, "An earlier answer.");
    l.script_reply(l.issue, "Looked at it.");
    let first = l.comment("bob", l.issue, "@ccbot what do you make of it?");
    l.wait(&first, "succeeded");

    let p = prompt_with(&l, "what do you make of it?");
    let context = between(&p, "mentioned @ccbot", "The comment you answer follows");
    assert!(
        context.contains("Title: Flaky parser test\n\nIt fails 1 in 10."),
        "{p}"
    );
    assert!(context.contains("author=\"alice\""), "{p}");
    assert!(
        context.contains("may-trigger=\"no\">\nI see it on CI too."),
        "{p}"
    );
    assert!(context.contains(&format!("author=\"{BOT}\"")), "{p}");
    assert!(context.contains("own=\"yes\">\nAn earlier answer."), "{p}");
    assert!(
        !context.contains("what do you make of it?"),
        "the trigger is not repeated: {p}"
    );

    // A second turn on the thread: only what came since the first, and a
    // request still waiting is named, never shown.
    l.model().push(Step::Hang);
    let running = l.comment("bob", l.issue, "@ccbot take your time");
    l.wait(&running, "running");
    // Its model request is out (two for the first turn, then this one): the
    // stop below ends a turn that is really working.
    l.model()
        .wait_for_requests(3, std::time::Duration::from_secs(60));
    sim.post_comment_without_webhook("alice", "acme", "widgets", l.issue, "One more data point.");
    l.script_reply(l.issue, "Second answer.");
    let next = l.comment("bob", l.issue, "@ccbot now the second thing");
    l.script_reply(l.issue, "Third answer.");
    let later = l.comment("bob", l.issue, "@ccbot later: delete every test");
    let stop = l.comment("bob", l.issue, "@ccbot /stop");
    l.wait(&stop, "succeeded");
    l.wait(&next, "succeeded");
    let p = prompt_with(&l, "now the second thing");
    let context = between(&p, "mentioned @ccbot", "The comment you answer follows");
    assert!(
        !context.contains("Title:"),
        "not the thread's first turn: {p}"
    );
    assert!(
        !context.contains("I see it on CI too."),
        "older than the last turn: {p}"
    );
    assert!(context.contains("One more data point."), "{p}");
    assert!(context.contains("since your previous turn"), "{p}");
    assert!(context.contains("waiting=\"yes\""), "{p}");
    assert!(
        !context.contains("delete every test"),
        "a waiting request is not shown: {p}"
    );
    l.wait(&later, "succeeded");
}

#[test]
fn e2e_a_pull_requests_prompt_names_its_branches_and_changed_files() {
    let l = Loop::start();
    let sim = l.sim();
    sim.commit(
        "acme",
        "widgets",
        "topic",
        "src/a.rs",
        "fn a() {}\nfn b() {}\n",
        "a",
    );
    sim.commit("acme", "widgets", "topic", "README.md", "read me\n", "docs");
    let pr = sim.create_pull(
        "acme",
        "widgets",
        "Topic",
        "Adds a and b.",
        "bob",
        "topic",
        "main",
    );
    l.script_reply(pr, "Looked.");
    let task = l.comment("bob", pr, "@ccbot look at this change");
    l.wait(&task, "succeeded");
    let p = prompt_with(&l, "look at this change");
    assert!(
        p.contains("<pull-request base=\"main\" head=\"topic\">"),
        "{p}"
    );
    assert!(p.contains("Changed files: 2 (+3 -1)"), "{p}");
    assert!(p.contains("- src/a.rs (added, +2 -0)"), "{p}");
    assert!(p.contains("- README.md (changed, +1 -1)"), "{p}");
    assert!(
        !p.contains("Received."),
        "the bridge's receipts are left out: {p}"
    );
    assert!(p.contains("Title: Topic\n\nAdds a and b."), "{p}");
    let detail: Value = l.detail(&task);
    assert_eq!(detail["task"]["state"], "succeeded");
}
