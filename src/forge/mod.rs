//! What the actors need from the forge (Gitea): proving that a reply landed,
//! the bridge's REST post of a reply, who may trigger work, and the facts a
//! pull request's trust rests on. The Gitea client
//! implements it; tests put stand-ins behind it.

use crate::domain::trust::PrFacts;
use crate::domain::{ResourceKey, TaskId};
use futures_util::future::BoxFuture;

pub mod scripted;

/// Whether the agent's reply is really in Gitea: a comment by the bot that
/// carries the task's marker on the task's Issue/PR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyCheck {
    /// Found: bot author + marker + resource.
    Confirmed { comment_id: Option<i64> },
    /// Gitea said explicitly that it is not there.
    Missing,
    /// The query failed: nothing may be written on this basis.
    Unknown(String),
}

/// What the verifier needs to find a reply.
#[derive(Debug, Clone)]
pub struct ReplyQuery {
    pub task_id: TaskId,
    pub turn_id: String,
    pub resource_key: ResourceKey,
    pub final_text: Option<String>,
    pub form: ReplyForm,
}

/// What a reply is in Gitea.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyForm {
    /// A comment on the Issue/PR.
    Comment,
    /// A review of the pull request (`/review`'s result).
    PullReview,
}

/// Whether a commenter may trigger work (write permission by default,
/// widened or narrowed by config).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TriggerCheck {
    Allowed,
    /// Not allowed; the reason goes into the rejection receipt.
    Denied(String),
    /// The question could not be answered now (Gitea unreachable).
    Unknown(String),
}

/// What a turn's prompt may tell the agent about its Issue/PR, as Gitea has
/// it now: all of it untrusted data.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ThreadContext {
    pub title: String,
    pub body: String,
    pub author: String,
    /// Every plain comment, oldest first.
    pub comments: Vec<ContextComment>,
    /// A pull request's branches and changed files.
    pub pull: Option<PullContext>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextComment {
    pub id: i64,
    pub author: String,
    /// RFC 3339, as Gitea gives it.
    pub created_at: String,
    pub body: String,
    /// Whether the author holds `trigger_permission` (`None`: Gitea could
    /// not say).
    pub author_permitted: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PullContext {
    pub base: String,
    pub head: String,
    pub files: Vec<FileStat>,
    /// Gitea listed more files than were read.
    pub more_files: bool,
}

/// One changed file of a pull request and its diff stat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileStat {
    pub filename: String,
    /// `added`, `changed`, `deleted`, `renamed`, … as Gitea says.
    pub status: String,
    pub additions: i64,
    pub deletions: i64,
}

/// The Gitea side the actors need (the Gitea client implements it): proving a
/// reply landed, the one REST fallback post, and who may trigger work.
pub trait Forge: Send + Sync + 'static {
    fn verify(&self, query: ReplyQuery) -> BoxFuture<'static, ReplyCheck>;

    /// Posts `body` on the resource in `form` (the REST fallback, or the
    /// bridge's own reply); the new comment's or review's id. A write: the
    /// caller proves it missing first.
    fn post_reply(
        &self,
        resource_key: ResourceKey,
        body: String,
        form: ReplyForm,
    ) -> BoxFuture<'static, Result<i64, String>> {
        let _ = (resource_key, body, form);
        Box::pin(async { Err("this forge cannot post comments".to_owned()) })
    }

    /// Where the pull request's head lives and whether its head commit's
    /// author holds `trigger_permission`. An `Err` (the question could not be
    /// answered) makes the pull request untrusted: the default fails closed.
    fn pr_facts(&self, resource_key: ResourceKey) -> BoxFuture<'static, Result<PrFacts, String>> {
        let _ = resource_key;
        Box::pin(async {
            Err(
                "this forge cannot read a pull request's head; configure gitea_url and \
                 gitea_token"
                    .to_owned(),
            )
        })
    }

    /// The Issue/PR as a turn's prompt may describe it: title, body,
    /// comments (with whether each author holds `trigger_permission`), and a
    /// pull request's branches and changed files.
    fn thread_context(
        &self,
        resource_key: ResourceKey,
    ) -> BoxFuture<'static, Result<ThreadContext, String>> {
        let _ = resource_key;
        Box::pin(async { Err("this forge cannot read an Issue or pull request".to_owned()) })
    }

    /// Whether `author`, who is not the workflow's owner, holds
    /// `gate_permission` on the resource's repository and so may answer its
    /// gate. Without a way to ask, only the owner answers.
    fn may_answer_gate(
        &self,
        resource_key: ResourceKey,
        author: String,
    ) -> BoxFuture<'static, Result<bool, String>> {
        let _ = (resource_key, author);
        Box::pin(async { Ok(false) })
    }

    /// Whether the Issue or pull request is open (`false`: closed or
    /// merged). An `Err` (Gitea could not say) runs nothing on a guess.
    fn resource_open(&self, resource_key: ResourceKey) -> BoxFuture<'static, Result<bool, String>> {
        let _ = resource_key;
        Box::pin(async { Err("this forge cannot read an Issue or pull request".to_owned()) })
    }

    /// Whether `author` may trigger work on the resource's repository.
    ///
    /// A verifier that cannot ask anyone must not let a turn start, so the
    /// default fails closed. It answers `Unknown` rather than `Denied`: a
    /// verifier without this check is a setup gap, not a verdict on the
    /// commenter, and `Denied` would reject the task for good and tell them
    /// they lack permission. `Unknown` keeps the task retryable and says why.
    /// A verifier that really allows everyone says so in its own impl.
    fn may_trigger(
        &self,
        resource_key: ResourceKey,
        author: String,
    ) -> BoxFuture<'static, TriggerCheck> {
        let _ = (resource_key, author);
        Box::pin(async {
            TriggerCheck::Unknown(
                "this forge cannot check a commenter's permission; configure \
                 gitea_url and gitea_token"
                    .into(),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A verifier that implements only what the trait requires.
    struct VerifyOnly;

    impl Forge for VerifyOnly {
        fn verify(&self, _: ReplyQuery) -> BoxFuture<'static, ReplyCheck> {
            Box::pin(async { ReplyCheck::Missing })
        }
    }

    #[tokio::test]
    async fn a_verifier_that_does_not_check_permissions_lets_nobody_trigger() {
        let check = VerifyOnly
            .may_trigger(
                ResourceKey::parse("default:acme/widgets:issue:1").unwrap(),
                "mallory".into(),
            )
            .await;
        assert!(
            matches!(&check, TriggerCheck::Unknown(why) if why.contains("gitea_url")),
            "{check:?}"
        );
    }
}
