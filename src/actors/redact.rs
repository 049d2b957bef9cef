//! The one place where what the agent did is scrubbed of secrets before it
//! is stored: every occurrence of a secret of this server's configuration
//! (the Gitea tokens, the webhook secret, the admin token) in any text, and
//! the values of secret-looking keys (`token`, `password`, `api_key`, …) in
//! JSON such as an MCP tool call's arguments. A command that prints its
//! environment, or a tool call that carries a token, is stored as
//! `[redacted]` where the secret was.

use crate::agent::transcript::TranscriptItem;
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;
use std::sync::Arc;

/// What a secret is replaced with.
pub const REDACTED: &str = "[redacted]";

/// Shorter configured values are not searched for: they would redact
/// ordinary words, and no secret this server accepts is that short.
const MIN_SECRET_LEN: usize = 8;

/// Scrubs the configured secrets out of texts and JSON.
#[derive(Clone, Default)]
pub struct Redactor {
    secrets: Arc<Vec<SecretString>>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Redactor({} secrets)", self.secrets.len())
    }
}

impl Redactor {
    /// A redactor of these secrets (empty and too short ones are skipped).
    pub fn new(secrets: impl IntoIterator<Item = SecretString>) -> Redactor {
        let mut kept: Vec<SecretString> = secrets
            .into_iter()
            .filter(|s| s.expose_secret().len() >= MIN_SECRET_LEN)
            .collect();
        // Longest first: a secret that contains another is replaced whole.
        kept.sort_by_key(|s| std::cmp::Reverse(s.expose_secret().len()));
        kept.dedup_by(|a, b| a.expose_secret() == b.expose_secret());
        Redactor {
            secrets: Arc::new(kept),
        }
    }

    /// This redactor and `more` secrets.
    pub fn with(&self, more: impl IntoIterator<Item = SecretString>) -> Redactor {
        Redactor::new(self.secrets.iter().cloned().chain(more))
    }

    /// Replaces every occurrence of a secret in `text`.
    pub fn text(&self, text: &mut String) {
        for s in self.secrets.iter() {
            let secret = s.expose_secret();
            if text.contains(secret) {
                *text = text.replace(secret, REDACTED);
            }
        }
    }

    /// Scrubs JSON: the value of every secret-looking key is replaced whole,
    /// and every string (keys included) loses the secrets in it.
    pub fn value(&self, value: &mut Value) {
        match value {
            Value::String(s) => self.text(s),
            Value::Array(items) => items.iter_mut().for_each(|v| self.value(v)),
            Value::Object(map) => {
                let entries = std::mem::take(map);
                for (mut key, mut v) in entries {
                    if is_secret_key(&key) {
                        v = Value::String(REDACTED.into());
                    } else {
                        self.value(&mut v);
                    }
                    self.text(&mut key);
                    map.insert(key, v);
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }

    /// Scrubs every text and JSON value of a transcript item.
    pub fn item(&self, item: &mut TranscriptItem) {
        let (texts, values) = item.body.texts_mut();
        for t in texts {
            self.text(t);
        }
        for v in values {
            self.value(v);
        }
    }
}

/// Whether a JSON key names a secret: `token`, `access_token`, `password`,
/// `client-secret`, `Authorization`, `api_key`, `apiKey`, `privateKey`,
/// `key`, … (case, `-` and `_` aside). Redacting a harmless value by
/// mistake costs less than storing a secret.
pub fn is_secret_key(key: &str) -> bool {
    let k: String = key
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .collect();
    const WORDS: [&str; 8] = [
        "token",
        "password",
        "passwd",
        "secret",
        "authorization",
        "credential",
        "cookie",
        "apikey",
    ];
    WORDS.iter().any(|w| k.contains(w)) || k.ends_with("key") || k == "auth" || k == "pat"
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::transcript::{
        ChangeKind, FileDiff, ItemBody, ItemStatus, Prompt, PromptPart,
    };
    use serde_json::json;

    fn redactor() -> Redactor {
        Redactor::new(
            ["gitea-token-0123456789", "hook-secret-abcdef", "short", ""]
                .map(|s| SecretString::from(s.to_owned())),
        )
    }

    #[test]
    fn secret_looking_keys_are_recognised_and_ordinary_ones_left_alone() {
        for k in [
            "token",
            "access_token",
            "Authorization",
            "password",
            "client-secret",
            "api_key",
            "apiKey",
            "X-Api-Key",
            "privateKey",
            "key",
            "GITEA_TOKEN",
            "credentials",
            "Cookie",
        ] {
            assert!(is_secret_key(k), "{k}");
        }
        for k in [
            "body",
            "owner",
            "repo",
            "issue_number",
            "title",
            "author",
            "keys_total",
        ] {
            assert!(!is_secret_key(k), "{k}");
        }
    }

    #[test]
    fn configured_secrets_are_replaced_in_texts_wherever_they_occur() {
        let r = redactor();
        let mut t =
            "GITEA_TOKEN=gitea-token-0123456789\nx=hook-secret-abcdefgitea-token-0123456789 short"
                .to_owned();
        r.text(&mut t);
        assert_eq!(
            t, "GITEA_TOKEN=[redacted]\nx=[redacted][redacted] short",
            "too short a value is not searched for"
        );
        let longer =
            Redactor::new(["abcdefgh", "abcdefgh-ijkl"].map(|s| SecretString::from(s.to_owned())));
        let mut t = "abcdefgh-ijkl".to_owned();
        longer.text(&mut t);
        assert_eq!(t, "[redacted]", "the longer secret is replaced whole");
    }

    #[test]
    fn tool_call_arguments_lose_secret_keys_values_and_configured_secrets() {
        let r = redactor();
        let mut v = json!({
            "owner": "acme",
            "token": "anything",
            "headers": {"Authorization": "Bearer x", "accept": "json"},
            "body": "see gitea-token-0123456789",
            "list": [{"api_key": 7}, "hook-secret-abcdef"],
        });
        r.value(&mut v);
        assert_eq!(
            v,
            json!({
                "owner": "acme",
                "token": "[redacted]",
                "headers": {"Authorization": "[redacted]", "accept": "json"},
                "body": "see [redacted]",
                "list": [{"api_key": "[redacted]"}, "[redacted]"],
            })
        );
    }

    #[test]
    fn every_text_of_an_item_is_scrubbed() {
        let r = redactor();
        let secret = "gitea-token-0123456789";
        let mut items = vec![
            Prompt {
                parts: vec![
                    PromptPart::trusted("x"),
                    PromptPart::untrusted(format!("use {secret}")),
                ],
            }
            .item(),
            TranscriptItem {
                item_id: "c".into(),
                status: ItemStatus::Completed,
                body: ItemBody::CommandExecution {
                    command: format!("curl -H 'token {secret}'"),
                    cwd: "/w".into(),
                    exit_code: Some(0),
                    duration_ms: None,
                    output: Some(format!("GITEA_TOKEN={secret}\n")),
                    output_bytes: 0,
                    output_truncated: false,
                },
            },
            TranscriptItem {
                item_id: "f".into(),
                status: ItemStatus::Completed,
                body: ItemBody::FileChange {
                    changes: vec![FileDiff::new(
                        ".env".into(),
                        ChangeKind::Add,
                        None,
                        format!("TOKEN={secret}\n"),
                    )],
                },
            },
            TranscriptItem {
                item_id: "m".into(),
                status: ItemStatus::Failed,
                body: ItemBody::McpToolCall {
                    server: "gitea".into(),
                    tool: "add_comment".into(),
                    arguments: json!({"body": secret, "password": "p"}),
                    error: Some(format!("401 for {secret}")),
                    result: Some(secret.into()),
                    duration_ms: None,
                    truncated: false,
                },
            },
            TranscriptItem {
                item_id: "a".into(),
                status: ItemStatus::Completed,
                body: ItemBody::AgentMessage {
                    text: format!("the token is {secret}"),
                    truncated: false,
                },
            },
        ];
        for item in &mut items {
            r.item(item);
            let json = serde_json::to_string(&item.body).unwrap();
            assert!(!json.contains(secret), "{json}");
            assert!(json.contains(REDACTED), "{json}");
        }
        assert!(format!("{:?}", r).contains("2 secrets"));
    }
}
