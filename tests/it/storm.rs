//! Storms: other bots mentioning ours, and bridges answering each other,
//! are stopped at intake on the real server.

use crate::support::*;
use crate::testapp::*;
use serde_json::Value;

#[test]
fn another_bot_and_a_quoted_marker_are_recorded_and_never_trigger() {
    let s = TestApp::builder()
        .env("CODEX_BRIDGE_IGNORE_LOGINS", "[\"relaybot\"]")
        .start();
    let post = |delivery: &str, id: i64, author: &str, text: &str| {
        let mut v: Value = serde_json::from_slice(&comment_body(id, text, "widgets", 1)).unwrap();
        v["comment"]["user"]["login"] = author.into();
        v["sender"]["login"] = author.into();
        let body = serde_json::to_vec(&v).unwrap();
        s.webhook(
            &gitea_headers(delivery, "issue_comment", "issue_comment", &body),
            &body,
        )
    };
    let r = post("storm-1", 1, "RelayBot", "@ccbot answer me");
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert_eq!(r.json["reason"], "ignored_login");
    let r = post(
        "storm-2",
        2,
        "bob",
        "@ccbot you said:\n> fixed\n<!-- codex-bridge task=task-9 turn=t-1 -->",
    );
    assert_eq!(r.json["reason"], "quotes_marker", "{:?}", r.json);
    // A person's plain mention still triggers.
    assert_eq!(post("storm-3", 3, "bob", "@ccbot fix it").status, 202);
    let mut c = s.db();
    assert_eq!(count(&mut c, "tasks"), 1);
    assert_eq!(
        count_where(&mut c, "webhook_deliveries", "status = 'ignored'"),
        2
    );
}
