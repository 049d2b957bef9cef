//! Signing the app-server in, through the one process the keeper keeps
//! running (it owns CODEX_HOME, where the credentials are stored as files):
//! `account/read` with a ChatGPT account's rate limits, `account/login/start`
//! with an API key or a device code, `account/logout`. A device-code
//! sign-in ends later, with `account/login/completed`; the router hands that
//! to the [`AccountEvents`], which keep each sign-in's outcome for whoever
//! asks and wake the keeper, so the published availability follows a
//! sign-in or sign-out at once instead of at its next re-read.

use super::agent::CodexAgent;
use super::protocol::{
    self, AccountKind, AccountLoginCompletedNotification, AccountRead, AccountSummary, LoginStart,
    LoginStartResponse, Logout, RateLimitsRead,
};
use super::rpc::{RpcConnection, RpcError};
use crate::agent::account::{
    Account, AccountControl, AccountError, AccountStatus, DeviceCode, LoginId, LoginStatus,
    NoRateLimits, RateLimitSnapshot, RateLimitWindow, RateLimits,
};
use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use secrecy::SecretString;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// Sign-ins remembered for [`AccountControl::login_status`]: an operator
/// polls the last one or two; older ones are forgotten first.
const LOGINS_KEPT: usize = 32;

/// What the app-server said about sign-ins, shared by the router (which
/// hears it) and the agent (which asks). It outlives app-server processes.
#[derive(Default)]
pub(super) struct AccountEvents {
    /// Sign-ins this process started, oldest first.
    logins: Mutex<VecDeque<(LoginId, LoginStatus)>>,
    /// Wakes the keeper to read the account again (one waiter: the keeper).
    changed: tokio::sync::Notify,
}

impl AccountEvents {
    /// A device-code sign-in started: pending, unless its end came first
    /// (the notification can overtake the answer that names it).
    fn started(&self, id: &LoginId) {
        if let Ok(mut logins) = self.logins.lock() {
            if !logins.iter().any(|(l, _)| l == id) {
                logins.push_back((id.clone(), LoginStatus::Pending));
                while logins.len() > LOGINS_KEPT {
                    logins.pop_front();
                }
            }
        }
    }

    /// `account/login/completed`.
    pub(super) fn completed(&self, n: &AccountLoginCompletedNotification) {
        if let Some(id) = &n.login_id {
            let status = if n.success {
                LoginStatus::Completed
            } else {
                LoginStatus::Failed {
                    error: n
                        .error
                        .clone()
                        .unwrap_or_else(|| "the sign-in did not complete".into()),
                }
            };
            let id = LoginId(id.clone());
            self.started(&id);
            if let Ok(mut logins) = self.logins.lock() {
                if let Some((_, s)) = logins.iter_mut().find(|(l, _)| *l == id) {
                    *s = status;
                }
            }
        }
        self.changed.notify_one();
    }

    /// The account changed (`account/updated`, or a sign-in or sign-out the
    /// bridge made itself).
    pub(super) fn updated(&self) {
        self.changed.notify_one();
    }

    /// The app-server is gone: a sign-in it was waiting for will never end.
    pub(super) fn connection_closed(&self) {
        if let Ok(mut logins) = self.logins.lock() {
            for (_, s) in logins.iter_mut() {
                if *s == LoginStatus::Pending {
                    *s = LoginStatus::Failed {
                        error: "the codex app-server stopped before this sign-in completed; \
                                start the sign-in again"
                            .into(),
                    };
                }
            }
        }
    }

    fn status(&self, id: &LoginId) -> Option<LoginStatus> {
        let logins = self.logins.lock().ok()?;
        logins.iter().find(|(l, _)| l == id).map(|(_, s)| s.clone())
    }

    /// Resolves once the account may have changed since the last call.
    pub(super) async fn changed(&self) {
        self.changed.notified().await
    }
}

/// A request that never reached the app-server left nothing to undo; one it
/// answered with an error (or not at all) is the runtime's refusal.
fn account_error(e: RpcError) -> AccountError {
    match e {
        RpcError::NotSent => AccountError::Unavailable(e.to_string()),
        _ => AccountError::Refused(e.to_string()),
    }
}

fn account_of(summary: AccountSummary) -> Account {
    match summary.kind {
        AccountKind::ApiKey => Account::ApiKey,
        AccountKind::Chatgpt => Account::Chatgpt {
            email: summary.email,
            plan_type: summary.plan_type,
            workspace_name: summary.workspace_name,
        },
        AccountKind::Other(kind) => Account::Other { kind },
    }
}

fn window_of(w: protocol::RateLimitWindow) -> RateLimitWindow {
    RateLimitWindow {
        // A percentage (0-100), rounded: `as` saturates, it cannot wrap.
        used_percent: w.used_percent.round() as i64,
        window_minutes: w.window_duration_mins,
        resets_at: w
            .resets_at
            .and_then(|secs| chrono::DateTime::from_timestamp(secs, 0))
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
    }
}

fn snapshot_of(s: protocol::RateLimitSnapshot) -> RateLimitSnapshot {
    RateLimitSnapshot {
        plan_type: s.plan_type,
        primary: s.primary.map(window_of),
        secondary: s.secondary.map(window_of),
    }
}

impl CodexAgent {
    /// The running app-server's connection, started if need be.
    async fn account_connection(&self) -> Result<Arc<RpcConnection>, AccountError> {
        self.inner
            .process
            .connection()
            .await
            .map_err(|e| AccountError::Unavailable(e.detail))
    }

    /// `account/read`, and for a ChatGPT account `account/rateLimits/read`
    /// (which the app-server refuses for any other).
    pub async fn account_status(&self) -> Result<AccountStatus, AccountError> {
        let conn = self.account_connection().await?;
        let timeout = self.inner.process.settings().request_timeout;
        let read = conn
            .call(&AccountRead::default(), timeout)
            .await
            .map_err(account_error)?;
        let account = read.account.map(account_of);
        let (rate_limits, rate_limits_error) = match account {
            Some(Account::Chatgpt { .. }) => {
                let ask = RateLimitsRead {
                    exclude_reset_credit_details: true,
                };
                match conn.call(&ask, timeout).await {
                    Ok(answer) => (RateLimits::Read(snapshot_of(answer.rate_limits)), None),
                    Err(e) => (
                        RateLimits::Absent(NoRateLimits::Unavailable),
                        Some(e.to_string()),
                    ),
                }
            }
            _ => (RateLimits::Absent(NoRateLimits::NotApplicable), None),
        };
        Ok(AccountStatus {
            account,
            requires_openai_auth: read.requires_openai_auth,
            rate_limits,
            rate_limits_error,
        })
    }

    /// `account/login/start` with an API key: stored under CODEX_HOME when
    /// this returns.
    pub async fn login_api_key(&self, api_key: SecretString) -> Result<(), AccountError> {
        let conn = self.account_connection().await?;
        let timeout = self.inner.process.settings().request_timeout;
        let answer = conn
            .call(&LoginStart::ApiKey { api_key }, timeout)
            .await
            .map_err(account_error);
        // Whatever the answer, the account may have changed.
        self.inner.router.account().updated();
        match answer? {
            LoginStartResponse::ApiKey => {
                tracing::info!("codex signed in with an API key");
                Ok(())
            }
            other => Err(AccountError::Refused(format!(
                "the app-server answered an API-key sign-in with {other:?}"
            ))),
        }
    }

    /// `account/login/start` with a device code: the code and the address
    /// for the operator; `account/login/completed` ends it.
    pub async fn login_device_code(&self) -> Result<DeviceCode, AccountError> {
        let conn = self.account_connection().await?;
        let timeout = self.inner.process.settings().request_timeout;
        let answer = conn
            .call(&LoginStart::ChatgptDeviceCode, timeout)
            .await
            .map_err(account_error)?;
        let LoginStartResponse::ChatgptDeviceCode(started) = answer else {
            return Err(AccountError::Refused(format!(
                "the app-server answered a device-code sign-in with {answer:?}"
            )));
        };
        let login_id = LoginId(started.login_id);
        self.inner.router.account().started(&login_id);
        tracing::info!(login.id = %login_id, "codex device-code sign-in started");
        Ok(DeviceCode {
            login_id,
            verification_url: started.verification_url,
            user_code: started.user_code,
        })
    }

    /// Where a sign-in this process started stands.
    pub fn login_status(&self, login_id: &LoginId) -> Option<LoginStatus> {
        self.inner.router.account().status(login_id)
    }

    /// `account/logout`: the credentials under CODEX_HOME are removed.
    pub async fn logout(&self) -> Result<(), AccountError> {
        let conn = self.account_connection().await?;
        let timeout = self.inner.process.settings().request_timeout;
        let answer = conn.call(&Logout, timeout).await.map_err(account_error);
        self.inner.router.account().updated();
        answer?;
        tracing::info!("codex signed out");
        Ok(())
    }
}

impl AccountControl for CodexAgent {
    fn account(&self) -> BoxFuture<'static, Result<AccountStatus, AccountError>> {
        let this = self.clone();
        async move { this.account_status().await }.boxed()
    }

    fn login_api_key(&self, api_key: SecretString) -> BoxFuture<'static, Result<(), AccountError>> {
        let this = self.clone();
        async move { CodexAgent::login_api_key(&this, api_key).await }.boxed()
    }

    fn login_device_code(&self) -> BoxFuture<'static, Result<DeviceCode, AccountError>> {
        let this = self.clone();
        async move { CodexAgent::login_device_code(&this).await }.boxed()
    }

    fn login_status(&self, login_id: &LoginId) -> Option<LoginStatus> {
        CodexAgent::login_status(self, login_id)
    }

    fn logout(&self) -> BoxFuture<'static, Result<(), AccountError>> {
        let this = self.clone();
        async move { CodexAgent::logout(&this).await }.boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn completed(
        id: &str,
        success: bool,
        error: Option<&str>,
    ) -> AccountLoginCompletedNotification {
        AccountLoginCompletedNotification {
            login_id: Some(id.into()),
            success,
            error: error.map(str::to_owned),
        }
    }

    #[test]
    fn a_sign_in_is_pending_until_its_end_and_an_end_before_its_start_is_kept() {
        let events = AccountEvents::default();
        let (a, b) = (LoginId("a".into()), LoginId("b".into()));
        assert_eq!(events.status(&a), None);
        events.started(&a);
        assert_eq!(events.status(&a), Some(LoginStatus::Pending));
        events.completed(&completed("a", true, None));
        assert_eq!(events.status(&a), Some(LoginStatus::Completed));
        // The notification overtook the answer that names the sign-in.
        events.completed(&completed("b", false, Some("device code expired")));
        events.started(&b);
        assert_eq!(
            events.status(&b),
            Some(LoginStatus::Failed {
                error: "device code expired".into()
            })
        );
    }

    #[test]
    fn a_pending_sign_in_fails_when_the_app_server_stops_and_old_ones_are_forgotten() {
        let events = AccountEvents::default();
        let done = LoginId("done".into());
        events.started(&done);
        events.completed(&completed("done", true, None));
        let waiting = LoginId("waiting".into());
        events.started(&waiting);
        events.connection_closed();
        assert!(matches!(
            events.status(&waiting),
            Some(LoginStatus::Failed { error }) if error.contains("stopped")
        ));
        assert_eq!(events.status(&done), Some(LoginStatus::Completed));
        for n in 0..LOGINS_KEPT {
            events.started(&LoginId(format!("later-{n}")));
        }
        assert_eq!(events.status(&done), None, "the oldest is forgotten");
        assert_eq!(
            events.status(&LoginId(format!("later-{}", LOGINS_KEPT - 1))),
            Some(LoginStatus::Pending)
        );
    }

    #[tokio::test]
    async fn the_keeper_is_woken_by_a_change_that_came_while_it_was_busy() {
        let events = AccountEvents::default();
        // No one waits yet: the wake-up is kept for the next wait.
        events.updated();
        tokio::time::timeout(Duration::from_secs(5), events.changed())
            .await
            .expect("a change made before the wait wakes it");
        assert!(
            tokio::time::timeout(Duration::from_millis(50), events.changed())
                .await
                .is_err(),
            "one change, one wake-up"
        );
        events.completed(&AccountLoginCompletedNotification {
            login_id: None,
            success: true,
            error: None,
        });
        tokio::time::timeout(Duration::from_secs(5), events.changed())
            .await
            .expect("an API-key sign-in's end wakes it too");
    }
}
