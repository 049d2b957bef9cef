//! What a message asks, as one SHA-256: the same operation id with another
//! fingerprint is a conflict, never an overwrite. It covers every field
//! that changes what the agent is asked, and deliberately leaves out how
//! the message is delivered (its intent, its send mode, the run a steer
//! expects): a message queued and then sent now is the same operation,
//! while the same words aimed at another run are caught by admission, which
//! compares the run the entry stored.

use super::command::Command;
use sha2::{Digest, Sha256};

/// The request's fields, mapped to the bridge's: a Gitea comment asks in
/// a session's thread, under the access the thread was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint<'a> {
    pub session_key: &'a str,
    pub queue_id: &'a str,
    /// The comment as written.
    pub user_text: &'a str,
    /// What the turn is asked: a command's text after its word, else the
    /// comment.
    pub prompt_text: &'a str,
    /// The comment's attachments (Gitea asset ids), in the order given.
    pub attachments: &'a [i64],
    /// The session's thread when the message was taken, and how many times
    /// that thread was started over (`/reset`).
    pub thread_id: Option<&'a str>,
    pub thread_generation: i64,
    /// The access the thread was created with (`trusted`, `untrusted`;
    /// none before its first turn).
    pub access_mode: Option<&'a str>,
    /// `/replace`: the latest turn is dropped from the thread before sending.
    pub rollback_before_send: bool,
    /// When the comment was written, as Gitea says.
    pub created_at: &'a str,
}

/// What a message's turn is asked: a command's text after its word, else
/// the whole comment.
pub fn prompt_text<'a>(
    text: &'a str,
    command: Option<Command>,
    argument: Option<&'a str>,
) -> &'a str {
    match (command, argument) {
        (Some(c), Some(arg)) if c.carries_text() && !arg.trim().is_empty() => arg,
        _ => text,
    }
}

impl Fingerprint<'_> {
    /// The hex SHA-256 of the canonical form. The bridge chooses no service
    /// tier, model or reasoning effort (Codex's own configuration does), so
    /// those fields are fixed nulls: a message cannot differ in them.
    pub fn hash(&self) -> String {
        let canonical = Canonical {
            access_mode: self.access_mode,
            attachments: self.attachments,
            codex_thread_id: self.thread_id,
            created_at: self.created_at,
            expected_effort: None,
            expected_model: None,
            prompt_text: self.prompt_text,
            queue_id: self.queue_id,
            rollback_before_send: self.rollback_before_send,
            session_id: self.session_key,
            source: "gitea",
            speed_mode: None,
            thread_generation: self.thread_generation,
            user_text: self.user_text,
        };
        let mut sink = HashSink(Sha256::new());
        // Writing into a hash cannot fail, and these fields always serialize.
        if serde_json::to_writer(&mut sink, &canonical).is_err() {
            return String::new();
        }
        crate::domain::keys::lower_hex(&sink.0.finalize())
    }
}

/// The canonical form: compact JSON with its keys in byte order (the order
/// of this struct's fields), written straight into the hash as the webhook's
/// writer decides each accept, without building the document first.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Canonical<'a> {
    access_mode: Option<&'a str>,
    attachments: &'a [i64],
    codex_thread_id: Option<&'a str>,
    created_at: &'a str,
    expected_effort: Option<()>,
    expected_model: Option<()>,
    prompt_text: &'a str,
    queue_id: &'a str,
    rollback_before_send: bool,
    session_id: &'a str,
    source: &'static str,
    speed_mode: Option<()>,
    thread_generation: i64,
    user_text: &'a str,
}

struct HashSink(Sha256);

impl std::io::Write for HashSink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.update(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    struct Owned {
        strings: [String; 6],
        attachments: Vec<i64>,
        thread: Option<String>,
        generation: i64,
        rollback: bool,
    }

    impl Owned {
        fn view(&self) -> Fingerprint<'_> {
            Fingerprint {
                session_key: &self.strings[0],
                queue_id: &self.strings[1],
                user_text: &self.strings[2],
                prompt_text: &self.strings[3],
                attachments: &self.attachments,
                thread_id: self.thread.as_deref(),
                thread_generation: self.generation,
                access_mode: Some(&self.strings[4]),
                rollback_before_send: self.rollback,
                created_at: &self.strings[5],
            }
        }
    }

    fn owned() -> impl Strategy<Value = Owned> {
        (
            prop::array::uniform6("[a-z ]{0,8}"),
            prop::collection::vec(0i64..5, 0..3),
            prop::option::of("thread-[ab]"),
            0i64..3,
            any::<bool>(),
        )
            .prop_map(
                |(strings, attachments, thread, generation, rollback)| Owned {
                    strings,
                    attachments,
                    thread,
                    generation,
                    rollback,
                },
            )
    }

    /// The canonical form as a JSON document with its keys sorted: the
    /// definition the streamed form must keep (stored fingerprints compare
    /// against it).
    fn documented_hash(f: &Fingerprint<'_>) -> String {
        let mut keys = std::collections::BTreeMap::new();
        keys.insert("sessionId", serde_json::json!(f.session_key));
        keys.insert("queueId", serde_json::json!(f.queue_id));
        keys.insert("userText", serde_json::json!(f.user_text));
        keys.insert("promptText", serde_json::json!(f.prompt_text));
        keys.insert("attachments", serde_json::json!(f.attachments));
        keys.insert("codexThreadId", serde_json::json!(f.thread_id));
        keys.insert("threadGeneration", serde_json::json!(f.thread_generation));
        keys.insert("accessMode", serde_json::json!(f.access_mode));
        keys.insert("speedMode", serde_json::Value::Null);
        keys.insert("expectedModel", serde_json::Value::Null);
        keys.insert("expectedEffort", serde_json::Value::Null);
        keys.insert(
            "rollbackBeforeSend",
            serde_json::json!(f.rollback_before_send),
        );
        keys.insert("source", serde_json::json!("gitea"));
        keys.insert("createdAt", serde_json::json!(f.created_at));
        let text = serde_json::to_string(&keys).unwrap();
        hex::encode(Sha256::digest(text.as_bytes()))
    }

    #[test]
    fn a_known_request_keeps_its_fingerprint() {
        let f = Fingerprint {
            session_key: "default:acme/widgets:issue:7",
            queue_id: "q-1",
            user_text: "@ccbot fix \"the\" tést\n\u{1}",
            prompt_text: "fix it",
            attachments: &[3, 1],
            thread_id: Some("thr-1"),
            thread_generation: 2,
            access_mode: Some("trusted"),
            rollback_before_send: false,
            created_at: "2026-12-06T10:00:00Z",
        };
        assert_eq!(f.hash(), documented_hash(&f));
        let none = Fingerprint {
            thread_id: None,
            access_mode: None,
            attachments: &[],
            ..f
        };
        assert_eq!(none.hash(), documented_hash(&none));
    }

    proptest! {
        #[test]
        fn the_streamed_form_is_the_documented_one(a in owned()) {
            prop_assert_eq!(a.view().hash(), documented_hash(&a.view()));
        }

        #[test]
        fn the_hash_is_a_function_of_every_field_and_only_of_them(a in owned(), b in owned()) {
            // Equal views hash equal; any field that differs changes it.
            prop_assert_eq!(a.view() == b.view(), a.view().hash() == b.view().hash());
        }

        #[test]
        fn a_new_thread_generation_is_another_request(a in owned()) {
            let mut b = a.clone();
            b.generation += 1;
            prop_assert_ne!(a.view().hash(), b.view().hash());
        }
    }
}
