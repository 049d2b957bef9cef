//! The Gitea side of receipts: how the "received" receipt is given, what a
//! receipt says, and the calls that post one. The receipts worker that
//! decides which receipt is due lives above the clients (`jobs::receipts`).

use super::client::{GiteaClient, GiteaError};
use super::forge::blocking;
use crate::domain::limits::OUTBOX_CAPACITY;
use crate::domain::TaskId;
use std::time::Instant;

/// How the "received" receipt is given (config `receipt_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReceiptMode {
    /// A comment in the thread (the default).
    Comment,
    /// An `eyes` reaction on the triggering comment.
    Reaction,
}

impl From<crate::config::ReceiptMode> for ReceiptMode {
    fn from(mode: crate::config::ReceiptMode) -> ReceiptMode {
        match mode {
            crate::config::ReceiptMode::Comment => ReceiptMode::Comment,
            crate::config::ReceiptMode::Reaction => ReceiptMode::Reaction,
        }
    }
}

/// Posts `body` on Issue/PR `number` unless a comment of `bot` there already
/// carries `marker` (a crash between an earlier POST and its record never
/// yields a second comment); the comment's id either way. The POST is sent
/// only before `send_by`: the caller's claim on the receipt must outlast
/// it, and a long marker lookup must not push it past.
#[expect(
    clippy::too_many_arguments,
    reason = "where the comment goes, what it says, and until when it may be sent"
)]
pub async fn post_once(
    client: &GiteaClient,
    owner: String,
    repo: String,
    number: i64,
    bot: &str,
    marker: String,
    body: String,
    send_by: Instant,
) -> Result<i64, GiteaError> {
    let (client, bot) = (client.clone(), bot.to_owned());
    blocking(move || {
        if let Some(c) =
            client.find_comment(&owner, &repo, number, &bot, |b| b.contains(&marker))?
        {
            return Ok(c.id);
        }
        if Instant::now() >= send_by {
            return Err(GiteaError::Withheld {
                what: format!("the comment on {owner}/{repo}#{number}"),
                why: "looking for an earlier copy took until its claim ran short".into(),
            });
        }
        client
            .create_comment(&owner, &repo, number, &body)
            .map(|c| c.id)
    })
    .await
}

/// Adds the reaction `content` (`eyes`, …) to comment `comment_id`.
pub async fn add_reaction(
    client: &GiteaClient,
    owner: String,
    repo: String,
    comment_id: i64,
    content: &'static str,
) -> Result<(), GiteaError> {
    let client = client.clone();
    blocking(move || client.add_reaction(&owner, &repo, comment_id, content))
        .await
        .map(|_| ())
}

/// What a receipt says: what happened and where to look. Never a secret,
/// never the comment's text.
pub fn receipt_text(state: &str, task_id: &TaskId, error_code: Option<&str>) -> String {
    let code = error_code.map(|c| format!(" (`{c}`)")).unwrap_or_default();
    let look = format!("An operator can look at task `{task_id}` in the codex-bridge admin view or with `codex-bridge tasks show {task_id}`.");
    match state {
        "received" => format!("👀 Received. I am working on it and will answer in this thread.\n\n<sub>codex-bridge task `{task_id}`</sub>"),
        "failed" if error_code == Some("interrupted_by_restart") => format!("🔁 This task's turn was cut by a restart of the bridge{code}. Its request is not sent again; the work goes on in this thread's workflow, from where the turn stopped. {look}"),
        "failed" if error_code == Some("budget_exceeded") => format!("🧾 This task reached a limit on what the agent may spend{code} and was stopped; its workflow waits for its owner. Mention the bot to go on, or ask an operator to raise the limit named below. Files may have been changed in the workspace; nothing was rolled back. {look}"),
        "failed" if error_code == Some("capacity_denied") => format!("⏳ The model's provider turned this task's turn away for now{code}: a usage or rate limit, or no capacity. This is not a failure of the work: its request is not sent again, and the work goes on in this thread's workflow once the wait shown as its `waitReason` has passed. {look}"),
        "failed" => format!("❌ This task failed{code}. It will not be retried automatically. {look}"),
        "timed_out" => format!("⏱️ This task ran past its time limit and was stopped{code}. Files may have been changed in the workspace; nothing was rolled back. {look}"),
        "aborted" if error_code == Some("superseded") => format!("⏭️ Stopped for a newer request in this thread, which runs next. Files may have been changed in the workspace; nothing was rolled back. {look}"),
        "aborted" => format!("🛑 An operator stopped this task{code}. Files may have been changed in the workspace; nothing was rolled back. {look}"),
        "failed_reply" => format!("⚠️ The work finished, but its answer could not be posted or confirmed in this thread{code}. {look}"),
        "needs_reconciliation" => format!("⏸️ This task is held for an operator{code}: the bridge cannot prove what the agent did, so it will not run it again by itself. New requests on this repository wait until it is reconciled. {look}"),
        "rejected" if error_code == Some("outbox_full") => format!("🚫 Not queued{code}: this thread already has {OUTBOX_CAPACITY} requests waiting or running, the most one Issue or pull request may hold. Ask again once some have finished, or cancel the queued ones with `/cancel`. {look}"),
        "rejected" if error_code == Some("rate_limited") => format!("🚫 Not started{code}: you asked for more work in the last hour than one person may start (`user_triggers_per_hour`). Ask again later; an operator can raise `user_triggers_per_hour` in the configuration. `/stop` and the other commands still work. {look}"),
        "rejected" if error_code == Some("owner_gate_required") => format!("🚫 Not started{code}: this Issue's workflow waits for its owner's answer to the bot's last question, and only the owner may resume it. {look}"),
        "rejected" => format!("🚫 Not started{code}: only people with write access to this repository may ask for work. {look}"),
        other => format!("This task ended `{other}`{code}. {look}"),
    }
}
