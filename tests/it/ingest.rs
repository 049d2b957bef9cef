//! Batched ingest decides exactly as one-by-one ingest: random streams of
//! deliveries (repeats, Gitea replays, edits, deletes, ignored events, disabled
//! repositories) give the same answers and the same rows whichever way they are
//! cut into batches.

use crate::support::*;
use codex_bridge::domain::command::{Command, CommandLine};
use codex_bridge::domain::{IngestRequest, Intent, RepoRef, ResourceKind, Subject, TaskId};
use codex_bridge::store::ingest::{self, IngestOutcome};
use codex_bridge::store::{run_migrations, DbConn};
use proptest::prelude::*;

#[derive(Debug, Clone)]
pub(crate) struct Event {
    pub(crate) delivery: u8,
    pub(crate) comment: u8,
    pub(crate) repo: u8,
    pub(crate) kind: u8,
}

pub(crate) fn request(e: &Event) -> IngestRequest {
    let comment = i64::from(e.comment);
    let intent = match e.kind % 5 {
        0 | 1 => Intent::Trigger {
            trigger_key: format!("default:comment:{comment}"),
            text: format!("@ccbot {comment}"),
            command: (comment % 3 == 0).then(|| CommandLine {
                command: Command::Stop,
                word: "stop".into(),
                argument: String::new(),
            }),
            written_at: "t".into(),
            attachments: Vec::new(),
        },
        2 => Intent::Edit {
            trigger_key: format!("default:comment:{comment}"),
            text: "@ccbot edited".into(),
            command: None,
            written_at: "t2".into(),
            attachments: Vec::new(),
            mention_added: e.delivery % 2 == 0,
        },
        3 => Intent::Delete {
            trigger_key: format!("default:comment:{comment}"),
        },
        _ => Intent::Ignore {
            reason: "no_mention",
        },
    };
    let action = match e.kind % 5 {
        2 => "edited",
        3 => "deleted",
        _ => "created",
    };
    IngestRequest {
        delivery_key: format!("default:d{}", e.delivery),
        delivery_id: format!("d{}", e.delivery),
        event_type: "issue_comment".into(),
        action: Some(action.into()),
        payload_hash: codex_bridge::domain::PayloadHash::of(b"0"),
        content_key: Some(format!("default:comment:{comment}:{action}:t")),
        sender: Some("bob".into()),
        subject: Some(Subject {
            repo: RepoRef::new("default", "acme", &format!("r{}", e.repo)).unwrap(),
            kind: ResourceKind::Issue,
            number: i64::from(e.comment % 3),
            comment_id: Some(comment),
            author: "bob".into(),
            head_ref: None,
            base_ref: None,
        }),
        intent,
    }
}

fn fresh() -> (tempfile::TempDir, DbConn) {
    let dir = tempfile::tempdir().unwrap();
    let mut c = connect(&format!("sqlite://{}", dir.path().join("i.db").display()));
    run_migrations(&mut c).unwrap();
    // One repository starts disabled, to exercise that path in both ways.
    exec(&mut c, "INSERT INTO repositories (repo_key, instance_id, owner, name, status, registered_at, updated_at, version) VALUES ('default:acme/r3', 'default', 'acme', 'r3', 'disabled', 't', 't', 1)").unwrap();
    (dir, c)
}

fn rows(c: &mut DbConn) -> Vec<i64> {
    [
        "webhook_deliveries",
        "tasks",
        "task_transitions",
        "outbox_entries",
        "sessions",
        "repositories",
        "audit_events",
    ]
    .iter()
    .map(|t| count(c, t))
    .collect()
}

/// The outcomes with each task id replaced by the order of its first
/// appearance: ids are new each run (time-ordered), but which answers name the
/// same task must not depend on how the deliveries were batched.
fn canonical(outcomes: &[IngestOutcome]) -> Vec<IngestOutcome> {
    let mut seen: Vec<TaskId> = Vec::new();
    let mut name = |id: &TaskId| {
        let n = match seen.iter().position(|s| s == id) {
            Some(n) => n,
            None => {
                seen.push(id.clone());
                seen.len() - 1
            }
        };
        TaskId::parse(&format!("task-{n:032x}")).unwrap()
    };
    outcomes
        .iter()
        .map(|o| match o {
            IngestOutcome::Accepted { task_id, state } => IngestOutcome::Accepted {
                task_id: name(task_id),
                state: state.clone(),
            },
            IngestOutcome::Duplicate { task_id, state } => IngestOutcome::Duplicate {
                task_id: task_id.as_ref().map(&mut name),
                state: state.clone(),
            },
            IngestOutcome::Ignored { reason, task_id } => IngestOutcome::Ignored {
                reason: reason.clone(),
                task_id: task_id.as_ref().map(&mut name),
            },
            other => other.clone(),
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn batches_decide_like_one_by_one(
        events in prop::collection::vec((0u8..12, 0u8..8, 0u8..4, 0u8..10).prop_map(|(delivery, comment, repo, kind)| Event { delivery, comment, repo, kind }), 1..40),
        cuts in prop::collection::vec(1usize..8, 1..10),
    ) {
        let reqs: Vec<IngestRequest> = events.iter().map(request).collect();
        let (_d1, mut one) = fresh();
        let single: Vec<IngestOutcome> = reqs
            .iter()
            .map(|r| one.write_transaction(|c| ingest::ingest(c, r)).unwrap())
            .collect();
        let (_d2, mut many) = fresh();
        let mut batched = Vec::new();
        let mut rest = &reqs[..];
        let mut i = 0;
        while !rest.is_empty() {
            let n = cuts[i % cuts.len()].min(rest.len());
            let (now, later) = rest.split_at(n);
            batched.extend(many.write_transaction(|c| ingest::ingest_batch(c, now)).unwrap());
            rest = later;
            i += 1;
        }
        prop_assert_eq!(canonical(&single), canonical(&batched));
        prop_assert_eq!(rows(&mut one), rows(&mut many));
        // And the invariants hold: one task per comment, at most.
        prop_assert_eq!(
            count_where(&mut many, "tasks", "1 = 1"),
            count_where(&mut many, "(SELECT DISTINCT trigger_key FROM tasks)", "1 = 1")
        );
    }
}

/// A store on SQLite at `path` whose writer takes up to 256 queued
/// deliveries as one batch.
fn batching_store(path: &std::path::Path) -> codex_bridge::store::Store {
    use codex_bridge::config::DatabaseUrl;
    use codex_bridge::store::{Store, StoreSettings, WriterSettings};
    Store::open(&StoreSettings {
        url: DatabaseUrl::Sqlite(path.to_owned()),
        read_pool_size: 2,
        sqlite_busy_timeout: std::time::Duration::from_secs(5),
        writer: WriterSettings {
            batch_max: 256,
            threads: 1,
            queue_capacity: 1024,
            ingest: Default::default(),
        },
    })
    .unwrap()
}

/// Comment `i`, a trigger, in repository `r{i % 3}`, delivered as `d{i}`.
fn trigger(i: u8) -> Event {
    Event {
        delivery: i,
        comment: i,
        repo: i % 3,
        kind: 0,
    }
}

/// The writer ingests what arrived together as one batch without a savepoint;
/// when that batch fails (here one delivery is malformed), the transaction is
/// rolled back and the batch is run again delivery by delivery: the good ones
/// are stored and accepted, the bad one alone gets its error.
#[test]
fn a_failing_delivery_in_a_batch_fails_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let store = batching_store(&path);
    let good: Vec<IngestRequest> = (0u8..40).map(|i| request(&trigger(i))).collect();
    let mut bad = request(&Event {
        delivery: 200,
        comment: 200,
        repo: 0,
        kind: 0,
    });
    // A trigger without its Issue/PR: ingest refuses it.
    bad.subject = None;
    let mut reqs = good.clone();
    reqs.insert(20, bad);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let outcomes = rt.block_on(async {
        // Queued before the first is awaited: they reach the writer together.
        let pending: Vec<_> = reqs.into_iter().map(|r| store.ingest(r)).collect();
        futures_util::future::join_all(pending).await
    });
    assert_eq!(outcomes.len(), 41);
    for (i, o) in outcomes.iter().enumerate() {
        if i == 20 {
            assert!(o.is_err(), "{o:?}");
        } else {
            assert!(
                matches!(o, Ok(IngestOutcome::Accepted { .. })),
                "{i}: {o:?}"
            );
        }
    }
    let mut c = connect(&format!("sqlite://{}", path.display()));
    assert_eq!(count(&mut c, "tasks"), 40);
    assert_eq!(count(&mut c, "webhook_deliveries"), 40);
}

/// On SQLite the batch's INSERTs skip a row that breaks a constraint instead
/// of aborting (which would need a statement journal) and count what they
/// wrote: a delivery whose outbox entry collides with one already stored (an
/// operation id the batch's lookups do not read) fails alone, loudly, and
/// leaves nothing behind, instead of being accepted without its entry.
#[test]
fn a_row_a_constraint_refuses_fails_its_delivery_instead_of_vanishing() {
    use codex_bridge::domain::OperationId;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let store = batching_store(&path);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // An entry stored earlier, then given the operation id comment 120 will have.
    let first = rt.block_on(store.ingest(request(&trigger(100)))).unwrap();
    assert!(matches!(first, IngestOutcome::Accepted { .. }), "{first:?}");
    let taken = OperationId::of_comment("default:comment:120", "t");
    let mut c = connect(&format!("sqlite://{}", path.display()));
    assert_eq!(
        exec(
            &mut c,
            &format!(
                "UPDATE outbox_entries SET operation_id = '{}'",
                taken.as_str()
            )
        )
        .unwrap(),
        1
    );
    let reqs: Vec<IngestRequest> = (0u8..40)
        .chain([120])
        .map(|i| request(&trigger(i)))
        .collect();
    let outcomes = rt.block_on(async {
        // Queued before the first is awaited: they reach the writer together.
        let pending: Vec<_> = reqs.into_iter().map(|r| store.ingest(r)).collect();
        futures_util::future::join_all(pending).await
    });
    for (i, o) in outcomes.iter().enumerate() {
        if i == 40 {
            let e = o.as_ref().expect_err("the colliding delivery was accepted");
            assert!(e.to_string().contains("outbox_entries"), "{e}");
        } else {
            assert!(
                matches!(o, Ok(IngestOutcome::Accepted { .. })),
                "{i}: {o:?}"
            );
        }
    }
    assert_eq!(count(&mut c, "tasks"), 41);
    assert_eq!(count(&mut c, "outbox_entries"), 41);
    assert_eq!(
        count_where(&mut c, "tasks", "trigger_key = 'default:comment:120'"),
        0
    );
    assert_eq!(
        count_where(
            &mut c,
            "webhook_deliveries",
            "delivery_key = 'default:d120'"
        ),
        0
    );
}

/// The `n`th triggering comment on Issue 7 of acme/r0.
fn nth_comment_on_one_issue(n: u32) -> IngestRequest {
    let comment = 10_000 + i64::from(n);
    crate::actors::request("r0", 7, comment, &format!("@ccbot {n}"))
}

fn a_full_outbox_refuses_until_a_task_ends(url: &str) {
    use codex_bridge::lifecycle::TaskState;
    use codex_bridge::store::tasks::{self, TransitionOutcome, TransitionRequest};
    let mut c = connect(url);
    run_migrations(&mut c).unwrap();
    let cap = ingest::OUTBOX_CAPACITY as u32;
    // Filled in batches, as the writer would.
    let reqs: Vec<IngestRequest> = (0..cap).map(nth_comment_on_one_issue).collect();
    let mut ids = Vec::new();
    for batch in reqs.chunks(50) {
        for o in c
            .write_transaction(|c| ingest::ingest_batch(c, batch))
            .unwrap()
        {
            match o {
                IngestOutcome::Accepted { task_id, .. } => ids.push(task_id),
                other => panic!("below capacity, every delivery is accepted: {other:?}"),
            }
        }
    }
    let one_more = nth_comment_on_one_issue(cap);
    let refused = c
        .write_transaction(|c| ingest::ingest(c, &one_more))
        .unwrap();
    let IngestOutcome::OutboxFull {
        ref session_key,
        task_id: Some(ref refused_task),
    } = refused
    else {
        panic!("a refusal with its task: {refused:?}")
    };
    assert_eq!(session_key, "default:acme/r0:issue:7");
    // The refusal is a task born `rejected`, with one receipt naming why.
    assert_eq!(count(&mut c, "tasks"), i64::from(cap) + 1);
    assert_eq!(
        count_where(
            &mut c,
            "tasks",
            &format!(
                "task_id = '{refused_task}' AND state = 'rejected' AND error_code = 'outbox_full'"
            ),
        ),
        1
    );
    let receipt_of = |c: &mut _| {
        count_where(
            c,
            "comments",
            &format!(
                "task_id = '{refused_task}' AND kind = 'receipt' AND comment_key LIKE '%:rejected'"
            ),
        )
    };
    assert_eq!(receipt_of(&mut c), 1);
    assert_eq!(
        count(&mut c, "outbox_entries"),
        i64::from(cap),
        "no entry for it"
    );
    // A task that is still running keeps its place; one that ends frees it.
    for (to, frees) in [(TaskState::Leased, false), (TaskState::Failed, true)] {
        let outcome = c
            .write_transaction(|c| {
                tasks::transition(
                    c,
                    &TransitionRequest {
                        task_id: &ids[0],
                        to,
                        expected_version: None,
                        actor: "test",
                        reason: None,
                        error_code: None,
                    },
                )
            })
            .unwrap();
        assert!(
            matches!(outcome, TransitionOutcome::Applied { .. }),
            "{outcome:?}"
        );
        let next = nth_comment_on_one_issue(cap + 1 + u32::from(frees));
        let answer = c.write_transaction(|c| ingest::ingest(c, &next)).unwrap();
        assert_eq!(
            matches!(answer, IngestOutcome::Accepted { .. }),
            frees,
            "after {to:?}: {answer:?}"
        );
    }
    // The same delivery again is the same refusal; Gitea's replay of it (a
    // new delivery of the same comment) is the refused task again, with no
    // second receipt, even now that a place is free.
    let same = c
        .write_transaction(|c| ingest::ingest(c, &one_more))
        .unwrap();
    assert!(
        matches!(same, IngestOutcome::OutboxFull { task_id: Some(ref t), .. } if t == refused_task),
        "{same:?}"
    );
    let mut replay = one_more.clone();
    replay.delivery_key = "default:cap-replay".into();
    let again = c.write_transaction(|c| ingest::ingest(c, &replay)).unwrap();
    assert!(
        matches!(again, IngestOutcome::Duplicate { task_id: Some(ref t), ref state } if t == refused_task && state.as_deref() == Some("rejected")),
        "{again:?}"
    );
    assert_eq!(receipt_of(&mut c), 1, "one receipt, however often it comes");
    let open: i64 = count_where(
        &mut c,
        "sessions",
        &format!("session_key = 'default:acme/r0:issue:7' AND open_entries = {cap}"),
    );
    assert_eq!(open, 1, "the counter holds the capacity again");
}

#[test]
fn a_full_outbox_refuses_until_a_task_ends_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    a_full_outbox_refuses_until_a_task_ends(&format!(
        "sqlite://{}",
        dir.path().join("cap.db").display()
    ));
}

#[test]
fn a_full_outbox_refuses_until_a_task_ends_postgres() {
    let db = PgDb::create();
    a_full_outbox_refuses_until_a_task_ends(&db.url);
}

/// Gitea's names are case-insensitive: comments on `ACME/Widgets` and on
/// `acme/widgets` are one repository's and one Issue's, with one queue, one
/// lease and one session; the row keeps the spelling Gitea showed first.
#[test]
fn two_spellings_of_one_repository_are_one_repository() {
    let (_dir, mut c) = fresh();
    let mut shouted = crate::actors::request("widgets", 7, 1, "@ccbot one");
    shouted.subject.as_mut().unwrap().repo = RepoRef::new("default", "ACME", "Widgets").unwrap();
    let quiet = crate::actors::request("widgets", 7, 2, "@ccbot two");
    let outcomes = c
        .write_transaction(|c| ingest::ingest_batch(c, &[shouted, quiet]))
        .unwrap();
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, IngestOutcome::Accepted { .. })),
        "{outcomes:?}"
    );
    // (`fresh` holds one other repository.)
    assert_eq!(
        count_where(
            &mut c,
            "repositories",
            "lower(repo_key) = 'default:acme/widgets'"
        ),
        1
    );
    assert_eq!(
        count_where(
            &mut c,
            "repositories",
            "repo_key = 'default:acme/widgets' AND owner = 'ACME' AND name = 'Widgets'"
        ),
        1
    );
    assert_eq!(count(&mut c, "sessions"), 1);
    assert_eq!(
        count_where(
            &mut c,
            "tasks",
            "session_key = 'default:acme/widgets:issue:7'"
        ),
        2
    );
}

/// The same delivery id over other bytes is a conflict; over a row hashed
/// another way (stored with SHA-256, before payloads were hashed with BLAKE3)
/// it cannot be told, and is answered as the retry its id says it is, with
/// nothing written twice.
#[test]
fn a_delivery_stored_under_an_older_hash_is_answered_as_a_retry() {
    let (_dir, mut c) = fresh();
    let first = request(&trigger(1));
    let accepted = c.write_transaction(|c| ingest::ingest(c, &first)).unwrap();
    let IngestOutcome::Accepted { task_id, .. } = accepted else {
        panic!("{accepted:?}")
    };
    let mut again = first.clone();
    again.payload_hash = codex_bridge::domain::PayloadHash::of(b"other bytes");
    let conflict = c.write_transaction(|c| ingest::ingest(c, &again)).unwrap();
    assert!(
        matches!(conflict, IngestOutcome::DeliveryConflict { .. }),
        "{conflict:?}"
    );
    exec(
        &mut c,
        &format!(
            "UPDATE webhook_deliveries SET payload_hash = 'sha256:{}' WHERE delivery_key = '{}'",
            "0".repeat(64),
            first.delivery_key
        ),
    )
    .unwrap();
    let before = rows(&mut c);
    let retry = c.write_transaction(|c| ingest::ingest(c, &again)).unwrap();
    assert_eq!(
        retry,
        IngestOutcome::Duplicate {
            task_id: Some(task_id),
            state: Some("queued".into()),
        }
    );
    assert_eq!(rows(&mut c), before);
}
