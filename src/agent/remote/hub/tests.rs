use super::*;
use crate::worker_api::Value;
use std::time::Duration;

fn lookup() -> CallBody {
    CallBody::LookupTurn {
        thread_id: "t".into(),
        operation_id: "op".into(),
    }
}

#[tokio::test]
async fn a_call_goes_to_the_lease_that_takes_it_and_its_answer_comes_back() {
    let hub = CallHub::default();
    let mut sub = hub.submit("acme/widgets", lookup());
    assert!(hub.take("acme/other", "l1", "w1").is_empty());
    let calls = hub.take("acme/widgets", "l1", "w1");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].lease_id, "l1");
    // Another lease cannot answer it.
    assert_eq!(
        hub.answer("l2", &sub.call_id, Outcome::Ok { value: Value::Done }),
        Err(Unmatched::UnknownCall)
    );
    hub.answer("l1", &sub.call_id, Outcome::Ok { value: Value::Done })
        .unwrap();
    assert_eq!(
        sub.answer.try_recv().unwrap(),
        Outcome::Ok { value: Value::Done }
    );
    // Answered once.
    assert_eq!(
        hub.answer("l1", &sub.call_id, Outcome::Ok { value: Value::Done }),
        Err(Unmatched::UnknownCall)
    );
}

#[tokio::test]
async fn a_lost_call_is_unavailable_before_a_worker_took_it_and_uncertain_after() {
    let hub = CallHub::default();
    let queued = hub.submit("acme/widgets", lookup());
    let state = hub.abandon(&queued.call_id).unwrap();
    assert!(matches!(lost(&state, "x"), AgentError::Unavailable(_)));
    assert!(hub.take("acme/widgets", "l1", "w1").is_empty());

    let mut taken = hub.submit("acme/widgets", lookup());
    hub.take("acme/widgets", "l1", "w1");
    // Revoking the worker ends its lease: the call fails closed.
    assert_eq!(hub.end_worker("w1", "revoked"), 1);
    assert!(matches!(
        taken.answer.try_recv().unwrap(),
        Outcome::Uncertain { .. }
    ));
    assert_eq!(
        hub.answer("l1", &taken.call_id, Outcome::Ok { value: Value::Done }),
        Err(Unmatched::UnknownCall)
    );

    // A lease that moves loses the calls the old one took.
    let mut moved = hub.submit("acme/widgets", lookup());
    hub.take("acme/widgets", "l2", "w2");
    hub.take("acme/widgets", "l3", "w3");
    assert!(matches!(
        moved.answer.try_recv().unwrap(),
        Outcome::Uncertain { .. }
    ));
}

#[tokio::test]
async fn events_flow_in_order_once_and_the_stream_ends_with_the_turn() {
    let hub = CallHub::default();
    let (sub, mut rx) = hub.submit_turn(
        "acme/widgets",
        CallBody::Interrupt {
            thread_id: "t".into(),
            turn_id: "u".into(),
        },
    );
    // Nobody took the call yet: no lease may post its events.
    assert_eq!(
        hub.events("l1", &sub.call_id, 0, vec![Event::Idle { seq: 1 }]),
        Err(Unmatched::UnknownCall)
    );
    hub.take("acme/widgets", "l1", "w1");
    hub.answer(
        "l1",
        &sub.call_id,
        Outcome::Ok {
            value: Value::Turn {
                turn_id: "u".into(),
                worker_id: None,
            },
        },
    )
    .unwrap();
    // One notification makes a transcript item and the delivery, with one
    // `seq`: both are events of their own.
    let batch = vec![
        Event::Other { seq: 1 },
        Event::Delivered {
            seq: 1,
            client_id: Some("op".into()),
        },
    ];
    hub.events("l1", &sub.call_id, 0, batch.clone()).unwrap();
    // Sent again after a lost answer: nothing twice.
    hub.events("l1", &sub.call_id, 0, batch).unwrap();
    // A batch past a gap is refused: a batch before it was lost.
    assert_eq!(
        hub.events("l1", &sub.call_id, 5, vec![Event::Idle { seq: 9 }]),
        Err(Unmatched::UnknownCall)
    );
    hub.events(
        "l1",
        &sub.call_id,
        2,
        vec![Event::Completed {
            seq: 3,
            final_text: Some("done".into()),
        }],
    )
    .unwrap();
    let mut got = Vec::new();
    while let Some(e) = rx.recv().await {
        got.push(e);
    }
    assert_eq!(
        got,
        vec![
            TurnEvent::Delivered {
                seq: 1,
                client_id: Some("op".into())
            },
            TurnEvent::Completed {
                seq: 3,
                final_text: Some("done".into())
            },
        ]
    );
    assert_eq!(
        hub.events("l1", &sub.call_id, 3, vec![Event::Idle { seq: 4 }]),
        Err(Unmatched::UnknownCall)
    );
}

#[tokio::test]
async fn a_poll_wakes_when_a_call_arrives() {
    let hub = CallHub::default();
    let waiter = {
        let hub = hub.clone();
        tokio::spawn(async move {
            hub.wait("acme/widgets", Duration::from_secs(30)).await;
            hub.take("acme/widgets", "l1", "w1").len()
        })
    };
    tokio::task::yield_now().await;
    let _sub = hub.submit("acme/widgets", lookup());
    let taken = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(taken, 1);
}
