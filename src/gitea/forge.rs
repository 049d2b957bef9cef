//! The Gitea side of a task, as the actors see it: the verifier that proves a
//! reply landed (bot author + marker + resource), the REST fallback post, and
//! who may trigger work. Implements [`crate::forge::Forge`].

use super::client::{GiteaClient, GiteaError, Permission};
use super::reply::has_reply_marker;
use crate::domain::trust::PrFacts;
use crate::domain::ResourceKey;
use crate::forge::{Forge, ReplyCheck, ReplyForm, ReplyQuery, TriggerCheck};
use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use std::collections::BTreeSet;
use std::sync::Arc;

/// Who may trigger work (config `trigger_permission`, `trigger_allow`,
/// `trigger_deny`): the commenter needs at least `min` on the repository,
/// unless listed in `allow`; anyone in `deny` never may.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TriggerPolicy {
    pub min: Permission,
    /// Lower-case logins that may trigger whatever their permission.
    pub allow: BTreeSet<String>,
    /// Lower-case logins that may never trigger.
    pub deny: BTreeSet<String>,
    /// `gate_permission`: the least permission that lets someone besides a
    /// workflow's owner answer its gate.
    pub gate: Permission,
}

impl TriggerPolicy {
    /// `trigger_permission`, `trigger_allow` and `trigger_deny` as configured.
    pub fn from_config(config: &crate::config::Config) -> TriggerPolicy {
        use crate::config::TriggerPermission;
        TriggerPolicy {
            min: match config.trigger_permission {
                TriggerPermission::Read => Permission::Read,
                TriggerPermission::Write => Permission::Write,
                TriggerPermission::Admin => Permission::Admin,
            },
            allow: config.trigger_allow.clone(),
            deny: config.trigger_deny.clone(),
            gate: match config.gate_permission {
                TriggerPermission::Read => Permission::Read,
                TriggerPermission::Write => Permission::Write,
                TriggerPermission::Admin => Permission::Admin,
            },
        }
    }
}

impl Default for TriggerPolicy {
    fn default() -> Self {
        TriggerPolicy {
            min: Permission::Write,
            allow: BTreeSet::new(),
            deny: BTreeSet::new(),
            gate: Permission::Admin,
        }
    }
}

#[derive(Clone)]
pub struct GiteaForge {
    client: GiteaClient,
    bot_login: String,
    policy: Arc<TriggerPolicy>,
}

impl GiteaForge {
    pub fn new(client: GiteaClient, bot_login: &str, policy: TriggerPolicy) -> GiteaForge {
        GiteaForge {
            client,
            bot_login: bot_login.to_ascii_lowercase(),
            policy: Arc::new(policy),
        }
    }

    pub fn client(&self) -> &GiteaClient {
        &self.client
    }
}

impl GiteaForge {
    /// Whether `login` holds `trigger_permission` on the repository (or is
    /// in `trigger_allow`, and not in `trigger_deny`). A permission Gitea
    /// will not tell (403) is not held; a Gitea that cannot answer is an
    /// error.
    pub(super) async fn holds_trigger_permission(
        &self,
        owner: &str,
        repo: &str,
        login: &str,
    ) -> Result<bool, String> {
        let lower = login.to_ascii_lowercase();
        if self.policy.deny.contains(&lower) {
            return Ok(false);
        }
        if self.policy.allow.contains(&lower) {
            return Ok(true);
        }
        let client = self.client.clone();
        let (o, r, l) = (owner.to_owned(), repo.to_owned(), login.to_owned());
        match blocking(move || client.permission(&o, &r, &l)).await {
            Ok(p) => Ok(p >= self.policy.min),
            Err(e) if e.status() == Some(403) => Ok(false),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// Runs a blocking Gitea call on the blocking pool.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, GiteaError> + Send + 'static,
) -> Result<T, GiteaError> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        Err(GiteaError::Transport {
            what: "a Gitea call".into(),
            detail: format!("the call did not finish: {e}"),
        })
    })
}

impl Forge for GiteaForge {
    fn verify(&self, query: ReplyQuery) -> BoxFuture<'static, ReplyCheck> {
        let this = self.clone();
        async move {
            let key = &query.resource_key;
            let (owner, repo, number) = (
                key.repo().owner().to_owned(),
                key.repo().name().to_owned(),
                key.number(),
            );
            let (client, bot, task) = (this.client.clone(), this.bot_login.clone(), query.task_id);
            let found = blocking(move || match query.form {
                ReplyForm::Comment => client
                    .find_comment(&owner, &repo, number, &bot, |body| {
                        has_reply_marker(body, &task)
                    })
                    .map(|c| c.map(|c| c.id)),
                ReplyForm::PullReview => client
                    .find_pull_review(&owner, &repo, number, &bot, |body| {
                        has_reply_marker(body, &task)
                    })
                    .map(|r| r.map(|r| r.id)),
            })
            .await;
            match found {
                Ok(Some(id)) => ReplyCheck::Confirmed {
                    comment_id: Some(id),
                },
                Ok(None) => ReplyCheck::Missing,
                Err(e) => ReplyCheck::Unknown(e.to_string()),
            }
        }
        .boxed()
    }

    fn post_reply(
        &self,
        resource_key: ResourceKey,
        body: String,
        form: ReplyForm,
    ) -> BoxFuture<'static, Result<i64, String>> {
        let client = self.client.clone();
        async move {
            let owner = resource_key.repo().owner().to_owned();
            let repo = resource_key.repo().name().to_owned();
            let number = resource_key.number();
            blocking(move || match form {
                ReplyForm::Comment => client
                    .create_comment(&owner, &repo, number, &body)
                    .map(|c| c.id),
                ReplyForm::PullReview => client
                    .create_pull_review(&owner, &repo, number, &body)
                    .map(|r| r.id),
            })
            .await
            .map_err(|e| e.to_string())
        }
        .boxed()
    }

    fn thread_context(
        &self,
        resource_key: ResourceKey,
    ) -> BoxFuture<'static, Result<crate::forge::ThreadContext, String>> {
        let this = self.clone();
        async move { this.read_context(resource_key).await }.boxed()
    }

    fn may_answer_gate(
        &self,
        resource_key: ResourceKey,
        author: String,
    ) -> BoxFuture<'static, Result<bool, String>> {
        let this = self.clone();
        async move {
            if this.policy.deny.contains(&author.to_ascii_lowercase()) {
                return Ok(false);
            }
            let client = this.client.clone();
            let (o, r) = (
                resource_key.repo().owner().to_owned(),
                resource_key.repo().name().to_owned(),
            );
            match blocking(move || client.permission(&o, &r, &author)).await {
                Ok(p) => Ok(p >= this.policy.gate),
                Err(e) if e.status() == Some(403) => Ok(false),
                Err(e) => Err(e.to_string()),
            }
        }
        .boxed()
    }

    fn resource_open(&self, resource_key: ResourceKey) -> BoxFuture<'static, Result<bool, String>> {
        let client = self.client.clone();
        async move {
            let (owner, repo) = (
                resource_key.repo().owner().to_owned(),
                resource_key.repo().name().to_owned(),
            );
            let number = resource_key.number();
            let issue = blocking(move || client.get_issue(&owner, &repo, number))
                .await
                .map_err(|e| e.to_string())?;
            // A merged pull request is a closed issue to this endpoint.
            match issue.get("state").and_then(|s| s.as_str()) {
                Some("open") => Ok(true),
                Some(_) => Ok(false),
                None => Err(format!("Gitea gave {resource_key} without a state")),
            }
        }
        .boxed()
    }

    fn pr_facts(&self, resource_key: ResourceKey) -> BoxFuture<'static, Result<PrFacts, String>> {
        let this = self.clone();
        async move {
            let owner = resource_key.repo().owner().to_owned();
            let repo = resource_key.repo().name().to_owned();
            let number = resource_key.number();
            let client = this.client.clone();
            let (o, r) = (owner.clone(), repo.clone());
            let (head, author) = blocking(move || {
                let head = client.pull_head(&o, &r, number)?;
                let author = client.commit_author(&o, &r, &head.sha)?;
                Ok((head, author))
            })
            .await
            .map_err(|e| e.to_string())?;
            // An author Gitea cannot name is no one who holds a permission.
            let permitted = match author {
                Some(login) => this.holds_trigger_permission(&owner, &repo, &login).await?,
                None => false,
            };
            Ok(PrFacts {
                head_in_base_repo: head.in_base_repo,
                head_author_permitted: permitted,
            })
        }
        .boxed()
    }

    fn may_trigger(
        &self,
        resource_key: ResourceKey,
        author: String,
    ) -> BoxFuture<'static, TriggerCheck> {
        let this = self.clone();
        async move {
            let login = author.to_ascii_lowercase();
            if login == this.bot_login {
                return TriggerCheck::Denied("the bot's own comments never trigger work".into());
            }
            if this.policy.deny.contains(&login) {
                return TriggerCheck::Denied(format!("{author} is in trigger_deny"));
            }
            if this.policy.allow.contains(&login) {
                return TriggerCheck::Allowed;
            }
            let owner = resource_key.repo().owner().to_owned();
            let repo = resource_key.repo().name().to_owned();
            let client = this.client.clone();
            let (o, r, a) = (owner.clone(), repo.clone(), author.clone());
            match blocking(move || client.permission(&o, &r, &a)).await {
                Ok(p) if p >= this.policy.min => TriggerCheck::Allowed,
                Ok(p) => TriggerCheck::Denied(format!(
                    "{author} has {} permission on {owner}/{repo}; triggering needs {}",
                    p.as_str(),
                    this.policy.min.as_str()
                )),
                // Gitea lets only site and repository admins read other users'
                // permissions: a setup problem, and failing closed is the safe answer.
                Err(e) if e.status() == Some(403) => TriggerCheck::Denied(format!(
                    "codex-bridge cannot check {author}'s permission on {owner}/{repo}: {e}. Make the \
                     bot an administrator of the repository, or list trusted users in trigger_allow"
                )),
                Err(e) => TriggerCheck::Unknown(e.to_string()),
            }
        }
        .boxed()
    }
}

/// The Gitea side when `gitea_url` or `gitea_token` is not set. The scheduler
/// holds every task in that case (`ActorSettings::hold`), so nothing should
/// reach this; if something does, it fails closed with the reason: nobody may
/// trigger, no reply is proven, nothing is posted.
pub struct ForgeNotConfigured {
    /// What is missing and which keys to set (never their values).
    pub reason: String,
}

impl Forge for ForgeNotConfigured {
    fn verify(&self, _: ReplyQuery) -> BoxFuture<'static, ReplyCheck> {
        let reason = self.reason.clone();
        async move { ReplyCheck::Unknown(reason) }.boxed()
    }

    fn post_reply(
        &self,
        _: ResourceKey,
        _: String,
        _: ReplyForm,
    ) -> BoxFuture<'static, Result<i64, String>> {
        let reason = self.reason.clone();
        async move { Err(reason) }.boxed()
    }

    fn may_trigger(&self, _: ResourceKey, _: String) -> BoxFuture<'static, TriggerCheck> {
        let reason = self.reason.clone();
        async move { TriggerCheck::Unknown(reason) }.boxed()
    }
}
