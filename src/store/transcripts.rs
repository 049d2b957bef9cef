//! Turn transcripts: the items a turn reported (the prompt as sent first),
//! each kept once per turn and bounded ([`TranscriptItem::bounded`]), and the
//! thread's token totals around each turn. Written by the session actor as
//! the events arrive; read page by page for the admin view.

use super::models::Turn;
use super::schema::{tasks, transcript_items, turn_token_usage, turns};
use super::{now, DbConn, StoreError};
use crate::agent::transcript::{ItemBody, ItemPhase, ItemStatus, TokenCounts, TranscriptItem};
use crate::domain::{ResourceKey, TaskId};
use crate::with_conn;
use diesel::prelude::*;
use serde::Serialize;

/// Items kept per turn: a turn that runs more commands than this keeps its
/// first ones (the page says so through the turn's `itemsCapped`).
pub const MAX_ITEMS_PER_TURN: i64 = 2_000;

/// Stores an item of a turn once: a new item is inserted at its `seq`; its
/// completion (later, or straight away) sets its status, body and end time
/// once; anything repeated is a no-op. The item is bounded first. `false`
/// when nothing was written (repeated, or the turn's item cap was reached).
pub fn record_item(
    conn: &mut DbConn,
    turn_id: &str,
    seq: i64,
    phase: ItemPhase,
    item: &TranscriptItem,
) -> Result<bool, StoreError> {
    let item = item.clone().bounded();
    let payload = serde_json::to_string(&item.body)
        .map_err(|e| StoreError::Query(format!("a transcript item is not JSON: {e}")))?;
    let at = now();
    let completed_at = (phase == ItemPhase::Completed).then_some(at.as_str());
    let key = transcript_items::table
        .filter(transcript_items::turn_id.eq(turn_id))
        .filter(transcript_items::item_id.eq(&item.item_id));
    let (exists, count): (i64, i64) = with_conn!(conn, |c| {
        let exists = key.count().get_result(c)?;
        let count = transcript_items::table
            .filter(transcript_items::turn_id.eq(turn_id))
            .count()
            .get_result(c)?;
        Ok::<_, diesel::result::Error>((exists, count))
    })?;
    if exists > 0 {
        if phase == ItemPhase::Started {
            return Ok(false);
        }
        let n = with_conn!(conn, |c| diesel::update(
            key.filter(transcript_items::completed_at.is_null())
        )
        .set((
            transcript_items::status.eq(item.status.as_str()),
            transcript_items::payload.eq(&payload),
            transcript_items::completed_at.eq(completed_at),
        ))
        .execute(c))?;
        return Ok(n == 1);
    }
    if count >= MAX_ITEMS_PER_TURN {
        return Ok(false);
    }
    let n = with_conn!(conn, |c| diesel::insert_into(transcript_items::table)
        .values((
            transcript_items::turn_id.eq(turn_id),
            transcript_items::seq.eq(seq),
            transcript_items::item_id.eq(&item.item_id),
            transcript_items::kind.eq(item.body.kind()),
            transcript_items::status.eq(item.status.as_str()),
            transcript_items::started_at.eq(&at),
            transcript_items::completed_at.eq(completed_at),
            transcript_items::payload.eq(&payload),
        ))
        .on_conflict_do_nothing()
        .execute(c))?;
    Ok(n == 1)
}

/// Stores the thread's token totals around a turn: `start` once (the first
/// report of the turn), `end` from every report.
pub fn record_token_usage(
    conn: &mut DbConn,
    turn_id: &str,
    thread_id: &str,
    start: TokenCounts,
    end: TokenCounts,
) -> Result<(), StoreError> {
    use turn_token_usage as u;
    let at = now();
    let ends = (
        u::end_input_tokens.eq(end.input),
        u::end_cached_input_tokens.eq(end.cached_input),
        u::end_output_tokens.eq(end.output),
        u::end_reasoning_tokens.eq(end.reasoning),
        u::end_total_tokens.eq(end.total),
        u::updated_at.eq(&at),
    );
    with_conn!(conn, |c| diesel::insert_into(u::table)
        .values((
            u::turn_id.eq(turn_id),
            u::thread_id.eq(thread_id),
            u::start_input_tokens.eq(start.input),
            u::start_cached_input_tokens.eq(start.cached_input),
            u::start_output_tokens.eq(start.output),
            u::start_reasoning_tokens.eq(start.reasoning),
            u::start_total_tokens.eq(start.total),
            ends,
        ))
        .on_conflict(u::turn_id)
        .do_update()
        .set(ends)
        .execute(c))?;
    Ok(())
}

#[derive(Queryable, Selectable, Debug, Clone)]
#[diesel(table_name = transcript_items)]
struct ItemRow {
    seq: i64,
    item_id: String,
    kind: String,
    status: String,
    started_at: String,
    completed_at: Option<String>,
    payload: String,
}

#[derive(Queryable, Selectable, Debug, Clone)]
#[diesel(table_name = turn_token_usage)]
struct UsageRow {
    turn_id: String,
    start_input_tokens: i64,
    start_cached_input_tokens: i64,
    start_output_tokens: i64,
    start_reasoning_tokens: i64,
    start_total_tokens: i64,
    end_input_tokens: i64,
    end_cached_input_tokens: i64,
    end_output_tokens: i64,
    end_reasoning_tokens: i64,
    end_total_tokens: i64,
}

/// A turn's tokens: what it used (`end - start`, flattened), and the
/// thread's totals before and after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnTokens {
    #[serde(flatten)]
    pub used: TokenCounts,
    pub thread_start: TokenCounts,
    pub thread_end: TokenCounts,
}

impl From<UsageRow> for TurnTokens {
    fn from(r: UsageRow) -> Self {
        let thread_start = TokenCounts {
            input: r.start_input_tokens,
            cached_input: r.start_cached_input_tokens,
            output: r.start_output_tokens,
            reasoning: r.start_reasoning_tokens,
            total: r.start_total_tokens,
        };
        let thread_end = TokenCounts {
            input: r.end_input_tokens,
            cached_input: r.end_cached_input_tokens,
            output: r.end_output_tokens,
            reasoning: r.end_reasoning_tokens,
            total: r.end_total_tokens,
        };
        TurnTokens {
            used: thread_end.since(thread_start),
            thread_start,
            thread_end,
        }
    }
}

/// One stored item, as the admin API serves it: the row's fields and the
/// body's (its `kind` among them).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ItemView {
    pub seq: i64,
    pub item_id: String,
    pub status: ItemStatus,
    pub started_at: String,
    pub completed_at: Option<String>,
    #[serde(flatten)]
    pub body: ItemBody,
}

impl From<ItemRow> for ItemView {
    fn from(r: ItemRow) -> Self {
        // A body this build cannot read (a later one wrote it) is named only.
        let body =
            serde_json::from_str(&r.payload).unwrap_or(ItemBody::Other { item_type: r.kind });
        ItemView {
            seq: r.seq,
            item_id: r.item_id,
            status: ItemStatus::parse(&r.status),
            started_at: r.started_at,
            completed_at: r.completed_at,
            body,
        }
    }
}

/// A turn with some of its items (a page's share).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnTranscript {
    pub turn_id: String,
    pub thread_id: String,
    pub task_id: TaskId,
    /// `normal` or `reply_retry`.
    pub kind: String,
    pub status: String,
    pub started_at: String,
    pub completed_at: Option<String>,
    pub tokens: Option<TurnTokens>,
    /// The turn reached [`MAX_ITEMS_PER_TURN`]: later items were not kept.
    pub items_capped: bool,
    pub items: Vec<ItemView>,
}

/// Where the next page of a task's transcript starts: after item `seq` of
/// the task's `turn`-th turn (0-based, in start order). Written `turn:seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TranscriptCursor {
    pub turn: usize,
    pub seq: i64,
}

impl TranscriptCursor {
    /// The first page.
    pub const START: TranscriptCursor = TranscriptCursor { turn: 0, seq: -1 };

    pub fn parse(text: &str) -> Option<TranscriptCursor> {
        let (turn, seq) = text.split_once(':')?;
        Some(TranscriptCursor {
            turn: turn.parse().ok()?,
            seq: seq.parse().ok()?,
        })
    }
}

impl std::fmt::Display for TranscriptCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.turn, self.seq)
    }
}

/// A page of a task's transcript: its turns in start order, each with the
/// items of this page, at most `limit` items in all.
#[derive(Debug, Clone, PartialEq)]
pub struct TranscriptPage {
    pub turns: Vec<TurnTranscript>,
    pub next: Option<TranscriptCursor>,
}

/// The task's turns in start order (only `turn_id`, if given).
fn task_turns(
    conn: &mut DbConn,
    task_id: &TaskId,
    turn_id: Option<&str>,
) -> Result<Vec<Turn>, StoreError> {
    Ok(with_conn!(conn, |c| {
        let mut q = turns::table
            .filter(turns::task_id.eq(task_id))
            .order((turns::started_at.asc(), turns::turn_id.asc()))
            .select(Turn::as_select())
            .into_boxed();
        if let Some(t) = turn_id {
            q = q.filter(turns::turn_id.eq(t));
        }
        q.load(c)
    })?)
}

/// The token usage of these turns, by turn id.
fn usage_of(
    conn: &mut DbConn,
    turn_ids: &[&str],
) -> Result<std::collections::HashMap<String, TurnTokens>, StoreError> {
    let rows: Vec<UsageRow> = with_conn!(conn, |c| turn_token_usage::table
        .filter(turn_token_usage::turn_id.eq_any(turn_ids))
        .select(UsageRow::as_select())
        .load(c))?;
    Ok(rows
        .into_iter()
        .map(|r| (r.turn_id.clone(), TurnTokens::from(r)))
        .collect())
}

fn item_count(conn: &mut DbConn, turn_id: &str) -> Result<i64, StoreError> {
    Ok(with_conn!(conn, |c| transcript_items::table
        .filter(transcript_items::turn_id.eq(turn_id))
        .count()
        .get_result(c))?)
}

/// A page of the task's transcript from `cursor`, at most `limit` items.
pub fn task_transcript(
    conn: &mut DbConn,
    task_id: &TaskId,
    turn_id: Option<&str>,
    cursor: TranscriptCursor,
    limit: i64,
) -> Result<TranscriptPage, StoreError> {
    let turns = task_turns(conn, task_id, turn_id)?;
    let mut remaining = limit.max(1);
    let mut page = Vec::new();
    let mut next = None;
    for (i, turn) in turns.iter().enumerate().skip(cursor.turn) {
        if remaining == 0 {
            next = Some(TranscriptCursor { turn: i, seq: -1 });
            break;
        }
        let after = if i == cursor.turn { cursor.seq } else { -1 };
        let mut rows: Vec<ItemRow> = with_conn!(conn, |c| transcript_items::table
            .filter(transcript_items::turn_id.eq(&turn.turn_id))
            .filter(transcript_items::seq.gt(after))
            .order(transcript_items::seq.asc())
            .limit(remaining + 1)
            .select(ItemRow::as_select())
            .load(c))?;
        if rows.len() as i64 > remaining {
            rows.truncate(remaining as usize);
            next = rows.last().map(|r| TranscriptCursor {
                turn: i,
                seq: r.seq,
            });
        }
        remaining -= rows.len() as i64;
        page.push((turn, rows));
        if next.is_some() {
            break;
        }
    }
    let ids: Vec<&str> = page.iter().map(|(t, _)| t.turn_id.as_str()).collect();
    let mut usage = usage_of(conn, &ids)?;
    let mut turns_out = Vec::with_capacity(page.len());
    for (turn, rows) in page {
        let items_capped = item_count(conn, &turn.turn_id)? >= MAX_ITEMS_PER_TURN;
        turns_out.push(TurnTranscript {
            tokens: usage.remove(&turn.turn_id),
            turn_id: turn.turn_id.clone(),
            thread_id: turn.thread_id.clone(),
            task_id: turn.task_id.clone(),
            kind: turn.kind.clone(),
            status: turn.status.clone(),
            started_at: turn.started_at.clone(),
            completed_at: turn.completed_at.clone(),
            items_capped,
            items: rows.into_iter().map(ItemView::from).collect(),
        });
    }
    Ok(TranscriptPage {
        turns: turns_out,
        next,
    })
}

/// One turn of a session, for the session's page.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionTurn {
    pub turn_id: String,
    pub task_id: TaskId,
    pub thread_id: String,
    pub kind: String,
    pub status: String,
    pub started_at: String,
    pub completed_at: Option<String>,
    pub final_text: Option<String>,
    pub tokens: Option<TurnTokens>,
}

/// The session's turns across its tasks, oldest first, from the `offset`-th
/// (turns are only ever added at the end, so an offset stays put); and the
/// offset of the next page, if there is one.
pub fn session_turns(
    conn: &mut DbConn,
    session_key: &ResourceKey,
    offset: i64,
    limit: i64,
) -> Result<(Vec<SessionTurn>, Option<i64>), StoreError> {
    let mut rows: Vec<Turn> = with_conn!(conn, |c| turns::table
        .inner_join(tasks::table.on(tasks::task_id.eq(turns::task_id)))
        .filter(tasks::session_key.eq(session_key))
        .order((turns::started_at.asc(), turns::turn_id.asc()))
        .offset(offset.max(0))
        .limit(limit + 1)
        .select(Turn::as_select())
        .load(c))?;
    let next = (rows.len() as i64 > limit).then(|| offset.max(0) + limit);
    rows.truncate(limit as usize);
    let ids: Vec<&str> = rows.iter().map(|t| t.turn_id.as_str()).collect();
    let mut usage = usage_of(conn, &ids)?;
    let turns = rows
        .into_iter()
        .map(|t| SessionTurn {
            tokens: usage.remove(&t.turn_id),
            turn_id: t.turn_id,
            task_id: t.task_id,
            thread_id: t.thread_id,
            kind: t.kind,
            status: t.status,
            started_at: t.started_at,
            completed_at: t.completed_at,
            final_text: t.final_text,
        })
        .collect();
    Ok((turns, next))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_read_back_what_they_write_and_nothing_else() {
        let c = TranscriptCursor { turn: 2, seq: 17 };
        assert_eq!(TranscriptCursor::parse(&c.to_string()), Some(c));
        assert_eq!(
            TranscriptCursor::parse(&TranscriptCursor::START.to_string()),
            Some(TranscriptCursor::START)
        );
        for bad in ["", "1", "a:1", "1:b", "-1:0", "1:2:3"] {
            assert_eq!(TranscriptCursor::parse(bad), None, "{bad}");
        }
    }
}
