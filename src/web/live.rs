//! Live updates for the admin web view: `GET /api/gitea-workflow/events`, a
//! `text/event-stream` behind the same admin auth as the rest of the API
//! (Bearer or the session cookie).
//!
//! One [`Hub`] per process computes what changed and broadcasts it to every
//! open stream, so ten open pages cost one set of queries, not ten. It wakes
//! when this process commits a write (`Store::changes`), and at least every
//! [`TICK`] to see work of other instances (several on one PostgreSQL) and
//! actor health that changes without a write. While nobody listens it only
//! keeps its position in the task history and the audit log.
//!
//! The charts' `stats` document reads a day of history, so it is computed at
//! most every [`STATS_EVERY`] (and only while someone listens), and a stream
//! that connects meanwhile gets the hub's last one.
//!
//! Events (each `data:` is one line of JSON, camelCase as in the API):
//!
//! | event | when | data |
//! |---|---|---|
//! | `overview` | on connect, then when it changes | as `GET /overview` |
//! | `actors` | on connect, then when it changes | as `GET /actors` |
//! | `stats` | on connect, then when it changes (looked at every [`STATS_EVERY`] at most) | as `GET /stats` (24 hours) |
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
use crate::store::models::Transition;
use crate::store::stats::Hours;
use crate::store::views::{self, LogIdSets, LogIds};
use crate::store::{approvals, tasks, DbConn, StoreError};
use crate::web::admin::{actors, overview, stats};
use crate::web::auth::Admin;
use crate::web::error::ApiError;
use crate::web::state::AppState;
use actix_web::web::{self, Bytes};
use actix_web::HttpResponse;
use serde_json::{json, Value};
use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{broadcast, watch};

/// How often the hub looks even when this process wrote nothing.
pub const TICK: Duration = Duration::from_secs(2);
/// How often the charts' document is read again while someone listens.
pub const STATS_EVERY: Duration = Duration::from_secs(15);
/// How often an idle stream sends a comment.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// Writes that arrive together are looked at once.
const SETTLE: Duration = Duration::from_millis(100);
/// Most `task`/`audit` events one look sends (more: `resync`).
const BATCH: i64 = 200;
/// How far below its position the hub looks again. On PostgreSQL, ids come from
/// sequences and become visible in commit order, not id order: a writer that
/// drew lower ids can commit after the hub has seen higher ones. Rows that
/// turn up late within this many ids are still sent, once.
const LOOKBACK: i64 = 1024;

/// One server-sent event, already framed.
#[derive(Debug)]
pub struct Frame(Bytes);

impl Frame {
    fn new(name: &str, data: &Value) -> Frame {
        Frame::of_json(name, &data.to_string())
    }

    /// A frame whose data is JSON already written out (on one line).
    fn of_json(name: &str, json: &str) -> Frame {
        Frame(Bytes::from(format!("event: {name}\ndata: {json}\n\n")))
    }
}

/// The per-process broadcaster of live events.
pub struct Hub {
    tx: broadcast::Sender<Arc<Frame>>,
    stop: watch::Sender<bool>,
    /// The last read of the `stats` document: shared by the hub's loop and
    /// new streams, so the charts' queries run at most once per
    /// [`STATS_EVERY`] however many pages are open.
    stats: std::sync::Mutex<Option<StatsRead>>,
}

/// One read of the charts' document.
struct StatsRead {
    read_at: Instant,
    /// Its JSON; `None` when the read failed.
    json: Option<Arc<str>>,
}

impl Default for Hub {
    fn default() -> Self {
        Hub {
            tx: broadcast::channel(1024).0,
            stop: watch::channel(false).0,
            stats: std::sync::Mutex::new(None),
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
    /// comes first must find the position already taken, or the rows it causes
    /// could fall before a position read later (this happened to a test when a
    /// busy machine delayed the read past the listener's first webhook).
    pub async fn start(state: web::Data<AppState>) {
        let position = state.store.read(current_position).await.ok();
        actix_web::rt::spawn(async move { run(state, position).await });
    }
}

/// Where the hub stands in the task history and the audit log: the highest
/// ids it has dealt with, and every id it has seen in the [`LOOKBACK`] window
/// below them (so a row that becomes visible late is told from one sent).
#[derive(Default, Clone)]
struct FeedPosition {
    last: LogIds,
    window: LogIdSets,
}

/// What the hub sent last: its position in the logs, and the text of each
/// document, so that only a document that changed goes out again.
#[derive(Default)]
struct LastSent {
    position: Option<FeedPosition>,
    overview: String,
    actors: String,
    attention: String,
    stats: Arc<str>,
}

async fn run(state: web::Data<AppState>, position: Option<FeedPosition>) {
    let mut changes = state.store.changes();
    let mut stop = state.live.stop.subscribe();
    // Start at the end of the logs as the server started: a listener sees
    // what happens from its first moment on.
    let mut last_sent = LastSent {
        position,
        ..LastSent::default()
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
            // Nobody listens: only keep the position in the logs (reads of
            // ids alone), so a new listener misses nothing from its first moment.
            // The position moves only if still nobody listens once it is read:
            // a listener who came during the read may already have caused
            // rows that lie before it.
            if let Ok(position) = state.store.read(current_position).await {
                if state.live.tx.receiver_count() == 0 {
                    last_sent = LastSent {
                        position: Some(position),
                        ..LastSent::default()
                    };
                    continue;
                }
            } else {
                continue;
            }
        }
        if let Err(e) = look(&state, &mut last_sent).await {
            tracing::warn!(error = %e, "live view: could not read the store; trying again");
        }
    }
}

fn send(state: &AppState, frame: Frame) {
    // No receiver is fine: nobody is looking.
    let _ = state.live.tx.send(Arc::new(frame));
}

/// One look: new transitions and audit events, then documents that changed.
async fn look(state: &AppState, last_sent: &mut LastSent) -> Result<(), ApiError> {
    match last_sent.position.clone() {
        // The very first look: start at the current end.
        None => last_sent.position = Some(state.store.read(current_position).await?),
        Some(old) => match state.store.read(move |c| feed_update(c, &old)).await? {
            FeedUpdate::Behind(position) => {
                send(state, Frame::new("resync", &json!({})));
                last_sent.position = Some(position);
            }
            FeedUpdate::Rows {
                position,
                transitions,
                audits,
            } => {
                for t in &transitions {
                    send(state, Frame::new("task", &task_event(t)));
                }
                for e in audits {
                    send(state, Frame::new("audit", &json!(e)));
                }
                last_sent.position = Some(position);
            }
        },
    }

    for (name, doc, last) in [
        (
            "overview",
            overview::compute(state).await?,
            &mut last_sent.overview,
        ),
        (
            "actors",
            actors::tree_json(state).await?,
            &mut last_sent.actors,
        ),
        (
            "attention",
            attention(state).await?,
            &mut last_sent.attention,
        ),
    ] {
        let text = doc.to_string();
        if *last != text {
            send(state, Frame::new(name, &doc));
            *last = text;
        }
    }
    if let Some(stats) = stats_json(state).await {
        if last_sent.stats != stats {
            send(state, Frame::of_json("stats", &stats));
            last_sent.stats = stats;
        }
    }
    Ok(())
}

/// The charts' document as JSON: the hub's last one while it is younger than
/// [`STATS_EVERY`], else read again. `None` (logged) when it cannot be read:
/// the charts keep what they show, and a read is tried again only after
/// [`STATS_EVERY`], so a failing read does not run at every look.
async fn stats_json(state: &AppState) -> Option<Arc<str>> {
    let cached = state.live.stats.lock().ok().and_then(|cache| {
        cache
            .as_ref()
            .filter(|c| c.read_at.elapsed() < STATS_EVERY)
            .map(|c| c.json.clone())
    });
    if let Some(json) = cached {
        return json;
    }
    let json: Option<Arc<str>> = match stats::compute(state, Hours::DAY).await {
        Ok(doc) => match serde_json::to_string(&doc) {
            Ok(json) => Some(json.into()),
            Err(e) => {
                tracing::warn!(error = %e, "live view: could not write the charts' document");
                None
            }
        },
        Err(e) => {
            tracing::warn!(error = %e, "live view: could not read the charts' history; trying again");
            None
        }
    };
    if let Ok(mut cache) = state.live.stats.lock() {
        *cache = Some(StatsRead {
            read_at: Instant::now(),
            json: json.clone(),
        });
    }
    json
}

/// What one look found in the logs.
enum FeedUpdate {
    /// Rows not sent yet, in id order, and the position after them.
    Rows {
        position: FeedPosition,
        transitions: Vec<Transition>,
        audits: Vec<AuditView>,
    },
    /// More than [`BATCH`] new rows: listeners are told to fetch again.
    Behind(FeedPosition),
}

/// `LOOKBACK` ids below `ids` in each log.
fn lookback_from(ids: LogIds) -> LogIds {
    LogIds {
        transition: ids.transition - LOOKBACK,
        audit: ids.audit - LOOKBACK,
    }
}

/// The position at the current end of the logs (nothing below it to send).
fn current_position(c: &mut DbConn) -> Result<FeedPosition, StoreError> {
    let last = views::last_log_ids(c)?;
    let window = views::log_ids_between(c, lookback_from(last), last)?;
    Ok(FeedPosition { last, window })
}

/// The rows visible now that `old` has not seen: everything above its
/// position, and anything in the window below it that was not visible before.
fn feed_update(c: &mut DbConn, old: &FeedPosition) -> Result<FeedUpdate, StoreError> {
    let last = views::last_log_ids(c)?;
    // The window from below the old position up to the ends read above: rows
    // committed after that read are for the next look.
    let visible = views::log_ids_between(c, lookback_from(old.last), last)?;
    let new_t: Vec<i64> = visible
        .transitions
        .difference(&old.window.transitions)
        .copied()
        .collect();
    let new_a: Vec<i64> = visible
        .audits
        .difference(&old.window.audits)
        .copied()
        .collect();
    let keep = |ids: BTreeSet<i64>, last: i64| -> BTreeSet<i64> {
        ids.into_iter().filter(|id| *id > last - LOOKBACK).collect()
    };
    let position = FeedPosition {
        last: LogIds {
            transition: last.transition.max(old.last.transition),
            audit: last.audit.max(old.last.audit),
        },
        window: LogIdSets {
            transitions: keep(visible.transitions, last.transition),
            audits: keep(visible.audits, last.audit),
        },
    };
    if new_t.len() as i64 > BATCH || new_a.len() as i64 > BATCH {
        return Ok(FeedUpdate::Behind(position));
    }
    Ok(FeedUpdate::Rows {
        position,
        transitions: views::transitions_by_id(c, &new_t)?,
        audits: views::audit_events_by_id(c, &new_a)?,
    })
}

/// A `task` event's data: one row of the task history.
fn task_event(t: &Transition) -> Value {
    json!({
        "id": t.id, "taskId": t.task_id, "from": t.from_state, "to": t.to_state,
        "stateVersion": t.state_version, "actor": t.actor, "reason": t.reason,
        "errorCode": t.error_code, "at": t.at,
    })
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
    if let Some(stats) = stats_json(&state).await {
        first.push_back(Frame::of_json("stats", &stats).0);
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
