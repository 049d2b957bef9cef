//! The web view's Codex panel in a real browser (see `browser.rs` for the
//! rig): signed out, a device-code sign-in that shows the code and follows
//! it to its end, the account and rate limits, a refused API key, and the
//! sign-out through the action dialog. Codex is the recorded app-server of
//! `codex_login.rs` (the real device-code flow needs OpenAI's servers).

use crate::browser::{browser_test, click, confirm_action, el, sign_in, text_until};
use crate::codex_login::recorded::{self, RecordedAppServer};
use crate::support::*;
use crate::testapp::*;

#[test]
fn browser_codex_panel_signs_in_with_a_device_code_and_out() {
    let peer = &RecordedAppServer::start();
    let s = &TestApp::builder()
        .codex()
        .env("CODEX_BRIDGE_CODEX_BIN", peer.bin().to_str().unwrap())
        .start();
    browser_test("codex_panel", |c| async move {
        sign_in(&c, s, ADMIN_TOKEN).await;
        let account = text_until(&c, "#codex-account", |t| t.contains("signed out")).await;
        assert!(account.contains("tasks wait"), "{account}");
        text_until(&c, "#codex-rate-limits", |t| t.contains("not applicable")).await;

        click(&c, "#codex-device-start").await;
        text_until(&c, "#codex-user-code", |t| t == recorded::USER_CODE).await;
        let link = el(&c, "a#codex-verification-url").await;
        assert_eq!(
            link.attr("href").await.unwrap().as_deref(),
            Some(recorded::VERIFICATION_URL)
        );
        assert_eq!(
            link.attr("rel").await.unwrap().as_deref(),
            Some("noopener noreferrer")
        );
        text_until(&c, "#codex-login-state", |t| t.contains("Waiting")).await;
        peer.complete(None);
        text_until(&c, "#codex-login-state", |t| t == "Codex is signed in.").await;
        let account = text_until(&c, "#codex-account", |t| t.contains("ChatGPT")).await;
        assert!(
            account.contains("ops@example.com") && account.contains("plan plus"),
            "{account}"
        );
        let limits = text_until(&c, "#codex-rate-limits", |t| t.contains("42% used")).await;
        assert!(
            limits.contains("secondary") && limits.contains("7% used"),
            "{limits}"
        );

        // An API key this app-server refuses: the panel says so, the field is emptied.
        let input = el(&c, "#codex-api-key").await;
        input
            .send_keys("sk-test-typed-into-the-page")
            .await
            .unwrap();
        click(&c, "#codex-api-key-submit").await;
        let error = text_until(&c, "#codex-error", |t| t.contains("codex_refused")).await;
        assert!(!error.contains("typed-into"), "{error}");
        let left = el(&c, "#codex-api-key").await.prop("value").await.unwrap();
        assert_eq!(left.as_deref(), Some(""));

        click(&c, "#codex-sign-out").await;
        assert_eq!(
            confirm_action(&c, "rotating the account").await,
            "codex.logout"
        );
        text_until(&c, "#codex-account", |t| t.contains("signed out")).await;
    });
    assert!(peer.methods().contains(&"account/logout".to_owned()));
    let audit = s.admin_get("/api/gitea-workflow/audit");
    assert!(
        audit.json.to_string().contains("rotating the account"),
        "{:?}",
        audit.json
    );
}
