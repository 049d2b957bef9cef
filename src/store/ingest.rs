//! The webhook's one transaction, on the hot path: the delivery
//! row, the repository and session (created on first sight), the task in
//! `queued`, its outbox entry, its history and the audit events, all or nothing.
//!
//! Deliveries are ingested in batches (the group-commit writer hands over what
//! arrived together): one round of lookups for the whole batch, every decision
//! made in memory in arrival order (so duplicates inside a batch are found too),
//! then one multi-row INSERT per table. A single delivery is a batch of one, so
//! there is only one code path.

use super::models::*;
use super::schema::{
    audit_events, outbox_entries, repositories, sessions, task_transitions, tasks,
    webhook_deliveries,
};
use super::{now, sha256_hex, DbConn, StoreError};
use crate::domain::states::{CommentKind, CommentStatus, OutboxStatus, SendMode};
use crate::domain::{
    IngestRequest, Intent, OperationId, RepoKey, ResourceKey, ResourceKind, Subject,
};
use crate::lifecycle::TaskState;
use crate::with_conn;
use diesel::prelude::*;
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};

/// Most entries a session's outbox holds for unfinished tasks.
pub const OUTBOX_CAPACITY: i64 = 256;

/// What the transaction did; the webhook maps it to a status code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IngestOutcome {
    Accepted {
        task_id: String,
        state: String,
    },
    Duplicate {
        task_id: Option<String>,
        state: Option<String>,
    },
    Ignored {
        reason: String,
        task_id: Option<String>,
    },
    RepositoryDisabled {
        repo_key: RepoKey,
    },
    OutboxFull {
        session_key: ResourceKey,
    },
}

/// A new task id: `task-` and 32 hex digits of a time-ordered UUID (v7).
///
/// Time order is what keeps ingest fast: the task id keys the tasks row and,
/// through it, every child row the accept writes (history, outbox entry,
/// receipt, audit events), so ordered ids append to those indexes instead of
/// dirtying a random page of each per delivery (each dirty page is another
/// 4 KiB in the WAL at every commit). A replayed delivery still gets its
/// original task: the stored delivery row names it.
pub fn new_task_id() -> String {
    format!("task-{}", uuid::Uuid::now_v7().simple())
}

/// Why an accepted task went from `received` to `queued` (its first history row).
const ACCEPT_REASON: &str = "webhook accepted and queued";

/// Ingests one delivery in the caller's transaction.
pub fn ingest(conn: &mut DbConn, req: &IngestRequest) -> Result<IngestOutcome, StoreError> {
    ingest_batch(conn, std::slice::from_ref(req))?
        .pop()
        .ok_or_else(|| StoreError::Query("an ingest batch of one gave no outcome".into()))
}

/// Ingests deliveries in arrival order, in the caller's transaction: the
/// outcomes are the same as ingesting them one after the other.
pub fn ingest_batch(
    conn: &mut DbConn,
    reqs: &[IngestRequest],
) -> Result<Vec<IngestOutcome>, StoreError> {
    let at = now();
    let mut known = Known::load(conn, reqs)?;
    let mut plan = Plan::default();
    let mut outcomes = Vec::with_capacity(reqs.len());
    for req in reqs {
        outcomes.push(decide(req, &mut known, &mut plan, &at)?);
    }
    plan.write(conn, &at)?;
    Ok(outcomes)
}

/// What the store already holds that the batch's decisions depend on, kept up
/// to date as the batch is decided.
#[derive(Default)]
struct Known {
    deliveries: HashMap<String, Delivery>,
    /// content key → (delivery key, task id) of the delivery that claimed it.
    content: HashMap<String, (String, Option<String>)>,
    /// repository key → status
    repos: HashMap<RepoKey, String>,
    /// trigger key → (task id, state, delivery key)
    triggers: HashMap<String, (String, String, String)>,
    /// task id → state, for the answers to repeated deliveries
    task_states: HashMap<String, String>,
    /// session key → unfinished outbox entries, for every session that
    /// exists (in the store or created earlier in the batch)
    open_entries: HashMap<ResourceKey, i64>,
}

fn keys<'a>(items: impl Iterator<Item = &'a String>) -> Vec<&'a str> {
    let mut v: Vec<&str> = items.map(String::as_str).collect();
    v.sort_unstable();
    v.dedup();
    v
}

impl Known {
    fn load(conn: &mut DbConn, reqs: &[IngestRequest]) -> Result<Known, StoreError> {
        let delivery_keys = keys(reqs.iter().map(|r| &r.delivery_key));
        let content_keys = keys(reqs.iter().filter_map(|r| r.content_key.as_ref()));
        let repo_keys: Vec<RepoKey> = {
            let mut v: Vec<RepoKey> = reqs
                .iter()
                .filter_map(|r| r.subject.as_ref().map(|s| s.repo.repo_key().clone()))
                .collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        let trigger_keys = keys(reqs.iter().filter_map(|r| match &r.intent {
            Intent::Trigger { trigger_key, .. }
            | Intent::Edit { trigger_key, .. }
            | Intent::Delete { trigger_key } => Some(trigger_key),
            Intent::Ignore { .. } => None,
        }));
        let session_keys: Vec<ResourceKey> = {
            let mut v: Vec<ResourceKey> = reqs
                .iter()
                .filter(|r| matches!(r.intent, Intent::Trigger { .. } | Intent::Edit { .. }))
                .filter_map(|r| r.subject.as_ref().map(Subject::resource_key))
                .collect();
            v.sort_unstable();
            v.dedup();
            v
        };

        let repo_keys: Vec<&str> = repo_keys.iter().map(RepoKey::as_str).collect();
        let session_keys: Vec<&str> = session_keys.iter().map(ResourceKey::as_str).collect();
        let (deliveries, by_content, repos, triggers, open) = with_conn!(conn, |c| {
            let deliveries: Vec<Delivery> = each_64(&delivery_keys, |keys| {
                webhook_deliveries::table
                    .filter(InKeys {
                        column: webhook_deliveries::delivery_key,
                        keys,
                    })
                    .select(Delivery::as_select())
                    .load(c)
            })?;
            let by_content: Vec<(Option<String>, String, Option<String>)> =
                each_64(&content_keys, |keys| {
                    webhook_deliveries::table
                        // (NULL is in no IN list: only keyed rows match.)
                        .filter(InKeys {
                            column: webhook_deliveries::content_key.assume_not_null(),
                            keys,
                        })
                        .select((
                            webhook_deliveries::content_key,
                            webhook_deliveries::delivery_key,
                            webhook_deliveries::task_id,
                        ))
                        .load(c)
                })?;
            let repos: Vec<(RepoKey, String)> = each_64(&repo_keys, |keys| {
                repositories::table
                    .filter(InKeys {
                        column: repositories::repo_key,
                        keys,
                    })
                    .select((repositories::repo_key, repositories::status))
                    .load(c)
            })?;
            let triggers: Vec<(String, String, String, String)> = each_64(&trigger_keys, |keys| {
                tasks::table
                    .filter(InKeys {
                        column: tasks::trigger_key,
                        keys,
                    })
                    .select((
                        tasks::trigger_key,
                        tasks::task_id,
                        tasks::state,
                        tasks::delivery_key,
                    ))
                    .load(c)
            })?;
            // Existing sessions, with their count of unfinished outbox entries.
            let open: Vec<(ResourceKey, i64)> = each_64(&session_keys, |keys| {
                sessions::table
                    .filter(InKeys {
                        column: sessions::session_key,
                        keys,
                    })
                    .select((sessions::session_key, sessions::open_entries))
                    .load(c)
            })?;
            Ok::<_, diesel::result::Error>((deliveries, by_content, repos, triggers, open))
        })?;

        let mut known = Known {
            open_entries: open.into_iter().collect(),
            ..Default::default()
        };
        for (content_key, delivery_key, task_id) in by_content {
            if let Some(k) = content_key {
                known.content.insert(k, (delivery_key, task_id));
            }
        }
        known.repos = repos.into_iter().collect();
        for (trigger, task_id, state, delivery_key) in triggers {
            known.task_states.insert(task_id.clone(), state.clone());
            known
                .triggers
                .insert(trigger, (task_id, state, delivery_key));
        }
        // States of the tasks that repeated deliveries point at.
        let wanted: Vec<String> = deliveries
            .iter()
            .filter_map(|d| d.task_id.clone())
            .chain(known.content.values().filter_map(|(_, t)| t.clone()))
            .filter(|t| !known.task_states.contains_key(t))
            .collect();
        if !wanted.is_empty() {
            let states: Vec<(String, String)> = with_conn!(conn, |c| tasks::table
                .filter(tasks::task_id.eq_any(&wanted))
                .select((tasks::task_id, tasks::state))
                .load(c))?;
            known.task_states.extend(states);
        }
        known.deliveries = deliveries
            .into_iter()
            .map(|d| (d.delivery_key.clone(), d))
            .collect();
        Ok(known)
    }
}

#[derive(Insertable)]
#[diesel(table_name = repositories)]
struct RepoRow {
    repo_key: RepoKey,
    instance_id: String,
    owner: String,
    name: String,
    clone_url: Option<String>,
    default_branch: Option<String>,
    status: String,
    registered_at: String,
    updated_at: String,
    version: i64,
}

#[derive(Insertable)]
#[diesel(table_name = sessions)]
struct SessionRow {
    session_key: ResourceKey,
    repo_key: RepoKey,
    kind: ResourceKind,
    number: i64,
    status: String,
    created_at: String,
    updated_at: String,
    version: i64,
}

#[derive(Insertable)]
#[diesel(table_name = tasks, treat_none_as_default_value = false)]
struct TaskRow {
    task_id: String,
    delivery_key: String,
    repo_key: RepoKey,
    session_key: ResourceKey,
    resource_key: ResourceKey,
    trigger_key: String,
    comment_id: Option<i64>,
    author: String,
    state: TaskState,
    state_version: i64,
    head_ref: Option<String>,
    base_ref: Option<String>,
    created_at: String,
    updated_at: String,
}

#[derive(Insertable)]
#[diesel(table_name = task_transitions, treat_none_as_default_value = false)]
struct TransitionRow {
    task_id: String,
    from_state: Option<TaskState>,
    to_state: TaskState,
    state_version: i64,
    actor: String,
    reason: Option<String>,
    error_code: Option<String>,
    at: String,
}

#[derive(Insertable)]
#[diesel(table_name = outbox_entries, treat_none_as_default_value = false)]
struct OutboxRow {
    queue_id: String,
    session_key: ResourceKey,
    task_id: String,
    operation_id: OperationId,
    fingerprint: String,
    mode: SendMode,
    status: OutboxStatus,
    auto_drain: bool,
    user_text: String,
    created_at: String,
    updated_at: String,
    version: i64,
}

#[derive(Insertable)]
#[diesel(table_name = audit_events, treat_none_as_default_value = false)]
struct AuditRow {
    event_id: String,
    task_id: Option<String>,
    action: String,
    actor: String,
    from_state: Option<TaskState>,
    to_state: Option<TaskState>,
    delivery_id: Option<String>,
    turn_id: Option<String>,
    comment_id: Option<i64>,
    error_code: Option<String>,
    metadata: String,
    at: String,
}

/// Inserts `rows` with multi-row INSERTs of fixed sizes (64, 16, 4 and 1 rows).
/// diesel keeps a prepared statement only for a batch whose size is part of its
/// type (an array); a batch of any other length is parsed and planned again at
/// every run, which cost the group-commit writer a tenth of its time.
macro_rules! insert_all {
    ($c:expr, $table:expr, $rows:expr) => {{
        let mut rest = &$rows[..];
        while !rest.is_empty() {
            if let Some((head, tail)) = rest.split_first_chunk::<64>() {
                diesel::insert_into($table).values(head).execute($c)?;
                rest = tail;
            } else if let Some((head, tail)) = rest.split_first_chunk::<16>() {
                diesel::insert_into($table).values(head).execute($c)?;
                rest = tail;
            } else if let Some((head, tail)) = rest.split_first_chunk::<4>() {
                diesel::insert_into($table).values(head).execute($c)?;
                rest = tail;
            } else if let Some((head, tail)) = rest.split_first_chunk::<1>() {
                diesel::insert_into($table).values(head).execute($c)?;
                rest = tail;
            }
        }
    }};
}

/// The rows the batch writes, collected while deciding.
#[derive(Default)]
struct Plan {
    repos: Vec<RepoRow>,
    sessions: Vec<SessionRow>,
    deliveries: Vec<Delivery>,
    tasks: Vec<TaskRow>,
    transitions: Vec<TransitionRow>,
    outbox: Vec<OutboxRow>,
    receipts: Vec<ReceiptRow>,
    audits: Vec<AuditRow>,
    /// session key → outbox entries this batch opens (sorted: PostgreSQL
    /// writers that update the same sessions take their row locks in one order).
    opened: BTreeMap<ResourceKey, i64>,
}

/// The "received" receipt each accepted task gets, written by the receipts
/// worker after the commit.
#[derive(Insertable)]
#[diesel(table_name = super::schema::comments, treat_none_as_default_value = false)]
struct ReceiptRow {
    comment_key: String,
    task_id: String,
    kind: CommentKind,
    resource_key: ResourceKey,
    status: CommentStatus,
    created_at: String,
    updated_at: String,
}

/// An audit event under construction (`Plan::audit` fills the rest).
struct Event<'a> {
    action: &'a str,
    actor: &'a str,
    task_id: Option<&'a str>,
    states: (Option<TaskState>, Option<TaskState>),
    delivery_id: Option<&'a str>,
    comment_id: Option<i64>,
    error_code: Option<&'a str>,
    metadata: serde_json::Value,
}

impl<'a> Event<'a> {
    fn new(action: &'a str, actor: &'a str, metadata: serde_json::Value) -> Self {
        Event {
            action,
            actor,
            task_id: None,
            states: (None, None),
            delivery_id: None,
            comment_id: None,
            error_code: None,
            metadata,
        }
    }
}

impl Plan {
    fn audit(&mut self, e: Event<'_>, at: &str) {
        self.audits.push(AuditRow {
            event_id: format!("audit-{}", uuid::Uuid::now_v7().simple()),
            task_id: e.task_id.map(str::to_owned),
            action: e.action.to_owned(),
            actor: e.actor.to_owned(),
            from_state: e.states.0,
            to_state: e.states.1,
            delivery_id: e.delivery_id.map(str::to_owned),
            turn_id: None,
            comment_id: e.comment_id,
            error_code: e.error_code.map(str::to_owned),
            metadata: e.metadata.to_string(),
            at: at.to_owned(),
        });
    }

    fn write(mut self, conn: &mut DbConn, at: &str) -> Result<(), StoreError> {
        // SQLite has one writer; PostgreSQL may have several at once.
        let one_writer = matches!(conn, DbConn::Sqlite(_));
        // Repositories first: a concurrent first sighting (another writer)
        // inserts nothing here, and only real registrations are audited.
        let mut registered: Vec<RepoKey> = Vec::new();
        // (Row by row: SQLite cannot combine multi-row inserts with ON
        // CONFLICT, and new repositories and sessions are few.)
        for repo in &self.repos {
            let inserted = with_conn!(conn, |c| diesel::insert_into(repositories::table)
                .values(repo)
                .on_conflict_do_nothing()
                .execute(c))?;
            if inserted == 1 {
                registered.push(repo.repo_key.clone());
            }
        }
        for repo_key in registered {
            self.audit(
                Event::new(
                    "repository.registered",
                    "system",
                    serde_json::json!({ "repoKey": repo_key }),
                ),
                at,
            );
        }
        with_conn!(conn, |c| {
            for session in &self.sessions {
                diesel::insert_into(sessions::table)
                    .values(session)
                    .on_conflict_do_nothing()
                    .execute(c)?;
            }
            insert_all!(c, webhook_deliveries::table, &self.deliveries);
            insert_all!(c, tasks::table, &self.tasks);
            insert_all!(c, task_transitions::table, &self.transitions);
            for row in &self.transitions {
                crate::metrics::transition_written(row.to_state.as_str());
            }
            insert_all!(c, outbox_entries::table, &self.outbox);
            if one_writer {
                // diesel prepares every UPDATE afresh: one statement per
                // increment rather than one per session (~50 a batch).
                let mut by_increment: BTreeMap<i64, Vec<&ResourceKey>> = BTreeMap::new();
                for (session, n) in &self.opened {
                    by_increment.entry(*n).or_default().push(session);
                }
                for (n, keys) in by_increment {
                    diesel::update(sessions::table.filter(sessions::session_key.eq_any(keys)))
                        .set(sessions::open_entries.eq(sessions::open_entries + n))
                        .execute(c)?;
                }
            } else {
                // Several PostgreSQL writers: one row at a time, in key order,
                // so that they take these row locks in the same order.
                for (session, n) in &self.opened {
                    diesel::update(sessions::table.find(session))
                        .set(sessions::open_entries.eq(sessions::open_entries + n))
                        .execute(c)?;
                }
            }
            insert_all!(c, super::schema::comments::table, &self.receipts);
            insert_all!(c, audit_events::table, &self.audits);
            Ok::<(), diesel::result::Error>(())
        })?;
        Ok(())
    }
}

fn delivery_row(
    req: &IngestRequest,
    status: &str,
    reason: Option<&str>,
    task_id: Option<&str>,
    duplicate_of: Option<&str>,
    at: &str,
) -> Delivery {
    // Only deliveries that did something claim the content key: a replay of a
    // rejected one (say, while the repository was disabled) is judged afresh.
    let claims_content = matches!(status, "accepted" | "recorded");
    Delivery {
        delivery_key: req.delivery_key.clone(),
        delivery_id: req.delivery_id.clone(),
        event_type: req.event_type.clone(),
        action: req.action.clone(),
        status: status.to_owned(),
        reason: reason.map(str::to_owned),
        repo_key: req.subject.as_ref().map(|s| s.repo.repo_key().clone()),
        resource_key: req.subject.as_ref().map(Subject::resource_key),
        comment_id: req.subject.as_ref().and_then(|s| s.comment_id),
        content_key: if claims_content {
            req.content_key.clone()
        } else {
            None
        },
        duplicate_of: duplicate_of.map(str::to_owned),
        task_id: task_id.map(str::to_owned),
        sender: req.sender.clone(),
        payload_hash: req.payload_hash.clone(),
        received_at: at.to_owned(),
    }
}

/// Records the delivery in the plan and in what later deliveries of the batch see.
fn record(known: &mut Known, plan: &mut Plan, row: Delivery) {
    if let Some(k) = &row.content_key {
        known
            .content
            .insert(k.clone(), (row.delivery_key.clone(), row.task_id.clone()));
    }
    known
        .deliveries
        .insert(row.delivery_key.clone(), row.clone());
    plan.deliveries.push(row);
}

fn decide(
    req: &IngestRequest,
    known: &mut Known,
    plan: &mut Plan,
    at: &str,
) -> Result<IngestOutcome, StoreError> {
    // 1. The same delivery again (a client retry): the first answer again.
    if let Some(original) = known.deliveries.get(&req.delivery_key) {
        return Ok(replay_answer(known, original));
    }
    // 2. The same content under a new delivery id (Gitea's manual replay).
    if let Some((original, task_id)) = req
        .content_key
        .as_ref()
        .and_then(|k| known.content.get(k))
        .cloned()
    {
        return Ok(duplicate(
            req,
            known,
            plan,
            &original,
            task_id.as_deref(),
            at,
        ));
    }
    match &req.intent {
        Intent::Ignore { reason } => {
            record(
                known,
                plan,
                delivery_row(req, "ignored", Some(reason), None, None, at),
            );
            plan.audit(
                Event {
                    delivery_id: Some(&req.delivery_id),
                    comment_id: req.subject.as_ref().and_then(|s| s.comment_id),
                    ..Event::new(
                        "webhook.ignored",
                        "system",
                        serde_json::json!({ "reason": reason, "eventType": req.event_type }),
                    )
                },
                at,
            );
            Ok(IngestOutcome::Ignored {
                reason: (*reason).to_owned(),
                task_id: None,
            })
        }
        Intent::Trigger {
            trigger_key,
            text,
            written_at,
        } => create_task(req, known, plan, trigger_key, text, written_at, at),
        Intent::Edit {
            trigger_key,
            text,
            written_at,
            mention_added,
        } => {
            let existing = known.triggers.get(trigger_key).cloned();
            if existing.is_none() && *mention_added {
                create_task(req, known, plan, trigger_key, text, written_at, at)
            } else {
                Ok(comment_change(
                    req,
                    known,
                    plan,
                    "comment.edited",
                    existing,
                    at,
                ))
            }
        }
        Intent::Delete { trigger_key } => {
            let existing = known.triggers.get(trigger_key).cloned();
            Ok(comment_change(
                req,
                known,
                plan,
                "comment.deleted",
                existing,
                at,
            ))
        }
    }
}

/// The answer a repeated delivery gets: what the first one got.
fn replay_answer(known: &Known, original: &Delivery) -> IngestOutcome {
    let state_of =
        |id: &Option<String>| id.as_ref().and_then(|t| known.task_states.get(t).cloned());
    match (
        original.status.as_str(),
        original.reason.as_deref(),
        &original.repo_key,
        &original.resource_key,
    ) {
        ("accepted" | "duplicate", ..) => IngestOutcome::Duplicate {
            task_id: original.task_id.clone(),
            state: state_of(&original.task_id),
        },
        ("rejected", Some("repository_disabled"), Some(repo_key), _) => {
            IngestOutcome::RepositoryDisabled {
                repo_key: repo_key.clone(),
            }
        }
        ("rejected", Some("outbox_full"), _, Some(session_key)) => IngestOutcome::OutboxFull {
            session_key: session_key.clone(),
        },
        _ => IngestOutcome::Ignored {
            reason: original
                .reason
                .clone()
                .unwrap_or_else(|| original.status.clone()),
            task_id: original.task_id.clone(),
        },
    }
}

fn duplicate(
    req: &IngestRequest,
    known: &mut Known,
    plan: &mut Plan,
    original_delivery: &str,
    task_id: Option<&str>,
    at: &str,
) -> IngestOutcome {
    record(
        known,
        plan,
        delivery_row(
            req,
            "duplicate",
            Some("same_content"),
            task_id,
            Some(original_delivery),
            at,
        ),
    );
    plan.audit(
        Event {
            task_id,
            delivery_id: Some(&req.delivery_id),
            ..Event::new(
                "webhook.duplicate",
                "system",
                serde_json::json!({ "originalDeliveryKey": original_delivery }),
            )
        },
        at,
    );
    IngestOutcome::Duplicate {
        task_id: task_id.map(str::to_owned),
        state: task_id.and_then(|t| known.task_states.get(t).cloned()),
    }
}

fn comment_change(
    req: &IngestRequest,
    known: &mut Known,
    plan: &mut Plan,
    action: &str,
    existing: Option<(String, String, String)>,
    at: &str,
) -> IngestOutcome {
    let task_id = existing.as_ref().map(|(id, _, _)| id.as_str());
    record(
        known,
        plan,
        delivery_row(req, "recorded", Some(action), task_id, None, at),
    );
    let actor = format!("gitea:user:{}", req.sender.as_deref().unwrap_or("unknown"));
    plan.audit(
        Event {
            task_id,
            delivery_id: Some(&req.delivery_id),
            comment_id: req.subject.as_ref().and_then(|s| s.comment_id),
            ..Event::new(
                action,
                &actor,
                serde_json::json!({
                    "taskState": existing.as_ref().map(|(_, s, _)| s),
                    "effect": "recorded; a comment change never creates a second task",
                }),
            )
        },
        at,
    );
    IngestOutcome::Ignored {
        reason: action.replace('.', "_"),
        task_id: task_id.map(str::to_owned),
    }
}

fn create_task(
    req: &IngestRequest,
    known: &mut Known,
    plan: &mut Plan,
    trigger_key: &str,
    text: &str,
    written_at: &str,
    at: &str,
) -> Result<IngestOutcome, StoreError> {
    let subject = req
        .subject
        .as_ref()
        .ok_or_else(|| StoreError::Query("a triggering event must name its Issue/PR".into()))?;
    let repo_key = subject.repo.repo_key().clone();
    let status = match known.repos.get(&repo_key) {
        Some(status) => status.clone(),
        None => {
            // Registered on first sight (audited when the row is really written).
            plan.repos.push(RepoRow {
                repo_key: repo_key.clone(),
                instance_id: repo_key.instance().to_owned(),
                owner: subject.repo.owner.clone(),
                name: subject.repo.name.clone(),
                clone_url: subject.repo.clone_url.clone(),
                default_branch: subject.repo.default_branch.clone(),
                status: "active".into(),
                registered_at: at.to_owned(),
                updated_at: at.to_owned(),
                version: 1,
            });
            known.repos.insert(repo_key.clone(), "active".into());
            "active".to_owned()
        }
    };
    if status == "disabled" {
        record(
            known,
            plan,
            delivery_row(req, "rejected", Some("repository_disabled"), None, None, at),
        );
        plan.audit(
            Event {
                delivery_id: Some(&req.delivery_id),
                comment_id: subject.comment_id,
                error_code: Some("repository_disabled"),
                ..Event::new(
                    "webhook.rejected",
                    "system",
                    serde_json::json!({ "repoKey": repo_key }),
                )
            },
            at,
        );
        return Ok(IngestOutcome::RepositoryDisabled { repo_key });
    }
    if let Some((task_id, _, original_delivery)) = known.triggers.get(trigger_key).cloned() {
        // The comment already has its task (a replay with another updated_at).
        return Ok(duplicate(
            req,
            known,
            plan,
            &original_delivery,
            Some(&task_id),
            at,
        ));
    }
    let session_key = subject.resource_key();
    let open = match known.open_entries.entry(session_key.clone()) {
        Entry::Occupied(e) => e.into_mut(),
        Entry::Vacant(e) => {
            plan.sessions.push(SessionRow {
                session_key: session_key.clone(),
                repo_key: repo_key.clone(),
                kind: subject.kind,
                number: subject.number,
                status: "active".into(),
                created_at: at.to_owned(),
                updated_at: at.to_owned(),
                version: 1,
            });
            e.insert(0)
        }
    };
    if *open >= OUTBOX_CAPACITY {
        record(
            known,
            plan,
            delivery_row(req, "rejected", Some("outbox_full"), None, None, at),
        );
        plan.audit(
            Event {
                delivery_id: Some(&req.delivery_id),
                comment_id: subject.comment_id,
                error_code: Some("outbox_full"),
                ..Event::new(
                    "webhook.rejected",
                    "system",
                    serde_json::json!({ "sessionKey": session_key, "capacity": OUTBOX_CAPACITY }),
                )
            },
            at,
        );
        return Ok(IngestOutcome::OutboxFull { session_key });
    }
    *open += 1;

    let task_id = new_task_id();
    record(
        known,
        plan,
        delivery_row(req, "accepted", None, Some(&task_id), None, at),
    );
    plan.tasks.push(TaskRow {
        task_id: task_id.clone(),
        delivery_key: req.delivery_key.clone(),
        repo_key: repo_key.clone(),
        session_key: session_key.clone(),
        resource_key: session_key.clone(),
        trigger_key: trigger_key.to_owned(),
        comment_id: subject.comment_id,
        author: subject.author.clone(),
        state: TaskState::Queued,
        state_version: 2,
        head_ref: subject.head_ref.clone(),
        base_ref: subject.base_ref.clone(),
        created_at: at.to_owned(),
        updated_at: at.to_owned(),
    });
    let actor = format!("gitea:user:{}", subject.author);
    // The task is born `received` (state version 1) and leaves it in this same
    // transaction: its history starts with that one transition, and the accept's
    // audit event is the transition's event (one history row and one audit event
    // per state change). Nothing can read the task before.
    plan.transitions.push(TransitionRow {
        task_id: task_id.clone(),
        from_state: Some(TaskState::Received),
        to_state: TaskState::Queued,
        state_version: 2,
        actor: actor.clone(),
        reason: Some(ACCEPT_REASON.into()),
        error_code: None,
        at: at.to_owned(),
    });
    let queue_id = format!("q-{}", uuid::Uuid::now_v7().simple());
    let operation_id = OperationId::mint();
    plan.receipts.push(ReceiptRow {
        comment_key: super::comments::receipt_key(&task_id, TaskState::Received),
        task_id: task_id.clone(),
        kind: CommentKind::Receipt,
        resource_key: session_key.clone(),
        status: CommentStatus::Pending,
        created_at: at.to_owned(),
        updated_at: at.to_owned(),
    });
    *plan.opened.entry(session_key.clone()).or_insert(0) += 1;
    plan.outbox.push(OutboxRow {
        fingerprint: fingerprint(session_key.as_str(), &queue_id, text, subject, written_at),
        queue_id: queue_id.clone(),
        session_key: session_key.clone(),
        task_id: task_id.clone(),
        operation_id: operation_id.clone(),
        mode: SendMode::Enqueue,
        status: OutboxStatus::Queued,
        auto_drain: true,
        user_text: text.to_owned(),
        created_at: at.to_owned(),
        updated_at: at.to_owned(),
        version: 1,
    });
    plan.audit(
        Event {
            task_id: Some(&task_id),
            states: (Some(TaskState::Received), Some(TaskState::Queued)),
            delivery_id: Some(&req.delivery_id),
            comment_id: subject.comment_id,
            ..Event::new(
                "webhook.accept",
                &actor,
                serde_json::json!({
                    "stateVersion": 2,
                    "reason": ACCEPT_REASON,
                    "eventType": req.event_type,
                    "repoKey": repo_key,
                    "resourceKey": session_key,
                    "queueId": queue_id,
                    "operationId": operation_id,
                }),
            )
        },
        at,
    );
    known
        .task_states
        .insert(task_id.clone(), TaskState::Queued.as_str().to_owned());
    known.triggers.insert(
        trigger_key.to_owned(),
        (
            task_id.clone(),
            TaskState::Queued.as_str().to_owned(),
            req.delivery_key.clone(),
        ),
    );
    Ok(IngestOutcome::Accepted {
        task_id,
        state: TaskState::Queued.as_str().to_owned(),
    })
}

/// SHA-256 over the canonical request fields: the same operation id
/// with another fingerprint is a conflict, never an overwrite.
pub fn fingerprint(
    session_key: &str,
    queue_id: &str,
    text: &str,
    subject: &Subject,
    written_at: &str,
) -> String {
    // serde_json's map is ordered by key, so this text is canonical.
    let canonical = serde_json::json!({
        "sessionKey": session_key,
        "queueId": queue_id,
        "userText": text,
        "source": "gitea",
        "commentId": subject.comment_id,
        "author": subject.author,
        "createdAt": written_at,
    });
    sha256_hex(canonical.to_string().as_bytes())
}

/// Runs `query` over `keys` in lists of 64 (see [`InKeys`]).
fn each_64<'k, T>(
    keys: &[&'k str],
    mut query: impl FnMut([&'k str; 64]) -> diesel::QueryResult<Vec<T>>,
) -> diesel::QueryResult<Vec<T>> {
    let mut rows = Vec::new();
    for chunk in keys.chunks(64) {
        let mut list = [chunk[0]; 64];
        list[..chunk.len()].copy_from_slice(chunk);
        rows.extend(query(list)?);
    }
    Ok(rows)
}

/// `column IN (?, …)` over exactly `N` text values. diesel prepares every
/// `eq_any` afresh (its list is of any length), and the batch's five lookups
/// were parsed and planned again at every group commit; a list of fixed length
/// is a statement diesel keeps. Unused places repeat the first key.
#[derive(Debug, Clone, Copy)]
struct InKeys<'a, C, const N: usize> {
    column: C,
    keys: [&'a str; N],
}

impl<C, const N: usize> diesel::expression::Expression for InKeys<'_, C, N>
where
    C: diesel::expression::Expression<SqlType = diesel::sql_types::Text>,
{
    type SqlType = diesel::sql_types::Bool;
}

impl<C, QS, const N: usize> diesel::expression::AppearsOnTable<QS> for InKeys<'_, C, N> where
    C: diesel::expression::AppearsOnTable<QS, SqlType = diesel::sql_types::Text>
{
}

impl<C, QS, const N: usize> diesel::expression::SelectableExpression<QS> for InKeys<'_, C, N> where
    C: diesel::expression::SelectableExpression<QS, SqlType = diesel::sql_types::Text>
{
}

impl<C, const N: usize> diesel::expression::ValidGrouping<()> for InKeys<'_, C, N>
where
    C: diesel::expression::ValidGrouping<()>,
{
    type IsAggregate = C::IsAggregate;
}

impl<C: diesel::query_builder::QueryId, const N: usize> diesel::query_builder::QueryId
    for InKeys<'_, C, N>
{
    type QueryId = InKeys<'static, C::QueryId, N>;
    const HAS_STATIC_QUERY_ID: bool = C::HAS_STATIC_QUERY_ID;
}

impl<C, DB, const N: usize> diesel::query_builder::QueryFragment<DB> for InKeys<'_, C, N>
where
    DB: diesel::backend::Backend + diesel::sql_types::HasSqlType<diesel::sql_types::Text>,
    C: diesel::query_builder::QueryFragment<DB>,
    str: diesel::serialize::ToSql<diesel::sql_types::Text, DB>,
{
    fn walk_ast<'b>(
        &'b self,
        mut out: diesel::query_builder::AstPass<'_, 'b, DB>,
    ) -> diesel::QueryResult<()> {
        self.column.walk_ast(out.reborrow())?;
        out.push_sql(" IN (");
        for (i, key) in self.keys.iter().enumerate() {
            if i > 0 {
                out.push_sql(", ");
            }
            out.push_bind_param::<diesel::sql_types::Text, str>(key)?;
        }
        out.push_sql(")");
        Ok(())
    }
}
