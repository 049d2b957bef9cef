use super::*;
use std::time::Instant;

#[test]
fn a_lost_call_is_unavailable_before_a_worker_took_it_and_uncertain_after() {
    assert!(matches!(
        lost(&CallState::Queued, "x"),
        AgentError::Unavailable(_)
    ));
    assert!(matches!(
        lost(
            &CallState::Delivered {
                lease_id: "l1".into()
            },
            "x"
        ),
        AgentError::Uncertain(_)
    ));
}

#[tokio::test]
async fn a_wake_up_after_the_look_is_not_missed_and_others_keys_wake_nobody() {
    let wakeups = Wakeups::default();
    let mut w = wakeups.waiter("call:a");
    w.seen();
    // Comes between the look at the store and the wait.
    wakeups.wake("call:a");
    let t = Instant::now();
    w.wait(Duration::from_secs(30)).await;
    assert!(t.elapsed() < Duration::from_secs(10));

    w.seen();
    wakeups.wake("call:b");
    let t = Instant::now();
    w.wait(Duration::from_millis(200)).await;
    assert!(
        t.elapsed() >= Duration::from_millis(200),
        "woken by another key"
    );

    w.seen();
    wakeups.wake_all();
    let t = Instant::now();
    w.wait(Duration::from_secs(30)).await;
    assert!(t.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn a_key_goes_with_its_last_waiter() {
    let wakeups = Wakeups::default();
    let a = wakeups.waiter("repo:acme/widgets");
    let b = wakeups.waiter("repo:acme/widgets");
    drop(a);
    assert_eq!(wakeups.lock().len(), 1);
    drop(b);
    assert!(wakeups.lock().is_empty());
}
