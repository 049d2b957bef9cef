//! The keeper: starts the app-server as the bridge starts and keeps it
//! running, and publishes what it finds as a [`RuntimeStatus`]: whether the
//! process runs (a missing binary, a start that fails) and whether its
//! account lets it reach the model (`account/read`: no account while the
//! provider `requiresOpenaiAuth`). The scheduler leases no task while Codex
//! cannot run it, so an operator can fix the setup while tasks wait `queued`
//! with their attempts untouched; the keeper finds the fix by itself
//! (a failed start is tried again after the process's backoff, 1 s doubling
//! to 60 s; a missing account is read again every few seconds, and at once
//! after a sign-in or sign-out, `account.rs`).

use super::agent::CodexAgent;
use super::process::start_backoff;
use super::protocol::AccountRead;
use super::rpc::RpcConnection;
use crate::agent::{AccountState, ProcessState, RuntimeStatus, StartProblem, StatusSender};
use std::time::{Duration, Instant};

/// While signed out, how often the account is read again: a sign-in made
/// with `codex login` for the same CODEX_HOME shows in the next read.
const SIGNED_OUT_POLL: Duration = Duration::from_secs(5);
/// While Codex works, how often the account is read again (a sign-out, a
/// login removed from CODEX_HOME).
const ACCOUNT_RECHECK: Duration = Duration::from_secs(60);
/// A process that ends sooner after its start (and not by the bridge's own
/// hand) counts as a failed start: a crash loop backs off instead of spinning.
const STABLE_AFTER: Duration = Duration::from_secs(30);

impl CodexAgent {
    /// Keeps the app-server started and publishes its status on `status`
    /// until nobody reads it any more. Spawned once, by the app, beside the
    /// actors that read the other end.
    pub async fn keep_available(self, status: StatusSender) {
        let process = &self.inner.process;
        let mut early_exits = 0u32;
        loop {
            let conn = match process.connection().await {
                Ok(conn) => conn,
                Err(e) => {
                    publish(
                        &status,
                        RuntimeStatus {
                            process: ProcessState::Unavailable {
                                problem: e.problem,
                                detail: e.detail,
                            },
                            account: AccountState::Unknown,
                        },
                    );
                    // At least a moment: `retry_in` is zero for a start that
                    // failed just now only if the clock says so.
                    let wait = process.retry_in().max(Duration::from_millis(100));
                    if !pause(&status, wait).await {
                        return;
                    }
                    continue;
                }
            };
            let started = Instant::now();
            let kills = process.kills();
            loop {
                let account = self.read_account(&conn).await;
                publish(
                    &status,
                    RuntimeStatus {
                        process: ProcessState::Running,
                        account,
                    },
                );
                let recheck = if account == AccountState::SignedOut {
                    SIGNED_OUT_POLL
                } else {
                    ACCOUNT_RECHECK
                };
                tokio::select! {
                    _ = conn.closed() => break,
                    _ = tokio::time::sleep(recheck) => {},
                    // A sign-in or sign-out: read the account now, so tasks
                    // start (or wait) at once.
                    _ = self.inner.router.account().changed() => {},
                    _ = status.closed() => return,
                }
            }
            // The process ended. The bridge's own reset (an interrupt never
            // confirmed) starts the next one at once, as does an exit after a
            // long life; one that dies soon after starting waits first.
            let lived = started.elapsed();
            if lived >= STABLE_AFTER || process.kills() != kills {
                early_exits = 0;
                continue;
            }
            early_exits += 1;
            let wait = start_backoff(early_exits);
            publish(
                &status,
                RuntimeStatus {
                    process: ProcessState::Unavailable {
                        problem: StartProblem::FailedToStart,
                        detail: format!(
                            "the codex app-server exited {} s after it started ({} time(s) in a \
                             row); starting another in {} s",
                            lived.as_secs(),
                            early_exits,
                            wait.as_secs()
                        ),
                    },
                    account: AccountState::Unknown,
                },
            );
            if !pause(&status, wait).await {
                return;
            }
        }
    }

    /// The account as `account/read` tells it. An app-server that cannot
    /// say (an older one, an error) is [`AccountState::Unknown`]: that holds
    /// no turn back, the turns themselves tell.
    async fn read_account(&self, conn: &RpcConnection) -> AccountState {
        let timeout = self.inner.process.settings().request_timeout;
        match conn.call(&AccountRead::default(), timeout).await {
            Ok(answer) => match (answer.account, answer.requires_openai_auth) {
                (Some(_), _) => AccountState::SignedIn,
                (None, true) => AccountState::SignedOut,
                (None, false) => AccountState::NotRequired,
            },
            Err(e) => {
                tracing::info!(error = %e, "cannot read the codex account; turns will tell whether it works");
                AccountState::Unknown
            }
        }
    }
}

/// Publishes `next` if it differs from what readers have, logging the change
/// once, with what it means for the tasks.
fn publish(status: &StatusSender, next: RuntimeStatus) {
    status.send_if_modified(|current| {
        if *current == next {
            return false;
        }
        match (&next.process, next.account) {
            (ProcessState::Unavailable { detail, .. }, _) => {
                tracing::warn!("codex is unavailable, tasks wait queued until it starts: {detail}")
            }
            (ProcessState::Running, AccountState::SignedOut) => tracing::warn!(
                "the codex app-server is not signed in and its model provider needs an account; \
                 tasks wait queued until it is (codex login with this server's codex_home)"
            ),
            (ProcessState::Running, _) if !current.can_run() => {
                tracing::info!(account = ?next.account, "codex is available; queued tasks start")
            }
            _ => {}
        }
        *current = next;
        true
    });
}

/// Waits `wait`; `false` if meanwhile nobody reads the status any more.
async fn pause(status: &StatusSender, wait: Duration) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(wait) => true,
        _ = status.closed() => false,
    }
}
