//! What a real `codex app-server` was doing, for the report of a test that
//! waited in vain: the server's process tree (state and kernel wait channel
//! of every process, so a command or MCP server stuck on something shows),
//! the tail of every thread's rollout under `CODEX_HOME`, and the newest
//! rows of Codex's own log database there. A turn that hangs inside Codex
//! leaves the bridge's log silent; these say where Codex stopped.

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Text};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The whole report: processes under `server_pid`, rollouts and Codex's log.
pub fn report(codex_home: &Path, server_pid: u32) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "processes under the server (pid state wchan argv):");
    out.push_str(&process_tree(server_pid));
    for rollout in files(&codex_home.join("sessions"), "rollout-", ".jsonl") {
        let _ = writeln!(out, "rollout {} (last lines):", rollout.display());
        out.push_str(&rollout_tail(&rollout, 12));
    }
    for db in files(codex_home, "logs_", ".sqlite") {
        let _ = writeln!(out, "codex log {} (newest first):", db.display());
        out.push_str(&log_tail(&db, 60));
    }
    out
}

/// Every file under `dir` (recursively) named `prefix…suffix`, sorted.
fn files(dir: &Path, prefix: &str, suffix: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![dir.to_owned()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                dirs.push(path);
            } else if name.starts_with(prefix) && name.ends_with(suffix) {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// `pid state wchan argv` of `root` and its descendants, indented by depth.
fn process_tree(root: u32) -> String {
    let mut children: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        if let Some((_, ppid)) = stat(pid) {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut out = String::new();
    let mut stack = vec![(root, 0usize)];
    while let Some((pid, depth)) = stack.pop() {
        let state = stat(pid).map(|(s, _)| s).unwrap_or('?');
        let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
        let argv = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        let argv: String = argv.trim().chars().take(160).collect();
        let _ = writeln!(
            out,
            "{:indent$}{pid} {state} {wchan} {argv}",
            "",
            indent = depth * 2
        );
        for child in children.get(&pid).into_iter().flatten().rev() {
            stack.push((*child, depth + 1));
        }
    }
    out
}

/// The state letter and parent pid from `/proc/<pid>/stat`.
fn stat(pid: u32) -> Option<(char, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut after = stat.rsplit_once(')')?.1.split_whitespace();
    let state = after.next()?.chars().next()?;
    Some((state, after.next()?.parse().ok()?))
}

/// The last `n` lines of a rollout, each cut to 300 characters.
fn rollout_tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let mut out = String::new();
    for line in &lines[lines.len().saturating_sub(n)..] {
        let _ = writeln!(out, "  {}", line.chars().take(300).collect::<String>());
    }
    out
}

#[derive(QueryableByName)]
struct LogRow {
    #[diesel(sql_type = BigInt)]
    ts: i64,
    #[diesel(sql_type = Text)]
    level: String,
    #[diesel(sql_type = Text)]
    target: String,
    #[diesel(sql_type = Nullable<Text>)]
    thread_id: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    body: Option<String>,
}

/// The newest `n` rows of a Codex log database (read while Codex may still
/// write it: WAL lets both go on).
fn log_tail(db: &Path, n: i64) -> String {
    let url = db.display().to_string();
    let rows = SqliteConnection::establish(&url).and_then(|mut c| {
        diesel::sql_query(
            // Without a sign-in Codex notes every second that it reloaded
            // its auth and cannot resolve remote control: left out.
            "SELECT ts, level, target, thread_id, feedback_log_body AS body FROM logs \
             WHERE target NOT LIKE '%remote_control%' AND target <> 'codex_login::auth::manager' \
             ORDER BY id DESC LIMIT ?",
        )
        .bind::<BigInt, _>(n)
        .load::<LogRow>(&mut c)
        .map_err(|e| diesel::ConnectionError::BadConnection(e.to_string()))
    });
    match rows {
        Ok(rows) => rows
            .iter()
            .map(|r| {
                format!(
                    "  {} {} {} [{}] {}\n",
                    r.ts,
                    r.level,
                    r.target,
                    r.thread_id.as_deref().unwrap_or("-"),
                    excerpt(r.body.as_deref().unwrap_or(""))
                )
            })
            .collect(),
        Err(e) => format!("  (unreadable: {e})\n"),
    }
}

/// A log body short enough to read: Codex puts the span's context (often
/// hundreds of characters of request fields) before the message, so a long
/// body keeps its start and its end, where the message is.
fn excerpt(body: &str) -> String {
    let chars: Vec<char> = body.chars().collect();
    if chars.len() <= 420 {
        return body.to_owned();
    }
    let head: String = chars[..100].iter().collect();
    let tail: String = chars[chars.len() - 300..].iter().collect();
    format!("{head} … {tail}")
}

#[test]
fn a_long_log_body_keeps_its_message_at_the_end() {
    let body = format!("span{}the message", "x".repeat(1000));
    let short = excerpt(&body);
    assert!(short.starts_with("spanx"), "{short}");
    assert!(short.ends_with("the message"), "{short}");
    assert!(short.chars().count() < 420, "{short}");
    assert_eq!(excerpt("short"), "short");
}
