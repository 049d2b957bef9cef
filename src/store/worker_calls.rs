//! The agent calls a server process hands to remote workers, their answers
//! and the events of the turns they start, kept in the store so that any
//! server process of a deployment serves the worker API: a worker polling
//! one process takes the calls another queued for the repositories it
//! leases, and what it answers or streams, wherever it is posted, reaches
//! the process waiting for it.
//!
//! A call is `queued` until the worker holding its repository's lease takes
//! it (`delivered` under that lease: from then on it may have reached Codex),
//! then `answered`, or `lost` when the lease it was delivered under ended
//! first. Every decision is a pure function here ([`claimable`],
//! [`may_answer`], [`stream_open`], [`place`], [`watch_verdict`]) that the
//! queries apply, so a call is never handed out twice, never taken after
//! its caller died or gave up, and never answered under another lease.
//!
//! Retention: the caller deletes a call (and its events) once it has read
//! what it waited for, or gave up; [`sweep`] deletes what a caller that died
//! left behind.

use super::schema::{server_instances, worker_call_events, worker_calls, worker_leases, workers};
use super::worker_leases::{Holding, WorkerLease};
use super::workers::WorkerId;
use super::{format_time, shared_clock, DbConn, StoreError};
use crate::agent::remote::hub::CallState;
use crate::domain::TaskId;
use crate::with_conn;
use crate::worker_api::{Call, CallBody, Event, Outcome};
use diesel::prelude::*;
use std::collections::HashSet;
use std::time::Duration;

/// A call's id: `wc-` and a UUID v7, unique across every process of the
/// deployment (a worker names it in its answer and its event batches).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CallId(String);

impl CallId {
    pub fn mint() -> CallId {
        CallId(crate::domain::keys::mint_with_prefix("wc-"))
    }

    /// A call id as a worker sent it; `None`: no call of ours has that shape.
    pub fn parse(text: &str) -> Option<CallId> {
        let hex = text.strip_prefix("wc-")?;
        (hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| CallId(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for CallId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a call stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// No worker took it: nothing reached any runtime.
    Queued,
    /// The worker holding `lease_id` took it: it may have reached Codex.
    Delivered,
    /// The worker answered it.
    Answered,
    /// The lease it was delivered under ended before an answer came: its
    /// outcome says it is uncertain.
    Lost,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Queued => "queued",
            Phase::Delivered => "delivered",
            Phase::Answered => "answered",
            Phase::Lost => "lost",
        }
    }

    pub fn parse(text: &str) -> Option<Phase> {
        Some(match text {
            "queued" => Phase::Queued,
            "delivered" => Phase::Delivered,
            "answered" => Phase::Answered,
            "lost" => Phase::Lost,
            _ => return None,
        })
    }
}

/// Why an answer or an event batch is not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unmatched {
    /// No call (or stream) of that id waits for this lease: it was answered,
    /// given up on, or handed to another lease.
    UnknownCall,
}

#[derive(Queryable, Selectable, Debug, Clone)]
#[diesel(table_name = worker_calls)]
struct Row {
    call_id: String,
    repository: String,
    caller: String,
    body: String,
    stream: bool,
    state: String,
    lease_id: Option<String>,
    outcome: Option<String>,
    deadline_at: String,
}

/// A call as the rules read it.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerCall {
    pub call_id: CallId,
    pub repository: String,
    /// The server process waiting for it.
    pub caller: String,
    pub phase: Phase,
    pub lease_id: Option<String>,
    pub outcome: Option<Outcome>,
    /// It starts a turn whose events follow.
    pub stream: bool,
    /// After this (by the shared clock) no worker takes it.
    pub deadline_at: String,
}

impl WorkerCall {
    fn from_row(row: Row) -> Result<(WorkerCall, String), StoreError> {
        let phase = Phase::parse(&row.state).ok_or_else(|| {
            StoreError::Query(format!(
                "worker call {} has state {:?}, which this version does not know",
                row.call_id, row.state
            ))
        })?;
        let outcome = match &row.outcome {
            Some(text) => Some(serde_json::from_str(text).map_err(|e| {
                StoreError::Query(format!(
                    "the answer stored for worker call {} is unreadable: {e}",
                    row.call_id
                ))
            })?),
            None => None,
        };
        Ok((
            WorkerCall {
                call_id: CallId(row.call_id),
                repository: row.repository,
                caller: row.caller,
                phase,
                lease_id: row.lease_id,
                outcome,
                stream: row.stream,
                deadline_at: row.deadline_at,
            },
            row.body,
        ))
    }

    /// Where it stood for its caller, had it to give it up now.
    pub fn state(&self) -> CallState {
        match (&self.phase, &self.lease_id) {
            (Phase::Queued, _) | (_, None) => CallState::Queued,
            (_, Some(l)) => CallState::Delivered {
                lease_id: l.clone(),
            },
        }
    }
}

fn expiry(conn: &mut DbConn, ttl: Duration) -> Result<(String, String), StoreError> {
    let at = shared_clock(conn)?;
    let ttl = chrono::Duration::from_std(ttl).unwrap_or_else(|_| chrono::Duration::seconds(120));
    Ok((format_time(at), format_time(at + ttl)))
}

fn json<T: serde::Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value)
        .map_err(|e| StoreError::Query(format!("cannot write a worker call as JSON: {e}")))
}

/// Queues a call for whichever worker holds `repository`'s lease, waited
/// for by `caller` for `ttl`: no worker takes it after that.
pub fn insert(
    conn: &mut DbConn,
    call_id: &CallId,
    repository: &str,
    caller: &str,
    body: &CallBody,
    stream: bool,
    ttl: Duration,
) -> Result<(), StoreError> {
    let (at, deadline) = expiry(conn, ttl)?;
    let kind = body.kind();
    let body = json(body)?;
    with_conn!(conn, |c| diesel::insert_into(worker_calls::table)
        .values((
            worker_calls::call_id.eq(call_id.as_str()),
            worker_calls::repository.eq(repository),
            worker_calls::caller.eq(caller),
            worker_calls::kind.eq(kind),
            worker_calls::body.eq(&body),
            worker_calls::stream.eq(stream),
            worker_calls::state.eq(Phase::Queued.as_str()),
            worker_calls::created_at.eq(&at),
            worker_calls::deadline_at.eq(&deadline),
        ))
        .execute(c))?;
    Ok(())
}

fn find_row(conn: &mut DbConn, call_id: &CallId) -> Result<Option<Row>, StoreError> {
    Ok(with_conn!(conn, |c| worker_calls::table
        .find(call_id.as_str())
        .select(Row::as_select())
        .first(c)
        .optional())?)
}

/// The call, if it is still stored.
pub fn find(conn: &mut DbConn, call_id: &CallId) -> Result<Option<WorkerCall>, StoreError> {
    find_row(conn, call_id)?
        .map(|r| WorkerCall::from_row(r).map(|(c, _)| c))
        .transpose()
}

/// Whether the worker lease `lease_id` is held now: not released, not
/// expired, its worker not revoked.
pub fn lease_held(conn: &mut DbConn, lease_id: &str) -> Result<bool, StoreError> {
    let row: Option<(WorkerLease, Option<String>)> = with_conn!(conn, |c| worker_leases::table
        .inner_join(workers::table)
        .filter(worker_leases::lease_id.eq(lease_id))
        .select((WorkerLease::as_select(), workers::revoked_at))
        .first(c)
        .optional())?;
    let Some((lease, revoked_at)) = row else {
        return Ok(false);
    };
    let at = format_time(shared_clock(conn)?);
    Ok(Holding {
        worker_id: &lease.worker_id,
        fence: lease.fence,
        expires_at: &lease.expires_at,
        released: lease.released_at.is_some(),
        revoked: revoked_at.is_some(),
    }
    .is_held(&at))
}

/// What the caller of `call_id` learns from it now (see [`watch_verdict`]).
pub fn watch(conn: &mut DbConn, call_id: &CallId) -> Result<Verdict, StoreError> {
    let call = find(conn, call_id)?;
    let held = match call.as_ref().and_then(|c| c.lease_id.clone()) {
        Some(l) => lease_held(conn, &l)?,
        None => false,
    };
    Ok(watch_verdict(call.as_ref(), held))
}

/// The server processes alive since `since` (not stopped, beat after it).
fn callers_alive(conn: &mut DbConn, since: &str) -> Result<HashSet<String>, StoreError> {
    let ids: Vec<String> = with_conn!(conn, |c| server_instances::table
        .filter(server_instances::stopped_at.is_null())
        .filter(server_instances::heartbeat_at.gt(since))
        .select(server_instances::server_id)
        .load(c))?;
    Ok(ids.into_iter().collect())
}

/// Whether a poll under `lease` has anything to do: calls queued for its
/// repository, or calls an earlier lease of it took and never answered. A
/// read, so that idle polls write nothing.
pub fn claim_due(conn: &mut DbConn, lease: &WorkerLease) -> Result<bool, StoreError> {
    let n: i64 = with_conn!(conn, |c| worker_calls::table
        .filter(worker_calls::repository.eq(&lease.repository))
        .filter(
            worker_calls::state
                .eq(Phase::Queued.as_str())
                .or(worker_calls::state
                    .eq(Phase::Delivered.as_str())
                    .and(worker_calls::lease_id.ne(&lease.lease_id)))
        )
        .count()
        .get_result(c))?;
    Ok(n > 0)
}

/// What a poll under a lease took, and the calls it found lost.
#[derive(Debug, Default)]
pub struct Claimed {
    pub calls: Vec<Call>,
    /// Calls an earlier lease of the repository took and never answered:
    /// now lost, their callers to be woken.
    pub lost: Vec<CallId>,
}

/// Hands the calls waiting for `lease`'s repository to it, each at most
/// once across every process (a compare-and-set from `queued`), only those
/// whose caller beat after `callers_alive_since`. Calls an earlier lease of
/// the repository took and never answered are lost with it.
pub fn claim(
    conn: &mut DbConn,
    lease: &WorkerLease,
    callers_alive_since: &str,
) -> Result<Claimed, StoreError> {
    let repository = lease.repository.as_str();
    let stale: Vec<String> = with_conn!(conn, |c| worker_calls::table
        .filter(worker_calls::repository.eq(repository))
        .filter(worker_calls::state.eq(Phase::Delivered.as_str()))
        .filter(worker_calls::lease_id.ne(&lease.lease_id))
        .select(worker_calls::call_id)
        .load(c))?;
    let mut claimed = Claimed::default();
    for id in stale {
        let id = CallId(id);
        if mark_lost(conn, &id, "the repository's lease moved to another worker")? {
            claimed.lost.push(id);
        }
    }
    let rows: Vec<Row> = with_conn!(conn, |c| worker_calls::table
        .filter(worker_calls::repository.eq(repository))
        .filter(worker_calls::state.eq(Phase::Queued.as_str()))
        .order(worker_calls::created_at.asc())
        .select(Row::as_select())
        .load(c))?;
    if rows.is_empty() {
        return Ok(claimed);
    }
    let at = format_time(shared_clock(conn)?);
    let alive = callers_alive(conn, callers_alive_since)?;
    for row in rows {
        let (call, body) = WorkerCall::from_row(row)?;
        if !claimable(&call, repository, &at, alive.contains(&call.caller)) {
            continue;
        }
        let n = with_conn!(conn, |c| diesel::update(
            worker_calls::table
                .filter(worker_calls::call_id.eq(call.call_id.as_str()))
                .filter(worker_calls::state.eq(Phase::Queued.as_str()))
        )
        .set((
            worker_calls::state.eq(Phase::Delivered.as_str()),
            worker_calls::lease_id.eq(&lease.lease_id),
            worker_calls::delivered_at.eq(&at),
        ))
        .execute(c))?;
        if n == 0 {
            // Taken, or given up, by another process meanwhile.
            continue;
        }
        let body: CallBody = serde_json::from_str(&body).map_err(|e| {
            StoreError::Query(format!(
                "worker call {} has a body this version cannot read: {e}",
                call.call_id
            ))
        })?;
        if let Some(a) = starts_attempt(&body) {
            if let Ok(task_id) = a.task_id.parse::<TaskId>() {
                let worker = WorkerId::stored(lease.worker_id.clone());
                super::attempts::delivered_to_worker(conn, &task_id, &a.attempt_id, &worker)?;
            }
        }
        claimed.calls.push(Call {
            call_id: call.call_id.0,
            lease_id: lease.lease_id.clone(),
            body,
        });
    }
    Ok(claimed)
}

/// A delivered call fails closed: lost, uncertain. `false`: it was not
/// delivered (answered, lost or gone already).
fn mark_lost(conn: &mut DbConn, call_id: &CallId, why: &str) -> Result<bool, StoreError> {
    let Some(call) = find(conn, call_id)? else {
        return Ok(false);
    };
    if call.phase != Phase::Delivered {
        return Ok(false);
    }
    let outcome = json(&lost_outcome(&call.state(), why))?;
    let at = format_time(shared_clock(conn)?);
    let n = with_conn!(conn, |c| diesel::update(
        worker_calls::table
            .filter(worker_calls::call_id.eq(call_id.as_str()))
            .filter(worker_calls::state.eq(Phase::Delivered.as_str()))
    )
    .set((
        worker_calls::state.eq(Phase::Lost.as_str()),
        worker_calls::outcome.eq(&outcome),
        worker_calls::answered_at.eq(&at),
    ))
    .execute(c))?;
    Ok(n == 1)
}

/// The answer of the worker under `lease_id` to a call it took. Refused
/// unless that lease took it and it was not answered yet.
pub fn answer(
    conn: &mut DbConn,
    lease_id: &str,
    call_id: &CallId,
    outcome: &Outcome,
) -> Result<Result<(), Unmatched>, StoreError> {
    let Some(call) = find(conn, call_id)? else {
        return Ok(Err(Unmatched::UnknownCall));
    };
    // A lease that ended answers nothing, even before anyone marked its
    // calls lost.
    if !may_answer(&call, lease_id) || !lease_held(conn, lease_id)? {
        return Ok(Err(Unmatched::UnknownCall));
    }
    let text = json(outcome)?;
    let at = format_time(shared_clock(conn)?);
    let n = with_conn!(conn, |c| diesel::update(
        worker_calls::table
            .filter(worker_calls::call_id.eq(call_id.as_str()))
            .filter(worker_calls::state.eq(Phase::Delivered.as_str()))
            .filter(worker_calls::lease_id.eq(lease_id))
    )
    .set((
        worker_calls::state.eq(Phase::Answered.as_str()),
        worker_calls::outcome.eq(&text),
        worker_calls::answered_at.eq(&at),
    ))
    .execute(c))?;
    Ok(if n == 1 {
        Ok(())
    } else {
        Err(Unmatched::UnknownCall)
    })
}

/// How many events the stream holds, and whether its last ended the turn.
fn held_events(conn: &mut DbConn, call_id: &CallId) -> Result<(u64, bool), StoreError> {
    let last: Option<(i64, bool)> = with_conn!(conn, |c| worker_call_events::table
        .filter(worker_call_events::call_id.eq(call_id.as_str()))
        .order(worker_call_events::place.desc())
        .select((worker_call_events::place, worker_call_events::ends_turn))
        .first(c)
        .optional())?;
    Ok(match last {
        Some((place, ended)) => (u64::try_from(place).unwrap_or(0) + 1, ended),
        None => (0, false),
    })
}

/// A batch of the turn `stream` started, as the worker under `lease_id`
/// sent it, its first event at place `first`: the events past those held
/// are stored, each once (see [`place`]). `Ok(Ok(n))`: how many were new.
pub fn add_events(
    conn: &mut DbConn,
    lease_id: &str,
    stream: &CallId,
    first: u64,
    events: &[Event],
) -> Result<Result<usize, Unmatched>, StoreError> {
    let Some(call) = find(conn, stream)? else {
        return Ok(Err(Unmatched::UnknownCall));
    };
    if !stream_open(&call, lease_id) || !lease_held(conn, lease_id)? {
        return Ok(Err(Unmatched::UnknownCall));
    }
    let (have, ended) = held_events(conn, stream)?;
    let range = match place(have, ended, first, events) {
        Ok(r) => r,
        Err(e) => return Ok(Err(e)),
    };
    let mut added = 0;
    for (i, event) in events[range.clone()].iter().enumerate() {
        let at = i64::try_from(have).unwrap_or(i64::MAX) + i as i64;
        let text = json(event)?;
        // Another process may have stored the same batch a moment ago:
        // the same events at the same places, so nothing is lost.
        added += with_conn!(conn, |c| diesel::insert_into(worker_call_events::table)
            .values((
                worker_call_events::call_id.eq(stream.as_str()),
                worker_call_events::place.eq(at),
                worker_call_events::event.eq(&text),
                worker_call_events::ends_turn.eq(event.ends_turn()),
            ))
            .on_conflict_do_nothing()
            .execute(c))?;
    }
    Ok(Ok(added))
}

/// What a caller following a turn's stream reads.
#[derive(Debug, Clone, PartialEq)]
pub struct Followed {
    /// The events from the place asked for, in order.
    pub events: Vec<Event>,
    /// More may come: the call is stored, its stream not failed, and the
    /// lease it was delivered under is held.
    pub open: bool,
}

/// The stream's events from place `from` on, and whether more may come.
pub fn follow(conn: &mut DbConn, stream: &CallId, from: u64) -> Result<Followed, StoreError> {
    let from = i64::try_from(from).unwrap_or(i64::MAX);
    let texts: Vec<String> = with_conn!(conn, |c| worker_call_events::table
        .filter(worker_call_events::call_id.eq(stream.as_str()))
        .filter(worker_call_events::place.ge(from))
        .order(worker_call_events::place.asc())
        .select(worker_call_events::event)
        .load(c))?;
    let events = texts
        .iter()
        .map(|t| {
            // An event this version cannot read keeps its place in the order.
            serde_json::from_str(t).unwrap_or(Event::Other { seq: 0 })
        })
        .collect();
    let open = match find(conn, stream)? {
        Some(call) => match call.lease_id.clone() {
            Some(l) => stream_open(&call, &l) && lease_held(conn, &l)?,
            None => false,
        },
        None => false,
    };
    Ok(Followed { events, open })
}

/// Ends a lease's calls: those it took and never answered are lost, and
/// the turns it streams take no more events. The ids of those calls, whose
/// callers are to be woken.
pub fn end_lease(conn: &mut DbConn, lease_id: &str, why: &str) -> Result<Vec<CallId>, StoreError> {
    let ids: Vec<String> = with_conn!(conn, |c| worker_calls::table
        .filter(worker_calls::lease_id.eq(lease_id))
        .filter(worker_calls::state.eq(Phase::Delivered.as_str()))
        .select(worker_calls::call_id)
        .load(c))?;
    let mut lost = Vec::new();
    for id in ids {
        let id = CallId(id);
        if mark_lost(conn, &id, why)? {
            lost.push(id);
        }
    }
    // Answered turns keep their answer (their callers read it already);
    // their streams close.
    let streams: Vec<String> = with_conn!(conn, |c| worker_calls::table
        .filter(worker_calls::lease_id.eq(lease_id))
        .filter(worker_calls::state.eq(Phase::Answered.as_str()))
        .filter(worker_calls::stream.eq(true))
        .select(worker_calls::call_id)
        .load(c))?;
    for id in streams {
        let n = with_conn!(conn, |c| diesel::update(
            worker_calls::table
                .filter(worker_calls::call_id.eq(&id))
                .filter(worker_calls::state.eq(Phase::Answered.as_str()))
        )
        .set(worker_calls::state.eq(Phase::Lost.as_str()))
        .execute(c))?;
        if n == 1 {
            lost.push(CallId(id));
        }
    }
    Ok(lost)
}

/// The caller stops waiting: the call goes, with its events. What it had
/// come to: its outcome if one was stored, else where it stood (`None`: it
/// was gone already).
pub fn give_up(
    conn: &mut DbConn,
    call_id: &CallId,
) -> Result<Option<Result<Outcome, CallState>>, StoreError> {
    let Some(call) = find(conn, call_id)? else {
        return Ok(None);
    };
    delete(conn, call_id)?;
    Ok(Some(match (call.phase, call.outcome) {
        (Phase::Answered | Phase::Lost, Some(o)) => Ok(o),
        (phase, _) => Err(match (phase, call.lease_id) {
            (Phase::Queued, _) | (_, None) => CallState::Queued,
            (_, Some(lease_id)) => CallState::Delivered { lease_id },
        }),
    }))
}

/// Deletes a call and its events.
pub fn delete(conn: &mut DbConn, call_id: &CallId) -> Result<(), StoreError> {
    with_conn!(conn, |c| diesel::delete(
        worker_call_events::table.filter(worker_call_events::call_id.eq(call_id.as_str()))
    )
    .execute(c))?;
    with_conn!(conn, |c| diesel::delete(
        worker_calls::table.filter(worker_calls::call_id.eq(call_id.as_str()))
    )
    .execute(c))?;
    Ok(())
}

/// Deletes what callers that died left: the calls (and events) of every
/// process that has not beaten since `callers_alive_since`, or stopped.
/// Such calls were never handed out after their caller died (see
/// [`claimable`]); its sessions are recovered from the store. How many.
pub fn sweep(conn: &mut DbConn, callers_alive_since: &str) -> Result<usize, StoreError> {
    let callers: Vec<String> = with_conn!(conn, |c| worker_calls::table
        .select(worker_calls::caller)
        .distinct()
        .load(c))?;
    let alive = callers_alive(conn, callers_alive_since)?;
    let mut n = 0;
    for caller in callers.iter().filter(|c| !alive.contains(*c)) {
        let ids: Vec<String> = with_conn!(conn, |c| worker_calls::table
            .filter(worker_calls::caller.eq(caller))
            .select(worker_calls::call_id)
            .load(c))?;
        for id in ids {
            delete(conn, &CallId(id))?;
            n += 1;
        }
    }
    Ok(n)
}

mod rules;
pub use rules::*;

#[cfg(test)]
mod tests;
