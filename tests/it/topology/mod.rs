//! Three processes of the real server on one PostgreSQL, behind the real
//! nginx with the shipped site for several instances, working for the
//! Gitea simulator with the scripted runtime, through what a deployment
//! lives through: steady work, an instance killed in the middle of a turn,
//! one paused past its lease, one whose clock runs ahead, and a rolling
//! restart. Every webhook goes through nginx to whichever instance it
//! picks. After each phase nothing accepted is lost, no turn was started
//! twice, and Gitea holds every receipt and commit status once
//! ([`Rig::check`]).

mod rig;

use crate::nginx::*;
use crate::support::*;
use rig::*;
use serde_json::json;
use std::process::Command;
use std::time::Duration;

/// libfaketime, which `scripts/test` installs: preloaded into one process,
/// it moves that process's clocks alone.
const FAKETIME_LIB: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

#[test]
fn three_instances_behind_nginx_lose_nothing_and_run_nothing_twice() {
    let mut rig = Rig::start();
    steady(&mut rig);
    rig.check("steady");
    killed_mid_turn(&mut rig);
    rig.check("kill");
    paused_past_its_lease(&mut rig);
    rig.check("pause");
    clock_ahead(&mut rig);
    rig.check("skew");
    drained_and_restarted(&mut rig);
    rig.check("drain");
}

fn signal(pid: u32, sig: &str) {
    let status = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {sig} {pid} failed");
}

/// Webhooks spread over the three instances, each task runs once and
/// succeeds, and the pull request's task sets its commit statuses.
fn steady(rig: &mut Rig) {
    let mut tasks = Vec::new();
    for _ in 0..2 {
        tasks.extend(rig.send_each(&REPOS, "@ccbot steady work [sleep:300]"));
    }
    tasks.push(rig.send(PR_REPO, rig.pr, "@ccbot review this [sleep:300]"));
    for t in &tasks {
        rig.wait(t, "succeeded");
    }
    // Its status on the head: set by whichever instance's worker, once
    // (`Rig::check` counts).
    let pr_task = tasks.last().unwrap();
    wait_until("the pull request's success status", LONG, || {
        rig.statuses_of(pr_task).contains(&"success".to_owned())
    });
    let served = rig.served();
    assert!(
        served.iter().all(|n| *n > 0),
        "webhooks per instance: {served:?}"
    );
}

/// Slow turns on three repositories; the first one's instance, and with it
/// whatever it runs, is split from the others.
fn slow_turns(rig: &mut Rig, ms: u32) -> (String, Vec<String>, Vec<String>) {
    let tasks = rig.send_each(&REPOS[1..], &format!("@ccbot slow work [sleep:{ms}]"));
    for t in &tasks {
        rig.wait(t, "running");
    }
    let owner = rig.ran_on(&tasks[0]);
    let (its, others) = tasks.into_iter().partition(|t| rig.ran_on(t) == owner);
    (owner, its, others)
}

/// An instance killed (SIGKILL) in the middle of a turn: its lease expires
/// and another instance takes the repository; the lost turn is never
/// started again: with no way to see it, the task waits for an operator,
/// who reconciles it. The other turns end as usual, webhooks sent meanwhile
/// reach the living instances, and the killed one comes back.
fn killed_mid_turn(rig: &mut Rig) {
    let (victim_id, lost, others) = slow_turns(rig, 6000);
    let victim = rig.slot_of(&victim_id);
    let held: Vec<_> = lost.iter().map(|t| rig.lease_of(t)).collect();
    let mark = rig.mark();
    rig.apps[victim].kill9();
    let mut meanwhile = rig.send_each(&[PR_REPO], "@ccbot while one is dead");
    meanwhile.push(rig.send(PR_REPO, rig.pr, "@ccbot review, while one is dead"));
    for t in others.iter().chain(&meanwhile) {
        rig.wait(t, "succeeded");
    }
    for (t, before) in lost.iter().zip(&held) {
        rig.wait(t, "needs_reconciliation");
        let moved: Vec<_> = ["lease.taken_over", "lease.expired_released"]
            .iter()
            .flat_map(|action| rig.audit_after(mark, action))
            .collect();
        let now = rig.lease_of(t);
        assert!(
            now.owner != victim_id && now.fence > before.fence,
            "{t}'s repository did not move on from the killed instance: {now:?}"
        );
        // Taken over once expired, or released by a sweep and then taken.
        assert!(
            moved
                .iter()
                .any(|m| m["repoKey"] == before.repo_key.as_str()
                    && (m["previousOwner"] == victim_id.as_str()
                        || m["owner"] == victim_id.as_str())),
            "{moved:?}"
        );
        // The instance that took it looked the turn up in its own runtime's
        // history, did not find it, and left it to an operator.
        let found: Vec<_> = rig
            .task_audit(t, "turn.history_checked")
            .iter()
            .map(|m| m["found"].clone())
            .collect();
        assert_eq!(found, [json!("missing")], "{t}");
    }
    let living = (victim + 1) % rig.apps.len();
    for t in &lost {
        rig.apps[living].reconcile_failed(t);
        rig.expected.insert(t.clone(), "failed");
    }
    rig.apps[victim].start_again();
}

/// An instance stopped (SIGSTOP) in the middle of a turn while webhooks keep
/// coming: its leases move on; the webhooks nginx passed to it wait, and
/// are taken once it goes on (SIGCONT); its turns' late writes, under the
/// tokens it lost, are refused. A turn it ran is then never started again:
/// another instance, which cannot see it, leaves it to an operator, or the
/// paused instance, leasing the repository anew, finds it ended in its own
/// runtime's history.
fn paused_past_its_lease(rig: &mut Rig) {
    let (paused_id, cut, others) = slow_turns(rig, 5000);
    let paused = rig.slot_of(&paused_id);
    let pid = rig.apps[paused].server_pid();
    let held: Vec<_> = cut.iter().map(|t| (t, rig.lease_of(t))).collect();
    let mark = rig.mark();
    let pending: Vec<_> = (0..6)
        .map(|i| {
            let repo = REPOS[i % REPOS.len()];
            let n = if i == 0 { rig.pr } else { rig.issue(repo) };
            rig.comment(repo, n, "@ccbot while one is paused")
        })
        .collect();
    signal(pid, "-STOP");
    let replies = std::thread::scope(|s| {
        let nginx = &rig.nginx;
        let sending: Vec<_> = pending
            .iter()
            .map(|p| s.spawn(move || deliver(nginx, &p.delivery)))
            .collect();
        // Well before the webhooks' own 30 s: an instance that does not
        // answer them then is one whose writes wait on a lock.
        let moved = poll_until(Duration::from_secs(20), || {
            held.iter().all(|(t, before)| {
                let now = rig.lease_of(t);
                now.lease_id != before.lease_id || now.released_at.is_some()
            })
        });
        assert!(
            moved,
            "the paused instance ({paused_id}) leases did not move on by {}; held before \
             the pause, then now: {:#?}; lease events since: {:#?}; sessions: {:#?}",
            rig.db_now(),
            held.iter()
                .map(|(t, before)| (before.clone(), rig.lease_of(t)))
                .collect::<Vec<_>>(),
            [
                "lease.taken_over",
                "lease.expired_released",
                "lease.handed_over"
            ]
            .iter()
            .map(|action| (action, rig.audit_after(mark, action)))
            .collect::<Vec<_>>(),
            rig.activity()
        );
        signal(pid, "-CONT");
        sending
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    // A webhook nginx passed to the stopped instance waited for it and was
    // taken: the server keeps idle connections far longer than nginx does,
    // so waking up it never closes one nginx has just written a request to.
    for (p, r) in pending.into_iter().zip(replies) {
        assert_ne!(
            r.status,
            502,
            "a webhook to the paused instance was cut off: {}",
            rig.nginx.error_log()
        );
        rig.accept(p, r);
    }
    let mut c = rig.db();
    for t in &cut {
        wait_until(
            "the paused instance's late write to be refused",
            LONG,
            || {
                count_where(
                    &mut c,
                    "audit_events",
                    &format!("id > {mark} AND action = 'lease.write_refused' AND task_id = '{t}'"),
                ) > 0
            },
        );
        let settled = poll_until(LONG, || {
            matches!(
                task_state(&mut c, t).as_deref(),
                Some("needs_reconciliation" | "succeeded")
            )
        });
        let state = task_state(&mut c, t).unwrap();
        assert!(settled, "{t} is {state}: {:?}", rig.task_actions(t));
        let found: Vec<String> = rig
            .task_audit(t, "turn.history_checked")
            .iter()
            .filter_map(|m| m["found"].as_str().map(str::to_owned))
            .collect();
        if state == "succeeded" {
            assert_eq!(rig.ran_on(t), paused_id);
            assert!(found.contains(&"completed".to_owned()), "{found:?}");
        } else {
            assert!(found.contains(&"missing".to_owned()), "{found:?}");
            let living = (paused + 1) % rig.apps.len();
            rig.apps[living].reconcile_failed(t);
            rig.expected.insert(t.clone(), "failed");
        }
    }
    let refused = rig.audit_after(mark, "lease.write_refused");
    assert!(
        refused.iter().all(|m| m["owner"] == paused_id.as_str()),
        "{refused:?}"
    );
    assert!(
        rig.apps[paused]
            .logs()
            .contains("lease moved on from token"),
        "the paused instance did not log its refused write"
    );
    for t in &others {
        rig.wait(t, "succeeded");
    }
}

/// An instance whose wall clock runs 30 s ahead (libfaketime, preloaded into
/// that process alone) takes a slot while the others hold the leases of
/// running turns. A lease's expiry is judged by the database's clock, so it
/// sees those leases held and takes none of them; the work completes once,
/// and the skewed instance runs work of its own.
fn clock_ahead(rig: &mut Rig) {
    let slot = 2;
    rig.apps[slot].stop();
    let tasks = rig.send_each(&REPOS, "@ccbot slow work [sleep:6000]");
    for t in &tasks {
        rig.wait(t, "running");
    }
    let mark = rig.mark();
    let addr = rig.addrs[slot].clone();
    rig.apps[slot] = rig.apps[0].another_instance_with(|b| {
        b.env("CODEX_BRIDGE_LISTEN", &addr)
            .env("LD_PRELOAD", FAKETIME_LIB)
            .env("FAKETIME", "+30s")
    });
    let skewed = &rig.apps[slot];
    // The clock really is ahead: the Date its HTTP answers carry.
    let r = ureq::get(&skewed.url("/healthz")).call().unwrap();
    let date = chrono::DateTime::parse_from_rfc2822(r.header("date").unwrap()).unwrap();
    let ahead = date.signed_duration_since(chrono::Utc::now()).num_seconds();
    assert!(
        ahead >= 25,
        "the skewed instance's clock is {ahead} s ahead"
    );
    // Its sweep wakes every repository with a running turn, and it leaves
    // each to its holder: its actors show them busy elsewhere. Trusting its
    // own clock, it would read those leases as expired, and take them.
    let skewed_pid = skewed.pid();
    let by_skewed = |m: &serde_json::Value| {
        m["owner"]
            .as_str()
            .is_some_and(|o| o.contains(&format!(":{skewed_pid}:")))
    };
    wait_until("the skewed instance to look at a held lease", LONG, || {
        let tree = skewed.admin_get("/api/gitea-workflow/actors").json;
        let left = tree["repositories"]
            .as_array()
            .is_some_and(|r| r.iter().any(|r| r["status"] == "busy_elsewhere"));
        left || !rig.audit_after(mark, "lease.expired_released").is_empty()
            || rig
                .audit_after(mark, "lease.taken_over")
                .iter()
                .any(by_skewed)
    });
    let mut c = rig.db();
    for t in &tasks {
        wait_until("the turns to end", LONG, || {
            task_state(&mut c, t).as_deref() != Some("running")
        });
    }
    let taken = rig.audit_after(mark, "lease.taken_over");
    assert!(
        !taken.iter().any(by_skewed),
        "the skewed instance took over a lease whose holder lives: {taken:?}"
    );
    // Nothing died here: no lease expired, and no holder lost one.
    for action in [
        "lease.taken_over",
        "lease.expired_released",
        "lease.write_refused",
    ] {
        let events = rig.audit_after(mark, action);
        assert!(
            events.is_empty(),
            "{action} while every holder lives: {events:?}"
        );
    }
    for t in &tasks {
        rig.wait(t, "succeeded");
    }
    rig.until_one_runs_on(slot);
}

/// A rolling restart's step: an instance drained through the site while it
/// runs a turn finishes that turn, takes no new work, hands its repository
/// over; stopped (SIGTERM) and started again, it takes work again.
fn drained_and_restarted(rig: &mut Rig) {
    let (drained_id, its, others) = slow_turns(rig, 4000);
    let d = rig.slot_of(&drained_id);
    let repo = rig.repo_of(&its[0]);
    let mark = rig.mark();
    // One turn per repository at a time: this one waits for the drained
    // instance's turn, then runs elsewhere.
    let n = rig.issue(&repo);
    let next = rig.send(&repo, n, "@ccbot after the drain");
    let r = rig.nginx.http_request(
        "POST",
        &format!("/api/gitea-workflow/instances/{drained_id}/drain"),
        &[
            bearer(),
            ("Content-Type".to_owned(), "application/json".to_owned()),
        ],
        json!({"requestId": "topology-drain", "reason": "rolling restart"})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    for t in its.iter().chain(&others).chain([&next]) {
        rig.wait(t, "succeeded");
    }
    for t in &its {
        assert_eq!(rig.ran_on(t), drained_id, "{t} moved while its turn ran");
    }
    let took = rig.ran_on(&next);
    assert_ne!(took, drained_id, "the drained instance took new work");
    let handed = rig.audit_after(mark, "lease.handed_over");
    assert!(
        handed
            .iter()
            .any(|m| m["previousOwner"] == drained_id.as_str() && m["owner"] == took.as_str()),
        "no handover from the drained instance: {handed:?}"
    );
    let pid = rig.apps[d].pid();
    wait_until("the drained instance to hold no lease", LONG, || {
        row_of(&instances(&rig.nginx), pid)
            .is_some_and(|r| r["draining"] == true && r["leases"] == 0)
    });
    rig.apps[d].terminate();
    let exit = rig.apps[d].wait_exit(Duration::from_secs(20));
    assert!(exit.is_some_and(|s| s.success()), "{exit:?}");
    let row = row_of(&instances(&rig.nginx), pid).unwrap();
    assert!(row["stoppedAt"].is_string(), "{row}");
    rig.apps[d].start_again();
    let pid = rig.apps[d].pid();
    wait_until("the restarted instance to register", LONG, || {
        row_of(&instances(&rig.nginx), pid)
            .is_some_and(|r| r["alive"] == true && r["draining"] == false)
    });
    rig.until_one_runs_on(d);
}
