//! The finals the worker owes the server outside their turn's event stream:
//! a turn's end whose event batch the server refused (the lease it ran
//! under ended) is offered on its own (`POST /finals`) until the server
//! takes it or refuses it for good. Each offer and its answer are
//! journalled, so a restarted worker goes on offering what is still open
//! and never offers what was settled.

use super::{now, Journal};
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Text};

/// Where an owed final stands with the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Neither taken nor refused for good: offered again.
    Open,
    /// The server took it.
    Taken,
    /// The server refused it for a reason that does not pass (its code is
    /// journalled): never offered again.
    Refused,
}

impl Standing {
    pub fn as_str(self) -> &'static str {
        match self {
            Standing::Open => "open",
            Standing::Taken => "taken",
            Standing::Refused => "refused",
        }
    }

    fn parse(text: &str) -> Option<Standing> {
        Some(match text {
            "open" => Standing::Open,
            "taken" => Standing::Taken,
            "refused" => Standing::Refused,
            _ => return None,
        })
    }
}

/// One owed final, as the journal holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwedFinal {
    /// The call whose turn it ended.
    pub stream: String,
    pub standing: Standing,
    /// When it was last offered (`None`: never yet).
    pub offered_at: Option<chrono::DateTime<chrono::Utc>>,
    /// How many times it was offered.
    pub offers: i64,
    /// The server's code of the last refusal.
    pub code: Option<String>,
}

#[derive(QueryableByName)]
struct Row {
    #[diesel(sql_type = Text)]
    stream: String,
    #[diesel(sql_type = Text)]
    standing: String,
    #[diesel(sql_type = Nullable<Text>)]
    offered_at: Option<String>,
    #[diesel(sql_type = BigInt)]
    offers: i64,
    #[diesel(sql_type = Nullable<Text>)]
    code: Option<String>,
}

impl Row {
    fn owed(self) -> Option<OwedFinal> {
        Some(OwedFinal {
            standing: Standing::parse(&self.standing)?,
            // A time this journal did not write reads as never offered:
            // offered once more rather than held back.
            offered_at: self
                .offered_at
                .as_deref()
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .map(|t| t.with_timezone(&chrono::Utc)),
            stream: self.stream,
            offers: self.offers,
            code: self.code,
        })
    }
}

const COLUMNS: &str = "stream, standing, offered_at, offers, code";

impl Journal {
    /// The final of call `stream`'s turn is owed outside its stream: open
    /// until settled. Owing it again changes nothing.
    pub fn final_owed(&self, stream: &str) -> anyhow::Result<()> {
        self.with(|c| {
            diesel::sql_query(
                "INSERT OR IGNORE INTO late_finals (stream, standing, offers, owed_at) \
                 VALUES (?, ?, 0, ?)",
            )
            .bind::<Text, _>(stream)
            .bind::<Text, _>(Standing::Open.as_str())
            .bind::<Text, _>(now())
            .execute(c)
            .map(|_| ())
        })
    }

    /// The owed final of call `stream`, if one is owed.
    pub fn owed_final(&self, stream: &str) -> anyhow::Result<Option<OwedFinal>> {
        let rows: Vec<Row> = self.with(|c| {
            diesel::sql_query(format!(
                "SELECT {COLUMNS} FROM late_finals WHERE stream = ?"
            ))
            .bind::<Text, _>(stream)
            .load(c)
        })?;
        Ok(rows.into_iter().next().and_then(Row::owed))
    }

    /// The owed finals still open, oldest first.
    pub fn open_finals(&self) -> anyhow::Result<Vec<OwedFinal>> {
        let rows: Vec<Row> = self.with(|c| {
            diesel::sql_query(format!(
                "SELECT {COLUMNS} FROM late_finals WHERE standing = ? ORDER BY owed_at"
            ))
            .bind::<Text, _>(Standing::Open.as_str())
            .load(c)
        })?;
        Ok(rows.into_iter().filter_map(Row::owed).collect())
    }

    /// The final of `stream` is being offered now.
    pub fn final_offered(&self, stream: &str) -> anyhow::Result<()> {
        self.with(|c| {
            diesel::sql_query(
                "UPDATE late_finals SET offered_at = ?, offers = offers + 1 WHERE stream = ?",
            )
            .bind::<Text, _>(now())
            .bind::<Text, _>(stream)
            .execute(c)
            .map(|_| ())
        })
    }

    /// What the server's answer to the last offer made of it, with the
    /// code of a refusal.
    pub fn final_answered(
        &self,
        stream: &str,
        standing: Standing,
        code: Option<&str>,
    ) -> anyhow::Result<()> {
        self.with(|c| {
            diesel::sql_query("UPDATE late_finals SET standing = ?, code = ? WHERE stream = ?")
                .bind::<Text, _>(standing.as_str())
                .bind::<Nullable<Text>, _>(code)
                .bind::<Text, _>(stream)
                .execute(c)
                .map(|_| ())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owed_final_is_open_until_answered_and_survives_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.db");
        {
            let j = Journal::open(&path).unwrap();
            j.final_owed("s1").unwrap();
            j.final_owed("s2").unwrap();
            j.final_owed("s1").unwrap();
            let s1 = j.owed_final("s1").unwrap().unwrap();
            assert_eq!(
                (s1.standing, s1.offers, s1.offered_at),
                (Standing::Open, 0, None)
            );
            j.final_offered("s1").unwrap();
            j.final_answered("s1", Standing::Open, Some("not_uncertain"))
                .unwrap();
            j.final_offered("s2").unwrap();
            j.final_answered("s2", Standing::Refused, Some("attempt_mismatch"))
                .unwrap();
        }
        let j = Journal::open(&path).unwrap();
        let open = j.open_finals().unwrap();
        assert_eq!(open.len(), 1, "{open:?}");
        assert_eq!(open[0].stream, "s1");
        assert_eq!(open[0].offers, 1);
        assert!(open[0].offered_at.is_some());
        assert_eq!(open[0].code.as_deref(), Some("not_uncertain"));
        let s2 = j.owed_final("s2").unwrap().unwrap();
        assert_eq!(
            (s2.standing, s2.code.as_deref()),
            (Standing::Refused, Some("attempt_mismatch"))
        );
        j.final_offered("s1").unwrap();
        j.final_answered("s1", Standing::Taken, None).unwrap();
        assert!(j.open_finals().unwrap().is_empty());
        assert_eq!(j.owed_final("s3").unwrap(), None);
    }
}
