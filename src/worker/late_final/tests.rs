use super::*;
use proptest::prelude::*;

const EVERY: Duration = Duration::from_secs(10);

fn refused(code: &str) -> ClientError {
    ClientError::Refused {
        code: code.into(),
        message: String::new(),
    }
}

#[test]
fn only_a_refused_event_batch_of_a_stream_no_longer_followed_offers_its_final() {
    assert!(offers_final(Kind::Events, &ClientError::LeaseLost));
    assert!(offers_final(Kind::Events, &refused("not_found")));
    assert!(!offers_final(Kind::Answer, &ClientError::LeaseLost));
    assert!(!offers_final(Kind::Events, &refused("bad_request")));
    assert!(!offers_final(Kind::Events, &ClientError::Revoked));
    assert!(!offers_final(
        Kind::Events,
        &ClientError::Transport(String::new())
    ));
}

#[test]
fn a_final_is_settled_when_taken_or_refused_for_good_and_open_otherwise() {
    assert_eq!(after_offer(&Ok(())), Standing::Taken);
    for code in [
        "already_reconciled",
        "attempt_mismatch",
        "attempt_of_another_worker",
        "repository_not_allowed",
        "task_ended",
    ] {
        assert_eq!(
            after_offer(&Err(refused(code))),
            Standing::Refused,
            "{code}"
        );
    }
    for open in [
        refused("not_uncertain"),
        refused("state_changed"),
        refused("a_code_of_a_newer_server"),
        ClientError::Transport("cut".into()),
    ] {
        assert_eq!(after_offer(&Err(open.clone())), Standing::Open, "{open:?}");
    }
}

/// What the server answers one offer, for the simulation below.
fn any_answer() -> impl Strategy<Value = Result<(), ClientError>> {
    prop_oneof![
        Just(Ok(())),
        proptest::sample::select(vec![
            "not_uncertain",
            "state_changed",
            "already_reconciled",
            "attempt_mismatch",
            "attempt_of_another_worker",
            "repository_not_allowed",
            "task_ended",
            "not_found",
        ])
        .prop_map(|c| Err(refused(c))),
        Just(Err(ClientError::Transport("cut".into()))),
    ]
}

proptest! {
    /// A worker looks at an owed final at arbitrary moments (its heartbeat,
    /// a refused batch) and the server answers each offer arbitrarily: the
    /// final is never offered twice within a period, never again once
    /// taken or refused for good, and an open one is offered whenever a
    /// period has passed since its last offer.
    #[test]
    fn an_owed_final_is_offered_at_most_once_a_period_until_settled(
        looks in proptest::collection::vec(0u64..25_000, 1..60),
        answers in proptest::collection::vec(any_answer(), 60),
    ) {
        let start = chrono::DateTime::parse_from_rfc3339("2026-12-07T10:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        let mut now = start;
        let mut standing = Standing::Open;
        let mut last: Option<chrono::DateTime<chrono::Utc>> = None;
        let mut answers = answers.into_iter();
        let mut settled = false;
        for gap in looks {
            now += chrono::Duration::milliseconds(gap as i64);
            let offer = offer_now(standing, last, now, EVERY);
            if settled {
                prop_assert!(!offer, "offered after it was settled");
                continue;
            }
            let due = last.is_none_or(|at| (now - at).to_std().unwrap() >= EVERY);
            prop_assert_eq!(offer, due);
            if offer {
                let answer = answers.next().unwrap();
                standing = after_offer(&answer);
                last = Some(now);
                settled = standing != Standing::Open;
                prop_assert_eq!(settled, match &answer {
                    Ok(()) => true,
                    Err(ClientError::Refused { code, .. }) => code != "not_uncertain" && code != "state_changed",
                    Err(_) => false,
                });
            }
        }
    }
}

#[test]
fn a_clock_that_went_back_does_not_hold_an_open_final() {
    let at = chrono::DateTime::parse_from_rfc3339("2026-12-07T10:00:00Z")
        .unwrap()
        .with_timezone(&chrono::Utc);
    let earlier = at - chrono::Duration::seconds(3);
    assert!(offer_now(Standing::Open, Some(at), earlier, EVERY));
    assert!(!offer_now(Standing::Taken, Some(at), earlier, EVERY));
    assert!(!offer_now(
        Standing::Open,
        Some(at),
        at + chrono::Duration::seconds(9),
        EVERY
    ));
    assert!(offer_now(
        Standing::Open,
        Some(at),
        at + chrono::Duration::seconds(10),
        EVERY
    ));
}

#[test]
fn a_refused_stream_is_news_once_and_the_memory_is_bounded() {
    let mut seen = std::collections::VecDeque::new();
    assert!(first_refusal(&mut seen, "a"));
    assert!(!first_refusal(&mut seen, "a"));
    assert!(first_refusal(&mut seen, "b"));
    for i in 0..REMEMBERED_STREAMS {
        first_refusal(&mut seen, &format!("s{i}"));
    }
    assert_eq!(seen.len(), REMEMBERED_STREAMS);
    // "a" was forgotten first: news again, and "s63" is still known.
    assert!(first_refusal(&mut seen, "a"));
    assert!(!first_refusal(
        &mut seen,
        &format!("s{}", REMEMBERED_STREAMS - 1)
    ));
}
