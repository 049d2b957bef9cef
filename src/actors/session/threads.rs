//! Which thread a task's turn runs on: decided from what the session stored
//! (its thread, the trust and the Codex home it was created with) and where
//! this process's runtime keeps its threads, with no I/O.
//!
//! A thread lives in the Codex home of the process that created it; it is
//! never shared between processes. While that process holds the
//! repository, its sessions resume their threads. When another process
//! runs the session (the first one died, was drained, or gave the
//! repository back), it cannot open the thread: it starts a new one and
//! hands it the conversation as the bridge stored it (each turn's comment
//! and the agent's final answer) before the first turn, recorded as a new
//! generation of the session.

use crate::agent::Exchange;
use crate::domain::trust::ThreadTrust;
use crate::store::sessions::StoredExchange;

/// The most earlier exchanges a rebuilt thread is given.
pub const REBUILD_EXCHANGES: i64 = 20;

/// The most text (in bytes, both sides of every exchange) a rebuilt thread
/// is given: the newest exchanges that fit. A longer conversation loses its
/// oldest part, as a model's context would.
pub const REBUILD_BYTES: usize = 64 * 1024;

/// What the session's next turn needs of the runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ThreadPlan {
    /// No thread yet: start one (a delegated child forks its parent's when
    /// asked to).
    Start,
    /// Resume the stored thread.
    Resume(String),
    /// The stored thread was created for another trust: a new, clean
    /// thread replaces it (a thread that read a fork's content never gets
    /// the Gitea tools; a trusted task is not held to a read-only thread).
    Replace { old: String },
    /// The stored thread lives in another Codex home: a new thread here
    /// goes on with its conversation.
    Rebuild { old: String, from_home: String },
}

impl ThreadPlan {
    /// The stored thread this plan leaves behind, if any.
    pub fn replaces(&self) -> Option<&str> {
        match self {
            ThreadPlan::Replace { old } | ThreadPlan::Rebuild { old, .. } => Some(old),
            ThreadPlan::Start | ThreadPlan::Resume(_) => None,
        }
    }
}

/// The plan for a task of `trust`, on the session's stored thread.
pub fn plan(
    stored: Option<&str>,
    stored_trust: Option<ThreadTrust>,
    stored_home: Option<&str>,
    trust: ThreadTrust,
    here: Option<&str>,
) -> ThreadPlan {
    let Some(old) = stored else {
        return ThreadPlan::Start;
    };
    // A thread made before trust was recorded had every tool.
    if stored_trust.unwrap_or(ThreadTrust::Trusted) != trust {
        return ThreadPlan::Replace { old: old.into() };
    }
    match (stored_home, here) {
        (Some(there), Some(here)) if there != here => ThreadPlan::Rebuild {
            old: old.into(),
            from_home: there.into(),
        },
        // The same home, or one side cannot say: resume (a thread that is
        // not there fails to resume, and the task says so).
        _ => ThreadPlan::Resume(old.into()),
    }
}

/// Whether a thread a task's turn ran on can be opened in this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reach {
    /// Open it here (a thread that is not there after all fails to open,
    /// and the task says so).
    Here(String),
    /// It lives in another process's Codex home: its history cannot be read
    /// here, and a turn that only acts on what the task's turn produced
    /// (the reply retry: post this final text again) runs on a new thread.
    Elsewhere { thread: String, home: String },
}

/// Where `thread` can be reached, given the session's stored thread and its
/// home. Only the session's own thread has a known home; any other is
/// taken to be here.
pub fn reach(
    thread: &str,
    stored: Option<&str>,
    stored_home: Option<&str>,
    here: Option<&str>,
) -> Reach {
    match (stored, stored_home, here) {
        (Some(s), Some(there), Some(here)) if s == thread && there != here => Reach::Elsewhere {
            thread: thread.into(),
            home: there.into(),
        },
        _ => Reach::Here(thread.into()),
    }
}

/// The newest of `stored` (oldest first) that fit in `budget` bytes, oldest
/// first: what a rebuilt thread is given.
pub fn fit(stored: &[StoredExchange], budget: usize) -> Vec<Exchange> {
    let mut left = budget;
    let mut kept: Vec<Exchange> = Vec::new();
    for x in stored.iter().rev() {
        let size = x.asked.len() + x.answered.len();
        if size > left {
            break;
        }
        left -= size;
        kept.push(Exchange {
            asked: x.asked.clone(),
            answered: x.answered.clone(),
        });
    }
    kept.reverse();
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const T: ThreadTrust = ThreadTrust::Trusted;

    #[test]
    fn a_thread_from_another_home_is_rebuilt_and_one_from_this_home_resumed() {
        assert_eq!(
            plan(Some("t1"), Some(T), Some("home-a"), T, Some("home-b")),
            ThreadPlan::Rebuild {
                old: "t1".into(),
                from_home: "home-a".into()
            }
        );
        assert_eq!(
            plan(Some("t1"), Some(T), Some("home-a"), T, Some("home-a")),
            ThreadPlan::Resume("t1".into())
        );
        assert_eq!(plan(None, None, None, T, Some("h")), ThreadPlan::Start);
    }

    #[test]
    fn a_thread_is_reached_here_unless_its_home_is_known_to_be_another() {
        assert_eq!(
            reach("t1", Some("t1"), Some("home-a"), Some("home-b")),
            Reach::Elsewhere {
                thread: "t1".into(),
                home: "home-a".into()
            }
        );
        assert_eq!(
            reach("t1", Some("t1"), Some("home-a"), Some("home-a")),
            Reach::Here("t1".into())
        );
        // Not the session's thread: its home is unknown.
        assert_eq!(
            reach("t0", Some("t1"), Some("home-a"), Some("home-b")),
            Reach::Here("t0".into())
        );
        assert_eq!(
            reach("t1", Some("t1"), None, Some("home-b")),
            Reach::Here("t1".into())
        );
    }

    fn trust() -> impl Strategy<Value = ThreadTrust> {
        proptest::sample::select(vec![ThreadTrust::Trusted, ThreadTrust::Untrusted])
    }

    fn home() -> impl Strategy<Value = Option<String>> {
        proptest::option::of(proptest::sample::select(vec![
            "a".to_owned(),
            "b".to_owned(),
        ]))
    }

    fn exchange() -> impl Strategy<Value = StoredExchange> {
        ("[a-z]{0,40}", "[a-z]{0,40}").prop_map(|(asked, answered)| StoredExchange {
            asked,
            answered,
            started_at: String::new(),
        })
    }

    proptest! {
        /// A change of trust always starts clean, whatever the homes say;
        /// a rebuild happens only when both homes are known and differ;
        /// a thread is never resumed in a home known to be another.
        #[test]
        fn the_plan_follows_trust_first_then_the_home(
            stored in proptest::option::of(Just("t".to_owned())),
            stored_trust in proptest::option::of(trust()),
            stored_home in home(),
            task_trust in trust(),
            here in home(),
        ) {
            let p = plan(stored.as_deref(), stored_trust, stored_home.as_deref(), task_trust, here.as_deref());
            match &p {
                ThreadPlan::Start => prop_assert!(stored.is_none()),
                ThreadPlan::Replace { .. } => {
                    prop_assert_ne!(stored_trust.unwrap_or(ThreadTrust::Trusted), task_trust)
                }
                ThreadPlan::Rebuild { from_home, .. } => {
                    prop_assert_eq!(stored_trust.unwrap_or(ThreadTrust::Trusted), task_trust);
                    prop_assert_eq!(Some(from_home), stored_home.as_ref());
                    prop_assert!(here.is_some() && here != stored_home);
                }
                ThreadPlan::Resume(_) => {
                    prop_assert_eq!(stored_trust.unwrap_or(ThreadTrust::Trusted), task_trust);
                    prop_assert!(stored_home.is_none() || here.is_none() || here == stored_home);
                }
            }
            prop_assert_eq!(p.replaces().is_some(), matches!(p, ThreadPlan::Replace { .. } | ThreadPlan::Rebuild { .. }));
        }

        /// What a rebuilt thread is given is the newest exchanges, in their
        /// order, within the budget, with none skipped in between.
        #[test]
        fn a_rebuild_keeps_the_newest_exchanges_that_fit(
            stored in proptest::collection::vec(exchange(), 0..12),
            budget in 0usize..400,
        ) {
            let kept = fit(&stored, budget);
            let size: usize = kept.iter().map(|x| x.asked.len() + x.answered.len()).sum();
            prop_assert!(size <= budget);
            let tail = &stored[stored.len() - kept.len()..];
            for (k, s) in kept.iter().zip(tail) {
                prop_assert_eq!(&k.asked, &s.asked);
                prop_assert_eq!(&k.answered, &s.answered);
            }
            // The next older one would not have fit.
            if kept.len() < stored.len() {
                let next = &stored[stored.len() - kept.len() - 1];
                prop_assert!(size + next.asked.len() + next.answered.len() > budget);
            }
        }
    }
}
