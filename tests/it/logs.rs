//! Secrets and comment bodies never reach the logs; the correlation ids do.

use crate::support::*;
use crate::testapp::*;
use serde_json::json;

fn full_flow(s: &TestApp) -> String {
    let (body, headers) = fixture("issue_comment.created.issue.mention");
    let accepted = s.webhook(&headers, &body);
    assert_eq!(accepted.status, 202);
    assert_eq!(s.webhook(&headers, &body).status, 200);
    let mut bad = headers.clone();
    bad.retain(|(k, _)| !k.contains("Signature"));
    assert_eq!(s.webhook(&bad, &body).status, 401);
    let broken = comment_body(5, "@ccbot SECRET-PROMPT-TEXT-123", "../etc", 1);
    assert_eq!(
        s.webhook(
            &gitea_headers("bad-repo", "issue_comment", "issue_comment", &broken),
            &broken
        )
        .status,
        400
    );
    assert_eq!(s.admin_get("/api/gitea-workflow/overview").status, 200);
    assert_eq!(
        s.get(
            "/api/gitea-workflow/overview",
            Some("a-wrong-token-value-xyz")
        )
        .status,
        401
    );
    assert_eq!(
        s.admin_post(
            "/api/gitea-workflow/control/pause",
            &json!({"requestId": "l-1", "reason": "logs"})
        )
        .status,
        200
    );
    accepted.json["taskId"].as_str().unwrap().to_owned()
}

fn assert_clean(logs: &str, task_id: &str) {
    for secret in [SECRET, ADMIN_TOKEN, GITEA_TOKEN, "a-wrong-token-value-xyz"] {
        assert!(!logs.contains(secret), "a secret reached the logs");
    }
    for body_text in [
        "can you look into why",
        "SECRET-PROMPT-TEXT-123",
        "TestRetryBackoff",
    ] {
        assert!(
            !logs.contains(body_text),
            "comment text reached the logs: {body_text}"
        );
    }
    // Positive control: the logs do carry the correlation ids.
    assert!(
        logs.contains("6f1c2a8e-3d4b-4e5f-9a7b-1c2d3e4f5a60"),
        "delivery id missing:\n{logs}"
    );
    assert!(logs.contains(task_id), "task id missing:\n{logs}");
}

#[test]
fn plain_logs_carry_ids_but_no_secrets_or_bodies() {
    let mut s = TestApp::builder()
        .env("CODEX_BRIDGE_LOG_FILTER", "debug")
        .start();
    let task = full_flow(&s);
    s.stop();
    let logs = s.logs();
    assert_clean(&logs, &task);
}

#[test]
fn json_logs_are_json_lines_with_the_span_ids() {
    let mut s = TestApp::builder()
        .env("CODEX_BRIDGE_LOG_FORMAT", "json")
        .env("CODEX_BRIDGE_LOG_FILTER", "debug")
        .start();
    let task = full_flow(&s);
    s.stop();
    let logs = s.logs();
    assert_clean(&logs, &task);
    let mut with_task = 0;
    for line in logs.lines().filter(|l| l.starts_with('{')) {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        if v["span"]["task.id"] == task.as_str() {
            with_task += 1;
        }
    }
    assert!(
        with_task > 0,
        "no JSON line carries task.id in its span:\n{logs}"
    );
}
