//! What the in-process benchmarks (`actors`, `turns`) share: plain-folder
//! workspaces, a comment that triggers a task, resident memory, percentiles.
//! Those that drive the Gitea simulator load it with `simulator.rs`.

use anyhow::{Context as _, Result};
use codex_bridge::actors::Workspaces;
use codex_bridge::domain::{IngestRequest, Intent, RepoRef, ResourceKind, Subject};
use codex_bridge::workspace::{Checkout, RepoSpec, WorkspaceError};
use std::path::PathBuf;

/// Workspaces that need no git: the benchmarks measure the bridge, not clones.
/// `create`: make the folder (a real agent needs it as its working directory).
pub struct Folders {
    pub root: PathBuf,
    pub create: bool,
}

impl Workspaces for Folders {
    fn prepare(
        &self,
        repo: &RepoSpec,
        _: &Checkout,
    ) -> std::result::Result<PathBuf, WorkspaceError> {
        let p = self.path_for(&repo.owner, &repo.name)?;
        if self.create {
            std::fs::create_dir_all(&p).map_err(|source| WorkspaceError::Io {
                what: "could not create the benchmark's workspace folder",
                path: p.clone(),
                source,
            })?;
        }
        Ok(p)
    }
    fn path_for(&self, owner: &str, name: &str) -> std::result::Result<PathBuf, WorkspaceError> {
        Ok(self.root.join(owner).join(name))
    }
}

/// The store on SQLite at `path`, as the in-process benchmarks run it: one
/// writer thread batching up to 256 transactions.
pub fn sqlite_store(path: PathBuf) -> Result<codex_bridge::store::Store> {
    use codex_bridge::store::{Store, StoreSettings, WriterSettings};
    Ok(Store::open(&StoreSettings {
        url: codex_bridge::config::DatabaseUrl::Sqlite(path),
        read_pool_size: 8,
        sqlite_busy_timeout: std::time::Duration::from_secs(5),
        writer: WriterSettings {
            batch_max: 256,
            threads: 1,
            queue_capacity: 1 << 20,
            ingest: Default::default(),
        },
    })?)
}

/// A comment by bob on issue `number` of `acme/<repo>` that triggers a task;
/// `key` makes its delivery, content and trigger keys unique.
#[expect(
    clippy::expect_used,
    reason = "benchmarks name their repositories `r0`, `repo1`, …: a bad name is a bug in the bench"
)]
pub fn trigger_request(
    repo: &str,
    number: i64,
    comment_id: i64,
    key: &str,
    text: String,
) -> IngestRequest {
    IngestRequest {
        delivery_key: format!("default:{key}"),
        delivery_id: key.to_owned(),
        event_type: "issue_comment".into(),
        action: Some("created".into()),
        payload_hash: codex_bridge::domain::PayloadHash::of(b"0"),
        content_key: Some(format!("default:comment:{key}:created:t")),
        sender: Some("bob".into()),
        subject: Some(Subject {
            repo: RepoRef::new("default", "acme", repo).expect("a valid repository name"),
            kind: ResourceKind::Issue,
            number,
            comment_id: Some(comment_id),
            author: "bob".into(),
            head_ref: None,
            base_ref: None,
        }),
        intent: Intent::Trigger {
            trigger_key: format!("default:comment:{key}"),
            text,
            command: None,
            // As Gitea writes it (RFC 3339), later for a later comment: the
            // operation id derived from it leads with this time.
            written_at: chrono::DateTime::from_timestamp(1_764_000_000 + comment_id, 0)
                .map_or_else(|| "t".to_owned(), |t| t.to_rfc3339()),
            attachments: Vec::new(),
        },
    }
}

/// This process's resident memory.
pub fn rss_bytes() -> Result<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").context("reading /proc/self/statm")?;
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .context("statm has no resident field")?
        .parse()?;
    Ok(pages * 4096)
}

/// The `p` quantile of sorted values (NaN when there are none).
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}
