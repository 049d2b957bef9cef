//! Whether the agent runtime can run turns now, as the runtime itself last
//! found out: its process started and answered, and its account lets it reach
//! the model. The runtime publishes a [`RuntimeStatus`] on a watch channel;
//! the scheduler reads it before it leases a task (a task leased while the
//! runtime cannot run it would only use up an attempt), and the health
//! endpoints show it. The runtime reports what it found in these types; the
//! words an operator reads (which configuration key, what to do) are
//! `readiness`'s.

use std::fmt;
use tokio::sync::watch;

/// Why the runtime's process cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartProblem {
    /// The binary could not be run at all (not there, not executable).
    NotInstalled,
    /// The runtime's home directory could not be created.
    HomeUnusable,
    /// The process started, but exited or did not answer its handshake.
    FailedToStart,
}

/// The runtime's process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessState {
    /// Not tried yet, or being started.
    Starting,
    /// Started and answering.
    Running,
    /// Cannot be started; `detail` is the error as the runtime saw it, for
    /// the log and the authenticated admin view (it may name paths).
    Unavailable {
        problem: StartProblem,
        detail: String,
    },
}

/// The runtime's account with the model's provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccountState {
    /// Not read (the process does not run, or cannot say).
    Unknown,
    SignedIn,
    /// The provider needs an account and there is none: every turn would fail.
    SignedOut,
    /// The provider needs no account (a custom or local one).
    NotRequired,
}

/// What the runtime last found about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeStatus {
    pub process: ProcessState,
    pub account: AccountState,
}

impl RuntimeStatus {
    /// Before the runtime has looked.
    pub fn starting() -> Self {
        RuntimeStatus {
            process: ProcessState::Starting,
            account: AccountState::Unknown,
        }
    }

    /// A runtime that needs neither a process nor an account (the scripted one).
    pub fn ready() -> Self {
        RuntimeStatus {
            process: ProcessState::Running,
            account: AccountState::NotRequired,
        }
    }

    /// Whether a turn started now could reach the model. An account the
    /// runtime cannot read does not hold turns back: the turns themselves tell.
    pub fn can_run(&self) -> bool {
        self.process == ProcessState::Running && self.account != AccountState::SignedOut
    }
}

impl fmt::Display for RuntimeStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.process, self.account) {
            (ProcessState::Starting, _) => f.write_str("starting"),
            (ProcessState::Unavailable { problem, detail }, _) => {
                write!(f, "unavailable ({problem:?}): {detail}")
            }
            (ProcessState::Running, AccountState::SignedOut) => {
                f.write_str("running, but signed out")
            }
            (ProcessState::Running, _) => f.write_str("running"),
        }
    }
}

/// The runtime's end: where it publishes what it finds.
pub type StatusSender = watch::Sender<RuntimeStatus>;

/// The readers' end: the scheduler, the registry and the health endpoints.
/// Cloning shares the channel.
#[derive(Debug, Clone)]
pub struct Availability(watch::Receiver<RuntimeStatus>);

impl Availability {
    /// A channel whose runtime has not looked yet.
    pub fn channel() -> (StatusSender, Availability) {
        let (tx, rx) = watch::channel(RuntimeStatus::starting());
        (tx, Availability(rx))
    }

    /// A runtime that can always run (the scripted one, and tests of the
    /// actors): no sender, so the status never changes.
    pub fn always() -> Availability {
        Availability(watch::channel(RuntimeStatus::ready()).1)
    }

    /// The status as last published.
    pub fn now(&self) -> RuntimeStatus {
        self.0.borrow().clone()
    }

    /// Waits until the status changes; `false` once no runtime publishes
    /// any more (it never will again).
    pub async fn changed(&mut self) -> bool {
        self.0.changed().await.is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_running_process_whose_account_is_not_missing_runs_turns() {
        let running = |account| RuntimeStatus {
            process: ProcessState::Running,
            account,
        };
        assert!(running(AccountState::SignedIn).can_run());
        assert!(running(AccountState::NotRequired).can_run());
        assert!(running(AccountState::Unknown).can_run());
        assert!(!running(AccountState::SignedOut).can_run());
        assert!(!RuntimeStatus::starting().can_run());
        let down = RuntimeStatus {
            process: ProcessState::Unavailable {
                problem: StartProblem::NotInstalled,
                detail: "no such file".into(),
            },
            account: AccountState::Unknown,
        };
        assert!(!down.can_run());
        assert!(Availability::always().now().can_run());
    }

    #[tokio::test]
    async fn readers_see_each_status_the_runtime_publishes() {
        let (tx, mut rx) = Availability::channel();
        assert_eq!(rx.now(), RuntimeStatus::starting());
        tx.send_replace(RuntimeStatus::ready());
        assert!(rx.changed().await);
        assert!(rx.now().can_run());
        drop(tx);
        assert!(!rx.changed().await, "no runtime publishes any more");
    }
}
