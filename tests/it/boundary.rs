//! A wake-up that lands exactly at the end of a lane's pass — after the
//! pass's last read of the store, before the actor frees the lane — on the
//! real session actor: the pass-end probe commits a new command and wakes
//! the session right there, and waits until the actor took the wake-up (the
//! health view shows the follow-up). Nothing else would wake the lane (the
//! registry's sweep is ten minutes away), so the command is answered only
//! if that wake-up was kept.
//!
//! The command lane is the one whose wake-ups have a single source: a
//! drive's lane is also woken again by its repository when a task settles,
//! so the same probe there passes even with the follow-up dropped.

use super::actors::{request, run, settings, Harness};
use crate::support::poll_until_async;
use codex_bridge::actors::gate::{LaneKind, PassEndProbe};
use codex_bridge::actors::registry::{Notify, Registry, RunCommands, Snapshot};
use codex_bridge::agent::scripted::ScriptedAgent;
use codex_bridge::domain::TaskId;
use codex_bridge::lifecycle::TaskState;
use codex_bridge::store::ingest::{self, IngestOutcome};
use codex_bridge::store::Store;
use futures_util::FutureExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// What the probe needs of the harness, set once it started.
type Reach = OnceLock<(Store, actix::Addr<Registry>)>;

/// Commits `text` as comment 2 and wakes what the webhook would (the
/// session's command lane for a turnless command, else the repository,
/// which leases it and wakes the session's drive); then waits until the
/// session shows the wake-up as a pending follow-up of `lane`. Its task.
async fn land(
    store: &Store,
    registry: &actix::Addr<Registry>,
    lane: LaneKind,
    text: &str,
) -> String {
    let req = request("widgets", 1, 2, text);
    let session = req.session_to_wake();
    let subject = req.subject.as_ref().unwrap();
    let key = subject.resource_key().to_string();
    let repo_key = subject.repo.repo_key().clone();
    let out = store.write(move |c| ingest::ingest(c, &req)).await.unwrap();
    let IngestOutcome::Accepted { task_id, .. } = out else {
        panic!("not accepted: {out:?}")
    };
    match session {
        Some((session_key, repo_key)) => registry.do_send(RunCommands {
            session_key,
            repo_key,
        }),
        None => registry.do_send(Notify { repo_key }),
    }
    let taken = poll_until_async(Duration::from_secs(10), || {
        let key = key.clone();
        async move {
            let h = registry.send(Snapshot).await.unwrap();
            h.repositories
                .iter()
                .flat_map(|r| r.sessions.iter())
                .filter(|s| s.session_key == key)
                .any(|s| match lane {
                    LaneKind::Commands => s.command_lane.followup,
                    LaneKind::Drain => s.normal_lane.followup,
                    LaneKind::Steer => s.steer_lane.followup,
                })
        }
    })
    .await;
    assert!(taken, "the session never took the wake-up");
    task_id.to_string()
}

/// Runs `first`, and at the end of the first `lane` pass lands `second`
/// there; both must succeed.
fn landed_at_the_end_of(lane: LaneKind, first: &'static str, second: &'static str) {
    run(async move {
        let reach: Arc<Reach> = Arc::new(OnceLock::new());
        let landed: Arc<Mutex<Option<String>>> = Arc::default();
        let fired = Arc::new(AtomicBool::new(false));
        let mut s = settings();
        s.sweep = Duration::from_secs(600);
        let probe = {
            let (reach, landed, fired) = (reach.clone(), landed.clone(), fired.clone());
            PassEndProbe(Arc::new(move |at, _key| {
                let (reach, landed, fired) = (reach.clone(), landed.clone(), fired.clone());
                async move {
                    if at != lane || fired.swap(true, Ordering::SeqCst) {
                        return;
                    }
                    let (store, registry) = reach.get().expect("the harness started");
                    let task = land(store, registry, lane, second).await;
                    *landed.lock().unwrap() = Some(task);
                }
                .boxed()
            }))
        };
        s.pass_end = Some(probe);
        let h = Harness::start(ScriptedAgent::new(), s);
        assert!(reach.set((h.store.clone(), h.registry.clone())).is_ok());

        let first = h.comment("widgets", 1, 1, first).await;
        h.wait_state(&first, TaskState::Succeeded).await;
        let arrived = poll_until_async(Duration::from_secs(10), || async {
            landed.lock().unwrap().is_some()
        })
        .await;
        assert!(arrived, "the probe never landed its wake-up");
        let second: TaskId = landed.lock().unwrap().clone().unwrap().parse().unwrap();
        h.wait_state(&second, TaskState::Succeeded).await;
    });
}

#[test]
fn a_wake_up_landing_at_the_end_of_a_command_pass_is_kept() {
    landed_at_the_end_of(LaneKind::Commands, "@ccbot /status", "@ccbot /status");
}
