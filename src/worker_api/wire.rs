//! The messages themselves. JSON, camelCase fields, tagged enums with
//! snake_case tags, so a message names what it is.

use crate::domain::states::CapacityDenial;
use crate::domain::trust::ExecutionPolicy;
use serde::{Deserialize, Serialize};

/// `POST /leases`: the worker asks for a repository's work.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseRequest {
    /// The [`PROTOCOL_VERSION`](super::PROTOCOL_VERSION) the worker speaks.
    pub protocol: u32,
    /// `owner/name`, one of the repositories the worker was given.
    pub repository: String,
}

/// A lease the server granted (or renewed): the worker runs the
/// repository's calls until `expiresAt`, and renews it before then.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseGrant {
    pub lease_id: String,
    pub repository: String,
    /// Grows with every new holder of the repository's worker lease.
    pub fence: i64,
    /// RFC 3339, by the server's clock.
    pub expires_at: String,
    /// How long a renewal extends it, so the worker renews well before.
    pub ttl_secs: u64,
}

/// One call of the agent runtime, handed to the worker holding the lease.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Call {
    /// Unique per server process; the answer names it.
    pub call_id: String,
    pub lease_id: String,
    pub body: CallBody,
}

/// `GET /leases/{leaseId}/calls?waitMs=`: what is waiting (empty when the
/// wait ran out with nothing to do).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallBatch {
    pub calls: Vec<Call>,
}

/// What the thread runs under (see `agent::ThreadTerms`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Terms {
    pub policy: ExecutionPolicy,
    pub base_instructions: Option<String>,
}

/// One earlier exchange of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Exchange {
    pub asked: String,
    pub answered: String,
}

/// The calls, one per method of the agent runtime. A `cwd` is a folder on
/// the worker's disk: the worker prepares its workspaces under its own
/// `workspace_root`, and the server only hands back what it was told.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CallBody {
    #[serde(rename_all = "camelCase")]
    EnsureThread {
        session_key: String,
        thread_id: Option<String>,
        fork_from: Option<String>,
        cwd: String,
        terms: Terms,
        #[serde(default)]
        history: Vec<Exchange>,
    },
    #[serde(rename_all = "camelCase")]
    StartTurn {
        thread_id: String,
        operation_id: String,
        text: String,
        cwd: String,
        terms: Terms,
        /// The server's attempt the turn belongs to: the worker journals it
        /// with the turn, so an operator can reconcile that attempt there.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempt: Option<AttemptIdentity>,
    },
    #[serde(rename_all = "camelCase")]
    StartReview {
        thread_id: String,
        base_branch: String,
        cwd: String,
        terms: Terms,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempt: Option<AttemptIdentity>,
    },
    #[serde(rename_all = "camelCase")]
    Interrupt {
        thread_id: String,
        turn_id: String,
    },
    #[serde(rename_all = "camelCase")]
    SteerTurn {
        thread_id: String,
        expected_turn_id: String,
        operation_id: String,
        text: String,
    },
    #[serde(rename_all = "camelCase")]
    RevertThread {
        thread_id: String,
        before_turn_id: String,
    },
    #[serde(rename_all = "camelCase")]
    DecideApproval {
        key: String,
        accept: bool,
    },
    #[serde(rename_all = "camelCase")]
    AnswerTool {
        key: String,
        success: bool,
        text: String,
    },
    Reset,
    /// The session's worktree made ready for its next turn, under the
    /// worker's own `workspace_root`, cloned with the worker's own token.
    #[serde(rename_all = "camelCase")]
    PrepareSession {
        /// The server's `instance_id`: the first folder under the root, so
        /// both ends name one layout.
        instance: String,
        owner: String,
        name: String,
        clone_url: Option<String>,
        checkout: Checkout,
        worktree: Worktree,
        /// What the session's last turn left, to check the worktree against.
        recorded: Option<Tree>,
    },
    /// An empty folder of the session's own, for a turn that needs nothing
    /// of the repository.
    #[serde(rename_all = "camelCase")]
    Scratch {
        instance: String,
        owner: String,
        name: String,
        worktree: Worktree,
    },
    #[serde(rename_all = "camelCase")]
    LookupTurn {
        thread_id: String,
        operation_id: String,
    },
}

impl CallBody {
    /// The call's kind as its tag names it, for logs.
    pub fn kind(&self) -> &'static str {
        match self {
            CallBody::EnsureThread { .. } => "ensure_thread",
            CallBody::StartTurn { .. } => "start_turn",
            CallBody::StartReview { .. } => "start_review",
            CallBody::Interrupt { .. } => "interrupt",
            CallBody::SteerTurn { .. } => "steer_turn",
            CallBody::RevertThread { .. } => "revert_thread",
            CallBody::DecideApproval { .. } => "decide_approval",
            CallBody::AnswerTool { .. } => "answer_tool",
            CallBody::Reset => "reset",
            CallBody::PrepareSession { .. } => "prepare_session",
            CallBody::Scratch { .. } => "scratch",
            CallBody::LookupTurn { .. } => "lookup_turn",
        }
    }
}

/// One execution attempt of a server task, as reconciliation names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttemptIdentity {
    pub task_id: String,
    pub attempt_id: String,
}

/// What a task needs checked out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Checkout {
    DefaultBranch {
        name: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    PullRequest {
        number: i64,
        head_ref: String,
    },
}

/// Which session's worktree: the resource's kind (`issue`, `pull`) and
/// number, and a delegated child's number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Worktree {
    pub kind: String,
    pub number: i64,
    pub child: Option<i64>,
}

/// A worktree's state: its head commit and its tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tree {
    pub head: String,
    pub tree: String,
}

/// `POST /leases/{leaseId}/answers`: how a call went on the worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Answer {
    pub call_id: String,
    pub outcome: Outcome,
}

/// A call's result, split at the admission boundary as the runtime's
/// errors are: `unavailable` (nothing reached Codex: safe to retry),
/// `uncertain` (it may have), `refused` (nothing was sent, and retrying
/// cannot help).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Outcome {
    Ok {
        value: Value,
    },
    Unavailable {
        message: String,
    },
    Uncertain {
        message: String,
    },
    Refused {
        message: String,
    },
    /// A workspace call failed: `disposition` (`cannot_name`,
    /// `needs_operator`, `transient`, `permanent`) says where the task
    /// goes, `code` is the worker's error code.
    WorkspaceFailed {
        disposition: String,
        code: String,
        message: String,
    },
}

/// What a call that succeeded gives back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Value {
    /// `ensure_thread`.
    #[serde(rename_all = "camelCase")]
    Thread { thread_id: String },
    /// `start_turn`, `start_review`, `steer_turn`: the turn that took it.
    /// A started turn's events follow as batches on the call's id.
    #[serde(rename_all = "camelCase")]
    Turn {
        turn_id: String,
        /// The worker that took the call, as the server authenticated it
        /// (set by the server on the answer it received; what a worker
        /// writes here is replaced).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        worker_id: Option<String>,
    },
    /// `interrupt`, `revert_thread`, `decide_approval`, `answer_tool`, `reset`.
    Done,
    /// `lookup_turn`.
    Lookup { lookup: Lookup },
    /// `prepare_session`, `scratch`: the folder relative to the workspace
    /// root, and the commit checked out.
    Workspace { cwd: String, head: Option<String> },
}

/// What the thread's history says about one operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Lookup {
    Missing,
    #[serde(rename_all = "camelCase")]
    Running {
        turn_id: String,
    },
    #[serde(rename_all = "camelCase")]
    Completed {
        turn_id: String,
        final_text: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    Failed {
        turn_id: String,
        error: String,
        denial: Option<CapacityDenial>,
    },
    #[serde(rename_all = "camelCase")]
    Interrupted {
        turn_id: String,
    },
}

impl Outcome {
    /// Names `worker_id` as the worker that took a turn this outcome
    /// answers; any other outcome stays as it is.
    pub fn taken_by(&mut self, worker_id: &str) {
        if let Outcome::Ok {
            value: Value::Turn { worker_id: w, .. },
        } = self
        {
            *w = Some(worker_id.to_owned());
        }
    }
}

/// `POST /leases/{leaseId}/events`: events of the turn the `start_turn` (or
/// `start_review`) call `stream` started, in order. `first` is the place of
/// the batch's first event in the stream (from 0): a batch sent again
/// (after a lost answer or a restart) is harmless, as the server keeps
/// only the events past those it has. Places, not `seq`s: one
/// notification may make several events with the same `seq`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventBatch {
    pub stream: String,
    pub first: u64,
    pub events: Vec<Event>,
}

/// One event of a turn (see `agent::TurnEvent`). Transcript items travel
/// as JSON the server reads with its own transcript code.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    Progress {
        seq: i64,
        kind: String,
    },
    #[serde(rename_all = "camelCase")]
    Delivered {
        seq: i64,
        client_id: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    Completed {
        seq: i64,
        final_text: Option<String>,
    },
    ToolCall {
        seq: i64,
        phase: String,
        server: String,
        tool: String,
        arguments: serde_json::Value,
        status: String,
        error: Option<String>,
    },
    Failed {
        seq: i64,
        error: String,
        denial: Option<CapacityDenial>,
    },
    Interrupted {
        seq: i64,
    },
    Idle {
        seq: i64,
    },
    Active {
        seq: i64,
    },
    ToolRequested {
        seq: i64,
        key: String,
        tool: String,
        arguments: serde_json::Value,
    },
    ApprovalRequested {
        seq: i64,
        key: String,
        kind: String,
        detail: serde_json::Value,
    },
    /// An event of a kind this end does not carry over the wire (a
    /// transcript item, token counts): it keeps its place in the order.
    Other {
        seq: i64,
    },
}

impl Event {
    pub fn seq(&self) -> i64 {
        match self {
            Event::Progress { seq, .. }
            | Event::Delivered { seq, .. }
            | Event::Completed { seq, .. }
            | Event::ToolCall { seq, .. }
            | Event::Failed { seq, .. }
            | Event::Interrupted { seq }
            | Event::Idle { seq }
            | Event::Active { seq }
            | Event::ToolRequested { seq, .. }
            | Event::ApprovalRequested { seq, .. }
            | Event::Other { seq } => *seq,
        }
    }

    /// Whether the turn ends with it: nothing of the stream follows.
    pub fn ends_turn(&self) -> bool {
        matches!(
            self,
            Event::Completed { .. } | Event::Failed { .. } | Event::Interrupted { .. }
        )
    }
}

/// `POST /reconcile`: an operator on the worker's machine settles one
/// attempt the worker's journal holds as uncertain (sent to Codex, no end
/// recorded), having checked that no turn of it still runs there. The
/// server moves the task out of `needs_reconciliation` as its own
/// reconcile control does, and answers with the audit event. Never runs
/// anything again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReconcileRequest {
    pub task_id: String,
    pub attempt_id: String,
    /// `failed` or `succeeded`.
    pub verdict: String,
    /// Must be `true`: refused otherwise.
    #[serde(default)]
    pub confirm_no_active_turn: bool,
    /// Who decided, on the worker's machine (audited).
    pub operator: String,
    pub reason: String,
}

/// The error body of every refusal: a stable snake_case `code` the worker
/// acts on (`worker_revoked`: stop; `lease_lost`: lease again) and a message
/// for the operator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    pub code: String,
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::policy::{ApprovalPolicy, RepoPolicy, Sandbox};
    use crate::domain::trust::{ExecutionPolicy, Subject};

    fn terms() -> Terms {
        let repo = RepoPolicy {
            approval_policy: ApprovalPolicy::OnRequest,
            sandbox: Sandbox::WorkspaceWrite,
            turn_timeout: std::time::Duration::from_secs(60),
        };
        Terms {
            policy: ExecutionPolicy::decide(&repo, false, &Subject::Issue),
            base_instructions: Some("be brief".into()),
        }
    }

    fn round_trip<T>(value: &T) -> serde_json::Value
    where
        T: Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
    {
        let json = serde_json::to_value(value).unwrap();
        let back: T = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(&back, value);
        json
    }

    #[test]
    fn every_call_round_trips_and_names_its_kind() {
        let bodies = vec![
            CallBody::EnsureThread {
                session_key: "acme/widgets#issue/1".into(),
                thread_id: None,
                fork_from: Some("t0".into()),
                cwd: "acme/widgets/issue-1".into(),
                terms: terms(),
                history: vec![Exchange {
                    asked: "q".into(),
                    answered: "a".into(),
                }],
            },
            CallBody::StartTurn {
                thread_id: "t1".into(),
                operation_id: "op-1".into(),
                text: "hello".into(),
                cwd: "x".into(),
                terms: terms(),
                attempt: Some(AttemptIdentity {
                    task_id: "task-1".into(),
                    attempt_id: "att-1".into(),
                }),
            },
            CallBody::StartReview {
                thread_id: "t1".into(),
                base_branch: "main".into(),
                cwd: "x".into(),
                terms: terms(),
                attempt: None,
            },
            CallBody::Interrupt {
                thread_id: "t1".into(),
                turn_id: "u1".into(),
            },
            CallBody::SteerTurn {
                thread_id: "t1".into(),
                expected_turn_id: "u1".into(),
                operation_id: "op-2".into(),
                text: "more".into(),
            },
            CallBody::RevertThread {
                thread_id: "t1".into(),
                before_turn_id: "u1".into(),
            },
            CallBody::DecideApproval {
                key: "k".into(),
                accept: true,
            },
            CallBody::AnswerTool {
                key: "k".into(),
                success: false,
                text: "no".into(),
            },
            CallBody::Reset,
            CallBody::PrepareSession {
                instance: "default".into(),
                owner: "acme".into(),
                name: "widgets".into(),
                clone_url: Some("http://gitea/acme/widgets.git".into()),
                checkout: Checkout::PullRequest {
                    number: 3,
                    head_ref: "pr-3".into(),
                },
                worktree: Worktree {
                    kind: "pull".into(),
                    number: 3,
                    child: None,
                },
                recorded: Some(Tree {
                    head: "h".into(),
                    tree: "t".into(),
                }),
            },
            CallBody::Scratch {
                instance: "default".into(),
                owner: "acme".into(),
                name: "widgets".into(),
                worktree: Worktree {
                    kind: "issue".into(),
                    number: 1,
                    child: Some(2),
                },
            },
            CallBody::LookupTurn {
                thread_id: "t1".into(),
                operation_id: "op-1".into(),
            },
        ];
        for body in bodies {
            let call = Call {
                call_id: "c1".into(),
                lease_id: "l1".into(),
                body: body.clone(),
            };
            let json = round_trip(&call);
            assert_eq!(json["body"]["kind"], body.kind());
        }
        let json = round_trip(&CallBody::StartTurn {
            thread_id: "t1".into(),
            operation_id: "op-1".into(),
            text: "hi".into(),
            cwd: "x".into(),
            terms: terms(),
            attempt: Some(AttemptIdentity {
                task_id: "task-1".into(),
                attempt_id: "att-1".into(),
            }),
        });
        assert_eq!(json["operationId"], "op-1");
        assert_eq!(json["terms"]["policy"]["sandbox"], "workspace-write");
        assert_eq!(json["attempt"]["attemptId"], "att-1");
    }

    #[test]
    fn messages_without_the_added_fields_still_parse() {
        // As a peer of the first protocol version sends them.
        let mut old = serde_json::to_value(CallBody::StartTurn {
            thread_id: "t1".into(),
            operation_id: "op-1".into(),
            text: "hi".into(),
            cwd: "x".into(),
            terms: terms(),
            attempt: None,
        })
        .unwrap();
        assert!(old.get("attempt").is_none());
        old.as_object_mut().unwrap().remove("attempt");
        let body: CallBody = serde_json::from_value(old).unwrap();
        assert!(matches!(body, CallBody::StartTurn { attempt: None, .. }));
        let answer: Answer = serde_json::from_value(serde_json::json!({
            "callId": "c1",
            "outcome": {"result": "ok", "value": {"type": "turn", "turnId": "u1"}},
        }))
        .unwrap();
        let mut outcome = answer.outcome;
        assert_eq!(
            outcome,
            Outcome::Ok {
                value: Value::Turn {
                    turn_id: "u1".into(),
                    worker_id: None
                }
            }
        );
        outcome.taken_by("wrk-1");
        assert!(matches!(
            outcome,
            Outcome::Ok { value: Value::Turn { worker_id: Some(ref w), .. } } if w == "wrk-1"
        ));
        let mut done = Outcome::Ok { value: Value::Done };
        done.taken_by("wrk-1");
        assert_eq!(done, Outcome::Ok { value: Value::Done });
    }

    #[test]
    fn answers_events_and_leases_round_trip() {
        for outcome in [
            Outcome::Ok {
                value: Value::Thread {
                    thread_id: "t".into(),
                },
            },
            Outcome::Ok {
                value: Value::Turn {
                    turn_id: "u".into(),
                    worker_id: Some("wrk-1".into()),
                },
            },
            Outcome::Ok { value: Value::Done },
            Outcome::Ok {
                value: Value::Lookup {
                    lookup: Lookup::Failed {
                        turn_id: "u".into(),
                        error: "e".into(),
                        denial: Some(CapacityDenial::RateLimited),
                    },
                },
            },
            Outcome::Unavailable {
                message: "m".into(),
            },
            Outcome::Uncertain {
                message: "m".into(),
            },
            Outcome::Refused {
                message: "m".into(),
            },
            Outcome::WorkspaceFailed {
                disposition: "needs_operator".into(),
                code: "workspace_dirty".into(),
                message: "m".into(),
            },
            Outcome::Ok {
                value: Value::Workspace {
                    cwd: "worktrees/default/acme/widgets/issue-1".into(),
                    head: None,
                },
            },
        ] {
            round_trip(&Answer {
                call_id: "c".into(),
                outcome,
            });
        }
        let events = vec![
            Event::Progress {
                seq: 1,
                kind: "k".into(),
            },
            Event::Delivered {
                seq: 2,
                client_id: Some("op".into()),
            },
            Event::ToolCall {
                seq: 3,
                phase: "started".into(),
                server: "gitea".into(),
                tool: "create_comment".into(),
                arguments: serde_json::json!({"body": "x"}),
                status: "inProgress".into(),
                error: None,
            },
            Event::ApprovalRequested {
                seq: 4,
                key: "a".into(),
                kind: "command".into(),
                detail: serde_json::json!({}),
            },
            Event::ToolRequested {
                seq: 5,
                key: "t".into(),
                tool: "complete".into(),
                arguments: serde_json::json!({}),
            },
            Event::Idle { seq: 6 },
            Event::Active { seq: 7 },
            Event::Other { seq: 8 },
            Event::Interrupted { seq: 9 },
            Event::Failed {
                seq: 10,
                error: "e".into(),
                denial: None,
            },
            Event::Completed {
                seq: 11,
                final_text: Some("done".into()),
            },
        ];
        for (i, e) in events.iter().enumerate() {
            assert_eq!(e.seq(), i as i64 + 1);
        }
        assert_eq!(
            events.iter().filter(|e| e.ends_turn()).count(),
            3,
            "completed, failed and interrupted end a turn"
        );
        let json = round_trip(&EventBatch {
            stream: "c1".into(),
            first: 0,
            events,
        });
        assert_eq!(json["events"][1]["clientId"], "op");
        round_trip(&LeaseRequest {
            protocol: super::super::PROTOCOL_VERSION,
            repository: "acme/widgets".into(),
        });
        round_trip(&LeaseGrant {
            lease_id: "l".into(),
            repository: "acme/widgets".into(),
            fence: 3,
            expires_at: "2026-01-01T00:00:00Z".into(),
            ttl_secs: 60,
        });
    }
}
