//! Signing the agent runtime in with its model's provider, as the admin API
//! and the command line see it: which account it uses, whether its provider
//! needs one at all, the account's rate limits, and the sign-in itself (an
//! API key, or a device code an operator confirms in a browser). The runtime
//! implements [`AccountControl`]; the app hands it to the web layer. These
//! types are also the admin API's JSON (camelCase, times RFC 3339 UTC), so
//! the command line reads back exactly what the server wrote.
//!
//! An API key passes through here as a [`SecretString`] and is never part
//! of any of these types: nothing that is logged, shown or stored carries it.

use futures_util::future::BoxFuture;
use secrecy::SecretString;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The runtime's sign-in, for the admin API.
pub trait AccountControl: Send + Sync + 'static {
    /// The account as the runtime has it now, with its rate limits.
    fn account(&self) -> BoxFuture<'static, Result<AccountStatus, AccountError>>;
    /// Signs in with an API key; done when this returns.
    fn login_api_key(&self, api_key: SecretString) -> BoxFuture<'static, Result<(), AccountError>>;
    /// Starts a device-code sign-in: the operator opens the address and
    /// enters the code; [`AccountControl::login_status`] tells when it is done.
    fn login_device_code(&self) -> BoxFuture<'static, Result<DeviceCode, AccountError>>;
    /// Where a sign-in this process started stands; `None` for one it does
    /// not know (never started here, or long forgotten).
    fn login_status(&self, login_id: &LoginId) -> Option<LoginStatus>;
    /// Signs out: the stored credentials are removed.
    fn logout(&self) -> BoxFuture<'static, Result<(), AccountError>>;
}

/// Why the runtime could not do what was asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccountError {
    /// The runtime is not running and could not be started: nothing was done.
    #[error("the agent runtime is unavailable: {0}")]
    Unavailable(String),
    /// The runtime answered, and refused (or failed to reach its provider).
    #[error("the agent runtime refused: {0}")]
    Refused(String),
}

/// `GET /api/gitea-workflow/codex`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AccountStatus {
    /// The signed-in account; `None` when signed out.
    pub account: Option<Account>,
    /// Whether the configured model provider needs an OpenAI account: a
    /// custom or local provider does not, so `account: None` is then fine.
    pub requires_openai_auth: bool,
    pub rate_limits: RateLimits,
    /// Why rate limits are [`NoRateLimits::Unavailable`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limits_error: Option<String>,
}

impl AccountStatus {
    /// Whether turns would fail for want of an account.
    pub fn signed_out(&self) -> bool {
        self.account.is_none() && self.requires_openai_auth
    }
}

/// The account the runtime is signed in with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum Account {
    /// An OpenAI API key.
    ApiKey,
    /// A ChatGPT account (device code or browser sign-in).
    #[serde(rename_all = "camelCase")]
    Chatgpt {
        email: Option<String>,
        /// `plus`, `pro`, `team`, … as Codex names the plan.
        plan_type: Option<String>,
        workspace_name: Option<String>,
    },
    /// Another kind the runtime knows (a cloud provider's credentials).
    #[serde(untagged)]
    Other {
        #[serde(rename = "type")]
        kind: String,
    },
}

impl fmt::Display for Account {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Account::ApiKey => f.write_str("API key"),
            Account::Chatgpt {
                email, plan_type, ..
            } => {
                f.write_str("ChatGPT")?;
                match (email, plan_type) {
                    (Some(e), Some(p)) => write!(f, " ({e}, plan {p})"),
                    (Some(e), None) => write!(f, " ({e})"),
                    (None, Some(p)) => write!(f, " (plan {p})"),
                    (None, None) => Ok(()),
                }
            }
            Account::Other { kind } => f.write_str(kind),
        }
    }
}

/// The account's rate limits, or why there are none to show.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RateLimits {
    Read(RateLimitSnapshot),
    Absent(NoRateLimits),
}

/// Why an account has no rate limits to show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum NoRateLimits {
    /// Only ChatGPT accounts have them (an API key is billed per use; no
    /// account, nothing to limit).
    NotApplicable,
    /// A ChatGPT account whose limits could not be read just now.
    Unavailable,
}

/// What the provider reports of a ChatGPT account's usage windows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RateLimitSnapshot {
    pub plan_type: Option<String>,
    /// The shorter window (a few hours).
    pub primary: Option<RateLimitWindow>,
    /// The longer window (a week).
    pub secondary: Option<RateLimitWindow>,
}

/// One usage window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RateLimitWindow {
    /// How much of the window's allowance is used, 0–100.
    pub used_percent: i64,
    pub window_minutes: Option<i64>,
    /// When the window starts afresh (RFC 3339 UTC).
    pub resets_at: Option<String>,
}

impl fmt::Display for RateLimitWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}% used", self.used_percent)?;
        if let Some(m) = self.window_minutes {
            if m % 1440 == 0 {
                write!(f, " of a {} d window", m / 1440)?;
            } else if m % 60 == 0 {
                write!(f, " of a {} h window", m / 60)?;
            } else {
                write!(f, " of a {m} min window")?;
            }
        }
        if let Some(at) = &self.resets_at {
            write!(f, ", resets {at}")?;
        }
        Ok(())
    }
}

/// Names one sign-in the runtime started.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LoginId(pub String);

impl fmt::Display for LoginId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A device-code sign-in waiting for the operator: open `verification_url`,
/// sign in there, enter `user_code`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceCode {
    pub login_id: LoginId,
    pub verification_url: String,
    pub user_code: String,
}

/// Where a sign-in stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "camelCase")]
pub enum LoginStatus {
    /// Waiting for the operator (or the provider).
    Pending,
    Completed,
    Failed {
        error: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn round_trip(status: &AccountStatus, want: serde_json::Value) {
        assert_eq!(serde_json::to_value(status).unwrap(), want);
        let back: AccountStatus = serde_json::from_value(want).unwrap();
        assert_eq!(&back, status);
    }

    #[test]
    fn the_admin_api_shapes_read_back_as_written() {
        round_trip(
            &AccountStatus {
                account: None,
                requires_openai_auth: true,
                rate_limits: RateLimits::Absent(NoRateLimits::NotApplicable),
                rate_limits_error: None,
            },
            json!({"account": null, "requiresOpenaiAuth": true, "rateLimits": "notApplicable"}),
        );
        round_trip(
            &AccountStatus {
                account: Some(Account::ApiKey),
                requires_openai_auth: true,
                rate_limits: RateLimits::Absent(NoRateLimits::NotApplicable),
                rate_limits_error: None,
            },
            json!({"account": {"type": "apiKey"}, "requiresOpenaiAuth": true, "rateLimits": "notApplicable"}),
        );
        round_trip(
            &AccountStatus {
                account: Some(Account::Chatgpt {
                    email: Some("ops@example.com".into()),
                    plan_type: Some("plus".into()),
                    workspace_name: None,
                }),
                requires_openai_auth: true,
                rate_limits: RateLimits::Read(RateLimitSnapshot {
                    plan_type: Some("plus".into()),
                    primary: Some(RateLimitWindow {
                        used_percent: 42,
                        window_minutes: Some(300),
                        resets_at: Some("2026-12-02T20:00:00Z".into()),
                    }),
                    secondary: None,
                }),
                rate_limits_error: None,
            },
            json!({
                "account": {"type": "chatgpt", "email": "ops@example.com", "planType": "plus", "workspaceName": null},
                "requiresOpenaiAuth": true,
                "rateLimits": {"planType": "plus", "primary": {"usedPercent": 42, "windowMinutes": 300,
                    "resetsAt": "2026-12-02T20:00:00Z"}, "secondary": null},
            }),
        );
        round_trip(
            &AccountStatus {
                account: Some(Account::Other {
                    kind: "amazonBedrock".into(),
                }),
                requires_openai_auth: false,
                rate_limits: RateLimits::Absent(NoRateLimits::Unavailable),
                rate_limits_error: Some("no answer".into()),
            },
            json!({"account": {"type": "amazonBedrock"}, "requiresOpenaiAuth": false,
                "rateLimits": "unavailable", "rateLimitsError": "no answer"}),
        );
        assert_eq!(
            serde_json::to_value(LoginStatus::Failed {
                error: "expired".into()
            })
            .unwrap(),
            json!({"status": "failed", "error": "expired"})
        );
        assert_eq!(
            serde_json::to_value(LoginStatus::Pending).unwrap(),
            json!({"status": "pending"})
        );
    }

    #[test]
    fn accounts_and_windows_read_as_an_operator_expects() {
        let chatgpt = Account::Chatgpt {
            email: Some("ops@example.com".into()),
            plan_type: Some("pro".into()),
            workspace_name: None,
        };
        assert_eq!(chatgpt.to_string(), "ChatGPT (ops@example.com, plan pro)");
        assert_eq!(Account::ApiKey.to_string(), "API key");
        let window = |m| RateLimitWindow {
            used_percent: 7,
            window_minutes: Some(m),
            resets_at: None,
        };
        assert_eq!(window(300).to_string(), "7% used of a 5 h window");
        assert_eq!(window(10080).to_string(), "7% used of a 7 d window");
        assert_eq!(window(45).to_string(), "7% used of a 45 min window");
    }
}
