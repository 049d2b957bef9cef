use super::*;
use crate::domain::workflow::WorkflowState;
use crate::domain::ResourceKey;
use crate::domain::WorkflowId;
use crate::lifecycle;
use proptest::prelude::*;

fn task_id(n: u8) -> TaskId {
    TaskId::parse(&format!("task-{:032x}", u128::from(n) + 1)).expect("a valid task id")
}

fn fact(n: u8, state: TaskState, version: i64) -> TaskFact {
    TaskFact {
        task_id: task_id(n),
        state,
        state_version: version,
        command: None,
        continuation: false,
    }
}

fn session() -> ResourceKey {
    ResourceKey::parse("default:acme/widgets:issue:1").unwrap()
}

fn snapshot(command: Command) -> CommandSnapshot {
    CommandSnapshot {
        task: fact(0, TaskState::Queued, 2),
        command,
        argument: None,
        permission: Permission::Allowed,
        driven: Vec::new(),
        queued: Vec::new(),
        approvals: Vec::new(),
        thread_id: None,
        on_pull: false,
        workflow: None,
    }
}

fn any_state() -> impl Strategy<Value = TaskState> {
    prop::sample::select(TaskState::ALL.to_vec())
}

fn driven_state() -> impl Strategy<Value = TaskState> {
    prop::sample::select(vec![
        TaskState::Leased,
        TaskState::Running,
        TaskState::AwaitingApproval,
        TaskState::VerifyingReply,
        TaskState::CancelRequested,
    ])
}

prop_compose! {
    fn any_snapshot()(
        command in prop::sample::select(Command::ALL.to_vec()),
        own_state in prop::strategy::Union::new_weighted(vec![
            (4, Just(TaskState::Queued).boxed()),
            (1, any_state().boxed()),
        ]),
        own_version in 1i64..9,
        permission in prop_oneof![
            6 => Just(Permission::Allowed),
            1 => Just(Permission::Denied("no write access".into())),
            1 => Just(Permission::Unknown),
        ],
        driven in prop::collection::vec((driven_state(), 1i64..9), 0..3),
        queued in prop::collection::vec((1i64..9, any::<bool>()), 0..4),
        approvals in 0usize..3,
        argument in prop_oneof![
            Just(None),
            (0usize..3).prop_map(|i| Some(format!("appr-{i} please"))),
            "[a-z0-9 `-]{0,12}".prop_map(Some),
        ],
        thread in prop::option::of("thr-[a-z]{1,4}"),
        on_pull in any::<bool>(),
        workflow in prop::option::of((
            prop::sample::select(WorkflowState::ALL.to_vec()), 1i64..9, any::<bool>(),
        )),
    ) -> CommandSnapshot {
        CommandSnapshot {
            task: fact(0, own_state, own_version),
            command,
            argument,
            permission,
            driven: driven
                .into_iter()
                .enumerate()
                .map(|(i, (s, v))| fact(10 + i as u8, s, v))
                .collect(),
            queued: queued
                .into_iter()
                .enumerate()
                .map(|(i, (v, continuation))| TaskFact {
                    continuation,
                    ..fact(20 + i as u8, TaskState::Queued, v)
                })
                .collect(),
            approvals: (0..approvals)
                .map(|i| ApprovalFact {
                    approval_id: format!("appr-{i}"),
                    task_id: task_id(10),
                    session_key: session(),
                })
                .collect(),
            thread_id: thread,
            on_pull,
            workflow: workflow.map(|(state, version, by_owner)| WorkflowFact {
                workflow_id: WorkflowId::parse("wf-0123456789abcdef0123456789abcdef")
                    .expect("a valid workflow id"),
                state,
                version,
                by_owner,
            }),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 2000,
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::Direct(
                "tests/proptest-regressions/command-decide.txt",
            ),
        )),
        ..ProptestConfig::default()
    })]

    /// Every promise of the module, on any snapshot.
    #[test]
    fn a_command_keeps_its_promises(snap in any_snapshot()) {
        let d = decide(&snap);
        prop_assert_eq!(d.expected_version, snap.task.state_version);
        if let Some(to) = d.to {
            prop_assert!(lifecycle::check(snap.task.state, to).is_ok());
        }
        let applies = snap.task.state == TaskState::Queued
            && snap.command.answered_by_lane(snap.argument.as_deref(), snap.on_pull);
        if !applies {
            prop_assert!(d.to.is_none() && d.effects.is_empty(), "{:?}", d);
            return Ok(());
        }
        match &snap.permission {
            Permission::Denied(_) => {
                prop_assert_eq!(d.to, Some(TaskState::Rejected));
                prop_assert!(d.effects.is_empty(), "a rejection is answered by its receipt alone");
                return Ok(());
            }
            Permission::Unknown => {
                prop_assert_eq!(d.to, None);
                prop_assert_eq!(d.effects, vec![CommandEffect::RetryLater]);
                return Ok(());
            }
            Permission::Allowed => {}
        }
        prop_assert_eq!(d.to, Some(TaskState::Succeeded));
        let answers = d.effects.iter().filter(|e| matches!(e, CommandEffect::Answer(_))).count();
        prop_assert_eq!(answers, 1, "one answer: {:?}", d);
        prop_assert!(d.answer().is_some());
        let mut stops = 0;
        for e in &d.effects {
            match e {
                CommandEffect::Cancel { task_id, version } => {
                    prop_assert_eq!(snap.command, Command::Cancel);
                    prop_assert!(snap.queued.iter().any(|t| &t.task_id == task_id && t.state_version == *version));
                }
                CommandEffect::Stop { task_id, version } => {
                    stops += 1;
                    prop_assert_eq!(snap.command, Command::Stop);
                    let t = snap.driven.iter().find(|t| &t.task_id == task_id);
                    prop_assert!(t.is_some_and(|t| t.state_version == *version && stoppable(t.state)));
                    prop_assert!(snap.queued.iter().all(|q| &q.task_id != task_id));
                }
                CommandEffect::HaltWorkflow { version, .. } => {
                    prop_assert_eq!(snap.command, Command::Stop);
                    let w = snap.workflow.as_ref();
                    prop_assert!(w.is_some_and(|w| w.version == *version
                        && matches!(w.state, WorkflowState::Open | WorkflowState::WaitingChild)));
                }
                CommandEffect::CancelWorkflow { version, .. } => {
                    prop_assert_eq!(snap.command, Command::Cancel);
                    let w = snap.workflow.as_ref();
                    prop_assert!(w.is_some_and(|w| w.version == *version && w.by_owner && !w.state.is_end()),
                        "only the owner's /cancel cancels the workflow");
                }
                CommandEffect::ResetThread { old_thread } => {
                    prop_assert_eq!(snap.command, Command::Reset);
                    prop_assert_eq!(Some(old_thread), snap.thread_id.as_ref());
                }
                CommandEffect::DecideApproval { approval_id, accept, .. } => {
                    prop_assert!(matches!(snap.command, Command::Approve | Command::Deny));
                    prop_assert_eq!(*accept, snap.command == Command::Approve);
                    prop_assert!(snap.approvals.iter().any(|a| &a.approval_id == approval_id));
                    let given = snap.argument.as_deref().and_then(|a| a.split_whitespace().next());
                    prop_assert_eq!(given, Some(approval_id.as_str()));
                }
                CommandEffect::Answer(_) => {}
                CommandEffect::RetryLater => prop_assert!(false, "retry on an allowed command"),
            }
        }
        prop_assert!(stops <= 1);
        if snap.command == Command::Cancel {
            let cancels = d.effects.iter().filter(|e| matches!(e, CommandEffect::Cancel { .. })).count();
            let owner = snap.workflow.as_ref().is_some_and(|w| w.by_owner && !w.state.is_end());
            let expected = snap.queued.iter().filter(|t| owner || !t.continuation).count();
            prop_assert_eq!(cancels, expected, "every queued task, a continuation only for the workflow's owner");
        }
        if snap.command == Command::Stop {
            let open = snap.workflow.as_ref().is_some_and(|w| {
                matches!(w.state, WorkflowState::Open | WorkflowState::WaitingChild)
            });
            let halts = d.effects.iter().any(|e| matches!(e, CommandEffect::HaltWorkflow { .. }));
            prop_assert_eq!(halts, open, "/stop leaves an open workflow waiting for its owner");
        }
    }
}

#[test]
fn stop_takes_the_running_task_and_leaves_the_queue() {
    let mut snap = snapshot(Command::Stop);
    snap.driven = vec![fact(1, TaskState::Running, 5)];
    snap.queued = vec![fact(2, TaskState::Queued, 2)];
    let d = decide(&snap);
    assert_eq!(
        d.effects,
        vec![
            CommandEffect::Stop {
                task_id: task_id(1),
                version: 5
            },
            CommandEffect::Answer(Answer::Stopping {
                task: Some(task_id(1)),
                workflow: false
            }),
        ]
    );
}

#[test]
fn a_command_with_nothing_to_act_on_is_answered_so() {
    let cases = [
        (Command::Stop, Nothing::NoRun),
        (Command::Cancel, Nothing::NoQueued),
        (Command::Reset, Nothing::NoThread),
        (Command::Approve, Nothing::NoApprovalId { pending: vec![] }),
    ];
    for (command, nothing) in cases {
        let d = decide(&snapshot(command));
        assert_eq!(d.to, Some(TaskState::Succeeded), "{command}");
        assert_eq!(
            d.effects,
            vec![CommandEffect::Answer(Answer::Nothing(nothing))]
        );
    }
    let mut snap = snapshot(Command::Stop);
    snap.driven = vec![fact(1, TaskState::VerifyingReply, 7)];
    assert_eq!(
        decide(&snap).effects,
        vec![CommandEffect::Answer(Answer::Nothing(Nothing::TurnEnded(
            task_id(1)
        )))]
    );
}

#[test]
fn deny_names_its_approval_exactly() {
    let mut snap = snapshot(Command::Deny);
    snap.approvals = vec![ApprovalFact {
        approval_id: "appr-1".into(),
        task_id: task_id(1),
        session_key: session(),
    }];
    snap.argument = Some("appr-10".into());
    assert!(matches!(
        decide(&snap).effects.as_slice(),
        [CommandEffect::Answer(Answer::Nothing(
            Nothing::NoSuchApproval { .. }
        ))]
    ));
    snap.argument = Some("appr-1".into());
    assert_eq!(
        decide(&snap).effects[0],
        CommandEffect::DecideApproval {
            approval_id: "appr-1".into(),
            task_id: task_id(1),
            accept: false
        }
    );
}
