use super::*;
use crate::agent::remote::hub::Answered;
use crate::agent::AgentError;
use crate::domain::ResourceKind;
use futures_util::future::BoxFuture;
use std::sync::Mutex;

/// Answers every call with the next outcome given, and says which
/// repositories a worker leases.
#[derive(Default)]
struct Canned {
    outcomes: Mutex<Vec<Outcome>>,
    sent: Mutex<Vec<(String, CallBody)>>,
    timeouts: Mutex<Vec<Duration>>,
    leased: Vec<String>,
}

impl CallRoute for Canned {
    fn call(
        &self,
        repository: &str,
        body: CallBody,
        _stream: bool,
        timeout: Duration,
    ) -> BoxFuture<'static, Result<Answered, AgentError>> {
        self.timeouts.lock().unwrap().push(timeout);
        self.sent
            .lock()
            .unwrap()
            .push((repository.to_owned(), body));
        let outcome = self.outcomes.lock().unwrap().remove(0);
        Box::pin(async move {
            Ok(Answered {
                outcome,
                events: None,
            })
        })
    }

    fn leased_repositories(&self) -> BoxFuture<'static, Vec<String>> {
        let leased = self.leased.clone();
        Box::pin(async move { leased })
    }

    fn holder_home(&self, _repository: &str) -> BoxFuture<'static, Option<String>> {
        Box::pin(async { None })
    }
}

struct Fixture {
    route: Arc<Canned>,
    remote: RemoteWorkspaces,
    rt: tokio::runtime::Runtime,
    _root: tempfile::TempDir,
}

impl Fixture {
    fn new(leased: &[&str], outcomes: Vec<Outcome>) -> Fixture {
        let root = tempfile::tempdir().unwrap();
        let route = Arc::new(Canned {
            outcomes: Mutex::new(outcomes),
            sent: Mutex::default(),
            timeouts: Mutex::default(),
            leased: leased.iter().map(|r| r.to_string()).collect(),
        });
        let names = WorkspaceManager::new(root.path().to_path_buf(), "default".into(), None);
        let remote = RemoteWorkspaces::new(
            route.clone(),
            names,
            "default".into(),
            crate::workspace::DEFAULT_TIMEOUT,
        );
        Fixture {
            route,
            remote,
            rt: tokio::runtime::Runtime::new().unwrap(),
            _root: root,
        }
    }

    /// Runs `f` as the repo actor does: blocking, inside the runtime.
    fn run<T>(&self, f: impl FnOnce(&RemoteWorkspaces) -> T) -> T {
        let _in = self.rt.enter();
        f(&self.remote)
    }

    fn sent(&self) -> Vec<(String, CallBody)> {
        self.route.sent.lock().unwrap().clone()
    }
}

fn ok(value: Value) -> Outcome {
    Outcome::Ok { value }
}

const ISSUE: WorktreeId = WorktreeId {
    kind: ResourceKind::Issue,
    number: 4,
    child: None,
};

fn oid(c: char) -> String {
    c.to_string().repeat(40)
}

#[test]
fn the_base_instructions_come_from_the_worker_bounded() {
    let long = "a".repeat(crate::workspace::MAX_INSTRUCTIONS_BYTES + 10);
    let f = Fixture::new(
        &[],
        vec![
            ok(Value::Instructions {
                text: Some("BASE".into()),
            }),
            ok(Value::Instructions { text: Some(long) }),
            ok(Value::Instructions { text: None }),
            ok(Value::Done),
        ],
    );
    let read = |base| f.run(|r| r.base_instructions("Acme", "widgets", base));
    assert_eq!(read(Some("main")).unwrap().as_deref(), Some("BASE"));
    assert_eq!(
        read(None).unwrap().unwrap().len(),
        crate::workspace::MAX_INSTRUCTIONS_BYTES
    );
    assert_eq!(read(None).unwrap(), None);
    assert!(read(None).is_err(), "an answer of another call");
    let sent = f.sent();
    assert_eq!(sent[0].0, "acme/widgets");
    assert_eq!(
        sent[0].1,
        CallBody::BaseInstructions {
            instance: "default".into(),
            owner: "Acme".into(),
            name: "widgets".into(),
            base: Some("main".into()),
        }
    );
}

#[test]
fn the_tree_state_comes_from_the_worker_and_only_as_object_ids() {
    let f = Fixture::new(
        &[],
        vec![
            ok(Value::TreeState {
                state: Some(wire::Tree {
                    head: oid('a'),
                    tree: oid('b'),
                }),
            }),
            ok(Value::TreeState { state: None }),
            ok(Value::TreeState {
                state: Some(wire::Tree {
                    head: "HEAD".into(),
                    tree: oid('b'),
                }),
            }),
            Outcome::WorkspaceFailed {
                disposition: "needs_operator".into(),
                code: "workspace_dirty".into(),
                message: "a rebase is under way".into(),
            },
        ],
    );
    let read = || f.run(|r| r.tree_state("acme", "widgets", ISSUE));
    assert_eq!(
        read().unwrap(),
        Some(TreeState {
            head: oid('a'),
            tree: oid('b'),
        })
    );
    assert_eq!(read().unwrap(), None);
    assert!(read().is_err());
    assert_eq!(read().unwrap_err().code(), "workspace_dirty");
    // Local git on the worker: a lost call does not hold the turn's end
    // for the clone's timeout.
    assert!(f
        .route
        .timeouts
        .lock()
        .unwrap()
        .iter()
        .all(|t| *t == LOCAL_CALL_TIMEOUT));
    assert!(matches!(
        &f.sent()[0].1,
        CallBody::TreeState { worktree, .. } if worktree.kind == "issue" && worktree.number == 4
    ));
}

#[test]
fn retiring_asks_the_worker_holding_the_lease_and_no_other() {
    let kept = "refs/codex-bridge/retired/issue-4".to_owned();
    let f = Fixture::new(
        &["acme/widgets"],
        vec![
            ok(Value::Retired {
                removed: true,
                kept: Some(kept.clone()),
            }),
            ok(Value::Retired {
                removed: true,
                kept: Some("refs/heads/main".into()),
            }),
        ],
    );
    let retired = f.run(|r| r.retire("Acme", "Widgets", ISSUE)).unwrap();
    assert_eq!(
        retired,
        Retired {
            removed: true,
            kept: Some(kept)
        }
    );
    assert!(
        f.run(|r| r.retire("acme", "widgets", ISSUE)).is_err(),
        "a ref outside the retired ones"
    );
    assert_eq!(f.sent().len(), 2);

    let idle = Fixture::new(&["acme/other"], vec![]);
    let e = idle
        .run(|r| r.retire("acme", "widgets", ISSUE))
        .unwrap_err();
    assert_eq!(e.disposition(), crate::workspace::Disposition::Transient);
    assert!(idle.sent().is_empty(), "no call waits for a worker");
}

#[test]
fn names_that_cannot_be_folders_are_refused_before_any_call() {
    let f = Fixture::new(&["acme/widgets"], vec![]);
    for (owner, name) in [("..", "widgets"), ("acme", "a/b"), ("", "widgets")] {
        assert!(f.run(|r| r.tree_state(owner, name, ISSUE)).is_err());
        assert!(f.run(|r| r.retire(owner, name, ISSUE)).is_err());
        assert!(f.run(|r| r.base_instructions(owner, name, None)).is_err());
    }
    let negative = WorktreeId {
        number: -1,
        ..ISSUE
    };
    assert!(f.run(|r| r.retire("acme", "widgets", negative)).is_err());
    assert!(f.sent().is_empty());
}
