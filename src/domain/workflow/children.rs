//! Delegated children, decided with no I/O: what authority a child gets,
//! whether an assignment launches a child, and what a child that exited
//! without a result comes to. The store gathers each snapshot and writes the
//! decision in one transaction, by compare-and-swap on the parent's version.
//!
//! The promises (property-tested below):
//! - A child's authority is never above its parent's, and a child never
//!   speaks in the parent's thread: its result goes to the parent.
//! - One assignment makes at most one child. A refusal before launch
//!   (too many children, no place) is recorded as not admitted, and the same
//!   assignment may launch once there is room; once launched, or uncertain,
//!   it is that child for good.
//! - Only an open parent launches children; a handoff makes it wait.
//! - A child that exited without a result gets its bounded recovery, then
//!   one `incomplete` result; a success is never invented.

use crate::domain::policy::{ApprovalPolicy, Sandbox};
use crate::domain::states::text_enum;
use crate::domain::workflow::{ToolCall, WorkflowState};

text_enum!(
    /// How a parent hands work to a child.
    ChildMode, "child mode" {
        /// Independent work: the parent goes on; the result comes later.
        Assign = "assign",
        /// The parent waits (`waiting_child`) for the child's result.
        Handoff = "handoff",
    }
);

text_enum!(
    /// Where one assignment's launch stands.
    Launch, "child launch" {
        /// Refused before launch (a limit, no place): nothing ran, and the
        /// same assignment may launch later.
        NotAdmitted = "not_admitted",
        /// Its child exists: the assignment is that child, for good.
        Admitted = "admitted",
        /// The launch may have happened: treated as admitted, never
        /// launched again.
        Uncertain = "uncertain",
    }
);

/// What a thread may do, as far as delegation goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Authority {
    pub sandbox: Sandbox,
    pub approval: ApprovalPolicy,
    /// The Gitea MCP server that can write in the Issue/PR's thread.
    pub gitea_write: bool,
}

impl Authority {
    /// What a child of a thread with this authority gets: the same sandbox
    /// and approval policy at most, and no voice in the parent's Gitea
    /// thread (the child answers its parent through its result).
    pub fn for_child(self) -> Authority {
        Authority {
            gitea_write: false,
            ..self
        }
    }

    /// Whether this allows nothing that `other` does not: its sandbox
    /// reaches no further, it asks before acting at least as often, and it
    /// writes to Gitea only if `other` may.
    pub fn within(&self, other: &Authority) -> bool {
        sandbox_rank(self.sandbox) <= sandbox_rank(other.sandbox)
            && approval_rank(self.approval) <= approval_rank(other.approval)
            && (!self.gitea_write || other.gitea_write)
    }
}

impl Authority {
    /// The most of both: what `self` allows that `cap` allows too.
    pub fn meet(self, cap: Authority) -> Authority {
        Authority {
            sandbox: if sandbox_rank(self.sandbox) <= sandbox_rank(cap.sandbox) {
                self.sandbox
            } else {
                cap.sandbox
            },
            approval: if approval_rank(self.approval) <= approval_rank(cap.approval) {
                self.approval
            } else {
                cap.approval
            },
            gitea_write: self.gitea_write && cap.gitea_write,
        }
    }
}

/// The bridge's tools a thread is offered: a child's records its result;
/// a top-level thread completes its workflow, asks its owner, delegates
/// and reads its children's results — and is offered `record_result` as
/// well, because Codex gives a forked thread its source's tools and nothing
/// else, and a child forked from its parent must be able to record its
/// result. What a thread was offered is not what it may do: every call is
/// authorised by the session it arrives on (a top-level thread's
/// `record_result`, a forked child's `assign_child`: refused).
pub fn offered_tools(child: bool) -> &'static [&'static str] {
    if child {
        &["record_result"]
    } else {
        &[
            "complete_workflow",
            "request_owner_gate",
            "assign_child",
            "handoff_child",
            "ack_result",
            "list_results",
            "record_result",
        ]
    }
}

/// Why a thread may not make `call`, or `None` when it may: a delegated
/// child only records its result (it never ends, gates or delegates for
/// its parent, nor reads or acknowledges results); a top-level workflow
/// ends with `complete_workflow`, never with a result of its own.
pub fn refusal(call: &ToolCall, child: bool) -> Option<&'static str> {
    match (call, child) {
        (ToolCall::RecordResult(_), true) => None,
        (ToolCall::RecordResult(_), false) => Some(
            "record_result is a delegated child's tool; this workflow ends with complete_workflow",
        ),
        (_, false) => None,
        (ToolCall::CompleteWorkflow { .. }, true) => Some(
            "a delegated child does not end a workflow: record your result with record_result, \
             and your parent decides when the work is complete",
        ),
        (ToolCall::RequestOwnerGate { .. }, true) => Some(
            "a delegated child does not ask the owner: record your result with record_result, \
             and name the question among its blockers for your parent",
        ),
        (ToolCall::AssignChild(_) | ToolCall::HandoffChild(_), true) => Some(
            "a delegated child cannot delegate: record your result with record_result, and \
             name there the work that still needs doing",
        ),
        (ToolCall::AckResult { .. }, true) => {
            Some("a delegated child acknowledges nothing: results go to the top-level workflow")
        }
        (ToolCall::ListResults, true) => {
            Some("a delegated child has no children's results to list")
        }
    }
}

/// How far a sandbox lets commands reach: more is more authority.
fn sandbox_rank(s: Sandbox) -> u8 {
    match s {
        Sandbox::ReadOnly => 0,
        Sandbox::WorkspaceWrite => 1,
        Sandbox::DangerFullAccess => 2,
    }
}

/// How freely a policy lets the agent act without asking: more is more
/// authority.
fn approval_rank(a: ApprovalPolicy) -> u8 {
    match a {
        ApprovalPolicy::Untrusted => 0,
        ApprovalPolicy::OnRequest => 1,
        ApprovalPolicy::Never => 2,
    }
}

/// What an assignment's admission is decided on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmissionSnapshot {
    pub parent: WorkflowState,
    pub parent_version: i64,
    /// The parent's children that have not ended.
    pub live_children: i64,
    /// `max_children_per_workflow`.
    pub max_children: i64,
    /// This same assignment (the parent's tool call) seen before.
    pub earlier: Option<Launch>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Launch the child; a handoff's parent waits for it.
    Launch { parent_waits: bool },
    /// The assignment already has its child (or may have): answer with it.
    Existing,
    /// Not admitted now (recorded so); the same assignment may try again.
    NotAdmitted(NotAdmitted),
    /// The parent cannot delegate now.
    Refused(Refusal),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotAdmitted {
    /// The parent has `max_children_per_workflow` children running.
    MaxChildren,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The parent is not open (it waits, or it has ended).
    ParentNotOpen,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmissionDecision {
    /// The parent's version the decision was made on.
    pub expected_version: i64,
    pub admission: Admission,
}

/// Whether `mode`'s assignment launches a child now.
pub fn admit(snap: &AdmissionSnapshot, mode: ChildMode) -> AdmissionDecision {
    AdmissionDecision {
        expected_version: snap.parent_version,
        admission: admission(snap, mode),
    }
}

fn admission(snap: &AdmissionSnapshot, mode: ChildMode) -> Admission {
    // Duplicate protection first: a launched (or maybe launched) child is
    // the answer whatever changed since.
    if matches!(snap.earlier, Some(Launch::Admitted | Launch::Uncertain)) {
        return Admission::Existing;
    }
    if snap.parent != WorkflowState::Open {
        return Admission::Refused(Refusal::ParentNotOpen);
    }
    if snap.live_children >= snap.max_children.max(0) {
        return Admission::NotAdmitted(NotAdmitted::MaxChildren);
    }
    Admission::Launch {
        parent_waits: mode == ChildMode::Handoff,
    }
}

/// The same logical assignment, whenever it is asked: the parent, the mode
/// and the exact work. Asked again (a retry after a refusal, a call the
/// agent repeats), it names the same child, never a second one.
pub fn assignment_key(
    parent: &crate::domain::WorkflowId,
    mode: ChildMode,
    title: &str,
    instructions: &str,
) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for part in [parent.as_str(), mode.as_str(), title, instructions] {
        // Length-prefixed, so no two different lists make one text.
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    hex::encode(h.finalize())
}

/// What comes of a child whose turn ended without `record_result`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildExit {
    /// It recorded its result: nothing to recover.
    Done,
    /// Recovery number `attempt`: the child is asked again for its result.
    Recover { attempt: i64 },
    /// Its recovery is spent: one `incomplete` result goes to the parent.
    Incomplete,
}

/// The child's turn ended; `recovered`: recovery attempts it took so far.
/// Whatever the provider last showed, only a recorded result is success.
pub fn child_exited(has_result: bool, recovered: i64, max_recovery: i64) -> ChildExit {
    if has_result {
        ChildExit::Done
    } else if recovered < max_recovery.max(0) {
        ChildExit::Recover {
            attempt: recovered + 1,
        }
    } else {
        ChildExit::Incomplete
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A thread may call exactly what it is offered, except that a
    /// top-level thread (offered `record_result` for its forks' sake) may
    /// not record a result: a forked child keeps its parent's tools and
    /// must still never end, gate, delegate or acknowledge for it.
    #[test]
    fn a_thread_may_call_what_it_is_offered_and_a_child_only_record_result() {
        use crate::domain::workflow::{Delegation, GateKind, ResultReport};
        let delegation = Delegation {
            title: "t".into(),
            instructions: "i".into(),
            fork: true,
        };
        let every = [
            ToolCall::CompleteWorkflow {
                summary: "s".into(),
            },
            ToolCall::RequestOwnerGate {
                question: "q".into(),
                kind: GateKind::Publish,
            },
            ToolCall::AssignChild(delegation.clone()),
            ToolCall::HandoffChild(delegation),
            ToolCall::RecordResult(ResultReport::incomplete("s".into(), "r", "b")),
            ToolCall::AckResult {
                result_id: "r".into(),
            },
            ToolCall::ListResults,
        ];
        let mut names: Vec<&str> = every.iter().map(ToolCall::name).collect();
        let mut offered = offered_tools(false).to_vec();
        names.sort();
        offered.sort();
        assert_eq!(names, offered, "one call of every tool");
        for call in &every {
            let name = call.name();
            assert_eq!(
                refusal(call, true).is_none(),
                offered_tools(true).contains(&name),
                "a child's {name}"
            );
            assert_eq!(
                refusal(call, false).is_none(),
                name != "record_result",
                "a top-level thread's {name}"
            );
        }
    }

    /// Any authority a thread may have (also the trust rules' tests').
    pub(crate) fn authority() -> impl Strategy<Value = Authority> {
        (
            proptest::sample::select(Sandbox::ALL.to_vec()),
            proptest::sample::select(ApprovalPolicy::ALL.to_vec()),
            any::<bool>(),
        )
            .prop_map(|(sandbox, approval, gitea_write)| Authority {
                sandbox,
                approval,
                gitea_write,
            })
    }

    fn snapshot() -> impl Strategy<Value = AdmissionSnapshot> {
        (
            proptest::sample::select(WorkflowState::ALL.to_vec()),
            0i64..50,
            0i64..6,
            0i64..5,
            proptest::option::of(proptest::sample::select(Launch::ALL.to_vec())),
        )
            .prop_map(
                |(parent, parent_version, live_children, max_children, earlier)| {
                    AdmissionSnapshot {
                        parent,
                        parent_version,
                        live_children,
                        max_children,
                        earlier,
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn a_child_never_gets_more_authority_than_its_parent(parent in authority()) {
            let child = parent.for_child();
            prop_assert!(child.within(&parent));
            prop_assert!(!child.gitea_write, "a child never speaks in the parent's thread");
        }

        #[test]
        fn meeting_a_cap_stays_within_both(a in authority(), cap in authority()) {
            let m = a.meet(cap);
            prop_assert!(m.within(&a));
            prop_assert!(m.within(&cap));
            if a.within(&cap) {
                prop_assert_eq!(m, a);
            }
        }

        #[test]
        fn assignment_keys_follow_the_work_exactly(
            title in "[a-z ]{0,12}", instructions in "[a-z ]{0,12}", other in "[a-z ]{1,4}"
        ) {
            let wf = crate::domain::WorkflowId::mint();
            let key = assignment_key(&wf, ChildMode::Assign, &title, &instructions);
            prop_assert_eq!(&key, &assignment_key(&wf, ChildMode::Assign, &title, &instructions));
            prop_assert_ne!(&key, &assignment_key(&wf, ChildMode::Handoff, &title, &instructions));
            let moved = format!("{title}{other}");
            let rest = instructions.strip_prefix(other.as_str()).unwrap_or(&instructions).to_owned();
            if (moved.as_str(), rest.as_str()) != (title.as_str(), instructions.as_str()) {
                prop_assert_ne!(&key, &assignment_key(&wf, ChildMode::Assign, &moved, &rest));
            }
            prop_assert_ne!(&key, &assignment_key(&crate::domain::WorkflowId::mint(), ChildMode::Assign, &title, &instructions));
        }

        #[test]
        fn within_is_an_order(a in authority(), b in authority(), c in authority()) {
            prop_assert!(a.within(&a));
            if a.within(&b) && b.within(&c) {
                prop_assert!(a.within(&c));
            }
            if a.within(&b) && b.within(&a) {
                prop_assert_eq!(a, b);
            }
        }

        #[test]
        fn one_assignment_makes_at_most_one_child(s in snapshot(), handoff in any::<bool>()) {
            let mode = if handoff { ChildMode::Handoff } else { ChildMode::Assign };
            let d = admit(&s, mode);
            prop_assert_eq!(d.expected_version, s.parent_version);
            match d.admission {
                Admission::Launch { parent_waits } => {
                    prop_assert!(matches!(s.earlier, None | Some(Launch::NotAdmitted)));
                    prop_assert_eq!(s.parent, WorkflowState::Open);
                    prop_assert!(s.live_children < s.max_children);
                    prop_assert_eq!(parent_waits, handoff);
                }
                Admission::Existing => {
                    prop_assert!(matches!(s.earlier, Some(Launch::Admitted | Launch::Uncertain)));
                }
                Admission::NotAdmitted(NotAdmitted::MaxChildren) => {
                    prop_assert!(s.live_children >= s.max_children);
                }
                Admission::Refused(Refusal::ParentNotOpen) => {
                    prop_assert!(s.parent != WorkflowState::Open);
                }
            }
        }

        #[test]
        fn a_refusal_before_launch_may_launch_later_as_the_same_assignment(s in snapshot()) {
            let retried = AdmissionSnapshot {
                parent: WorkflowState::Open,
                live_children: 0,
                max_children: s.max_children.max(1),
                earlier: Some(Launch::NotAdmitted),
                ..s
            };
            let launched = matches!(
                admit(&retried, ChildMode::Assign).admission,
                Admission::Launch { .. }
            );
            prop_assert!(launched, "the same assignment launches once there is room");
        }

        #[test]
        fn a_child_without_a_result_is_recovered_then_incomplete_never_a_success(
            recovered in 0i64..6, max in 0i64..4,
        ) {
            match child_exited(false, recovered, max) {
                ChildExit::Recover { attempt } => {
                    prop_assert!(attempt <= max);
                    prop_assert_eq!(attempt, recovered + 1);
                }
                ChildExit::Incomplete => prop_assert!(recovered >= max),
                ChildExit::Done => prop_assert!(false, "a success invented"),
            }
            prop_assert_eq!(child_exited(true, recovered, max), ChildExit::Done);
        }
    }
}
