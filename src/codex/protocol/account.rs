//! Signing the app-server in: the account it has, the sign-in (an API key,
//! or ChatGPT's device code), signing out, and a ChatGPT account's rate
//! limits. The API key is a [`SecretString`] up to the moment it is written
//! to the app-server's stdin, so no `Debug` of a request shows it.

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize, Serializer};

use super::Request;
use secrecy::{ExposeSecret, SecretString};

/// `account/read` (`GetAccountParams`): whether the app-server is signed in,
/// and whether its model provider needs that at all.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AccountRead {
    /// `false`: read what is stored, never refresh a token.
    pub refresh_token: bool,
}

impl Request for AccountRead {
    const METHOD: &'static str = "account/read";
    type Response = AccountReadResponse;
}

/// The answer to [`AccountRead`] (`GetAccountResponse`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AccountReadResponse {
    /// The signed-in account, if any.
    #[serde(default)]
    pub account: Option<AccountSummary>,
    /// The configured model provider needs an OpenAI account (a custom or
    /// local provider does not).
    pub requires_openai_auth: bool,
}

/// The signed-in account (`Account`, a union by `type`); the ChatGPT
/// branch's fields are absent on the others.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AccountSummary {
    #[serde(rename = "type")]
    pub kind: AccountKind,
    #[serde(default)]
    pub email: Option<String>,
    #[serde(default)]
    pub plan_type: Option<String>,
    #[serde(default)]
    pub workspace_name: Option<String>,
}

/// `Account`'s `type`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum AccountKind {
    ApiKey,
    Chatgpt,
    /// A kind the bridge shows by name only (a cloud provider's).
    #[serde(untagged)]
    Other(String),
}

/// `account/login/start` (`LoginAccountParams`): the two ways a headless
/// server signs in.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum LoginStart {
    /// Stores the key under CODEX_HOME; done when answered.
    ApiKey {
        #[serde(rename = "apiKey", serialize_with = "expose")]
        api_key: SecretString,
    },
    /// Asks OpenAI for a device code; `account/login/completed` follows
    /// once the operator entered it (or it expired).
    ChatgptDeviceCode,
}

fn expose<S: Serializer>(secret: &SecretString, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(secret.expose_secret())
}

impl Request for LoginStart {
    const METHOD: &'static str = "account/login/start";
    type Response = LoginStartResponse;
}

/// The answer to [`LoginStart`] (`LoginAccountResponse`, by `type`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum LoginStartResponse {
    ApiKey,
    ChatgptDeviceCode(DeviceCodeStarted),
    /// A kind of sign-in the bridge does not start.
    #[serde(other)]
    Other,
}

/// A device code to show the operator (`LoginAccountResponse`'s
/// `chatgptDeviceCode` branch).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceCodeStarted {
    pub login_id: String,
    pub verification_url: String,
    pub user_code: String,
}

/// `account/logout` (no params): removes the stored credentials.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Logout;

impl Request for Logout {
    const METHOD: &'static str = "account/logout";
    type Response = IgnoredAny;
}

/// `account/rateLimits/read` (`GetAccountRateLimitsParams`). Only a
/// ChatGPT account has rate limits; for any other the app-server refuses.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RateLimitsRead {
    /// `true`: the bridge shows no reset credits, so spare the lookup.
    pub exclude_reset_credit_details: bool,
}

impl Request for RateLimitsRead {
    const METHOD: &'static str = "account/rateLimits/read";
    type Response = RateLimitsReadResponse;
}

/// The answer to [`RateLimitsRead`] (`GetAccountRateLimitsResponse`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RateLimitsReadResponse {
    pub rate_limits: RateLimitSnapshot,
}

/// `RateLimitSnapshot`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RateLimitSnapshot {
    #[serde(default)]
    pub plan_type: Option<String>,
    #[serde(default)]
    pub primary: Option<RateLimitWindow>,
    #[serde(default)]
    pub secondary: Option<RateLimitWindow>,
}

/// `RateLimitWindow`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RateLimitWindow {
    /// An integer in the schema; read as a number whatever its form, so a
    /// fraction never makes the whole answer unreadable.
    pub used_percent: f64,
    #[serde(default)]
    pub window_duration_mins: Option<i64>,
    /// Unix seconds.
    #[serde(default)]
    pub resets_at: Option<i64>,
}

/// `account/login/completed` (`AccountLoginCompletedNotification`): a
/// sign-in ended. An API-key sign-in sends one too, without a `loginId`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AccountLoginCompletedNotification {
    #[serde(default)]
    pub login_id: Option<String>,
    pub success: bool,
    #[serde(default)]
    pub error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_api_key_is_sent_but_never_shown_by_debug() {
        let login = LoginStart::ApiKey {
            api_key: SecretString::from("sk-test-very-secret"),
        };
        assert_eq!(
            serde_json::to_value(&login).unwrap(),
            json!({"type": "apiKey", "apiKey": "sk-test-very-secret"})
        );
        assert!(!format!("{login:?}").contains("very-secret"));
        assert_eq!(
            serde_json::to_value(LoginStart::ChatgptDeviceCode).unwrap(),
            json!({"type": "chatgptDeviceCode"})
        );
        assert_eq!(serde_json::to_value(Logout).unwrap(), json!(null));
    }

    #[test]
    fn accounts_and_sign_in_answers_are_read_by_their_type() {
        let read: AccountReadResponse = serde_json::from_value(json!({
            "account": {"type": "gcp"}, "requiresOpenaiAuth": false, "userId": null
        }))
        .unwrap();
        assert_eq!(read.account.unwrap().kind, AccountKind::Other("gcp".into()));
        let read: AccountReadResponse = serde_json::from_value(json!({
            "account": {"type": "chatgpt", "email": "ops@example.com", "planType": "plus"},
            "requiresOpenaiAuth": true
        }))
        .unwrap();
        let account = read.account.unwrap();
        assert_eq!(account.kind, AccountKind::Chatgpt);
        assert_eq!(account.plan_type.as_deref(), Some("plus"));
        let started: LoginStartResponse = serde_json::from_value(json!({
            "type": "chatgptDeviceCode", "loginId": "l-1",
            "verificationUrl": "https://auth.openai.com/codex/device", "userCode": "ABCD-1234"
        }))
        .unwrap();
        assert!(
            matches!(started, LoginStartResponse::ChatgptDeviceCode(ref d) if d.user_code == "ABCD-1234"),
            "{started:?}"
        );
        let other: LoginStartResponse =
            serde_json::from_value(json!({"type": "amazonBedrock"})).unwrap();
        assert_eq!(other, LoginStartResponse::Other);
    }
}
