//! Live updates for the admin web view: `GET /api/gitea-workflow/events`, a
//! `text/event-stream` behind the same admin auth as the rest of the API
//! (Bearer or the session cookie).
//!
//! One [`Hub`] per process computes what changed and broadcasts it to every
//! open stream, so ten open pages cost one set of queries, not ten. It wakes
//! when this process commits a write (`Store::changes`), and at least every
//! [`TICK`] to see work of other instances (several on one PostgreSQL) and
//! actor health that changes without a write. While nobody listens it only
//! keeps its place in the transition and audit tables.
//!
//! Events (each `data:` is one line of JSON, camelCase as in the API):
//!
//! | event | when | data |
//! |---|---|---|
//! | `overview` | on connect, then when it changes | as `GET /overview` |
//! | `actors` | on connect, then when it changes | as `GET /actors` |
//! | `attention` | on connect, then when it changes | `{"tasks": [Task in needs_reconciliation, blocked_workspace or failed_reply], "approvals": [pending approval]}` |
//! | `task` | a task changed state | `{"id", "taskId", "from", "to", "stateVersion", "actor", "reason", "errorCode", "at"}` |
//! | `audit` | an audit event was written (control actions included) | an audit event as in `GET /audit` |
//! | `resync` | this stream fell behind and lost events | `{}`: fetch what you show again |
//!
//! A comment line `: keep-alive` goes out every [`KEEP_ALIVE`] so proxies keep
//! the connection; the response says `X-Accel-Buffering: no` so nginx passes
//! events on at once. On shutdown every stream ends, so open pages do not hold
//! up a graceful stop.

use crate::lifecycle::TaskState;
use crate::store::audit::AuditView;
use crate::store::models::AuditEvent;
use crate::store::schema::{audit_events, task_transitions};
use crate::store::{approvals, tasks, DbConn, StoreError};
use crate::web::admin::{actors, overview};
use crate::web::auth::Admin;
use crate::web::error::ApiError;
use crate::web::state::AppState;
use crate::with_conn;
use actix_web::web::{self, Bytes};
use actix_web::HttpResponse;
use diesel::prelude::*;
use serde_json::{json, Value};
use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, watch};

/// How often the hub looks even when this process wrote nothing.
pub const TICK: Duration = Duration::from_secs(2);
/// How often an idle stream sends a comment.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// Writes that arrive together are looked at once.
const SETTLE: Duration = Duration::from_millis(100);
/// Most `task`/`audit` events one look sends (more: `resync`).
const BATCH: i64 = 200;
/// How far below its place the hub looks again. On PostgreSQL, ids come from
/// sequences and become visible in commit order, not id order: a writer that
/// drew lower ids can commit after the hub has seen higher ones. Rows that
/// turn up late within this many ids are still sent, once.
const LOOKBACK: i64 = 1024;

/// One server-sent event, already framed.
#[derive(Debug)]
pub struct Frame(Bytes);

impl Frame {
    fn new(name: &str, data: &Value) -> Frame {
        Frame(Bytes::from(format!("event: {name}\ndata: {data}\n\n")))
    }
}

/// The per-process broadcaster of live events.
pub struct Hub {
    tx: broadcast::Sender<Arc<Frame>>,
    stop: watch::Sender<bool>,
}

impl Default for Hub {
    fn default() -> Self {
        Hub {
            tx: broadcast::channel(1024).0,
            stop: watch::channel(false).0,
        }
    }
}

impl Hub {
    /// Ends every open stream (graceful shutdown).
    pub fn shutdown(&self) {
        self.stop.send_replace(true);
    }

    /// Reads where the tables end, then starts the hub's loop on the current
    /// runtime. Awaited before the server takes requests: a listener who
    /// comes first must find the place already taken, or the rows it causes
    /// could fall before a place read later (this happened to a test when a
    /// busy machine delayed the read past the listener's first webhook).
    pub async fn start(state: web::Data<AppState>) {
        let place = state.store.read(current_place).await.ok();
        actix_web::rt::spawn(async move { run(state, place).await });
    }
}

/// Where the hub stands in the transition and audit tables: the highest ids
/// it has dealt with, and every id it has seen in the [`LOOKBACK`] window
/// below them (so a row that becomes visible late is told from one sent).
#[derive(Default, Clone)]
struct Place {
    transition: i64,
    audit: i64,
    transitions: BTreeSet<i64>,
    audits: BTreeSet<i64>,
}

/// What the hub saw last.
#[derive(Default)]
struct Seen {
    place: Option<Place>,
    overview: String,
    actors: String,
    attention: String,
}

async fn run(state: web::Data<AppState>, place: Option<Place>) {
    let mut changes = state.store.changes();
    let mut stop = state.live.stop.subscribe();
    // Start at the end of the tables as the server started: a listener sees
    // what happens from its first moment on.
    let mut seen = Seen {
        place,
        ..Seen::default()
    };
    loop {
        tokio::select! {
            r = changes.changed() => if r.is_err() { return },
            _ = tokio::time::sleep(TICK) => {},
            _ = stop.changed() => return,
        }
        tokio::time::sleep(SETTLE).await;
        changes.borrow_and_update();
        if state.live.tx.receiver_count() == 0 {
            // Nobody listens: only keep the place in the tables (reads of
            // ids alone), so a new listener misses nothing from its first moment.
            // The place moves only if still nobody listens once it is read:
            // a listener who came during the read may already have caused
            // rows that lie before it.
            if let Ok(place) = state.store.read(current_place).await {
                if state.live.tx.receiver_count() == 0 {
                    seen = Seen {
                        place: Some(place),
                        ..Seen::default()
                    };
                    continue;
                }
            } else {
                continue;
            }
        }
        if let Err(e) = look(&state, &mut seen).await {
            tracing::warn!(error = %e, "live view: could not read the store; trying again");
        }
    }
}

fn send(state: &AppState, frame: Frame) {
    // No receiver is fine: nobody is looking.
    let _ = state.live.tx.send(Arc::new(frame));
}

/// One look: new transitions and audit events, then documents that changed.
async fn look(state: &AppState, seen: &mut Seen) -> Result<(), ApiError> {
    match seen.place.clone() {
        // The very first look: start at the current end.
        None => seen.place = Some(state.store.read(current_place).await?),
        Some(place) => match state.store.read(move |c| news(c, &place)).await? {
            News::Behind(place) => {
                send(state, Frame::new("resync", &json!({})));
                seen.place = Some(place);
            }
            News::Rows {
                place,
                transitions,
                audits,
            } => {
                for t in transitions {
                    send(state, Frame::new("task", &t));
                }
                for e in audits {
                    send(state, Frame::new("audit", &json!(e)));
                }
                seen.place = Some(place);
            }
        },
    }

    for (name, doc, last) in [
        (
            "overview",
            overview::compute(state).await?,
            &mut seen.overview,
        ),
        ("actors", actors::tree_json(state).await?, &mut seen.actors),
        ("attention", attention(state).await?, &mut seen.attention),
    ] {
        let text = doc.to_string();
        if *last != text {
            send(state, Frame::new(name, &doc));
            *last = text;
        }
    }
    Ok(())
}

/// What one look found.
enum News {
    /// Rows not sent yet, in id order, and the place after them.
    Rows {
        place: Place,
        transitions: Vec<Value>,
        audits: Vec<AuditView>,
    },
    /// More than [`BATCH`] new rows: listeners are told to fetch again.
    Behind(Place),
}

/// The place at the current end of the tables (nothing below it to send).
fn current_place(c: &mut DbConn) -> Result<Place, StoreError> {
    let (t, a) = max_ids(c)?;
    let (transitions, audits) = ids_between(c, (t - LOOKBACK, t), (a - LOOKBACK, a))?;
    Ok(Place {
        transition: t,
        audit: a,
        transitions,
        audits,
    })
}

/// The rows visible now that `old` has not seen: everything above its place,
/// and anything in the window below it that was not visible before.
fn news(c: &mut DbConn, old: &Place) -> Result<News, StoreError> {
    let (last_t, last_a) = max_ids(c)?;
    // The window from below the old place up to the ends read above: rows
    // committed after that read are for the next look.
    let (ids_t, ids_a) = ids_between(
        c,
        (old.transition - LOOKBACK, last_t),
        (old.audit - LOOKBACK, last_a),
    )?;
    let new_t: Vec<i64> = ids_t.difference(&old.transitions).copied().collect();
    let new_a: Vec<i64> = ids_a.difference(&old.audits).copied().collect();
    let keep = |ids: BTreeSet<i64>, last: i64| -> BTreeSet<i64> {
        ids.into_iter().filter(|id| *id > last - LOOKBACK).collect()
    };
    let place = Place {
        transition: last_t.max(old.transition),
        audit: last_a.max(old.audit),
        transitions: keep(ids_t, last_t),
        audits: keep(ids_a, last_a),
    };
    if new_t.len() as i64 > BATCH || new_a.len() as i64 > BATCH {
        return Ok(News::Behind(place));
    }
    let transitions = transitions_with_ids(c, &new_t)?;
    let audits: Vec<AuditView> = if new_a.is_empty() {
        Vec::new()
    } else {
        let rows: Vec<AuditEvent> = with_conn!(c, |conn| audit_events::table
            .filter(audit_events::id.eq_any(&new_a))
            .order(audit_events::id.asc())
            .select(AuditEvent::as_select())
            .load(conn))?;
        rows.into_iter().map(AuditView::from).collect()
    };
    Ok(News::Rows {
        place,
        transitions,
        audits,
    })
}

/// The ids of transitions and of audit events in the ranges `(low, high]`.
fn ids_between(
    c: &mut DbConn,
    (low_t, high_t): (i64, i64),
    (low_a, high_a): (i64, i64),
) -> Result<(BTreeSet<i64>, BTreeSet<i64>), StoreError> {
    Ok(with_conn!(c, |conn| {
        let t: Vec<i64> = task_transitions::table
            .filter(task_transitions::id.gt(low_t))
            .filter(task_transitions::id.le(high_t))
            .select(task_transitions::id)
            .load(conn)?;
        let a: Vec<i64> = audit_events::table
            .filter(audit_events::id.gt(low_a))
            .filter(audit_events::id.le(high_a))
            .select(audit_events::id)
            .load(conn)?;
        Ok::<_, diesel::result::Error>((t.into_iter().collect(), a.into_iter().collect()))
    })?)
}

fn max_ids(c: &mut DbConn) -> Result<(i64, i64), StoreError> {
    Ok(with_conn!(c, |conn| {
        let t: Option<i64> = task_transitions::table
            .select(diesel::dsl::max(task_transitions::id))
            .first(conn)?;
        let a: Option<i64> = audit_events::table
            .select(diesel::dsl::max(audit_events::id))
            .first(conn)?;
        Ok::<_, diesel::result::Error>((t.unwrap_or(0), a.unwrap_or(0)))
    })?)
}

type TransitionRow = (
    i64,
    String,
    Option<String>,
    String,
    i64,
    String,
    Option<String>,
    Option<String>,
    String,
);

fn transitions_with_ids(c: &mut DbConn, ids: &[i64]) -> Result<Vec<Value>, StoreError> {
    use task_transitions as t;
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let rows: Vec<TransitionRow> = with_conn!(c, |conn| t::table
        .filter(t::id.eq_any(ids))
        .order(t::id.asc())
        .select((
            t::id,
            t::task_id,
            t::from_state,
            t::to_state,
            t::state_version,
            t::actor,
            t::reason,
            t::error_code,
            t::at,
        ))
        .load(conn))?;
    Ok(rows
        .into_iter()
        .map(|(id, task, from, to, version, actor, reason, code, at)| {
            json!({
                "id": id, "taskId": task, "from": from, "to": to, "stateVersion": version,
                "actor": actor, "reason": reason, "errorCode": code, "at": at,
            })
        })
        .collect())
}

/// What needs a person: uncertain, blocked and unverified tasks, and pending
/// approvals.
pub async fn attention(state: &AppState) -> Result<Value, ApiError> {
    Ok(state
        .store
        .read(|c| {
            let mut rows = Vec::new();
            for s in [
                TaskState::NeedsReconciliation,
                TaskState::BlockedWorkspace,
                TaskState::FailedReply,
            ] {
                let (page, _) = tasks::list(
                    c,
                    &tasks::TaskFilter {
                        repo_key: None,
                        resource_key: None,
                        state: Some(s),
                        cursor: None,
                        limit: 100,
                    },
                )?;
                rows.extend(page);
            }
            let pending = approvals::pending(c)?;
            Ok(json!({ "tasks": rows, "approvals": pending }))
        })
        .await?)
}

/// `GET /api/gitea-workflow/events`.
pub async fn events(_: Admin, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    // Subscribe first, so nothing that happens while the snapshot is read is lost.
    let rx = state.live.tx.subscribe();
    let stop = state.live.stop.subscribe();
    let mut first: VecDeque<Bytes> = VecDeque::new();
    first.push_back(Bytes::from_static(b"retry: 3000\n\n"));
    for frame in [
        Frame::new("overview", &overview::compute(&state).await?),
        Frame::new("actors", &actors::tree_json(&state).await?),
        Frame::new("attention", &attention(&state).await?),
    ] {
        first.push_back(frame.0);
    }
    let keep_alive = tokio::time::interval_at(tokio::time::Instant::now() + KEEP_ALIVE, KEEP_ALIVE);
    let stream = futures_util::stream::unfold(
        (rx, stop, keep_alive, first),
        |(mut rx, mut stop, mut keep_alive, mut first)| async move {
            if let Some(b) = first.pop_front() {
                return Some((Ok::<_, actix_web::Error>(b), (rx, stop, keep_alive, first)));
            }
            if *stop.borrow() {
                return None;
            }
            let out = tokio::select! {
                msg = rx.recv() => match msg {
                    Ok(frame) => frame.0.clone(),
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        Bytes::from_static(b"event: resync\ndata: {}\n\n")
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
                _ = keep_alive.tick() => Bytes::from_static(b": keep-alive\n\n"),
                _ = stop.changed() => return None,
            };
            Some((Ok(out), (rx, stop, keep_alive, first)))
        },
    );
    Ok(HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("Cache-Control", "no-cache"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(stream))
}
