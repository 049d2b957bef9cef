//! The promises, checked after every restart and once more when the load has
//! stopped and the server has settled: nothing accepted is lost, nothing is
//! done twice, nothing uncertain is replayed, and the rows that count and
//! claim agree with one another. Every failed check is a violation with the
//! evidence in its text; the run fails if there is any.

use super::{Op, OWNER, REPO};
use crate::support::*;
use crate::testapp::SharedPeers;
use codex_bridge::lifecycle::TaskState;
use codex_bridge::store::DbConn;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Text};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};

#[derive(Default)]
pub struct Checks {
    /// Every terminal task seen so far: its state and version, which must
    /// never change.
    terminal: BTreeMap<String, (String, i64)>,
    pub violations: Vec<String>,
    reported: BTreeSet<String>,
    /// Webhooks answered 202 (a task accepted), as of the last check.
    pub accepted: usize,
    /// Webhooks that met no server (it was down) or got no 2xx.
    pub undelivered: usize,
    /// Bot comments that are replies, as of the last check.
    pub replies: usize,
    /// Tasks that were ever `needs_reconciliation`.
    pub reconciliations: i64,
}

#[derive(QueryableByName)]
struct TaskRow {
    #[diesel(sql_type = Text)]
    task_id: String,
    #[diesel(sql_type = Text)]
    state: String,
    #[diesel(sql_type = BigInt)]
    state_version: i64,
}

#[derive(QueryableByName)]
struct SessionCount {
    #[diesel(sql_type = Text)]
    session_key: String,
    #[diesel(sql_type = BigInt)]
    open_entries: i64,
    #[diesel(sql_type = BigInt)]
    counted: i64,
}

#[derive(QueryableByName)]
struct Twice {
    #[diesel(sql_type = Nullable<BigInt>)]
    comment_id: Option<i64>,
    #[diesel(sql_type = BigInt)]
    n: i64,
}

#[derive(QueryableByName)]
struct Key {
    #[diesel(sql_type = Text)]
    key: String,
}

fn load<
    T: diesel::deserialize::QueryableByName<diesel::sqlite::Sqlite>
        + diesel::deserialize::QueryableByName<diesel::pg::Pg>
        + 'static,
>(
    conn: &mut DbConn,
    sql: &str,
) -> Vec<T> {
    codex_bridge::with_conn!(conn, |c| diesel::sql_query(sql).load::<T>(c))
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// `'succeeded', 'failed', …`: the terminal states as an SQL list.
fn terminal_list() -> String {
    TaskState::TERMINAL
        .iter()
        .map(|s| format!("'{}'", s.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Checks {
    /// The checks that hold at any moment, the server running or not.
    pub fn run(
        &mut self,
        when: &str,
        db_url: &str,
        peers: &SharedPeers,
        issues: &[i64],
        ops: &[Op],
    ) {
        let mut conn = connect(db_url);
        self.accepted_have_tasks(when, &mut conn, peers);
        self.markers_once(when, peers, issues);
        self.terminal_unchanged(when, &mut conn);
        self.sent_once(when, peers, ops);
        self.one_task_per_comment(when, &mut conn);
        self.outbox_counts(when, &mut conn);
        self.reconciliations = count_where(
            &mut conn,
            "(SELECT DISTINCT task_id FROM task_transitions \
             WHERE to_state = 'needs_reconciliation') AS r",
            "1 = 1",
        );
    }

    /// Records a violation the first time it is seen (a later check sees
    /// the same evidence again).
    fn violation(&mut self, when: &str, what: String) {
        if self.reported.insert(what.clone()) {
            eprintln!("crashloop VIOLATION {when}: {what}");
            self.violations.push(format!("{when}: {what}"));
        }
    }

    /// Every webhook Gitea got a 2xx for that names a task has that task;
    /// every 202 names one.
    fn accepted_have_tasks(&mut self, when: &str, conn: &mut DbConn, peers: &SharedPeers) {
        let mut accepted = 0;
        self.undelivered = 0;
        // Read once per check, not once per delivery.
        let known: BTreeSet<String> = load::<Key>(conn, "SELECT task_id AS key FROM tasks")
            .into_iter()
            .map(|k| k.key)
            .collect();
        for d in peers.gitea().deliveries() {
            let Some(status) = d.status.filter(|s| (200..300).contains(s)) else {
                self.undelivered += 1;
                continue;
            };
            let body: Value = serde_json::from_str(&d.response_body).unwrap_or(Value::Null);
            match body["taskId"].as_str() {
                Some(task) => {
                    if status == 202 {
                        accepted += 1;
                    }
                    if !known.contains(task) {
                        self.violation(
                            when,
                            format!(
                                "delivery {} got {status} naming {task}, which is not in the store",
                                d.id
                            ),
                        );
                    }
                }
                None if status == 202 => self.violation(
                    when,
                    format!(
                        "delivery {} got 202 without a task: {}",
                        d.id, d.response_body
                    ),
                ),
                None => {}
            }
        }
        self.accepted = accepted;
    }

    /// No reply of a task and no receipt of one kind is in Gitea twice.
    fn markers_once(&mut self, when: &str, peers: &SharedPeers, issues: &[i64]) {
        let mut seen: BTreeMap<String, Vec<i64>> = BTreeMap::new();
        for &issue in issues {
            for c in peers.gitea().comments(OWNER, REPO, issue) {
                if c["user"]["login"] != BOT {
                    continue;
                }
                let body = c["body"].as_str().unwrap_or_default();
                let mut keys: Vec<String> = markers(body).collect();
                keys.sort();
                keys.dedup();
                for key in keys {
                    seen.entry(key)
                        .or_default()
                        .push(c["id"].as_i64().unwrap_or(0));
                }
            }
        }
        self.replies = seen.keys().filter(|k| k.starts_with("reply ")).count();
        for (key, comments) in seen {
            if comments.len() > 1 {
                self.violation(
                    when,
                    format!("{key} is in {} comments: {comments:?}", comments.len()),
                );
            }
        }
    }

    /// A terminal task never changes again.
    fn terminal_unchanged(&mut self, when: &str, conn: &mut DbConn) {
        let rows: Vec<TaskRow> = load(conn, "SELECT task_id, state, state_version FROM tasks");
        let now: BTreeMap<String, (String, i64)> = rows
            .into_iter()
            .map(|r| (r.task_id, (r.state, r.state_version)))
            .collect();
        let mut changed = Vec::new();
        for (task, before) in &self.terminal {
            if now.get(task) != Some(before) {
                changed.push(format!("{task}: {before:?} → {:?}", now.get(task)));
            }
        }
        for c in changed {
            self.violation(when, format!("a terminal task changed: {c}"));
        }
        for (task, (state, version)) in now {
            let terminal = state.parse::<TaskState>().is_ok_and(TaskState::is_terminal);
            if terminal {
                self.terminal.insert(task, (state, version));
            }
        }
    }

    /// No operation reached the agent as the new input of two Codex turns.
    /// The model's requests are read once per check and indexed by the
    /// nonces their newest comment carries: a count per operation over all
    /// requests would grow with the square of the run, under the lock the
    /// model answers with.
    fn sent_once(&mut self, when: &str, peers: &SharedPeers, ops: &[Op]) {
        let asked = peers.model().all_asked();
        let mut turns: HashMap<&str, BTreeMap<String, Option<&Value>>> = HashMap::new();
        for (i, a) in asked.iter().enumerate() {
            let Some(newest) = a.newest.as_deref() else {
                continue;
            };
            for nonce in nonces(newest) {
                turns
                    .entry(nonce)
                    .or_default()
                    .insert(a.turn_id(i), a.turn.as_ref());
            }
        }
        for op in ops {
            let Some(seen) = turns.get(op.nonce.as_str()) else {
                continue;
            };
            if seen.len() > 1 {
                for m in seen.values().flatten() {
                    eprintln!(
                        "crashloop {}: thread {} turn {} history {} kind {} started {}",
                        op.nonce,
                        m["thread_id"],
                        m["turn_id"],
                        m["history_initialization"],
                        m["request_kind"],
                        m["turn_started_at_unix_ms"]
                    );
                }
                self.violation(
                    when,
                    format!(
                        "{:?} {} on #{} was sent in {} turns",
                        op.kind,
                        op.nonce,
                        op.issue,
                        seen.len()
                    ),
                );
            }
        }
    }

    /// One Gitea comment, one task (replays and catch-ups find the first).
    fn one_task_per_comment(&mut self, when: &str, conn: &mut DbConn) {
        let twice: Vec<Twice> = load(
            conn,
            "SELECT comment_id, COUNT(*) AS n FROM tasks WHERE comment_id IS NOT NULL \
             AND state <> 'duplicate' GROUP BY comment_id HAVING COUNT(*) > 1",
        );
        for t in twice {
            self.violation(
                when,
                format!("comment {:?} has {} tasks", t.comment_id, t.n),
            );
        }
    }

    /// A session's count of open outbox entries is the number of its
    /// entries whose task has not ended.
    fn outbox_counts(&mut self, when: &str, conn: &mut DbConn) {
        let sql = format!(
            "SELECT s.session_key, s.open_entries, \
             (SELECT COUNT(*) FROM outbox_entries o JOIN tasks t ON t.task_id = o.task_id \
              WHERE o.session_key = s.session_key AND t.state NOT IN ({})) AS counted \
             FROM sessions s",
            terminal_list()
        );
        for s in load::<SessionCount>(conn, &sql) {
            if s.open_entries != s.counted {
                self.violation(
                    when,
                    format!(
                        "session {} counts {} open entries, its outbox holds {}",
                        s.session_key, s.open_entries, s.counted
                    ),
                );
            }
        }
    }

    /// Once settled: every receipt the store says was posted is in Gitea,
    /// and every task that succeeded on a mention has its reply there.
    pub fn settled(&mut self, db_url: &str, peers: &SharedPeers, issues: &[i64]) {
        let when = "settled";
        let mut conn = connect(db_url);
        let mut found: BTreeMap<String, usize> = BTreeMap::new();
        for &issue in issues {
            for c in peers.gitea().comments(OWNER, REPO, issue) {
                if c["user"]["login"] == BOT {
                    for key in markers(c["body"].as_str().unwrap_or_default()) {
                        *found.entry(key).or_default() += 1;
                    }
                }
            }
        }
        let posted: Vec<Key> = load(
            &mut conn,
            "SELECT comment_key AS key FROM comments \
             WHERE kind = 'receipt' AND status IN ('posted', 'verified')",
        );
        for k in posted {
            if !found.contains_key(&format!("receipt {}", k.key)) {
                self.violation(
                    when,
                    format!("receipt {} is posted in the store, not in Gitea", k.key),
                );
            }
        }
        let answered: Vec<Key> = load(
            &mut conn,
            "SELECT task_id AS key FROM tasks WHERE state IN \
             ('succeeded', 'succeeded_with_rest_fallback') \
             AND command IS NULL AND steered_into IS NULL",
        );
        for k in answered {
            if !found.contains_key(&format!("reply {}", k.key)) {
                self.violation(
                    when,
                    format!("task {} succeeded without its reply in Gitea", k.key),
                );
            }
        }
    }
}

/// The bridge's markers in a comment, as `reply <task>`, `receipt <key>` or
/// `status <task>` (a reply is one per task, whatever its turn).
fn markers(body: &str) -> impl Iterator<Item = String> + '_ {
    body.split("<!-- codex-bridge ").skip(1).filter_map(|rest| {
        let inner = rest.split(" -->").next()?;
        let (kind, value) = inner.split_once('=')?;
        let value = value.split(' ').next()?;
        match kind {
            "task" => Some(format!("reply {value}")),
            "receipt" | "status" => Some(format!("{kind} {value}")),
            _ => None,
        }
    })
}

/// The operation nonces (`[op-…]`, see `load::nonce`) a comment carries.
fn nonces(text: &str) -> impl Iterator<Item = &str> + '_ {
    text.match_indices("[op-").filter_map(move |(at, _)| {
        let end = text[at..].find(']')?;
        Some(&text[at..=at + end])
    })
}

#[test]
fn the_nonces_a_comment_carries_are_found() {
    let text = "@ccbot please handle [op-1f-000001] and [op-1f-000012]; not [op-";
    assert_eq!(
        nonces(text).collect::<Vec<_>>(),
        ["[op-1f-000001]", "[op-1f-000012]"]
    );
    assert_eq!(nonces("nothing here").count(), 0);
}
