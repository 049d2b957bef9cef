//! Commit statuses of pull request tasks, decided without I/O: which status
//! a task's state change asks for and on which commit ([`intent_for`]), and
//! which rows still waiting to be posted a newer status of the same commit
//! made stale ([`settle`]). The store queues what `intent_for` says in the
//! commit of the transition; the statuses worker posts what `settle` says.
//!
//! A pull request task sets the status context [`CONTEXT`] on the commit its
//! workspace was checked out at: `pending` when a turn starts, then its end.
//! A task that never started a turn sets none, an Issue task none at all.
//! Ends without a verdict on the work (held for an operator, cancelled,
//! stopped) are `error`: `failure` would say the work was done and is wrong.

use super::states::{CommitStatusState, StatusProgress};
use super::TaskId;
use crate::lifecycle::TaskState;

/// The context of every status the bridge sets: Gitea's combined state of a
/// commit counts the latest status of each context.
pub const CONTEXT: &str = "codex-bridge";

/// The status a move of a task to `to` asks for (`None`: it changes none).
pub fn state_for(to: TaskState) -> Option<CommitStatusState> {
    use CommitStatusState as C;
    use TaskState as T;
    match to {
        T::Running => Some(C::Pending),
        T::Succeeded | T::SucceededWithRestFallback => Some(C::Success),
        T::Failed | T::FailedReply | T::TimedOut | T::Rejected => Some(C::Failure),
        T::NeedsReconciliation | T::Cancelled | T::Aborted => Some(C::Error),
        T::Received
        | T::Queued
        | T::Leased
        | T::AwaitingApproval
        | T::WaitingUser
        | T::VerifyingReply
        | T::RetryWait
        | T::BlockedWorkspace
        | T::CancelRequested
        | T::Ignored
        | T::Duplicate => None,
    }
}

/// What the status says next to the commit: what happened, and the task to
/// look at (with `public_url` the status also links to it). Never a secret,
/// never a comment's text: only the state, the stable error code and the id.
pub fn description(to: TaskState, error_code: Option<&str>, task_id: &TaskId) -> String {
    use TaskState as T;
    let code = error_code.map(|c| format!(": {c}")).unwrap_or_default();
    let what = match to {
        T::Running => "Codex is working on it".to_owned(),
        T::Succeeded => "Codex answered in the conversation".to_owned(),
        T::SucceededWithRestFallback => {
            "Codex answered; the bridge posted the answer for it".to_owned()
        }
        T::Failed => format!("The task failed{code}"),
        T::FailedReply => {
            "Codex finished, but its answer could not be posted or confirmed".to_owned()
        }
        T::TimedOut => "The task ran past its time limit and was stopped".to_owned(),
        T::Rejected => format!("The task was refused{code}"),
        T::NeedsReconciliation => "Held for an operator: the outcome is uncertain".to_owned(),
        T::Cancelled => "Cancelled".to_owned(),
        T::Aborted => format!("Stopped before it finished{code}"),
        other => format!("The task is {other}"),
    };
    format!("{what} ({task_id})")
}

/// The last status queued for a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastStatus<'a> {
    pub state: CommitStatusState,
    pub sha: &'a str,
    pub description: &'a str,
}

/// A status to queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusIntent {
    pub state: CommitStatusState,
    pub sha: String,
    pub description: String,
}

/// The status a pull request task's move to `to` asks for. `head` is the
/// commit its workspace was last checked out at, `last` the task's last
/// status. `pending` goes on `head`; an end goes on the commit of `last`,
/// the one the turn ran on, and only if there is one (no turn started, no
/// status). Nothing that would repeat `last`: a turn after a retry or an
/// approval is still the same `pending`.
pub fn intent_for(
    to: TaskState,
    error_code: Option<&str>,
    task_id: &TaskId,
    head: Option<&str>,
    last: Option<LastStatus<'_>>,
) -> Option<StatusIntent> {
    let state = state_for(to)?;
    let sha = match state {
        CommitStatusState::Pending => head?,
        _ => last?.sha,
    };
    let description = description(to, error_code, task_id);
    let repeats = last.is_some_and(|l| {
        l.state == state
            && l.sha == sha
            && (state == CommitStatusState::Pending || l.description == description)
    });
    (!repeats).then(|| StatusIntent {
        state,
        sha: sha.to_owned(),
        description,
    })
}

/// One row of a commit's queue, as [`settle`] reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueuedStatus {
    pub id: i64,
    pub progress: StatusProgress,
    /// `posting`, and its claim has not run out: a worker (maybe another
    /// instance's) is posting it now.
    pub in_flight: bool,
}

/// What the worker does with an unfinished row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// The newest status of its commit, nothing in flight before it: post it.
    Post,
    /// A newer status of the same commit exists: posting this one after it
    /// (or instead of it) would show a stale state, so it is never posted.
    Supersede,
    /// Being posted, or behind one that is: look again once that is done.
    Wait,
}

/// What to do with each unfinished row of one commit, given its rows from
/// the oldest unfinished one on, in queue order (`id` ascending). The newest
/// row is the commit's current truth: posted when unfinished, but only after
/// every POST in flight for the commit has ended, so Gitea receives a
/// commit's statuses in queue order. Every older unfinished row that is not
/// in flight is superseded. Finished rows are left alone.
pub fn settle(rows: &[QueuedStatus]) -> Vec<(i64, Settle)> {
    let newest = rows.iter().map(|r| r.id).max();
    let in_flight = rows.iter().any(|r| r.in_flight && r.progress.is_open());
    rows.iter()
        .filter(|r| r.progress.is_open())
        .map(|r| {
            let action = match (r.in_flight, Some(r.id) == newest) {
                (true, _) => Settle::Wait,
                (false, true) if in_flight => Settle::Wait,
                (false, true) => Settle::Post,
                (false, false) => Settle::Supersede,
            };
            (r.id, action)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn task() -> TaskId {
        TaskId::parse("task-0123456789abcdef0123456789abcdef").unwrap()
    }

    #[test]
    fn each_state_asks_for_its_status() {
        use CommitStatusState as C;
        use TaskState as T;
        let expected = [
            (T::Running, Some(C::Pending)),
            (T::Succeeded, Some(C::Success)),
            (T::SucceededWithRestFallback, Some(C::Success)),
            (T::Failed, Some(C::Failure)),
            (T::FailedReply, Some(C::Failure)),
            (T::TimedOut, Some(C::Failure)),
            (T::Rejected, Some(C::Failure)),
            (T::NeedsReconciliation, Some(C::Error)),
            (T::Cancelled, Some(C::Error)),
            (T::Aborted, Some(C::Error)),
            (T::Queued, None),
            (T::Leased, None),
            (T::AwaitingApproval, None),
            (T::WaitingUser, None),
            (T::VerifyingReply, None),
            (T::RetryWait, None),
            (T::CancelRequested, None),
        ];
        for (to, status) in expected {
            assert_eq!(state_for(to), status, "{to}");
        }
        // Every terminal state ends the status it started.
        for to in TaskState::TERMINAL {
            if !matches!(to, T::Ignored | T::Duplicate) {
                assert!(
                    state_for(to).is_some_and(|s| s != C::Pending),
                    "{to} leaves a pending status behind"
                );
            }
        }
    }

    #[test]
    fn a_turn_start_sets_pending_on_the_head_and_the_end_follows_it() {
        let t = task();
        let pending = intent_for(TaskState::Running, None, &t, Some("abc"), None).unwrap();
        assert_eq!(
            (pending.state, pending.sha.as_str()),
            (CommitStatusState::Pending, "abc")
        );
        assert!(pending
            .description
            .ends_with("(task-0123456789abcdef0123456789abcdef)"));
        // No head (an Issue, or a workspace never prepared): nothing.
        assert_eq!(intent_for(TaskState::Running, None, &t, None, None), None);
        // No turn started: no end either.
        assert_eq!(
            intent_for(TaskState::Failed, Some("x"), &t, Some("abc"), None),
            None
        );
        let last = LastStatus {
            state: CommitStatusState::Pending,
            sha: "abc",
            description: &pending.description,
        };
        // The end goes on the commit the turn ran on, not on a newer head.
        let end = intent_for(
            TaskState::Failed,
            Some("turn_failed"),
            &t,
            Some("def"),
            Some(last),
        )
        .unwrap();
        assert_eq!(
            (end.state, end.sha.as_str()),
            (CommitStatusState::Failure, "abc")
        );
        assert!(
            end.description.contains("turn_failed"),
            "{}",
            end.description
        );
        // Another turn on the same commit (a retry, after an approval): the
        // same pending, not queued again; on a new head it is.
        assert_eq!(
            intent_for(TaskState::Running, None, &t, Some("abc"), Some(last)),
            None
        );
        assert_eq!(
            intent_for(TaskState::Running, None, &t, Some("def"), Some(last)).map(|i| i.sha),
            Some("def".to_owned())
        );
    }

    fn progress() -> impl Strategy<Value = StatusProgress> {
        prop::sample::select(StatusProgress::ALL.to_vec())
    }

    proptest! {
        // Failing cases are kept beside the integration tests' and replayed first.
        #![proptest_config(ProptestConfig {
            failure_persistence: Some(Box::new(
                proptest::test_runner::FileFailurePersistence::Direct(
                    "tests/proptest-regressions/domain-statuses.txt"
                )
            )),
            ..ProptestConfig::default()
        })]

        /// Whatever the rows, at most one is posted, it is the newest and
        /// nothing of its commit is in flight; a row in flight is left to its
        /// worker; every other older unfinished row is superseded; no
        /// finished row is touched.
        #[test]
        fn only_the_newest_status_of_a_commit_is_ever_posted(
            rows in prop::collection::vec((progress(), any::<bool>(), 1i64..5), 0..12),
        ) {
            let mut id = 0;
            let rows: Vec<QueuedStatus> = rows
                .into_iter()
                .map(|(progress, flying, gap)| {
                    id += gap;
                    QueuedStatus { id, progress, in_flight: flying && progress == StatusProgress::Posting }
                })
                .collect();
            let plan = settle(&rows);
            let newest = rows.last().map(|r| r.id);
            let flying = rows.iter().any(|r| r.in_flight);
            let action = |id: i64| plan.iter().find(|(a, _)| *a == id).map(|(_, s)| *s);
            let posts: Vec<i64> = plan.iter().filter(|(_, a)| *a == Settle::Post).map(|(id, _)| *id).collect();
            prop_assert!(posts.len() <= 1, "{:?}", plan);
            for post in &posts {
                prop_assert_eq!(Some(*post), newest, "posted a row that is not the newest");
                prop_assert!(!flying, "posted while a POST of the commit is in flight");
            }
            for r in &rows {
                match action(r.id) {
                    None => prop_assert!(!r.progress.is_open(), "{:?} left alone", r),
                    Some(_) if !r.progress.is_open() => prop_assert!(false, "{:?} is finished", r),
                    Some(Settle::Supersede) => prop_assert!(!r.in_flight && Some(r.id) != newest, "{:?}", r),
                    Some(Settle::Wait) => prop_assert!(r.in_flight || flying, "{:?} waits for nothing", r),
                    Some(Settle::Post) => {}
                }
                if r.progress.is_open() && !r.in_flight && Some(r.id) != newest {
                    prop_assert_eq!(action(r.id), Some(Settle::Supersede), "{:?} is stale", r);
                }
            }
            if !flying && rows.last().is_some_and(|r| r.progress.is_open()) {
                prop_assert_eq!(posts.len(), 1, "the newest unfinished status is not posted");
            }
        }

        /// Along any path of the lifecycle, the statuses queued never leave a
        /// pending status as the task's last once it ended, never repeat the
        /// last one, and never start with an end.
        #[test]
        fn a_task_s_statuses_follow_its_path(path in prop::collection::vec(0usize..21, 0..40), heads in prop::collection::vec(0usize..3, 40)) {
            let t = task();
            let shas = ["a1", "b2", "c3"];
            let mut state = TaskState::Queued;
            let mut queued: Vec<StatusIntent> = Vec::new();
            for (step, pick) in path.iter().enumerate() {
                let to = TaskState::ALL[*pick];
                if crate::lifecycle::check(state, to).is_err() {
                    continue;
                }
                state = to;
                let last = queued.last().map(|l| LastStatus {
                    state: l.state,
                    sha: &l.sha,
                    description: &l.description,
                });
                let head = Some(shas[heads[step]]);
                if let Some(next) = intent_for(to, None, &t, head, last) {
                    if let Some(l) = queued.last() {
                        prop_assert!(l != &next, "repeated {:?}", next);
                    } else {
                        prop_assert_eq!(next.state, CommitStatusState::Pending);
                    }
                    queued.push(next);
                }
            }
            if state.is_terminal() {
                if let Some(last) = queued.last() {
                    prop_assert!(last.state != CommitStatusState::Pending, "{state} left pending");
                }
            }
        }
    }
}
