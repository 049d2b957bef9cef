//! The rules, pure; the queries on SQLite and PostgreSQL are in
//! tests/it/worker_calls.rs.

use super::*;
use proptest::prelude::*;

fn call(phase: Phase, lease: Option<&str>, outcome: Option<Outcome>) -> WorkerCall {
    WorkerCall {
        call_id: CallId::mint(),
        repository: "acme/widgets".into(),
        caller: "server-a".into(),
        phase,
        lease_id: lease.map(str::to_owned),
        outcome,
        stream: true,
        deadline_at: "2026-01-01T00:01:00.000000Z".into(),
    }
}

const AT: &str = "2026-01-01T00:00:00.000000Z";

fn ok() -> Outcome {
    Outcome::Ok {
        value: crate::worker_api::Value::Done,
    }
}

#[test]
fn call_ids_are_ours_or_refused() {
    let id = CallId::mint();
    assert_eq!(CallId::parse(id.as_str()), Some(id));
    for bad in [
        "",
        "wc-",
        "call-1-2",
        "wc-xyz",
        "wc-0123456789abcdef0123456789abcdeg",
    ] {
        assert_eq!(CallId::parse(bad), None, "{bad}");
    }
    for p in [
        Phase::Queued,
        Phase::Delivered,
        Phase::Answered,
        Phase::Lost,
    ] {
        assert_eq!(Phase::parse(p.as_str()), Some(p));
    }
}

#[test]
fn a_poll_takes_only_queued_calls_of_its_repository_before_their_deadline_from_live_callers() {
    let q = call(Phase::Queued, None, None);
    assert!(claimable(&q, "acme/widgets", AT, true));
    assert!(!claimable(&q, "acme/other", AT, true));
    assert!(!claimable(&q, "acme/widgets", AT, false), "its caller died");
    assert!(
        !claimable(&q, "acme/widgets", "2026-01-01T00:01:00.000000Z", true),
        "past its deadline"
    );
    let d = call(Phase::Delivered, Some("l1"), None);
    assert!(!claimable(&d, "acme/widgets", AT, true), "never twice");
}

#[test]
fn only_the_lease_a_call_was_delivered_under_answers_it_once_and_streams_its_turn() {
    let d = call(Phase::Delivered, Some("l1"), None);
    assert!(may_answer(&d, "l1"));
    assert!(!may_answer(&d, "l2"));
    assert!(stream_open(&d, "l1"));
    assert!(!stream_open(&d, "l2"));
    let answered = call(Phase::Answered, Some("l1"), Some(ok()));
    assert!(!may_answer(&answered, "l1"), "answered once");
    assert!(stream_open(&answered, "l1"));
    let failed = call(
        Phase::Answered,
        Some("l1"),
        Some(Outcome::Refused {
            message: "no".into(),
        }),
    );
    assert!(!stream_open(&failed, "l1"), "a turn that never started");
    let lost_call = call(Phase::Lost, Some("l1"), Some(ok()));
    assert!(!stream_open(&lost_call, "l1"));
    assert!(!may_answer(&call(Phase::Queued, None, None), "l1"));
}

#[test]
fn a_caller_learns_its_answer_or_that_a_lease_that_ended_left_it_uncertain() {
    assert_eq!(
        watch_verdict(Some(&call(Phase::Queued, None, None)), false),
        Verdict::Pending
    );
    assert_eq!(
        watch_verdict(Some(&call(Phase::Delivered, Some("l1"), None)), true),
        Verdict::Pending
    );
    assert!(matches!(
        watch_verdict(Some(&call(Phase::Delivered, Some("l1"), None)), false),
        Verdict::Settled(Outcome::Uncertain { .. })
    ));
    assert_eq!(
        watch_verdict(Some(&call(Phase::Answered, Some("l1"), Some(ok()))), false),
        Verdict::Settled(ok()),
        "an answer stored stands, whatever became of the lease"
    );
    assert!(matches!(
        watch_verdict(None, true),
        Verdict::Settled(Outcome::Uncertain { .. })
    ));
}

fn event(i: u64, ends: bool) -> Event {
    if ends {
        Event::Completed {
            seq: i as i64,
            final_text: None,
        }
    } else {
        Event::Idle { seq: i as i64 }
    }
}

proptest! {
    /// However the worker cuts its stream into batches and sends them again
    /// (a lost answer, a restart), in order, the store holds the stream's
    /// events up to the one that ends the turn, each once, in place.
    #[test]
    fn batches_sent_and_sent_again_store_each_event_once_in_place(
        len in 1u64..20,
        end_at in proptest::option::of(0u64..20),
        cuts in proptest::collection::vec((0u64..20, 1u64..6), 1..40),
    ) {
        let stream: Vec<Event> = (0..len).map(|i| event(i, Some(i) == end_at)).collect();
        let mut held: Vec<Event> = Vec::new();
        let mut ended = false;
        // Each batch starts anywhere at or before what the store holds.
        for (back, size) in cuts {
            let first = (held.len() as u64).saturating_sub(back);
            if first >= len {
                continue;
            }
            let last = (first + size).min(len);
            let batch = &stream[first as usize..last as usize];
            match place(held.len() as u64, ended, first, batch) {
                Ok(range) => {
                    for e in &batch[range] {
                        prop_assert!(!ended, "nothing after the end");
                        ended = e.ends_turn();
                        held.push(e.clone());
                    }
                }
                Err(_) => prop_assert!(ended, "refused only past the end"),
            }
        }
        let want = match end_at.filter(|e| *e < len) {
            Some(e) => e as usize + 1,
            None => len as usize,
        };
        prop_assert!(held.len() <= want);
        prop_assert_eq!(&held[..], &stream[..held.len()]);
    }

    /// A batch past a gap is refused: a batch before it was lost.
    #[test]
    fn a_batch_past_a_gap_is_refused(have in 0u64..10, gap in 1u64..5) {
        prop_assert_eq!(
            place(have, false, have + gap, &[event(0, false)]),
            Err(Unmatched::UnknownCall)
        );
    }
}
