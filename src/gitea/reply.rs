//! Markers and the agent's reply: the hidden marker that proves a
//! comment is the answer of one task, and recognising the comment tool call
//! of every generation of gitea-mcp in a turn's items.

use crate::domain::TaskId;
use serde_json::Value;

/// The marker the agent's answer ends with. `turn` is the bridge's own id of
/// the turn (its operation id): Codex names the turn only after it started,
/// and the agent must know the marker before.
pub fn reply_marker(task_id: &TaskId, turn: &str) -> String {
    format!("<!-- codex-bridge task={task_id} turn={turn} -->")
}

/// The marker of a receipt, by its comment key (`taskId:status:<state>`).
pub fn receipt_marker(comment_key: &str) -> String {
    format!("<!-- codex-bridge receipt={comment_key} -->")
}

/// The marker of a `/status` command's answer: the command's own task.
pub fn status_marker(task_id: &TaskId) -> String {
    format!("<!-- codex-bridge status={task_id} -->")
}

/// Whether `body` is the bridge's own bookkeeping (a receipt, a command's
/// answer, a `/status`), as opposed to an answer of the agent.
pub fn is_bridge_notice(body: &str) -> bool {
    body.contains("<!-- codex-bridge receipt=") || body.contains("<!-- codex-bridge status=")
}

/// Whether `body` carries any marker of a bridge (a reply, a receipt, a
/// status): a comment quoting one is a bridge's words, never a request.
pub fn quotes_a_marker(body: &str) -> bool {
    body.contains("<!-- codex-bridge ")
}

/// Whether `body` carries the reply marker of `task_id` (any of its turns).
pub fn has_reply_marker(body: &str, task_id: &TaskId) -> bool {
    body.contains(&format!("<!-- codex-bridge task={task_id} turn="))
}

/// Where an MCP comment tool call posts: owner, repository, Issue/PR number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommentCall {
    pub owner: String,
    pub repo: String,
    pub number: i64,
    pub body: String,
}

/// Recognises a comment-posting tool call by its tool name and arguments:
/// the official gitea-mcp's `create_issue_comment {index}` (≤ early 2026),
/// `issue_write {method: add_comment, index | issue_number}` (2026-03 and
/// later), and the PyPI stand-in's `add_comment {issue_number}` and
/// `add_comment_on_pr {pull_number}`. Anything else is not a reply.
pub fn comment_call(tool: &str, args: &Value) -> Option<CommentCall> {
    let s = |k: &str| args.get(k).and_then(Value::as_str).map(str::to_owned);
    let n = |k: &str| {
        args.get(k).and_then(|v| {
            v.as_i64()
                .or_else(|| v.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
                .or_else(|| v.as_str().and_then(|t| t.parse().ok()))
        })
    };
    let number = match tool {
        "create_issue_comment" => n("index"),
        "issue_write" if s("method").as_deref() == Some("add_comment") => {
            n("issue_number").or_else(|| n("index"))
        }
        "add_comment" => n("issue_number"),
        "add_comment_on_pr" => n("pull_number"),
        _ => None,
    }?;
    Some(CommentCall {
        owner: s("owner")?,
        repo: s("repo")?,
        number,
        body: s("body").unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_generation_of_the_comment_tool_is_recognised() {
        let want = |n| {
            Some(CommentCall {
                owner: "acme".into(),
                repo: "widgets".into(),
                number: n,
                body: "hi".into(),
            })
        };
        let base = json!({"owner": "acme", "repo": "widgets", "body": "hi"});
        let with = |extra: Value| {
            let mut v = base.clone();
            for (k, x) in extra.as_object().unwrap() {
                v[k] = x.clone();
            }
            v
        };
        assert_eq!(
            comment_call("create_issue_comment", &with(json!({"index": 7}))),
            want(7)
        );
        assert_eq!(
            comment_call(
                "issue_write",
                &with(json!({"method": "add_comment", "index": 8}))
            ),
            want(8)
        );
        assert_eq!(
            comment_call(
                "issue_write",
                &with(json!({"method": "add_comment", "issue_number": 9}))
            ),
            want(9)
        );
        assert_eq!(
            comment_call("add_comment", &with(json!({"issue_number": 10}))),
            want(10)
        );
        assert_eq!(
            comment_call("add_comment_on_pr", &with(json!({"pull_number": 11}))),
            want(11)
        );
        assert_eq!(
            comment_call("add_comment", &with(json!({"issue_number": "12"}))),
            want(12)
        );
        // Not replies: other methods, other tools, missing fields.
        assert_eq!(
            comment_call(
                "issue_write",
                &with(json!({"method": "update", "index": 8}))
            ),
            None
        );
        assert_eq!(comment_call("get_issue", &with(json!({"index": 8}))), None);
        assert_eq!(
            comment_call("add_comment", &json!({"owner": "acme", "issue_number": 1})),
            None
        );
    }

    #[test]
    fn markers() {
        let task = TaskId::parse("task-0190a2b4c5d6e7f8a9b0c1d2e3f4a5b6").unwrap();
        let other = TaskId::parse("task-0190a2b4c5d6e7f8a9b0c1d2e3f4a5b7").unwrap();
        let m = reply_marker(&task, "op-2");
        assert_eq!(
            m,
            "<!-- codex-bridge task=task-0190a2b4c5d6e7f8a9b0c1d2e3f4a5b6 turn=op-2 -->"
        );
        assert!(has_reply_marker(&format!("done\n\n{m}"), &task));
        assert!(!has_reply_marker(&m, &other));
        assert!(!has_reply_marker(
            &format!("<!-- codex-bridge task={task} -->"),
            &task
        ));
    }
}
