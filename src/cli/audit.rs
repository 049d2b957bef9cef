//! `codex-bridge audit export`: the audit log, which the store never
//! deletes, written out as JSON Lines for archiving.
//!
//! Each line is one event as the admin API shows it, with its `seq` (the
//! order it was written in): an export that ends at `seq` N is continued by
//! `--after-seq N`, so monthly archives neither miss nor repeat an event.
//! With `--out` the file appears whole under its name, or not at all (a
//! temporary file in the same directory, synced, then linked without
//! replacing anything), and stderr names the count, the last `seq` and the
//! file's SHA-256.

use crate::store::audit::{self, AuditFilter, AuditView};
use crate::store::normalize_time;
use anyhow::{bail, Context};
use serde::Serialize;
use sha2::Digest;
use std::io::Write;
use std::path::PathBuf;

/// Events read per query.
const PAGE: i64 = 1000;

#[derive(Debug, clap::Subcommand)]
pub enum AuditCommand {
    /// Write audit events as JSON Lines, oldest first, each with its `seq`.
    ///
    /// The store keeps every audit event for ever; this writes them out for
    /// an archive. Prints on stderr how many, the last `seq` (continue with
    /// --after-seq) and the SHA-256 of what was written.
    Export(ExportArgs),
}

#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// Only events at or after this time (RFC 3339, e.g. 2026-11-01T00:00:00Z).
    #[arg(long)]
    pub since: Option<String>,
    /// Only events before this time (RFC 3339).
    #[arg(long)]
    pub until: Option<String>,
    /// Only events after this `seq` (the last one of a previous export).
    #[arg(long)]
    pub after_seq: Option<i64>,
    /// Write to this file, which must not exist yet, instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// One line of the export.
#[derive(Serialize)]
struct Line<'a> {
    seq: i64,
    #[serde(flatten)]
    event: &'a AuditView,
}

/// What an export wrote.
struct Written {
    events: u64,
    last_seq: Option<i64>,
    sha256: String,
}

pub fn run(config: &crate::config::Config, command: AuditCommand) -> anyhow::Result<()> {
    let AuditCommand::Export(args) = command;
    let time = |flag: &str, value: &Option<String>| -> anyhow::Result<Option<String>> {
        value
            .as_deref()
            .map(|v| {
                normalize_time(v).with_context(|| {
                    format!("--{flag} must be an RFC 3339 time, e.g. 2026-11-01T00:00:00Z")
                })
            })
            .transpose()
    };
    let filter = AuditFilter {
        task_id: None,
        since: time("since", &args.since)?,
        until: time("until", &args.until)?,
        after_seq: args.after_seq,
        limit: PAGE,
    };
    let mut conn = super::connect(config)?;
    let written = match &args.out {
        None => {
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            let written = export(&mut conn, filter, &mut out)?;
            out.flush().context("cannot write to stdout")?;
            written
        }
        Some(path) => {
            if path.exists() {
                bail!(
                    "{} exists: an export never replaces a file (choose another name)",
                    path.display()
                );
            }
            let dir = match path.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::from("."),
            };
            let mut tmp = tempfile::NamedTempFile::new_in(&dir)
                .with_context(|| format!("cannot create a file in {}", dir.display()))?;
            let written = {
                let mut out = std::io::BufWriter::new(tmp.as_file_mut());
                let written = export(&mut conn, filter, &mut out)?;
                out.flush()
                    .with_context(|| format!("cannot write to {}", dir.display()))?;
                written
            };
            tmp.as_file()
                .sync_all()
                .with_context(|| format!("cannot sync the export in {}", dir.display()))?;
            tmp.persist_noclobber(path).map_err(|e| {
                anyhow::anyhow!(
                    "cannot name the export {}: {} (nothing was written there)",
                    path.display(),
                    e.error
                )
            })?;
            written
        }
    };
    let last = written
        .last_seq
        .map_or_else(|| "none".to_owned(), |s| s.to_string());
    eprintln!(
        "exported {} audit events; last seq {last} (continue with --after-seq {last}); sha256 {}",
        written.events, written.sha256
    );
    Ok(())
}

/// Writes every event the filter selects, page after page.
fn export(
    conn: &mut crate::store::DbConn,
    mut filter: AuditFilter,
    out: &mut impl Write,
) -> anyhow::Result<Written> {
    let mut hash = sha2::Sha256::new();
    let mut events = 0u64;
    let mut last_seq = None;
    loop {
        let page = audit::list(conn, &filter)?;
        for event in &page {
            let mut line = serde_json::to_vec(&Line {
                seq: event.seq,
                event,
            })?;
            line.push(b'\n');
            hash.update(&line);
            out.write_all(&line).context("cannot write the export")?;
            events += 1;
            last_seq = Some(event.seq);
        }
        if i64::try_from(page.len()).unwrap_or(i64::MAX) < filter.limit {
            break;
        }
        filter.after_seq = last_seq;
    }
    Ok(Written {
        events,
        last_seq,
        sha256: hex::encode(hash.finalize()),
    })
}
