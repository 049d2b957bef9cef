//! The turn's transcript as the drive records it: the prompt (written with
//! the turn's admission), the runtime's items, approvals and their decisions,
//! the thread's token totals. Everything passes the configured
//! [`Redactor`](crate::actors::redact::Redactor) first; the store bounds it.

use super::decide::{Decision, Effect, TurnKind};
use super::drive::TaskDrive;
use super::prompt::turn_prompt;
use crate::agent::transcript::{
    ItemBody, ItemPhase, ItemStatus, Prompt, TokenCounts, TranscriptItem,
};
use crate::store::{transcripts, StoreError};

/// The item id of an approval request in its turn's transcript.
fn approval_item_id(key: &str) -> String {
    format!("approval:{key}")
}

impl TaskDrive {
    /// The prompt item to write with the turn admission `d` records, if it
    /// records one, scrubbed: the prompt this drive sent, or for the task's
    /// own turn admitted from history after a restart, the prompt built
    /// again from the task and its entry (without the Issue/PR context,
    /// which was read from Gitea for the send and is not kept).
    pub(super) fn admission_prompt(&self, d: &Decision) -> Option<TranscriptItem> {
        let kind = d.effects.iter().find_map(|e| match e {
            Effect::RecordAdmission(kind) => Some(*kind),
            _ => None,
        })?;
        let prompt = match (&self.prompt, &self.entry) {
            (Some(p), _) => p.clone(),
            (None, Some(entry)) if kind == TurnKind::Normal => turn_prompt(
                &self.task,
                entry,
                &self.deps.settings.bot_login,
                self.snap.reply_path,
                Vec::new(),
            ),
            _ => return None,
        };
        let mut item = prompt.item();
        self.deps.settings.redactor.item(&mut item);
        Some(item)
    }

    /// Keeps the prompt about to be sent, for the admission's commit.
    pub(super) fn sending(&mut self, prompt: &Prompt) {
        self.prompt = Some(prompt.clone());
    }

    /// An item of the turn, scrubbed. The runtime's copy of our own prompt
    /// (the user message carrying our operation id) is not kept twice.
    pub(super) async fn record_item(
        &mut self,
        turn_id: &str,
        seq: i64,
        phase: ItemPhase,
        mut item: TranscriptItem,
    ) -> Result<(), StoreError> {
        if let ItemBody::UserMessage {
            client_id: Some(id),
            ..
        } = &item.body
        {
            if self.operation_id.as_ref().map(|o| o.as_str()) == Some(id.as_str()) {
                return Ok(());
            }
        }
        self.deps.settings.redactor.item(&mut item);
        let tu = turn_id.to_owned();
        self.deps
            .store
            .write(move |c| transcripts::record_item(c, &tu, seq, phase, &item).map(|_| ()))
            .await
    }

    /// The thread's token totals before the turn and now.
    pub(super) async fn record_tokens(
        &mut self,
        turn_id: &str,
        start: TokenCounts,
        end: TokenCounts,
    ) -> Result<(), StoreError> {
        let Some(thread) = self.turn.thread_id.clone() else {
            return Ok(());
        };
        let tu = turn_id.to_owned();
        self.deps
            .store
            .write(move |c| transcripts::record_token_usage(c, &tu, &thread, start, end))
            .await
    }

    /// The agent asked for an approval: `pending` in the transcript.
    pub(super) async fn record_approval_asked(
        &mut self,
        turn_id: &str,
        seq: i64,
        key: &str,
        kind: &str,
        detail: &serde_json::Value,
    ) -> Result<(), StoreError> {
        let item = TranscriptItem {
            item_id: approval_item_id(key),
            status: ItemStatus::Pending,
            body: ItemBody::Approval {
                request: kind.to_owned(),
                detail: detail.clone(),
                decision: None,
            },
        };
        self.record_item(turn_id, seq, ItemPhase::Started, item)
            .await
    }

    /// The approval's decision, as handed to the runtime.
    pub(super) async fn record_approval_decided(
        &mut self,
        key: &str,
        kind: &str,
        detail: &serde_json::Value,
        accept: bool,
    ) -> Result<(), StoreError> {
        let Some(turn_id) = self.turn.turn_id.clone() else {
            return Ok(());
        };
        let item = TranscriptItem {
            item_id: approval_item_id(key),
            status: if accept {
                ItemStatus::Accepted
            } else {
                ItemStatus::Declined
            },
            body: ItemBody::Approval {
                request: kind.to_owned(),
                detail: detail.clone(),
                decision: Some(if accept { "accept" } else { "decline" }.to_owned()),
            },
        };
        // Its seq was given when it was asked (a completion keeps that one);
        // this one counts only if the request was never recorded.
        let seq = self.turn.last_seq;
        self.record_item(&turn_id, seq, ItemPhase::Completed, item)
            .await
    }
}
