//! The catch-up: Gitea never retries a webhook it could not deliver (the
//! bridge was down, the network dropped it), so every
//! `catchup_interval_secs` each known repository's comments updated since
//! its cursor are read through the REST API, and a mentioning comment that
//! has no task yet becomes one, exactly as its webhook would have made it.
//!
//! - One code path: a listed comment becomes an [`IngestRequest`] through the
//!   webhook's own rules ([`CommentRules`], implemented by the webhook's
//!   normaliser), as the `created` event Gitea would have sent. It carries the
//!   webhook's trigger and content keys, so a late delivery or Gitea's replay
//!   of that comment is found a duplicate of the catch-up's task, and the
//!   catch-up finds the webhook's. Its delivery key is
//!   `<instance>:catchup:<commentId>`.
//! - The cursor: Gitea's own `updated_at` of the newest comment a pass saw,
//!   moved only after the pass's tasks are committed, and only forward. A
//!   repository seen for the first time starts where the server first saw
//!   it, never at the beginning of time. Each listing reaches [`OVERLAP`]
//!   further back than the cursor: Gitea's `since` has whole seconds, a
//!   comment stamped just before another may commit just after it, and
//!   Gitea's clock is not ours. What is read twice is found again by its keys
//!   and costs no second task.
//! - Several processes on one PostgreSQL: a pass claims each repository
//!   (a lease on its cursor row) so two do not list it at once, and keeps it
//!   for half an interval afterwards, so that between them a repository is
//!   listed about once per interval. Were two to race anyway, the trigger
//!   key's unique index lets one task through.
//! - Cost: one paginated listing per repository per pass (at most
//!   [`MAX_PAGES`] pages), [`CONCURRENCY`] repositories at a time, plus one
//!   `GET /pulls/{n}` for each mentioning comment on a Pull Request that has
//!   no task yet (its branches, which a task's checkout needs).
//!
//! What the listing cannot see: submitted reviews (Gitea lists only plain
//! comments there), and edits or deletions of comments made while webhooks
//! were lost (an edit that added the first mention is seen: the comment
//! mentions the bot now and has no task).
//!
//! A repository an operator disabled is not listed: its cursor follows the
//! clock instead, so that enabling it again does not run what was said while
//! its webhooks were refused.

use crate::actors::registry::{Notify, Registry};
use crate::config::Config;
use crate::domain::states::RepoStatus;
use crate::domain::{IngestRequest, Intent, RepoKey, RepoRef, ResourceKind};
use crate::gitea::comments::{CommentListing, RepoComment};
use crate::gitea::{GiteaClient, GiteaError};
use crate::store::audit::{self, Audit};
use crate::store::catchup::{self, Cursor};
use crate::store::ingest::IngestOutcome;
use crate::store::models::Repository;
use crate::store::{format_time, Store, StoreError};
use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How much further back than its cursor each listing reaches.
pub const OVERLAP: Duration = Duration::from_secs(60);

/// Repositories read at once.
pub const CONCURRENCY: usize = 4;

/// Pages of one repository's comments read in one pass (50 comments each):
/// a repository with more new comments than this is read on over the next
/// passes instead of holding this one up.
pub const MAX_PAGES: u32 = 20;

/// The webhook's rules for a comment, applied to a comment read from the
/// repository's listing. The webhook's normaliser implements it, so that
/// both ways in share one set of rules (mentions, the bot's own comments,
/// the keys that find a comment's task).
pub trait CommentRules: Send + Sync + 'static {
    /// The request `comment` of `repo` would have made as a `created`
    /// delivery, with the body it has now (a Pull Request's branches left
    /// out: the listing does not name them). `None` when the listing does
    /// not say which Issue or Pull Request the comment is on.
    fn listed_comment(&self, repo: &RepoRef, comment: &RepoComment) -> Option<IngestRequest>;
}

/// How the catch-up runs.
#[derive(Debug, Clone)]
pub struct CatchupSettings {
    /// Whose repositories are listed (`instance_id`): this Gitea's.
    pub instance_id: String,
    /// This process, as the holder of a repository's catch-up lease.
    pub owner: String,
    /// Time between passes.
    pub interval: Duration,
    /// How long a pass may hold a repository before another process may take
    /// it over (an overrun costs a second listing, never a second task).
    pub lease_ttl: Duration,
    /// How long after a pass a repository is left alone by every process.
    pub quiet: Duration,
    pub concurrency: usize,
    pub max_pages: u32,
}

impl CatchupSettings {
    /// From `catchup_interval_secs` (`None`: 0, no catch-up) and
    /// `lease_ttl_secs`.
    pub fn from_config(config: &Config) -> Option<CatchupSettings> {
        if config.catchup_interval_secs == 0 {
            return None;
        }
        let interval = Duration::from_secs(config.catchup_interval_secs);
        Some(CatchupSettings {
            instance_id: config.instance_id.clone(),
            // The same form as the actors' lease owner.
            owner: crate::actors::ActorSettings::new(&config.instance_id).owner,
            interval,
            lease_ttl: Duration::from_secs(config.lease_ttl_secs),
            quiet: interval / 2,
            concurrency: CONCURRENCY,
            max_pages: MAX_PAGES,
        })
    }
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassReport {
    /// Known repositories that are not disabled.
    pub repositories: usize,
    /// Those read in this pass.
    pub read: usize,
    /// Those another pass held, or read so recently that this pass left them.
    pub skipped: usize,
    /// Those whose listing or ingest failed (logged and audited; their
    /// cursor stayed, so the next pass reads them again).
    pub failed: usize,
    /// Comments listed.
    pub comments: usize,
    /// Tasks created.
    pub tasks: usize,
}

/// Why one repository could not be caught up.
#[derive(Debug, thiserror::Error)]
enum RepoError {
    #[error(transparent)]
    Gitea(#[from] GiteaError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("its cursor {0:?} is not a time; it is set again from the next comment read")]
    Cursor(String),
}

impl RepoError {
    fn code(&self) -> &'static str {
        match self {
            RepoError::Gitea(GiteaError::Status { .. }) => "gitea_refused",
            RepoError::Gitea(GiteaError::Transport { .. }) => "gitea_unreachable",
            // The catch-up only reads; nothing of it is ever held back.
            RepoError::Gitea(GiteaError::Withheld { .. }) => "gitea_withheld",
            RepoError::Store(_) => "store_unavailable",
            RepoError::Cursor(_) => "invalid_cursor",
        }
    }
}

/// One repository's part of a pass.
enum RepoOutcome {
    Skipped,
    Read { comments: usize, tasks: usize },
    Failed,
}

/// What reading one repository found.
struct Caught {
    comments: usize,
    tasks: usize,
    /// Where its cursor moves (`None`: it stays).
    advance: Option<Cursor>,
}

pub struct CatchupWorker {
    store: Store,
    client: GiteaClient,
    rules: Arc<dyn CommentRules>,
    /// Woken for a repository that got a task (`None`: intake only; the
    /// tasks wait in the store).
    registry: Option<actix::Addr<Registry>>,
    settings: CatchupSettings,
    /// Repositories whose last pass failed: a failure is logged as a warning
    /// and audited when a repository starts failing, not again at every pass
    /// while Gitea stays unreachable (hundreds of repositories a minute).
    failing: Mutex<HashSet<RepoKey>>,
}

impl CatchupWorker {
    pub fn new(
        store: Store,
        client: GiteaClient,
        rules: Arc<dyn CommentRules>,
        registry: Option<actix::Addr<Registry>>,
        settings: CatchupSettings,
    ) -> CatchupWorker {
        CatchupWorker {
            store,
            client,
            rules,
            registry,
            settings,
            failing: Mutex::new(HashSet::new()),
        }
    }

    /// A pass at once (webhooks are lost most often while the server is
    /// down), then one every interval, counted from the start of the last.
    pub async fn run(self) {
        let mut ticks = tokio::time::interval(self.settings.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let started = Instant::now();
            let report = self.pass().await;
            let took = started.elapsed();
            if report.tasks > 0 || report.failed > 0 {
                tracing::info!(
                    repositories = report.repositories,
                    read = report.read,
                    failed = report.failed,
                    tasks = report.tasks,
                    took_ms = took.as_millis() as u64,
                    "catch-up pass"
                );
            } else {
                tracing::debug!(
                    repositories = report.repositories,
                    read = report.read,
                    comments = report.comments,
                    took_ms = took.as_millis() as u64,
                    "catch-up pass: nothing missed"
                );
            }
        }
    }

    /// One pass over every known repository of this Gitea: the disabled ones'
    /// cursors follow the clock, the others are read [`CONCURRENCY`] at a
    /// time. A repository that fails is logged and audited, and the pass goes
    /// on.
    pub async fn pass(&self) -> PassReport {
        let started = Instant::now();
        let mut report = PassReport::default();
        let instance = self.settings.instance_id.clone();
        let repos = match self
            .store
            .read(move |c| catchup::repositories(c, &instance))
            .await
        {
            Ok(repos) => repos,
            Err(e) => {
                tracing::warn!(error = %e, "catch-up: cannot read the known repositories; trying again next pass");
                crate::metrics::catchup_pass("incomplete", started.elapsed());
                return report;
            }
        };
        let (disabled, enabled): (Vec<Repository>, Vec<Repository>) = repos
            .into_iter()
            .partition(|r| r.status == RepoStatus::Disabled);
        if !disabled.is_empty() {
            self.follow(disabled).await;
        }
        report.repositories = enabled.len();
        let outcomes: Vec<RepoOutcome> = futures_util::stream::iter(enabled)
            .map(|repo| self.repository(repo))
            .buffer_unordered(self.settings.concurrency.max(1))
            .collect()
            .await;
        for outcome in outcomes {
            match outcome {
                RepoOutcome::Skipped => report.skipped += 1,
                RepoOutcome::Failed => report.failed += 1,
                RepoOutcome::Read { comments, tasks } => {
                    report.read += 1;
                    report.comments += comments;
                    report.tasks += tasks;
                }
            }
        }
        let outcome = if report.failed == 0 {
            "complete"
        } else {
            "incomplete"
        };
        crate::metrics::catchup_pass(outcome, started.elapsed());
        report
    }

    /// Moves the disabled repositories' cursors so that their next listing
    /// starts now (a listing reaches [`OVERLAP`] back from the cursor).
    async fn follow(&self, disabled: Vec<Repository>) {
        let keys: Vec<_> = disabled.into_iter().map(|r| r.repo_key).collect();
        let result = self
            .store
            .write(move |c| {
                let to = format_time(Utc::now() + overlap());
                for key in &keys {
                    catchup::follow(c, key, &to)?;
                }
                Ok(())
            })
            .await;
        if let Err(e) = result {
            tracing::warn!(error = %e, "catch-up: cannot move the disabled repositories' cursors; trying again next pass");
        }
    }

    /// Claims, reads and releases one repository.
    async fn repository(&self, repo: Repository) -> RepoOutcome {
        let (key, owner, first) = (
            repo.repo_key.clone(),
            self.settings.owner.clone(),
            repo.registered_at.clone(),
        );
        let ttl = self.settings.lease_ttl;
        let claimed = self
            .store
            .write(move |c| catchup::claim(c, &key, &first, &owner, ttl))
            .await;
        let cursor = match claimed {
            Ok(Some(cursor)) => cursor,
            Ok(None) => return RepoOutcome::Skipped,
            Err(e) => {
                self.failed(&repo, RepoError::Store(e)).await;
                return RepoOutcome::Failed;
            }
        };
        let result = self.catch_up(&repo, &cursor).await;
        let advance = match &result {
            Ok(caught) => caught.advance.clone(),
            Err(_) => None,
        };
        let (key, owner, quiet) = (
            repo.repo_key.clone(),
            self.settings.owner.clone(),
            self.settings.quiet,
        );
        let finished = self
            .store
            .write(move |c| catchup::finish(c, &key, &owner, advance.as_ref(), quiet))
            .await;
        match (result, finished) {
            (Ok(caught), Ok(())) => {
                if self.failing().remove(&repo.repo_key) {
                    tracing::info!(repo.key = %repo.repo_key, "catch-up: this repository is read again");
                }
                RepoOutcome::Read {
                    comments: caught.comments,
                    tasks: caught.tasks,
                }
            }
            (Err(e), _) => {
                self.failed(&repo, e).await;
                RepoOutcome::Failed
            }
            (Ok(_), Err(e)) => {
                self.failed(&repo, RepoError::Store(e)).await;
                RepoOutcome::Failed
            }
        }
    }

    /// Reads the repository's comments from its cursor and ingests every
    /// mentioning one the store does not know yet.
    async fn catch_up(&self, repo: &Repository, cursor: &Cursor) -> Result<Caught, RepoError> {
        let since = DateTime::parse_from_rfc3339(&cursor.since)
            .map_err(|_| RepoError::Cursor(cursor.since.clone()))?
            .with_timezone(&Utc)
            - overlap();
        let listing = {
            let (client, owner, name, pages) = (
                self.client.clone(),
                repo.owner.clone(),
                repo.name.clone(),
                self.settings.max_pages,
            );
            blocking(move || client.list_repo_comments_from(&owner, &name, since, pages)).await?
        };
        let repo_ref = RepoRef {
            key: repo.repo_key.clone(),
            owner: repo.owner.clone(),
            name: repo.name.clone(),
            clone_url: repo.clone_url.clone(),
            default_branch: repo.default_branch.clone(),
        };
        let mut wanted: Vec<IngestRequest> = Vec::new();
        for comment in &listing.comments {
            match self.rules.listed_comment(&repo_ref, comment) {
                Some(req) if matches!(req.intent, Intent::Trigger { .. }) => wanted.push(req),
                Some(_) => {}
                None => tracing::warn!(
                    repo.key = %repo.repo_key,
                    comment.id = comment.id,
                    "catch-up: Gitea's listing does not say which Issue or Pull Request this comment is on; skipped"
                ),
            }
        }
        let known = self.known(&wanted).await?;
        let mut tasks = 0;
        for mut req in wanted {
            if known.contains(&req.delivery_key)
                || trigger_key(&req).is_some_and(|k| known.contains(k))
            {
                continue;
            }
            if let Some(subject) = req
                .subject
                .as_mut()
                .filter(|s| s.kind == ResourceKind::Pull)
            {
                let (client, owner, name, number) = (
                    self.client.clone(),
                    repo.owner.clone(),
                    repo.name.clone(),
                    subject.number,
                );
                let refs = blocking(move || client.get_pull(&owner, &name, number)).await?;
                subject.head_ref = Some(refs.head_ref).filter(|r| !r.is_empty());
                subject.base_ref = Some(refs.base_ref).filter(|r| !r.is_empty());
            }
            let comment_id = req.subject.as_ref().and_then(|s| s.comment_id);
            if let IngestOutcome::Accepted { task_id, .. } = self.store.ingest(req).await? {
                tasks += 1;
                crate::metrics::catchup_task();
                tracing::info!(
                    repo.key = %repo.repo_key,
                    task.id = %task_id,
                    comment.id = comment_id,
                    "catch-up: a mentioning comment whose webhook never arrived is now a task"
                );
                // After the commit, as the webhook does: the process that
                // holds the repository may be another one.
                self.store.signal(crate::store::signals::Signal::Repo {
                    repo_key: repo.repo_key.clone(),
                });
                if let Some(registry) = &self.registry {
                    registry.do_send(Notify {
                        repo_key: repo.repo_key.clone(),
                    });
                }
            }
        }
        Ok(Caught {
            comments: listing.comments.len(),
            tasks,
            advance: next_cursor(&listing),
        })
    }

    /// The keys among `wanted`'s that the store already knows.
    async fn known(&self, wanted: &[IngestRequest]) -> Result<HashSet<String>, StoreError> {
        if wanted.is_empty() {
            return Ok(HashSet::new());
        }
        let triggers: Vec<String> = wanted
            .iter()
            .filter_map(trigger_key)
            .map(str::to_owned)
            .collect();
        let deliveries: Vec<String> = wanted.iter().map(|r| r.delivery_key.clone()).collect();
        self.store
            .read(move |c| catchup::known(c, &triggers, &deliveries))
            .await
    }

    fn failing(&self) -> std::sync::MutexGuard<'_, HashSet<RepoKey>> {
        // The set is only a filter for log lines: a panic elsewhere while it
        // was held leaves nothing in it that must not be read.
        self.failing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Logs and audits a repository the pass could not catch up, when it
    /// starts failing (afterwards only at debug level).
    async fn failed(&self, repo: &Repository, error: RepoError) {
        let code = error.code();
        let text = error.to_string();
        if !self.failing().insert(repo.repo_key.clone()) {
            tracing::debug!(repo.key = %repo.repo_key, code, error = %text, "catch-up: this repository still cannot be read");
            return;
        }
        tracing::warn!(
            repo.key = %repo.repo_key,
            code,
            error = %text,
            "catch-up: this repository was not read; its cursor stays and every pass tries again"
        );
        let repo_key = repo.repo_key.clone();
        let written = self
            .store
            .write(move |c| {
                audit::record(
                    c,
                    &Audit::new("catchup.failed", "system")
                        .error(code)
                        .meta(serde_json::json!({ "repoKey": repo_key, "error": text })),
                )
                .map(|_| ())
            })
            .await;
        if let Err(e) = written {
            tracing::warn!(error = %e, "catch-up: could not audit a repository that failed");
        }
    }
}

fn overlap() -> chrono::Duration {
    chrono::Duration::from_std(OVERLAP).unwrap_or_else(|_| chrono::Duration::zero())
}

fn trigger_key(req: &IngestRequest) -> Option<&str> {
    match &req.intent {
        Intent::Trigger { trigger_key, .. } => Some(trigger_key),
        _ => None,
    }
}

/// Where the cursor moves after a listing: to the newest `updated_at` read
/// when the listing is whole; when the page limit cut it, to the creation
/// time of the last comment read (those not read yet were created at or
/// after it, so none was updated before it). `None`: nothing to move to.
fn next_cursor(listing: &CommentListing) -> Option<Cursor> {
    let newest = if listing.complete {
        listing
            .comments
            .iter()
            .filter_map(|c| Some((c.updated()?, c.id)))
            .max()
    } else {
        listing
            .comments
            .last()
            .and_then(|c| Some((c.created()?, c.id)))
    };
    newest.map(|(at, id)| Cursor {
        since: format_time(at.with_timezone(&Utc)),
        last_comment_id: Some(id),
    })
}

/// Runs a Gitea call on the blocking pool.
async fn blocking<T: Send + 'static>(
    call: impl FnOnce() -> Result<T, GiteaError> + Send + 'static,
) -> Result<T, GiteaError> {
    tokio::task::spawn_blocking(call).await.unwrap_or_else(|e| {
        Err(GiteaError::Transport {
            what: "a catch-up call".to_owned(),
            detail: format!("the call's thread ended: {e}"),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn comment(id: i64, created: &str, updated: &str) -> RepoComment {
        serde_json::from_value(json!({
            "id": id, "issue_url": "https://g.example/acme/w/issues/1",
            "created_at": created, "updated_at": updated
        }))
        .unwrap()
    }

    #[test]
    fn a_whole_listing_moves_the_cursor_to_the_newest_update() {
        let listing = CommentListing {
            comments: vec![
                // An old comment edited lately comes first (Gitea orders by creation).
                comment(1, "2026-01-01T00:00:00Z", "2026-01-03T00:00:00+02:00"),
                comment(2, "2026-01-02T00:00:00Z", "2026-01-02T12:00:00Z"),
            ],
            complete: true,
        };
        assert_eq!(
            next_cursor(&listing),
            Some(Cursor {
                since: "2026-01-02T22:00:00.000000Z".into(),
                last_comment_id: Some(1)
            })
        );
    }

    #[test]
    fn a_cut_listing_moves_the_cursor_only_to_its_last_creation() {
        let listing = CommentListing {
            comments: vec![
                comment(1, "2026-01-01T00:00:00Z", "2026-01-05T00:00:00Z"),
                comment(2, "2026-01-02T00:00:00Z", "2026-01-02T00:00:00Z"),
            ],
            complete: false,
        };
        // Comment 1's update is later, but comments not read yet may have
        // been updated before it: only the last creation is safe.
        assert_eq!(
            next_cursor(&listing).map(|c| c.since),
            Some("2026-01-02T00:00:00.000000Z".into())
        );
        let empty = CommentListing {
            comments: vec![],
            complete: true,
        };
        assert_eq!(next_cursor(&empty), None);
    }
}
