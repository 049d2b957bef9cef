use super::*;
use crate::store::workers::{WorkerId, WorkerName};

const ME: &str = "wrk-0123456789abcdef0123456789abcdef";
const OTHER: &str = "wrk-fedcba9876543210fedcba9876543210";

fn worker(repos: &[&str]) -> Worker {
    let texts: Vec<String> = repos.iter().map(|r| r.to_string()).collect();
    Worker {
        worker_id: WorkerId::parse(ME).unwrap(),
        name: WorkerName::parse("build-1").unwrap(),
        repositories: RepoName::parse_list(&texts).unwrap(),
    }
}

fn attempt(owner: &str, status: &str, outcome: Option<&str>) -> Attempt {
    Attempt {
        attempt_id: "att-1".into(),
        task_id: TaskId::mint(),
        number: 1,
        lease_id: Some("lease-1".into()),
        owner: Some(owner.into()),
        status: status.into(),
        outcome: outcome.map(str::to_owned),
        started_at: crate::store::now(),
        ended_at: None,
    }
}

fn repo() -> RepoKey {
    RepoKey::parse("default:Acme/Widgets").unwrap()
}

#[test]
fn a_worker_settles_only_what_it_may_have_run() {
    let mine = worker(&["acme/widgets"]);
    let own = format!("worker:{ME}");
    assert_eq!(
        may_reconcile(&mine, &repo(), &attempt(&own, "active", None)),
        Ok(())
    );
    // Its start's answer never reached the server: still the server's
    // attempt, on a repository the worker was given.
    let unconfirmed = attempt("default:host:1:aa", "active", None);
    assert_eq!(may_reconcile(&mine, &repo(), &unconfirmed), Ok(()));
    assert_eq!(
        may_reconcile(&worker(&["acme/other"]), &repo(), &unconfirmed),
        Err(Refusal::RepositoryNotAllowed)
    );
    assert_eq!(
        may_reconcile(
            &mine,
            &repo(),
            &attempt(&format!("worker:{OTHER}"), "active", None)
        ),
        Err(Refusal::AnotherWorker(format!("worker:{OTHER}")))
    );
    assert_eq!(
        may_reconcile(
            &mine,
            &repo(),
            &attempt(&own, "ended", Some("reconciled_failed"))
        ),
        Err(Refusal::AlreadyReconciled("reconciled_failed".into()))
    );
    // Ended by what made its task uncertain: still the worker's to settle.
    assert_eq!(
        may_reconcile(
            &mine,
            &repo(),
            &attempt(&own, "ended", Some("interrupt_unconfirmed"))
        ),
        Ok(())
    );
}

#[test]
fn every_refusal_has_a_stable_code() {
    let task = TaskId::mint();
    for (refusal, code) in [
        (
            Refusal::AnotherWorker("worker:x".into()),
            "attempt_of_another_worker",
        ),
        (Refusal::RepositoryNotAllowed, "repository_not_allowed"),
        (
            Refusal::AlreadyReconciled("reconciled_failed".into()),
            "already_reconciled",
        ),
    ] {
        match refusal.into_error(&task, "att-1") {
            StoreError::Refused { code: c, message } => {
                assert_eq!(c, code);
                assert!(message.contains("att-1") && message.contains(task.as_str()));
            }
            other => panic!("{other:?}"),
        }
    }
}
