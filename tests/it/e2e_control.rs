//! Comment control on real parts: the Gitea simulator sends the webhooks
//! (comments, edits, deletions), the real `codex app-server` runs the turns
//! against the fake model, and what the model was asked is read from its
//! requests: an edit while queued rewrites the message, a deletion cancels
//! it, an edit after admission changes nothing and is answered once;
//! `/cancel` empties the queue and leaves the running turn; `/reset` starts
//! a new Codex thread that does not carry the old conversation.

use crate::e2e::Loop;
use crate::fakemodel::{user_texts, Step};
use crate::support::{connect, count_where};
use std::time::Duration;

/// Every user text the model was sent, in order.
fn asked(l: &Loop) -> Vec<String> {
    l.model().requests().iter().flat_map(user_texts).collect()
}

fn comment_id(l: &Loop, task: &str) -> i64 {
    l.detail(task)["task"]["commentId"]
        .as_i64()
        .expect("the task's comment")
}

fn wait_posted(l: &Loop) {
    let db = l.app.db_url.clone();
    l.app.wait_for("answers posted", || {
        let mut c = connect(&db);
        count_where(&mut c, "comments", "status IN ('pending', 'posting')") == 0
    });
}

/// Starts a turn whose model stream stays open until it is stopped.
fn long_run(l: &Loop, text: &str) -> String {
    let before = l.model().requests().len();
    l.model().push(Step::Hang);
    let running = l.comment("bob", l.issue, text);
    l.wait(&running, "running");
    // Its model request has taken the held-open step (a stop before that
    // would leave the step to the next turn).
    l.model()
        .wait_for_requests(before + 1, Duration::from_secs(60));
    running
}

#[test]
fn e2e_edits_and_deletions_change_only_what_has_not_reached_codex() {
    let l = Loop::start();
    let running = long_run(&l, "@ccbot a long job");
    let queued = l.comment("bob", l.issue, "@ccbot fix the OLD thing");
    let deleted = l.comment("bob", l.issue, "@ccbot do the DELETED thing");
    // Gitea stamps an edit with the time it was made: a second later.
    l.sim().advance_clock(Duration::from_secs(2));
    l.sim()
        .edit_comment_as("bob", comment_id(&l, &queued), "@ccbot fix the NEW thing");
    l.sim().delete_comment_as("bob", comment_id(&l, &deleted));
    // After admission: the running turn's comment, edited twice.
    let first = comment_id(&l, &running);
    l.sim()
        .edit_comment_as("bob", first, "@ccbot a DIFFERENT long job");
    l.sim().advance_clock(Duration::from_secs(1));
    l.sim()
        .edit_comment_as("bob", first, "@ccbot yet ANOTHER job");
    l.sim().wait_idle();
    l.wait(&deleted, "cancelled");
    let db = l.app.db_url.clone();
    l.app.wait_for("the queued message rewritten", || {
        let mut c = connect(&db);
        count_where(&mut c, "comment_changes", "status = 'pending'") == 0
    });
    assert_eq!(l.detail(&deleted)["task"]["errorCode"], "comment_deleted");

    l.script_reply(l.issue, "Fixed the new thing.");
    let stop = l.comment("bob", l.issue, "@ccbot /stop");
    l.wait(&stop, "succeeded");
    l.wait(&running, "aborted");
    l.wait(&queued, "succeeded");
    let texts = asked(&l).join("\n");
    assert!(texts.contains("fix the NEW thing"), "{texts}");
    for never in ["OLD thing", "DELETED thing", "DIFFERENT", "ANOTHER"] {
        assert!(!texts.contains(never), "{never}: {texts}");
    }
    wait_posted(&l);
    let late = l.bot_comments(l.issue, &format!("receipt={running}:late_edit"));
    assert_eq!(
        late.len(),
        1,
        "one answer however many late edits: {late:?}"
    );
}

#[test]
fn e2e_cancel_empties_the_queue_and_reset_starts_a_new_real_thread() {
    let l = Loop::start();
    l.script_reply(l.issue, "Noted.");
    let first = l.comment("bob", l.issue, "@ccbot remember the word PINEAPPLE");
    l.wait(&first, "succeeded");

    // /cancel: the queued requests end, the running turn goes on.
    let running = long_run(&l, "@ccbot a long job");
    let later = [
        l.comment("bob", l.issue, "@ccbot later one"),
        l.comment("bob", l.issue, "@ccbot later two"),
    ];
    let cancel = l.comment("bob", l.issue, "@ccbot /cancel");
    l.wait(&cancel, "succeeded");
    for t in &later {
        l.wait(t, "cancelled");
        assert_eq!(l.detail(t)["task"]["errorCode"], "cancelled_by_command");
    }
    assert_eq!(l.detail(&running)["task"]["state"], "running");
    let stop = l.comment("bob", l.issue, "@ccbot /stop");
    l.wait(&stop, "succeeded");
    l.wait(&running, "aborted");

    // /reset: the next request runs in a new Codex thread.
    let reset = l.comment("bob", l.issue, "@ccbot /reset");
    l.wait(&reset, "succeeded");
    l.script_reply(l.issue, "A new conversation.");
    let next = l.comment("bob", l.issue, "@ccbot what was the word");
    l.wait(&next, "succeeded");
    let old_thread = l.detail(&first)["task"]["threadId"].clone();
    let new_thread = l.detail(&next)["task"]["threadId"].clone();
    assert!(new_thread.is_string(), "{new_thread}");
    assert_ne!(old_thread, new_thread);
    // The new thread's request carries no turn of the old conversation: the
    // old instruction appears, if at all, only inside the new prompt's
    // context of earlier comments.
    let request = l
        .model()
        .requests()
        .into_iter()
        .map(|r| user_texts(&r))
        .find(|t| t.iter().any(|x| x.contains("what was the word")))
        .expect("the new turn's request");
    for text in &request {
        if text.contains("remember the word PINEAPPLE") {
            assert!(text.contains("what was the word"), "{request:?}");
        }
    }
    for t in &later {
        let d = l.detail(t);
        assert!(
            d["turns"].as_array().is_some_and(|x| x.is_empty()),
            "a cancelled request never reached Codex: {d}"
        );
    }
}

/// The one approval waiting, as the admin API lists it; its id.
fn the_pending_approval(l: &Loop) -> String {
    let pending = l.app.admin_get("/api/gitea-workflow/approvals").json["approvals"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(pending.len(), 1, "{pending:?}");
    pending[0]["approvalId"].as_str().unwrap().to_owned()
}

/// A pending approval of the real turn is announced in the thread with its
/// id; `/approve` by a commenter without `trigger_permission` is refused
/// and decides nothing; `/approve` by one who holds it lets the command run.
#[test]
fn e2e_approve_is_decided_only_by_a_commenter_who_may_trigger_work() {
    let l = Loop::start_with(|b| {
        b.env("CODEX_BRIDGE_APPROVAL_POLICY", "untrusted")
            .env("CODEX_BRIDGE_SANDBOX", "workspace-write")
    });
    l.sim().add_user("carol");
    l.sim()
        .set_permission("acme", "widgets", "carol", crate::giteasim::Perm::Read);
    l.model().push(crate::fakemodel::Step::Reply(vec![
        crate::fakemodel::Item::shell("touch approved.txt"),
    ]));
    l.script_reply(l.issue, "Touched it.");
    let task = l.comment("bob", l.issue, "@ccbot touch a file");
    l.wait(&task, "awaiting_approval");
    let approval = the_pending_approval(&l);
    wait_posted(&l);
    let announced = l.bot_comments(l.issue, &format!("receipt={task}:approval:{approval}"));
    assert_eq!(announced.len(), 1, "{announced:?}");

    let refused = l.comment("carol", l.issue, &format!("@ccbot /approve {approval}"));
    l.wait(&refused, "rejected");
    assert_eq!(l.detail(&task)["task"]["state"], "awaiting_approval");
    let granted = l.comment("bob", l.issue, &format!("@ccbot /approve {approval}"));
    l.wait(&granted, "succeeded");
    l.wait(&task, "succeeded");
    let d = l.detail(&task);
    assert_eq!(d["approvals"][0]["decision"], "accept", "{d}");
    let file = l.app.dir().join(format!(
        "ws/.worktrees/default/acme/widgets/issue-{}/approved.txt",
        l.issue
    ));
    assert!(file.exists(), "the approved command ran");
}

/// `/deny` by the owner declines the real turn's pending command: Codex
/// tells the model, the command never runs, and the turn goes on to its
/// answer.
#[test]
fn e2e_deny_declines_the_real_turns_command_and_it_never_runs() {
    let l = Loop::start_with(|b| {
        b.env("CODEX_BRIDGE_APPROVAL_POLICY", "untrusted")
            .env("CODEX_BRIDGE_SANDBOX", "workspace-write")
    });
    l.model().push(crate::fakemodel::Step::Reply(vec![
        crate::fakemodel::Item::shell("touch denied.txt"),
    ]));
    l.script_reply(l.issue, "Left it alone.");
    let task = l.comment("bob", l.issue, "@ccbot touch a file");
    l.wait(&task, "awaiting_approval");
    let approval = the_pending_approval(&l);
    let denied = l.comment("bob", l.issue, &format!("@ccbot /deny {approval}"));
    l.wait(&denied, "succeeded");
    l.wait(&task, "succeeded");
    let d = l.detail(&task);
    assert_eq!(d["approvals"][0]["decision"], "decline", "{d}");
    let worktree = l.app.dir().join(format!(
        "ws/.worktrees/default/acme/widgets/issue-{}",
        l.issue
    ));
    assert!(
        worktree.join(".git").is_file(),
        "the turn ran in {worktree:?}"
    );
    let file = worktree.join("denied.txt");
    assert!(!file.exists(), "the denied command ran");
}
