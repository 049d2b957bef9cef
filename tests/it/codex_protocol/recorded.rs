//! The recorded sign-in of `codex_login.rs` against the pinned codex's schema.

use super::Schema;
use codex_bridge::codex::protocol::*;
use serde_json::{json, Value};

/// The recorded device-code sign-in that `codex_login.rs` plays back is
/// what the pinned codex sends: each message against its definition, and
/// read by the bridge as it expects.
#[test]
fn the_recorded_sign_in_is_what_codex_sends() {
    use crate::codex_login::recorded as rec;
    let schema = Schema::generate();
    let parsed = |text: &str| -> Value { serde_json::from_str(text).unwrap() };
    schema.validate("InitializeResponse", &parsed(rec::INITIALIZE));
    schema.validate(
        "v2/CollaborationModeListResponse",
        &parsed(rec::COLLABORATION_MODES),
    );
    for error in [rec::RATE_LIMITS_SIGNED_OUT, rec::DEVICE_CODE_REFUSED] {
        schema.validate("JSONRPCErrorError", &parsed(error));
    }

    schema.validate("v2/GetAccountResponse", &parsed(rec::ACCOUNT_SIGNED_OUT));
    let out: AccountReadResponse = serde_json::from_str(rec::ACCOUNT_SIGNED_OUT).unwrap();
    assert_eq!((out.account, out.requires_openai_auth), (None, true));
    schema.validate("v2/GetAccountResponse", &parsed(rec::ACCOUNT_CHATGPT));
    let read: AccountReadResponse = serde_json::from_str(rec::ACCOUNT_CHATGPT).unwrap();
    let account = read.account.unwrap();
    assert_eq!(account.kind, AccountKind::Chatgpt);
    assert_eq!(account.email.as_deref(), Some("ops@example.com"));

    schema.validate("v2/GetAccountRateLimitsResponse", &parsed(rec::RATE_LIMITS));
    let limits: RateLimitsReadResponse = serde_json::from_str(rec::RATE_LIMITS).unwrap();
    let primary = limits.rate_limits.primary.unwrap();
    assert_eq!(primary.used_percent, 42.0);
    assert_eq!(primary.window_duration_mins, Some(300));

    let answer = rec::device_code("login-1");
    schema.validate("v2/LoginAccountResponse", &answer);
    match serde_json::from_value::<LoginStartResponse>(answer).unwrap() {
        LoginStartResponse::ChatgptDeviceCode(d) => {
            assert_eq!(d.login_id, "login-1");
            assert_eq!(d.user_code, rec::USER_CODE);
            assert_eq!(d.verification_url, rec::VERIFICATION_URL);
        }
        other => panic!("{other:?}"),
    }
    schema.validate("v2/LoginAccountResponse", &json!({"type": "apiKey"}));

    let notification = |method: &str, params: Value, definition: &str| {
        schema.validate(definition, &params);
        schema.validate(
            "ServerNotification",
            &json!({ "method": method, "params": params }),
        );
        ServerNotification::parse(method, params).unwrap()
    };
    for (error, success) in [(None, true), (Some(rec::EXPIRED), false)] {
        match notification(
            ServerNotification::ACCOUNT_LOGIN_COMPLETED,
            rec::login_completed("login-1", error),
            "v2/AccountLoginCompletedNotification",
        ) {
            ServerNotification::AccountLoginCompleted(n) => {
                assert_eq!(n.login_id.as_deref(), Some("login-1"));
                assert_eq!(n.success, success);
                assert_eq!(n.error.as_deref(), error);
            }
            other => panic!("{other:?}"),
        }
    }
    // What an API-key sign-in sends (observed from the real app-server).
    assert!(matches!(
        notification(
            ServerNotification::ACCOUNT_LOGIN_COMPLETED,
            json!({"loginId": null, "success": true, "error": null, "onboardingEntrypoint": null}),
            "v2/AccountLoginCompletedNotification",
        ),
        ServerNotification::AccountLoginCompleted(AccountLoginCompletedNotification {
            login_id: None,
            success: true,
            ..
        })
    ));
    for updated in [rec::UPDATED_CHATGPT, rec::UPDATED_SIGNED_OUT] {
        assert!(matches!(
            notification(
                ServerNotification::ACCOUNT_UPDATED,
                parsed(updated),
                "v2/AccountUpdatedNotification",
            ),
            ServerNotification::AccountUpdated
        ));
    }
}
