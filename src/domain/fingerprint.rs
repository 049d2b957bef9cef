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
        // serde_json's map is ordered by key, so this text is canonical.
        let canonical = serde_json::json!({
            "sessionId": self.session_key,
            "queueId": self.queue_id,
            "userText": self.user_text,
            "promptText": self.prompt_text,
            "attachments": self.attachments,
            "codexThreadId": self.thread_id,
            "threadGeneration": self.thread_generation,
            "accessMode": self.access_mode,
            "speedMode": null,
            "expectedModel": null,
            "expectedEffort": null,
            "rollbackBeforeSend": self.rollback_before_send,
            "source": "gitea",
            "createdAt": self.created_at,
        });
        hex::encode(Sha256::digest(canonical.to_string().as_bytes()))
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

    proptest! {
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
