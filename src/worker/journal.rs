//! The worker's local journal: a SQLite file (`journal_url`) of what it did
//! (the turns it started, their events and final text) and an outbox of
//! everything it owes the server (answers, event batches). Each is written
//! before anything is sent, so after a restart the worker re-sends what the
//! server may not have, and knows which turns ended and which it lost track
//! of: those it declares uncertain, and takes no new work until an operator
//! settles them. It never runs a lost turn again.

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Text};
use diesel::{Connection, SqliteConnection};
use std::path::Path;
use std::sync::{Arc, Mutex};

mod finals;
pub use finals::{OwedFinal, Standing};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS outbox (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    lease_id   TEXT NOT NULL,
    kind       TEXT NOT NULL,
    body       TEXT NOT NULL,
    created_at TEXT NOT NULL,
    sent_at    TEXT
);
CREATE TABLE IF NOT EXISTS turns (
    stream       TEXT PRIMARY KEY NOT NULL,
    repository   TEXT NOT NULL,
    thread_id    TEXT NOT NULL,
    operation_id TEXT NOT NULL,
    turn_id      TEXT,
    state        TEXT NOT NULL,
    final_text   TEXT,
    started_at   TEXT NOT NULL,
    ended_at     TEXT
);
CREATE TABLE IF NOT EXISTS turn_attempts (
    stream     TEXT PRIMARY KEY NOT NULL,
    task_id    TEXT NOT NULL,
    attempt_id TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS late_finals (
    stream     TEXT PRIMARY KEY NOT NULL,
    standing   TEXT NOT NULL,
    code       TEXT,
    offers     INTEGER NOT NULL,
    owed_at    TEXT NOT NULL,
    offered_at TEXT
);
";

/// What the outbox holds: which request it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Answer,
    Events,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Answer => "answer",
            Kind::Events => "events",
        }
    }

    fn parse(text: &str) -> Option<Kind> {
        match text {
            "answer" => Some(Kind::Answer),
            "events" => Some(Kind::Events),
            _ => None,
        }
    }
}

/// Where a journalled turn stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnState {
    /// Sent to Codex: it may be running, or may have run.
    Started,
    Completed,
    Failed,
    Interrupted,
    /// An operator settled it (the task reconciled on the server, no turn
    /// active on this machine): it no longer holds the worker.
    Settled,
}

impl TurnState {
    pub fn as_str(self) -> &'static str {
        match self {
            TurnState::Started => "started",
            TurnState::Completed => "completed",
            TurnState::Failed => "failed",
            TurnState::Interrupted => "interrupted",
            TurnState::Settled => "settled",
        }
    }
}

/// Whether a turn found in the journal after a restart is uncertain: sent
/// to Codex, with no end recorded. The Codex that ran it is gone with the
/// old process, so nothing can say whether it ran, or what it did.
pub fn is_uncertain(state: &str) -> bool {
    state == TurnState::Started.as_str()
}

/// One request the worker owes the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owed {
    pub id: i64,
    pub lease_id: String,
    pub kind: Kind,
    pub body: String,
}

/// A turn the journal cannot account for.
#[derive(Debug, Clone, PartialEq, Eq, QueryableByName)]
pub struct Uncertain {
    #[diesel(sql_type = Text)]
    pub stream: String,
    #[diesel(sql_type = Text)]
    pub repository: String,
    #[diesel(sql_type = Text)]
    pub operation_id: String,
    #[diesel(sql_type = Nullable<Text>)]
    pub turn_id: Option<String>,
    /// The server's task and attempt the turn belongs to (`None`: sent by
    /// a server that did not name them).
    #[diesel(sql_type = Nullable<Text>)]
    pub task_id: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    pub attempt_id: Option<String>,
}

/// A journalled turn of one attempt, and where it stands.
#[derive(Debug, Clone, PartialEq, Eq, QueryableByName)]
pub struct AttemptTurn {
    #[diesel(sql_type = Text)]
    pub stream: String,
    #[diesel(sql_type = Text)]
    pub state: String,
}

#[derive(QueryableByName)]
struct OwedRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Text)]
    lease_id: String,
    #[diesel(sql_type = Text)]
    kind: String,
    #[diesel(sql_type = Text)]
    body: String,
}

/// The journal; cheap to clone. Writes are few (one per call, per event
/// batch), so one connection behind a lock serves them.
#[derive(Clone)]
pub struct Journal {
    conn: Arc<Mutex<SqliteConnection>>,
}

fn now() -> String {
    chrono::Utc::now()
        .format("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

impl Journal {
    /// Opens (creating) the journal at `path`.
    pub fn open(path: &Path) -> anyhow::Result<Journal> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| {
                anyhow::anyhow!(
                    "cannot create the journal's folder {} (config key `journal_url`): {e}",
                    dir.display()
                )
            })?;
        }
        let url = path.to_string_lossy();
        let mut conn = SqliteConnection::establish(&url).map_err(|e| {
            anyhow::anyhow!(
                "cannot open the worker journal {} (config key `journal_url`): {e}",
                path.display()
            )
        })?;
        // Durable before anything is sent: the point of the journal.
        diesel::sql_query("PRAGMA journal_mode = WAL").execute(&mut conn)?;
        diesel::sql_query("PRAGMA synchronous = FULL").execute(&mut conn)?;
        // `codex-bridge reconcile` on this machine writes to the same file
        // while the worker runs: a write waits for the other rather than
        // failing at once.
        diesel::sql_query("PRAGMA busy_timeout = 5000").execute(&mut conn)?;
        conn.batch_execute(SCHEMA)?;
        Ok(Journal {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    fn with<T>(
        &self,
        f: impl FnOnce(&mut SqliteConnection) -> QueryResult<T>,
    ) -> anyhow::Result<T> {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut conn).map_err(|e| {
            anyhow::anyhow!("the worker journal cannot be written: {e}; check its disk")
        })
    }

    /// Records a request owed to the server; its id, to mark it sent.
    pub fn owe(&self, lease_id: &str, kind: Kind, body: &str) -> anyhow::Result<i64> {
        self.with(|c| {
            diesel::sql_query(
                "INSERT INTO outbox (lease_id, kind, body, created_at) VALUES (?, ?, ?, ?)",
            )
            .bind::<Text, _>(lease_id)
            .bind::<Text, _>(kind.as_str())
            .bind::<Text, _>(body)
            .bind::<Text, _>(now())
            .execute(c)?;
            diesel::select(diesel::dsl::sql::<BigInt>("last_insert_rowid()")).get_result(c)
        })
    }

    pub fn sent(&self, id: i64) -> anyhow::Result<()> {
        self.with(|c| {
            diesel::sql_query("UPDATE outbox SET sent_at = ? WHERE id = ?")
                .bind::<Text, _>(now())
                .bind::<BigInt, _>(id)
                .execute(c)
                .map(|_| ())
        })
    }

    /// What is owed still, oldest first.
    pub fn owed(&self) -> anyhow::Result<Vec<Owed>> {
        let rows: Vec<OwedRow> = self.with(|c| {
            diesel::sql_query(
                "SELECT id, lease_id, kind, body FROM outbox WHERE sent_at IS NULL ORDER BY id",
            )
            .load(c)
        })?;
        Ok(rows
            .into_iter()
            .filter_map(|r| {
                Some(Owed {
                    kind: Kind::parse(&r.kind)?,
                    id: r.id,
                    lease_id: r.lease_id,
                    body: r.body,
                })
            })
            .collect())
    }

    /// A turn is about to be sent to Codex.
    pub fn turn_sent(
        &self,
        stream: &str,
        repository: &str,
        thread_id: &str,
        operation_id: &str,
    ) -> anyhow::Result<()> {
        self.with(|c| {
            diesel::sql_query(
                "INSERT OR IGNORE INTO turns (stream, repository, thread_id, operation_id, state, \
                 started_at) VALUES (?, ?, ?, ?, ?, ?)",
            )
            .bind::<Text, _>(stream)
            .bind::<Text, _>(repository)
            .bind::<Text, _>(thread_id)
            .bind::<Text, _>(operation_id)
            .bind::<Text, _>(TurnState::Started.as_str())
            .bind::<Text, _>(now())
            .execute(c)
            .map(|_| ())
        })
    }

    /// The turn of call `stream` belongs to the server's `attempt_id` of
    /// `task_id`: written before the call runs, so that a turn found
    /// uncertain later names the attempt an operator reconciles.
    pub fn turn_attempt(
        &self,
        stream: &str,
        task_id: &str,
        attempt_id: &str,
    ) -> anyhow::Result<()> {
        self.with(|c| {
            diesel::sql_query(
                "INSERT OR IGNORE INTO turn_attempts (stream, task_id, attempt_id) VALUES (?, ?, ?)",
            )
            .bind::<Text, _>(stream)
            .bind::<Text, _>(task_id)
            .bind::<Text, _>(attempt_id)
            .execute(c)
            .map(|_| ())
        })
    }

    /// The turns this journal holds of one attempt, oldest first.
    pub fn attempt_turns(
        &self,
        task_id: &str,
        attempt_id: &str,
    ) -> anyhow::Result<Vec<AttemptTurn>> {
        self.with(|c| {
            diesel::sql_query(
                "SELECT t.stream, t.state FROM turns t JOIN turn_attempts a ON a.stream = t.stream \
                 WHERE a.task_id = ? AND a.attempt_id = ? ORDER BY t.started_at",
            )
            .bind::<Text, _>(task_id)
            .bind::<Text, _>(attempt_id)
            .load(c)
        })
    }

    /// Marks the uncertain turns of one attempt settled by an operator; how
    /// many.
    pub fn settle_attempt(&self, task_id: &str, attempt_id: &str) -> anyhow::Result<usize> {
        self.with(|c| {
            diesel::sql_query(
                "UPDATE turns SET state = ?, ended_at = ? WHERE state = ? AND stream IN \
                 (SELECT stream FROM turn_attempts WHERE task_id = ? AND attempt_id = ?)",
            )
            .bind::<Text, _>(TurnState::Settled.as_str())
            .bind::<Text, _>(now())
            .bind::<Text, _>(TurnState::Started.as_str())
            .bind::<Text, _>(task_id)
            .bind::<Text, _>(attempt_id)
            .execute(c)
        })
    }

    /// Codex accepted the turn (`turn_id`), or refused it (`None`: nothing ran).
    pub fn turn_answered(&self, stream: &str, turn_id: Option<&str>) -> anyhow::Result<()> {
        self.with(|c| match turn_id {
            Some(t) => diesel::sql_query("UPDATE turns SET turn_id = ? WHERE stream = ?")
                .bind::<Text, _>(t)
                .bind::<Text, _>(stream)
                .execute(c)
                .map(|_| ()),
            None => diesel::sql_query("DELETE FROM turns WHERE stream = ?")
                .bind::<Text, _>(stream)
                .execute(c)
                .map(|_| ()),
        })
    }

    /// The turn ended, with its final text.
    pub fn turn_ended(
        &self,
        stream: &str,
        state: TurnState,
        final_text: Option<&str>,
    ) -> anyhow::Result<()> {
        self.with(|c| {
            diesel::sql_query(
                "UPDATE turns SET state = ?, final_text = ?, ended_at = ? WHERE stream = ?",
            )
            .bind::<Text, _>(state.as_str())
            .bind::<Nullable<Text>, _>(final_text)
            .bind::<Text, _>(now())
            .bind::<Text, _>(stream)
            .execute(c)
            .map(|_| ())
        })
    }

    /// Marks every uncertain turn settled by an operator; how many.
    pub fn settle_uncertain(&self) -> anyhow::Result<usize> {
        self.with(|c| {
            diesel::sql_query("UPDATE turns SET state = ?, ended_at = ? WHERE state = ?")
                .bind::<Text, _>(TurnState::Settled.as_str())
                .bind::<Text, _>(now())
                .bind::<Text, _>(TurnState::Started.as_str())
                .execute(c)
        })
    }

    /// The turns sent to Codex whose end this journal never saw.
    pub fn uncertain(&self) -> anyhow::Result<Vec<Uncertain>> {
        let rows: Vec<Uncertain> = self.with(|c| {
            diesel::sql_query(
                "SELECT t.stream, t.repository, t.operation_id, t.turn_id, a.task_id, \
                 a.attempt_id FROM turns t LEFT JOIN turn_attempts a ON a.stream = t.stream \
                 WHERE t.state = ? ORDER BY t.started_at",
            )
            .bind::<Text, _>(TurnState::Started.as_str())
            .load(c)
        })?;
        Ok(rows)
    }

    /// The durable final of call `stream`'s turn, with the attempt it
    /// belongs to: `None` unless the turn completed and its attempt is
    /// known. What the worker offers the server when it no longer follows
    /// that turn.
    pub fn durable_final(&self, stream: &str) -> anyhow::Result<Option<DurableFinal>> {
        let rows: Vec<DurableFinal> = self.with(|c| {
            diesel::sql_query(
                "SELECT a.task_id, a.attempt_id, t.turn_id, t.final_text FROM turns t \
                 JOIN turn_attempts a ON a.stream = t.stream WHERE t.stream = ? AND t.state = ?",
            )
            .bind::<Text, _>(stream)
            .bind::<Text, _>(TurnState::Completed.as_str())
            .load(c)
        })?;
        Ok(rows.into_iter().next())
    }
}

/// A completed turn's end, and the server's attempt it belongs to.
#[derive(Debug, Clone, PartialEq, Eq, QueryableByName)]
pub struct DurableFinal {
    #[diesel(sql_type = Text)]
    pub task_id: String,
    #[diesel(sql_type = Text)]
    pub attempt_id: String,
    #[diesel(sql_type = Nullable<Text>)]
    pub turn_id: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    pub final_text: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_owed_survives_a_reopen_and_unended_turns_are_uncertain() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j/worker-journal.db");
        {
            let j = Journal::open(&path).unwrap();
            let a = j.owe("l1", Kind::Answer, "{\"a\":1}").unwrap();
            let b = j.owe("l1", Kind::Events, "{\"b\":2}").unwrap();
            j.sent(a).unwrap();
            assert_eq!(j.owed().unwrap().len(), 1);
            assert_eq!(j.owed().unwrap()[0].id, b);
            j.turn_sent("s1", "acme/w", "t1", "op1").unwrap();
            j.turn_answered("s1", Some("u1")).unwrap();
            j.turn_sent("s2", "acme/w", "t1", "op2").unwrap();
            j.turn_ended("s2", TurnState::Completed, Some("done"))
                .unwrap();
            j.turn_sent("s3", "acme/w", "t1", "op3").unwrap();
            j.turn_answered("s3", None).unwrap();
        }
        let j = Journal::open(&path).unwrap();
        let owed = j.owed().unwrap();
        assert_eq!(owed.len(), 1);
        assert_eq!(
            (owed[0].kind, owed[0].body.as_str()),
            (Kind::Events, "{\"b\":2}")
        );
        // A completed turn with no attempt named offers no final.
        assert_eq!(j.durable_final("s2").unwrap(), None);
        j.turn_attempt("s2", "task-1", "att-1").unwrap();
        let f = j.durable_final("s2").unwrap().unwrap();
        assert_eq!(
            (
                f.task_id.as_str(),
                f.attempt_id.as_str(),
                f.final_text.as_deref()
            ),
            ("task-1", "att-1", Some("done"))
        );
        // An unended turn has no final to offer.
        j.turn_attempt("s1", "task-1", "att-0").unwrap();
        assert_eq!(j.durable_final("s1").unwrap(), None);
        let uncertain = j.uncertain().unwrap();
        assert_eq!(uncertain.len(), 1, "{uncertain:?}");
        assert_eq!(uncertain[0].operation_id, "op1");
        assert_eq!(uncertain[0].turn_id.as_deref(), Some("u1"));
        assert!(is_uncertain("started") && !is_uncertain("completed"));
        assert_eq!(j.settle_uncertain().unwrap(), 1);
        assert!(j.uncertain().unwrap().is_empty());
    }

    #[test]
    fn an_uncertain_turn_names_its_attempt_and_settles_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("worker-journal.db");
        {
            let j = Journal::open(&path).unwrap();
            j.turn_attempt("s1", "task-a", "att-a").unwrap();
            j.turn_sent("s1", "acme/w", "t1", "op1").unwrap();
            j.turn_attempt("s2", "task-b", "att-b").unwrap();
            j.turn_sent("s2", "acme/w", "t2", "op2").unwrap();
            // A turn of a server that names no attempt.
            j.turn_sent("s3", "acme/w", "t3", "op3").unwrap();
            j.turn_attempt("s4", "task-c", "att-c").unwrap();
            j.turn_sent("s4", "acme/w", "t4", "op4").unwrap();
            j.turn_ended("s4", TurnState::Completed, Some("done"))
                .unwrap();
        }
        let j = Journal::open(&path).unwrap();
        let named: Vec<_> = j
            .uncertain()
            .unwrap()
            .into_iter()
            .map(|u| (u.stream, u.task_id, u.attempt_id))
            .collect();
        assert_eq!(
            named,
            vec![
                ("s1".into(), Some("task-a".into()), Some("att-a".into())),
                ("s2".into(), Some("task-b".into()), Some("att-b".into())),
                ("s3".into(), None, None),
            ]
        );
        let states = |t, a| -> Vec<String> {
            j.attempt_turns(t, a)
                .unwrap()
                .into_iter()
                .map(|t| t.state)
                .collect()
        };
        assert_eq!(states("task-c", "att-c"), ["completed"]);
        assert!(states("task-a", "att-b").is_empty());
        assert_eq!(j.settle_attempt("task-a", "att-a").unwrap(), 1);
        assert_eq!(states("task-a", "att-a"), ["settled"]);
        assert_eq!(j.settle_attempt("task-a", "att-a").unwrap(), 0);
        assert_eq!(
            j.settle_attempt("task-c", "att-c").unwrap(),
            0,
            "ended turns stay"
        );
        let left: Vec<_> = j
            .uncertain()
            .unwrap()
            .into_iter()
            .map(|u| u.stream)
            .collect();
        assert_eq!(left, ["s2", "s3"]);
    }
}
