//! Several server processes on one PostgreSQL: a process that lost its
//! repository's lease while stopped (SIGSTOP, as a long pause or a
//! partition looks from outside) comes back, and the write its turn then
//! makes is refused by the lease's fencing token; the process that took the
//! lease over drives the task from there.

use crate::support::*;
use crate::testapp::*;
use std::process::Command;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(60);

fn signal(pid: u32, sig: &str) {
    let status = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("running kill");
    assert!(status.success(), "kill {sig} {pid} failed");
}

fn lease_row(c: &mut codex_bridge::store::DbConn) -> Option<codex_bridge::store::leases::Lease> {
    let key = codex_bridge::domain::RepoKey::parse("default:acme/widgets").unwrap();
    codex_bridge::store::leases::find(c, &key).unwrap()
}

#[test]
fn a_paused_instances_late_write_is_refused_by_the_fencing_token() {
    let a = TestApp::builder()
        .git_sim()
        .scripted()
        .postgres()
        .env("CODEX_BRIDGE_LEASE_TTL_SECS", "3")
        .env("CODEX_BRIDGE_LEASE_HEARTBEAT_SECS", "1")
        .env("CODEX_BRIDGE_SCHEDULER_SWEEP_MS", "100")
        .start();
    a.git().create_repo("acme", "widgets");
    let mut c = connect(&a.db_url);
    // A runs a turn long enough to be paused in the middle of it.
    let task = a.task_comment(
        "fence-1",
        501,
        "@ccbot slow work [sleep:6000]",
        "widgets",
        1,
    );
    wait_task_state(&a.db_url, &task, "running", LONG);
    let held = lease_row(&mut c).expect("A holds the repository's lease");
    assert_eq!(held.fence, 1);

    // A stops answering; B starts, waits out A's lease and takes it over.
    signal(a.server_pid(), "-STOP");
    let b = a.another_instance();
    wait_until("B to take the lease over", LONG, || {
        lease_row(&mut c).is_some_and(|l| l.owner != held.owner && l.released_at.is_none())
    });
    let taken = lease_row(&mut c).unwrap();
    assert_eq!(taken.fence, 2, "the new holder's token follows A's");
    // B cannot see A's turn: the task waits for an operator, never re-run.
    wait_task_state(&a.db_url, &task, "needs_reconciliation", LONG);
    let version = codex_bridge::store::tasks::find(&mut c, &task.parse().unwrap())
        .unwrap()
        .unwrap()
        .state_version;

    // A resumes, its turn ends, and the drive's write under token 1 is
    // refused whole.
    signal(a.server_pid(), "-CONT");
    wait_until("A's late write to be refused", LONG, || {
        count_where(
            &mut c,
            "audit_events",
            &format!("action = 'lease.write_refused' AND task_id = '{task}'"),
        ) > 0
    });
    let refused: String = {
        #[derive(diesel::QueryableByName)]
        struct Row {
            #[diesel(sql_type = diesel::sql_types::Text)]
            metadata: String,
        }
        codex_bridge::with_conn!(&mut c, |conn| diesel::RunQueryDsl::get_result::<Row>(
            diesel::sql_query(format!(
                "SELECT metadata FROM audit_events WHERE action = 'lease.write_refused' AND task_id = '{task}' ORDER BY id LIMIT 1"
            )),
            conn
        ))
        .unwrap()
        .metadata
    };
    let refused: serde_json::Value = serde_json::from_str(&refused).unwrap();
    assert_eq!(refused["fence"], 1, "{refused}");
    assert_eq!(refused["owner"], held.owner.as_str(), "{refused}");
    // Logged once the refused write returns, just after its audit commits.
    wait_until("A to log why its write was refused", LONG, || {
        a.logs().contains("lease moved on from token 1")
    });
    // Nothing of A's late result landed: the task is where B left it, its
    // turn was never recorded as ended, and A's old holding never came
    // back (B gives the repository back once its task waits for an
    // operator, and A may then take it anew: a new token).
    let now = codex_bridge::store::tasks::find(&mut c, &task.parse().unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(
        (now.state.to_string(), now.state_version),
        ("needs_reconciliation".to_owned(), version)
    );
    assert_eq!(
        count_where(
            &mut c,
            "turns",
            &format!("task_id = '{task}' AND completed_at IS NOT NULL")
        ),
        0
    );
    let after = lease_row(&mut c).unwrap();
    assert!(
        after.fence >= taken.fence,
        "the lease went back to token {} (B took token {})",
        after.fence,
        taken.fence
    );
    assert!(
        after.owner == taken.owner || after.fence > taken.fence,
        "A holds the lease under B's token: {after:?}"
    );
    drop(b);
}

/// A repository whose holder died moves when the lease runs out, not at the
/// next sweep: a process that found it held looks again at its expiry.
/// Sweeps here are a minute apart.
#[test]
fn a_dead_instances_repository_moves_when_its_lease_runs_out() {
    let mut a = TestApp::builder()
        .git_sim()
        .scripted()
        .postgres()
        .env("CODEX_BRIDGE_LEASE_TTL_SECS", "3")
        .env("CODEX_BRIDGE_LEASE_HEARTBEAT_SECS", "1")
        .env("CODEX_BRIDGE_SCHEDULER_SWEEP_MS", "60000")
        .start();
    a.git().create_repo("acme", "widgets");
    let mut c = connect(&a.db_url);
    let first = a.task_comment(
        "move-1",
        601,
        "@ccbot slow work [sleep:30000]",
        "widgets",
        1,
    );
    wait_task_state(&a.db_url, &first, "running", LONG);
    let held = lease_row(&mut c).expect("A holds the repository's lease");
    // B gets work in the same repository and finds it held.
    let b = a.another_instance();
    let second = b.task_comment("move-2", 602, "@ccbot quick", "widgets", 2);
    b.wait_repo_passes("default:acme/widgets", "busy_elsewhere");
    a.kill9();
    let killed = std::time::Instant::now();
    wait_until("B to take the lease over", LONG, || {
        lease_row(&mut c).is_some_and(|l| l.owner != held.owner)
    });
    let took = killed.elapsed();
    assert!(
        took < Duration::from_secs(3 + 3),
        "the lease moved {took:?} after its holder died (lease time 3 s)"
    );
    wait_task_state(&a.db_url, &second, "succeeded", LONG);
}
