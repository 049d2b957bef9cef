//! The bridge's tools, answered inside the turn that called them: a call
//! is read and checked (a bad one gets an error the model can read), carried
//! out against the task's workflow in one transaction with the decision it
//! is, audited, and answered. The call is authorised by the turn it arrives
//! on: it acts only on that task's own workflow, and only as far as that
//! task's session (a delegated child, or a top-level thread) may.

use crate::actors::session::drive::{DriveError, TaskDrive};
use crate::agent::ToolAnswer;
use crate::domain::workflow::children::{refusal, ChildMode};
use crate::domain::workflow::decide::{decide, WorkflowEvent, WorkflowStep};
use crate::domain::workflow::{GateKind, ToolCall};
use crate::store::audit::{self, Audit};
use crate::store::workflows;

impl TaskDrive {
    /// Answers the call `key` of `tool` with `arguments`. A failure to
    /// answer is logged (the turn then fails or ends on its own); a failure
    /// of the store fails the drive as any other write would.
    pub(in crate::actors::session) async fn answer_tool_call(
        &mut self,
        turn_id: &str,
        key: &str,
        tool: &str,
        arguments: &serde_json::Value,
    ) -> Result<(), DriveError> {
        // Authorised by the session the call arrives on, not by what its
        // thread was offered: a forked child has its parent's tools.
        let child = self.task.session_key.child().is_some();
        let call = ToolCall::parse(tool, arguments).map(|call| (refusal(&call, child), call));
        let answer = match call {
            Err(e) => ToolAnswer {
                success: false,
                text: e.to_string(),
            },
            Ok((Some(why), _)) => ToolAnswer {
                success: false,
                text: why.to_owned(),
            },
            Ok((None, ToolCall::CompleteWorkflow { summary })) => {
                self.complete_workflow(summary).await?
            }
            Ok((None, ToolCall::RequestOwnerGate { question, kind })) => {
                self.request_owner_gate(question, kind).await?
            }
            Ok((None, ToolCall::AssignChild(asked))) => {
                self.delegate(ChildMode::Assign, asked).await?
            }
            Ok((None, ToolCall::HandoffChild(asked))) => {
                self.delegate(ChildMode::Handoff, asked).await?
            }
            Ok((None, ToolCall::RecordResult(report))) => self.record_result(report).await?,
            Ok((None, ToolCall::AckResult { result_id })) => self.ack_result(result_id).await?,
            Ok((None, ToolCall::ListResults)) => self.list_results().await?,
        };
        let task_id = self.task.task_id.clone();
        let (tool_name, success, text, turn) = (
            tool.chars().take(100).collect::<String>(),
            answer.success,
            answer.text.clone(),
            turn_id.to_owned(),
        );
        self.deps
            .store
            .write(move |c| {
                audit::record(
                    c,
                    &Audit::new("workflow.tool_call", "agent")
                        .task(&task_id)
                        .turn(&turn)
                        .meta(serde_json::json!({
                            "tool": tool_name, "success": success, "answer": text,
                        })),
                )
                .map(|_| ())
            })
            .await?;
        if let Err(e) = self.deps.runtime.answer_tool(key, answer).await {
            tracing::warn!(task.id = %self.task.task_id, error = %e, "could not answer the agent's tool call");
        }
        Ok(())
    }

    /// The title a workflow this task opens gets: its message's first line.
    pub(super) fn workflow_title(&self) -> String {
        self.entry
            .as_ref()
            .map(|e| super::title_of(&e.user_text))
            .unwrap_or_default()
    }

    /// `complete_workflow`: the task's workflow ends `completed`, with the
    /// summary, in one transaction with the decision.
    async fn complete_workflow(&mut self, summary: String) -> Result<ToolAnswer, DriveError> {
        let (task, title) = (self.task.clone(), self.workflow_title());
        let limits = self.deps.settings.workflow_limits();
        let step = self
            .deps
            .store
            .write(move |c| {
                let w = workflows::join(c, &task, &title)?;
                let snap = workflows::snapshot(c, &w, limits)?;
                let d = decide(&snap, WorkflowEvent::Complete);
                if let WorkflowStep::End { state, code } = d.step {
                    workflows::end(
                        c,
                        &w,
                        d.expected_version,
                        state,
                        code,
                        Some(&summary),
                        Some(&task.task_id),
                    )?;
                }
                Ok((w.workflow_id, w.state, d.step))
            })
            .await?;
        if matches!(step.2, WorkflowStep::End { .. }) {
            // The task that completes its workflow answers the owner, even
            // a continuation (the bridge posts its last message).
            self.snap.owes_reply = true;
        }
        Ok(match step {
            (id, _, WorkflowStep::End { .. }) => ToolAnswer {
                success: true,
                text: format!(
                    "Workflow {id} is complete; nothing more runs for it. End your turn with \
                     your answer to the owner."
                ),
            },
            (id, state, _) => ToolAnswer {
                success: false,
                text: format!("workflow {id} is {state}: it cannot be completed now"),
            },
        })
    }

    /// `request_owner_gate`: the workflow waits for its owner behind a gate
    /// whose comment asks `question`, in one transaction with the decision.
    async fn request_owner_gate(
        &mut self,
        question: String,
        kind: GateKind,
    ) -> Result<ToolAnswer, DriveError> {
        let (task, title) = (self.task.clone(), self.workflow_title());
        let limits = self.deps.settings.workflow_limits();
        let bot = self.deps.settings.bot_login.clone();
        let (id, state, gate) = self
            .deps
            .store
            .write(move |c| {
                let w = workflows::join(c, &task, &title)?;
                let snap = workflows::snapshot(c, &w, limits)?;
                let d = decide(&snap, WorkflowEvent::GateAsked(kind));
                let gate = match d.step {
                    WorkflowStep::Gate(kind) => Some(super::open_gate(
                        c,
                        &w,
                        d.expected_version,
                        kind,
                        &question,
                        &task,
                        &bot,
                    )?),
                    _ => None,
                };
                Ok((w.workflow_id, w.state, gate))
            })
            .await?;
        Ok(match gate {
            Some(gate) => ToolAnswer {
                success: true,
                text: format!(
                    "Gate {gate} is open: the question is posted in the thread, and workflow \
                     {id} waits until its owner answers there. End your turn now with a short \
                     note of what you did so far."
                ),
            },
            None => ToolAnswer {
                success: false,
                text: format!("workflow {id} is {state}: no gate can be opened now"),
            },
        })
    }
}
