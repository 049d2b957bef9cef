//! The whole loop on real parts: the Gitea simulator sends a signed
//! webhook → the server answers 202 → the workspace is cloned over git smart
//! HTTP → the real `codex app-server` runs the turn against the fake model,
//! which is scripted to call the MCP comment tool → the real PyPI `gitea-mcp`
//! (a stdio MCP server) posts the comment, marker included, to the simulator
//! → the verifier finds it → `succeeded`. And every failure path of a reply:
//! missing (one re-post turn, then the REST fallback), unverifiable, and a 2xx
//! that cannot be found afterwards.

use crate::fakemodel::{FakeModel, Item, Step};
use crate::giteasim::{GiteaSim, Perm};
use crate::support::*;
use crate::testapp::*;
use serde_json::{json, Value};
use std::time::Duration;

/// The whole server with the real `codex app-server` and gitea-mcp, and the
/// Issue every loop test works on: `acme/widgets` in the Gitea simulator,
/// bob a writer there and the bot an admin.
pub struct Loop {
    pub app: TestApp,
    pub issue: i64,
}

impl Loop {
    pub fn start() -> Loop {
        Self::start_with(|b| b)
    }

    pub fn start_with(extra: impl FnOnce(TestAppBuilder) -> TestAppBuilder) -> Loop {
        let sim = GiteaSim::start();
        sim.create_repo("acme", "widgets");
        // Gitea lets only repository admins read others' permissions.
        sim.set_permission("acme", "widgets", BOT, Perm::Admin);
        sim.add_user("bob");
        sim.set_permission("acme", "widgets", "bob", Perm::Write);
        let issue = sim.create_issue(
            "acme",
            "widgets",
            "Flaky parser test",
            "It fails 1 in 10.",
            "bob",
        );
        let app = extra(
            TestApp::builder()
                .codex()
                .gitea_mcp()
                .env("CODEX_BRIDGE_SCHEDULER_SWEEP_MS", "100"),
        )
        .start_with_gitea(sim);
        Loop { app, issue }
    }

    pub fn sim(&self) -> &GiteaSim {
        self.app.gitea()
    }

    pub fn model(&self) -> &FakeModel {
        self.app.model()
    }

    /// The model's answer for one turn: the comment tool call (PyPI
    /// gitea-mcp's `add_comment`) with the marker from the prompt, then the
    /// final message.
    pub fn script_reply(&self, number: i64, text: &str) {
        self.model().push(Step::Reply(vec![Item::mcp(
            "gitea",
            "add_comment",
            json!({
                "owner": "acme",
                "repo": "widgets",
                "issue_number": number,
                "body": format!("{text}\n\n{{{{marker}}}}"),
            }),
        )]));
        self.model()
            .push(Step::message(&format!("{text}\n\n{{{{marker}}}}")));
    }

    /// A turn that ends with a final message but posts nothing.
    pub fn script_silent(&self, text: &str) {
        self.model()
            .push(Step::message(&format!("{text}\n\n{{{{marker}}}}")));
    }

    /// `user` comments in the web UI; returns the task the comment made.
    pub fn comment(&self, user: &str, number: i64, text: &str) -> String {
        let comment = self
            .sim()
            .post_comment_as(user, "acme", "widgets", number, text);
        self.app.task_of_comment(&comment)
    }

    pub fn wait(&self, task: &str, state: &str) {
        let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            wait_task_state(&self.app.db_url, task, state, Duration::from_secs(90))
        }));
        if let Err(panic) = waited {
            // The report runs from the longest and least telling part (what
            // Codex was doing) to the shortest and most telling (the task's
            // own audit, then why it failed), so a log cut in its middle
            // still ends with what happened to the task.
            eprintln!(
                "{}",
                crate::codex_report::report(&self.app.codex_home(), self.app.server_pid())
            );
            let logs = self.app.logs();
            let tail: Vec<&str> = logs.lines().rev().take(40).collect();
            eprintln!(
                "server log (last lines, newest first):\n{}",
                tail.join("\n")
            );
            // Whether the turn reached the model, and what it was last asked:
            // a turn that never asked differs from one whose answer was lost.
            let asked = self.model().requests();
            let last: Vec<String> = asked
                .last()
                .map(|r| {
                    crate::fakemodel::user_texts(r)
                        .iter()
                        .rev()
                        .take(2)
                        .map(|t| t.chars().take(200).collect())
                        .collect()
                })
                .unwrap_or_default();
            eprintln!(
                "the model was asked {} time(s); the newest request's last user texts: {last:?}",
                asked.len()
            );
            let d = self.detail(task);
            eprintln!(
                "task detail: {}",
                serde_json::to_string_pretty(&d["audit"]).unwrap()
            );
            let why = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            panic!("{why}");
        }
    }

    pub fn detail(&self, task: &str) -> Value {
        let r = self
            .app
            .admin_get(&format!("/api/gitea-workflow/tasks/{task}"));
        assert_eq!(r.status, 200, "{:?}", r.json);
        r.json
    }

    /// Comments by the bot on the issue carrying `needle`.
    pub fn bot_comments(&self, number: i64, needle: &str) -> Vec<Value> {
        self.sim()
            .comments("acme", "widgets", number)
            .into_iter()
            .filter(|c| {
                c["user"]["login"] == BOT && c["body"].as_str().unwrap_or("").contains(needle)
            })
            .collect()
    }

    /// The bot's receipts on the Issue that say `task` reached `state`.
    pub fn receipts(&self, task: &str, state: &str) -> Vec<Value> {
        self.bot_comments(self.issue, &format!("receipt={task}:status:{state}"))
    }

    /// Waits for the receipts worker, then asserts exactly one receipt says
    /// `task` reached `state`.
    pub fn expect_one_receipt(&self, task: &str, state: &str) {
        self.wait_receipts(task);
        let found = self.receipts(task, state);
        assert_eq!(found.len(), 1, "receipts of {task} for {state}: {found:?}");
    }

    /// Waits until the receipts worker has nothing left to write.
    pub fn wait_receipts(&self, task: &str) {
        let db = self.app.db_url.clone();
        self.app.wait_for("receipts written", || {
            let mut c = connect(&db);
            count_where(
                &mut c,
                "comments",
                &format!(
                    "task_id = '{task}' AND kind = 'receipt' AND status IN ('pending', 'posting')"
                ),
            ) == 0
        });
    }
}

pub fn actions(detail: &Value) -> Vec<String> {
    detail["audit"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn e2e_a_comment_becomes_a_verified_reply_in_the_same_thread() {
    let l = Loop::start();
    // The reply quotes the mention: it must not trigger the bot again.
    l.script_reply(
        l.issue,
        "> @ccbot fix the flaky parser test\n\nThe parser test raced on a shared temp dir; fixed.",
    );
    let task = l.comment("bob", l.issue, "@ccbot fix the flaky parser test");
    l.wait(&task, "succeeded");
    l.wait_receipts(&task);

    // Exactly one reply with the task's marker, by the bot, posted through
    // gitea-mcp (the model's call), and one "received" receipt.
    let replies = l.bot_comments(l.issue, &format!("codex-bridge task={task} turn="));
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert!(replies[0]["body"]
        .as_str()
        .unwrap()
        .contains("shared temp dir"));
    let receipts = l.receipts(&task, "received");
    assert_eq!(receipts.len(), 1, "{receipts:?}");
    // The reply went through the MCP server (python-httpx), not our REST client.
    let posts: Vec<_> = l
        .sim()
        .requests()
        .into_iter()
        .filter(|r| {
            r.method == "POST" && r.path.ends_with(&format!("/issues/{}/comments", l.issue))
        })
        .collect();
    assert_eq!(posts.len(), 2, "one reply and one receipt: {posts:?}");

    // The audit chain: delivery → task → session/thread → turn → comment.
    let d = l.detail(&task);
    let t = &d["task"];
    assert!(t["deliveryKey"].as_str().unwrap().starts_with("default:"));
    assert_eq!(t["sessionKey"], "default:acme/widgets:issue:1");
    let thread = t["threadId"].as_str().unwrap();
    let turn = t["turnId"].as_str().unwrap();
    assert!(!thread.is_empty() && !turn.is_empty());
    let reply = d["comments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == "reply")
        .unwrap();
    assert_eq!(reply["status"], "verified");
    assert_eq!(reply["commentId"], replies[0]["id"]);
    assert_eq!(reply["turnId"], turn);
    let a = actions(&d);
    for want in [
        "webhook.accept",
        "turn.start_intent",
        "turn.started",
        "reply.mcp_call.started",
        "reply.mcp_call.completed",
        "reply.verification",
        "reply.confirmed",
        "receipt.intent",
        "receipt.posted",
    ] {
        assert!(a.contains(&want.to_owned()), "no {want} in {a:?}");
    }
    // Intent before result, for each external write.
    let pos = |x: &str| a.iter().position(|y| y == x).unwrap();
    assert!(pos("reply.mcp_call.started") < pos("reply.mcp_call.completed"));
    assert!(pos("receipt.intent") < pos("receipt.posted"));

    // The bot's own comments came back as webhooks and were ignored: no loop.
    let deliveries = l.sim().deliveries();
    assert_eq!(deliveries.len(), 3, "bob's comment, the receipt, the reply");
    for d in &deliveries[1..] {
        assert_eq!(d.status, Some(200), "{}", d.response_body);
        assert!(d.response_body.contains("ignored"), "{}", d.response_body);
    }
    assert_eq!(count(&mut l.app.db(), "tasks"), 1);
}

#[test]
fn e2e_a_missing_reply_gets_one_retry_turn_that_only_reposts() {
    let l = Loop::start();
    // The first turn forgets to post; the reply-retry turn posts.
    l.script_silent("Done: the fix is in parser.rs.");
    l.script_reply(l.issue, "Done: the fix is in parser.rs.");
    let task = l.comment("bob", l.issue, "@ccbot fix it");
    l.wait(&task, "succeeded");
    let replies = l.bot_comments(l.issue, &format!("codex-bridge task={task}"));
    assert_eq!(replies.len(), 1, "{replies:?}");
    let d = l.detail(&task);
    assert_eq!(d["task"]["replyAttempt"], 1);
    let kinds: Vec<&str> = d["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, vec!["normal", "reply_retry"]);
    // The retry prompt asks only to post the previous final text again.
    let prompts: Vec<String> = l
        .model()
        .requests()
        .iter()
        .flat_map(crate::fakemodel::user_texts)
        .collect();
    let retry = prompts
        .iter()
        .rev()
        .find(|p| p.contains("did not reach"))
        .unwrap();
    assert!(retry.contains("Do not change any files"), "{retry}");
    assert!(retry.contains("Done: the fix is in parser.rs."), "{retry}");
    // Two operations in the ledger, each sent once.
    let ledger = d["ledger"].as_array().unwrap();
    assert_eq!(ledger.len(), 2, "{ledger:?}");
    assert!(ledger.iter().all(|e| e["status"] == "sent"), "{ledger:?}");
}

#[test]
fn e2e_still_missing_after_the_retry_the_rest_fallback_posts_the_stored_text() {
    let l = Loop::start();
    l.script_silent("Answer from the first turn.");
    l.script_silent("I posted it (but did not).");
    let task = l.comment("bob", l.issue, "@ccbot explain the parser");
    l.wait(&task, "succeeded_with_rest_fallback");
    let replies = l.bot_comments(l.issue, &format!("codex-bridge task={task}"));
    assert_eq!(replies.len(), 1, "{replies:?}");
    let body = replies[0]["body"].as_str().unwrap();
    // The stored final text of the task's own turn, with one marker.
    assert!(body.starts_with("Answer from the first turn."), "{body}");
    assert_eq!(body.matches("<!-- codex-bridge task=").count(), 1, "{body}");
    let d = l.detail(&task);
    assert_eq!(d["task"]["errorCode"], "mcp_reply_missing");
    let fallback = d["comments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == "rest_fallback")
        .unwrap();
    assert_eq!(fallback["status"], "verified");
    assert_eq!(fallback["commentId"], replies[0]["id"]);
    // The MCP failure reason is kept.
    assert!(
        fallback["lastError"]
            .as_str()
            .unwrap()
            .contains("no comment call"),
        "{fallback}"
    );
    let a = actions(&d);
    let pos = |x: &str| a.iter().position(|y| y == x).unwrap();
    assert!(pos("reply.rest_fallback.intent") < pos("reply.rest_fallback.posted"));
}

#[test]
fn e2e_an_unknown_verification_writes_nothing_and_ends_failed_reply_with_a_receipt() {
    // The received receipt is a reaction here (it lists no comments), so the
    // listing failures all land on the verifier: its first read and both
    // retries fail, which is an unknown answer. The catch-up lists the
    // repository's comments too (a pass 60 s in, on a slow machine), and so
    // does the prompt's context before the turn: both would spend failures,
    // and both are off here.
    let l = Loop::start_with(|b| {
        b.env("CODEX_BRIDGE_RECEIPT_MODE", "reaction")
            .env("CODEX_BRIDGE_CATCHUP_INTERVAL_SECS", "0")
            .env("CODEX_BRIDGE_PROMPT_CONTEXT_BYTES", "0")
    });
    l.script_reply(l.issue, "Fixed.");
    l.sim().fail_comment_listings(3);
    let task = l.comment("bob", l.issue, "@ccbot fix it");
    l.wait(&task, "failed_reply");
    l.wait_receipts(&task);
    let d = l.detail(&task);
    assert_eq!(d["task"]["errorCode"], "reply_unverifiable");
    // No retry turn and no REST write on an unknown answer.
    assert_eq!(d["task"]["replyAttempt"], 0);
    assert_eq!(d["turns"].as_array().unwrap().len(), 1);
    assert!(!actions(&d).contains(&"reply.rest_fallback.intent".to_owned()));
    // One receipt for the abnormal end, posted once Gitea answers again.
    let r = l.receipts(&task, "failed_reply");
    assert_eq!(r.len(), 1, "{r:?}");
    // In reaction mode, "received" is the bot's eyes on bob's comment, and no
    // received comment was written.
    let trigger = d["task"]["commentId"].as_i64().unwrap();
    assert_eq!(
        l.sim().reactions(trigger),
        vec![(BOT.to_owned(), "eyes".to_owned())]
    );
    assert!(l.receipts(&task, "received").is_empty());
}

#[test]
fn e2e_a_2xx_that_cannot_be_found_afterwards_is_failed_reply() {
    // The received receipt is a reaction here, so the only comment posts are
    // the agent's, its retry's and the REST fallback's: all answered 201 and
    // none stored. The failed_reply receipt comes after the drops are used up.
    let l = Loop::start_with(|b| b.env("CODEX_BRIDGE_RECEIPT_MODE", "reaction"));
    l.script_reply(l.issue, "Fixed.");
    l.script_reply(l.issue, "Fixed.");
    l.sim().drop_next_comments(3);
    let task = l.comment("bob", l.issue, "@ccbot fix it");
    l.wait(&task, "failed_reply");
    let d = l.detail(&task);
    assert_eq!(d["task"]["errorCode"], "rest_fallback_not_found");
    assert_eq!(d["task"]["replyAttempt"], 1);
}

#[test]
fn e2e_a_duplicate_delivery_and_a_gitea_replay_yield_one_task_and_one_reply() {
    let l = Loop::start();
    l.script_reply(l.issue, "Only once.");
    let task = l.comment("bob", l.issue, "@ccbot do it once");
    let first = l.sim().deliveries()[0].clone();
    // The same delivery again (a retry by a proxy), then Gitea's replay.
    let r = l.app.webhook(&first.headers, &first.body);
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert_eq!(r.json["taskId"], task.as_str());
    // Found by its id: the bot's receipt comes back as a delivery of its own,
    // before or after the replay.
    let replay_id = l.sim().redeliver(&first.id);
    l.sim().wait_idle();
    let replay = l
        .sim()
        .deliveries()
        .into_iter()
        .find(|d| d.id == replay_id)
        .unwrap();
    assert_eq!(replay.status, Some(200), "{}", replay.response_body);
    assert!(
        replay.response_body.contains(&task),
        "{}",
        replay.response_body
    );
    l.wait(&task, "succeeded");
    assert_eq!(count(&mut l.app.db(), "tasks"), 1);
    assert_eq!(l.bot_comments(l.issue, "codex-bridge task=").len(), 1);
}

#[test]
fn e2e_a_follow_up_comment_continues_the_same_thread() {
    let l = Loop::start();
    l.script_reply(l.issue, "First answer.");
    let first = l.comment("bob", l.issue, "@ccbot look at the parser");
    l.wait(&first, "succeeded");
    l.script_reply(l.issue, "Second answer.");
    let second = l.comment("bob", l.issue, "@ccbot now the lexer");
    l.wait(&second, "succeeded");
    let a = l.detail(&first);
    let b = l.detail(&second);
    assert_eq!(a["task"]["threadId"], b["task"]["threadId"]);
    assert_ne!(a["task"]["turnId"], b["task"]["turnId"]);
    assert_eq!(l.bot_comments(l.issue, "codex-bridge task=").len(), 2);
}

#[test]
fn e2e_an_unauthorised_commenter_gets_one_rejection_receipt_and_no_turn() {
    let l = Loop::start();
    l.sim().add_user("mallory");
    l.sim()
        .set_permission("acme", "widgets", "mallory", Perm::Read);
    let task = l.comment("mallory", l.issue, "@ccbot delete everything");
    l.wait(&task, "rejected");
    l.wait_receipts(&task);
    let receipts = l.bot_comments(l.issue, &format!("receipt={task}:status:"));
    assert_eq!(receipts.len(), 1, "{receipts:?}");
    assert!(receipts[0]["body"]
        .as_str()
        .unwrap()
        .contains(":status:rejected"));
    assert!(
        l.model().requests().is_empty(),
        "the model was asked something"
    );
    let d = l.detail(&task);
    assert_eq!(d["task"]["errorCode"], "permission_denied");
}

#[test]
fn e2e_a_pull_request_comment_runs_on_the_pr_head_branch() {
    let l = Loop::start();
    l.sim().commit(
        "acme",
        "widgets",
        "fix-parser",
        "parser.rs",
        "fn parse() {}\n",
        "wip",
    );
    let pr = l.sim().create_pull(
        "acme",
        "widgets",
        "Fix parser",
        "",
        "bob",
        "fix-parser",
        "main",
    );
    l.model().push(Step::Reply(vec![Item::shell("ls")]));
    l.script_reply(pr, "Reviewed the parser on the branch.");
    let task = l.comment("bob", pr, "@ccbot review this");
    l.wait(&task, "succeeded");
    // The shell ran in the PR's checkout: the branch's file is there.
    let outputs: Vec<String> = l
        .model()
        .requests()
        .iter()
        .flat_map(crate::fakemodel::tool_outputs)
        .map(|(_, v)| v.to_string())
        .collect();
    assert!(
        outputs.iter().any(|o| o.contains("parser.rs")),
        "{outputs:?}"
    );
    let d = l.detail(&task);
    assert_eq!(
        d["task"]["resourceKey"],
        format!("default:acme/widgets:pull:{pr}")
    );
    assert_eq!(
        l.bot_comments(pr, &format!("codex-bridge task={task}"))
            .len(),
        1
    );
}

#[test]
fn e2e_permission_is_checked_again_when_the_task_starts() {
    let l = Loop::start();
    // Intake paused: the task is accepted and acknowledged, but waits.
    let pause = json!({"requestId": "p-1", "reason": "maintenance"});
    assert_eq!(
        l.app
            .admin_post("/api/gitea-workflow/control/pause", &pause)
            .status,
        200
    );
    let task = l.comment("bob", l.issue, "@ccbot fix it");
    l.expect_one_receipt(&task, "received");
    // Bob loses write access before the task starts.
    l.sim().set_permission("acme", "widgets", "bob", Perm::Read);
    let resume = json!({"requestId": "r-1", "reason": "done"});
    assert_eq!(
        l.app
            .admin_post("/api/gitea-workflow/control/resume", &resume)
            .status,
        200
    );
    l.wait(&task, "rejected");
    l.expect_one_receipt(&task, "rejected");
    assert!(l.model().requests().is_empty(), "no turn ran");
}
