//! `/api/gitea-workflow/codex`: Codex's account, and signing Codex in and
//! out through the app-server the server runs (which owns `codex_home`).
//!
//! - `GET /codex` (also `/codex/account`) → `{"account": {"type", …}|null,
//!   "requiresOpenaiAuth", "rateLimits": {…}|"notApplicable"|"unavailable",
//!   "rateLimitsError"?}`; signed out means `account: null` while
//!   `requiresOpenaiAuth` (a custom or local model provider needs no account).
//! - `POST /codex/login` with `{"type": "apiKey", "apiKey"}` →
//!   `{"type": "apiKey", "status": "completed", "event"}`, or with
//!   `{"type": "deviceCode"}` → `{"type": "deviceCode", "status": "pending",
//!   "loginId", "verificationUrl", "userCode", "event"}`: the operator opens
//!   the address and enters the code, then
//! - `GET /codex/login/{loginId}` → `{"loginId", "status": "pending" |
//!   "completed" | "failed", "error"?}`.
//! - `POST /codex/logout` → `{"status": "signedOut", "event"}`.
//!
//! The POST bodies may carry `operator`, `reason` and `requestId`, which go
//! into the audit event (`codex.login`, `codex.logout`; `event` in the
//! answer, `null` if the store could not take it). A repeated request signs
//! in or out again, which changes nothing, so `requestId` is recorded but
//! not deduplicated. Auth and the cross-site rules are every admin route's.
//!
//! The API key is read from the body straight into a [`SecretString`] and
//! handed to Codex: it is in no log line, answer, error or stored row. A body
//! that does not parse gets a fixed message that never quotes it.

use crate::agent::account::{AccountControl, AccountError, LoginId};
use crate::store::audit::{self, Audit, AuditView};
use crate::web::auth::Admin;
use crate::web::error::ApiError;
use crate::web::state::AppState;
use actix_web::{web, HttpResponse};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;

/// Codex's sign-in, or why there is none to use.
fn codex(state: &AppState) -> Result<Arc<dyn AccountControl>, ApiError> {
    state.account.clone().ok_or_else(|| ApiError::Conflict {
        code: "codex_not_configured",
        message: format!(
            "agent_runtime is `{}`: there is no Codex to sign in (set agent_runtime = \"codex\")",
            state.config.agent_runtime
        ),
    })
}

fn api_error(e: AccountError) -> ApiError {
    match e {
        AccountError::Unavailable(why) => {
            ApiError::AgentUnavailable(format!("codex is not running, nothing was done: {why}"))
        }
        AccountError::Refused(why) => ApiError::AgentRefused(format!("codex refused: {why}")),
    }
}

pub async fn account(_: Admin, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let status = codex(&state)?.account().await.map_err(api_error)?;
    Ok(HttpResponse::Ok().json(status))
}

/// How to sign in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
enum LoginKind {
    ApiKey,
    DeviceCode,
}

/// `POST /codex/login`. No `Debug`: it holds the key until it is wrapped.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LoginBody {
    #[serde(rename = "type")]
    kind: LoginKind,
    #[serde(default)]
    api_key: Option<String>,
    #[serde(flatten)]
    audit: AuditFields,
}

/// What the audit event of a sign-in or sign-out says besides what happened.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AuditFields {
    #[serde(default)]
    operator: Option<String>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    request_id: Option<String>,
}

const LOGIN_BODY: &str = r#"the body must be JSON: {"type": "apiKey", "apiKey": "..."} or {"type": "deviceCode"}, optionally with "operator", "reason" and "requestId""#;

/// A sign-in as asked for.
enum Login {
    ApiKey(SecretString),
    DeviceCode,
}

impl Login {
    fn method(&self) -> &'static str {
        match self {
            Login::ApiKey(_) => "apiKey",
            Login::DeviceCode => "deviceCode",
        }
    }
}

/// Reads a sign-in request; the key, if any, leaves as a secret only.
fn parse_login(body: &[u8]) -> Result<(Login, AuditFields), ApiError> {
    let body: LoginBody = serde_json::from_slice(body)
        .map_err(|_| ApiError::bad_request("invalid_login", LOGIN_BODY))?;
    let key = body
        .api_key
        .map(|k| SecretString::from(k.trim().to_owned()));
    let login = match (body.kind, key) {
        (LoginKind::ApiKey, Some(key)) if !key.expose_secret().is_empty() => Login::ApiKey(key),
        (LoginKind::ApiKey, _) => {
            return Err(ApiError::bad_request(
                "invalid_login",
                "an apiKey sign-in needs a non-empty \"apiKey\"",
            ))
        }
        (LoginKind::DeviceCode, Some(_)) => {
            return Err(ApiError::bad_request(
                "invalid_login",
                "a deviceCode sign-in takes no \"apiKey\"",
            ))
        }
        (LoginKind::DeviceCode, None) => Login::DeviceCode,
    };
    Ok((login, body.audit))
}

/// Records `action` with `meta` and the caller's audit fields. A store
/// that cannot take it does not undo what Codex did: the answer says
/// `event: null`, and the log has it.
async fn record(
    state: &AppState,
    action: &'static str,
    fields: AuditFields,
    mut meta: Value,
) -> Result<Option<AuditView>, ApiError> {
    let actor = super::actor_of(fields.operator)?;
    let reason = fields
        .reason
        .map(|r| r.trim().chars().take(2000).collect::<String>())
        .filter(|r| !r.is_empty());
    meta["reason"] = json!(reason);
    meta["requestId"] = json!(fields.request_id);
    let written = state
        .store
        .write(move |c| audit::record(c, &Audit::new(action, &actor).meta(meta.clone())))
        .await;
    Ok(match written {
        Ok(event) => Some(event),
        Err(e) => {
            tracing::warn!(action, error = %e, "could not audit a codex sign-in or sign-out");
            None
        }
    })
}

pub async fn login(
    _: Admin,
    state: web::Data<AppState>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    let (login, fields) = parse_login(&body)?;
    drop(body);
    let codex = codex(&state)?;
    // The operator field is checked before Codex is asked anything.
    super::actor_of(fields.operator.clone())?;
    let method = login.method();
    match login {
        Login::ApiKey(key) => {
            codex.login_api_key(key).await.map_err(|e| {
                tracing::warn!(error = %e, "codex API-key sign-in failed");
                api_error(e)
            })?;
            let event = record(&state, "codex.login", fields, json!({ "method": method })).await?;
            Ok(HttpResponse::Ok().json(json!({
                "type": method,
                "status": "completed",
                "event": event,
            })))
        }
        Login::DeviceCode => {
            let code = codex.login_device_code().await.map_err(|e| {
                tracing::warn!(error = %e, "codex device-code sign-in could not start");
                api_error(e)
            })?;
            let meta = json!({ "method": method, "loginId": code.login_id });
            let event = record(&state, "codex.login", fields, meta).await?;
            Ok(HttpResponse::Ok().json(json!({
                "type": method,
                "status": "pending",
                "loginId": code.login_id,
                "verificationUrl": code.verification_url,
                "userCode": code.user_code,
                "event": event,
            })))
        }
    }
}

pub async fn login_status(
    _: Admin,
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = LoginId(path.into_inner());
    let status = codex(&state)?.login_status(&id).ok_or_else(|| {
        ApiError::NotFound(format!(
            "sign-in {id} (not started by this server process, or long forgotten: start a new one)"
        ))
    })?;
    let mut answer = serde_json::to_value(&status).unwrap_or(Value::Null);
    answer["loginId"] = json!(id);
    Ok(HttpResponse::Ok().json(answer))
}

pub async fn logout(
    _: Admin,
    state: web::Data<AppState>,
    body: web::Bytes,
) -> Result<HttpResponse, ApiError> {
    // No body at all is fine: the audit fields are optional.
    let fields: AuditFields = if body.iter().all(u8::is_ascii_whitespace) {
        AuditFields::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| {
            ApiError::bad_request(
                "invalid_json",
                format!("the body must be JSON with optional operator, reason, requestId: {e}"),
            )
        })?
    };
    super::actor_of(fields.operator.clone())?;
    codex(&state)?.logout().await.map_err(api_error)?;
    let event = record(&state, "codex.logout", fields, json!({})).await?;
    Ok(HttpResponse::Ok().json(json!({ "status": "signedOut", "event": event })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sign_in_body_is_read_and_a_bad_one_is_refused_without_quoting_it() {
        let (login, fields) = parse_login(
            br#"{"type": "apiKey", "apiKey": " sk-test-1 ", "operator": "alice", "reason": "rotate"}"#,
        )
        .unwrap();
        assert!(matches!(login, Login::ApiKey(ref k) if k.expose_secret() == "sk-test-1"));
        assert_eq!(fields.operator.as_deref(), Some("alice"));
        let (login, _) = parse_login(br#"{"type": "deviceCode"}"#).unwrap();
        assert_eq!(login.method(), "deviceCode");
        for bad in [
            &br#"{"type": "sk-test-leaked-1", "apiKey": "x"}"#[..],
            br#"{"type": "apiKey", "apiKey": ["sk-test-leaked-1"]}"#,
            br#"{"type": "apiKey", "apiKey": "sk-test-leaked-1""#,
            br#"{"type": "apiKey", "apiKey": "   "}"#,
            br#"{"type": "deviceCode", "apiKey": "sk-test-leaked-1"}"#,
            b"sk-test-leaked-1",
        ] {
            let e = parse_login(bad).err().unwrap();
            assert_eq!(e.code(), "invalid_login");
            assert!(!e.to_string().contains("leaked"), "{e}");
        }
    }
}
