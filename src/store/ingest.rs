//! The webhook's one transaction (DESIGN §3 hot path, seed §5.1): the delivery
//! row, the repository and session (created on first sight), the task in
//! `queued`, its outbox entry and the audit events, all or nothing.

use super::audit::{self, Audit};
use super::models::*;
use super::schema::{outbox_entries, repositories, sessions, tasks, webhook_deliveries};
use super::tasks::append_history;
use super::{now, sha256_hex, DbConn, StoreError};
use crate::lifecycle::TaskState;
use crate::with_conn;
use diesel::prelude::*;

/// Most entries a session's outbox holds for unfinished tasks (DESIGN §6).
pub const OUTBOX_CAPACITY: i64 = 256;

/// A repository as the webhook names it. Names are validated by the webhook
/// before they get here (no path tricks reach the store).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoRef {
    pub instance_id: String,
    pub owner: String,
    pub name: String,
    pub clone_url: Option<String>,
    pub default_branch: Option<String>,
}

impl RepoRef {
    /// `<instance>:<owner>/<repo>`, the unit of mutual exclusion.
    pub fn repo_key(&self) -> String {
        format!("{}:{}/{}", self.instance_id, self.owner, self.name)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResourceKind {
    Issue,
    Pull,
}

impl ResourceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceKind::Issue => "issue",
            ResourceKind::Pull => "pull",
        }
    }
}

/// The Issue/PR (and comment) an event is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    pub repo: RepoRef,
    pub kind: ResourceKind,
    pub number: i64,
    pub comment_id: Option<i64>,
    /// Who wrote the triggering text.
    pub author: String,
    pub head_ref: Option<String>,
    pub base_ref: Option<String>,
}

impl Subject {
    /// `<repoKey>:<issue|pull>:<number>`: one Codex thread per resource.
    pub fn resource_key(&self) -> String {
        format!(
            "{}:{}:{}",
            self.repo.repo_key(),
            self.kind.as_str(),
            self.number
        )
    }
}

/// What the webhook decided the event means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Intent {
    /// Nothing to do (no mention, the bot's own comment, another event type...).
    Ignore { reason: &'static str },
    /// A new instruction for the agent.
    Trigger {
        /// One task per triggering comment or review, ever.
        trigger_key: String,
        text: String,
        /// When the comment was written, as Gitea says (part of the fingerprint).
        written_at: String,
    },
    /// A comment was edited. A task is created only if the edit added the first
    /// mention to a comment that has none; otherwise it is recorded and linked.
    Edit {
        trigger_key: String,
        text: String,
        written_at: String,
        mention_added: bool,
    },
    /// A comment was deleted: recorded and linked to its task, if any.
    Delete { trigger_key: String },
}

/// One verified webhook request, normalised.
#[derive(Debug, Clone)]
pub struct IngestRequest {
    pub delivery_key: String,
    pub delivery_id: String,
    pub event_type: String,
    pub action: Option<String>,
    pub payload_hash: String,
    /// comment id + action + updated_at: Gitea's replay sends the same bytes
    /// under a new delivery id, and this finds the original.
    pub content_key: Option<String>,
    pub sender: Option<String>,
    pub subject: Option<Subject>,
    pub intent: Intent,
}

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
        repo_key: String,
    },
    OutboxFull {
        session_key: String,
    },
}

/// Deterministic: a replayed delivery id maps to the same task id.
pub fn task_id_for(delivery_key: &str) -> String {
    format!("task-{}", &sha256_hex(delivery_key.as_bytes())[..32])
}

/// Runs the whole ingest in the caller's transaction.
pub fn ingest(conn: &mut DbConn, req: &IngestRequest) -> Result<IngestOutcome, StoreError> {
    let at = now();
    // 1. The same delivery again (a client retry): the first answer again.
    if let Some(original) = find_delivery(conn, &req.delivery_key)? {
        return replay_answer(conn, &original);
    }
    // 2. The same content under a new delivery id (Gitea's manual replay).
    if let Some(content_key) = &req.content_key {
        let original: Option<Delivery> = with_conn!(conn, |c| webhook_deliveries::table
            .filter(webhook_deliveries::content_key.eq(content_key))
            .select(Delivery::as_select())
            .first(c)
            .optional())?;
        if let Some(original) = original {
            return record_duplicate(
                conn,
                req,
                &original.delivery_key,
                original.task_id.as_deref(),
                &at,
            );
        }
    }
    match &req.intent {
        Intent::Ignore { reason } => {
            insert_delivery(conn, req, "ignored", Some(reason), None, None, &at)?;
            audit::record(
                conn,
                &Audit::new("webhook.ignored", "system")
                    .delivery(&req.delivery_id)
                    .comment(req.subject.as_ref().and_then(|s| s.comment_id))
                    .meta(serde_json::json!({ "reason": reason, "eventType": req.event_type })),
            )?;
            Ok(IngestOutcome::Ignored {
                reason: (*reason).to_owned(),
                task_id: None,
            })
        }
        Intent::Trigger {
            trigger_key,
            text,
            written_at,
        } => create_task(conn, req, trigger_key, text, written_at, &at),
        Intent::Edit {
            trigger_key,
            text,
            written_at,
            mention_added,
        } => {
            let existing = task_for_trigger(conn, trigger_key)?;
            if existing.is_none() && *mention_added {
                create_task(conn, req, trigger_key, text, written_at, &at)
            } else {
                record_comment_change(conn, req, "comment.edited", existing, &at)
            }
        }
        Intent::Delete { trigger_key } => {
            let existing = task_for_trigger(conn, trigger_key)?;
            record_comment_change(conn, req, "comment.deleted", existing, &at)
        }
    }
}

fn find_delivery(conn: &mut DbConn, delivery_key: &str) -> Result<Option<Delivery>, StoreError> {
    Ok(with_conn!(conn, |c| webhook_deliveries::table
        .find(delivery_key)
        .select(Delivery::as_select())
        .first(c)
        .optional())?)
}

fn task_state(conn: &mut DbConn, task_id: &str) -> Result<Option<String>, StoreError> {
    Ok(with_conn!(conn, |c| tasks::table
        .filter(tasks::task_id.eq(task_id))
        .select(tasks::state)
        .first(c)
        .optional())?)
}

/// The task a comment (or review) already has: `(task_id, state, delivery_key)`.
fn task_for_trigger(
    conn: &mut DbConn,
    trigger_key: &str,
) -> Result<Option<(String, String, String)>, StoreError> {
    Ok(with_conn!(conn, |c| tasks::table
        .filter(tasks::trigger_key.eq(trigger_key))
        .select((tasks::task_id, tasks::state, tasks::delivery_key))
        .first(c)
        .optional())?)
}

/// The answer a repeated delivery gets: what the first one got.
fn replay_answer(conn: &mut DbConn, original: &Delivery) -> Result<IngestOutcome, StoreError> {
    match original.status.as_str() {
        "accepted" | "duplicate" => {
            let state = match &original.task_id {
                Some(id) => task_state(conn, id)?,
                None => None,
            };
            Ok(IngestOutcome::Duplicate {
                task_id: original.task_id.clone(),
                state,
            })
        }
        "rejected" if original.reason.as_deref() == Some("repository_disabled") => {
            Ok(IngestOutcome::RepositoryDisabled {
                repo_key: original.repo_key.clone().unwrap_or_default(),
            })
        }
        "rejected" if original.reason.as_deref() == Some("outbox_full") => {
            Ok(IngestOutcome::OutboxFull {
                session_key: original.resource_key.clone().unwrap_or_default(),
            })
        }
        _ => Ok(IngestOutcome::Ignored {
            reason: original
                .reason
                .clone()
                .unwrap_or_else(|| original.status.clone()),
            task_id: original.task_id.clone(),
        }),
    }
}

#[allow(clippy::too_many_arguments)]
fn insert_delivery(
    conn: &mut DbConn,
    req: &IngestRequest,
    status: &str,
    reason: Option<&str>,
    task_id: Option<&str>,
    duplicate_of: Option<&str>,
    at: &str,
) -> Result<(), StoreError> {
    // Only deliveries that did something claim the content key: a replay of a
    // rejected one (say, while the repository was disabled) is judged afresh.
    let claims_content = matches!(status, "accepted" | "recorded");
    let row = Delivery {
        delivery_key: req.delivery_key.clone(),
        delivery_id: req.delivery_id.clone(),
        event_type: req.event_type.clone(),
        action: req.action.clone(),
        status: status.to_owned(),
        reason: reason.map(str::to_owned),
        repo_key: req.subject.as_ref().map(|s| s.repo.repo_key()),
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
    };
    with_conn!(conn, |c| diesel::insert_into(webhook_deliveries::table)
        .values(&row)
        .execute(c))?;
    Ok(())
}

fn record_duplicate(
    conn: &mut DbConn,
    req: &IngestRequest,
    original_delivery: &str,
    task_id: Option<&str>,
    at: &str,
) -> Result<IngestOutcome, StoreError> {
    insert_delivery(
        conn,
        req,
        "duplicate",
        Some("same_content"),
        task_id,
        Some(original_delivery),
        at,
    )?;
    let mut event = Audit::new("webhook.duplicate", "system")
        .delivery(&req.delivery_id)
        .meta(serde_json::json!({ "originalDeliveryKey": original_delivery }));
    event.task_id = task_id;
    audit::record(conn, &event)?;
    let state = match task_id {
        Some(id) => task_state(conn, id)?,
        None => None,
    };
    Ok(IngestOutcome::Duplicate {
        task_id: task_id.map(str::to_owned),
        state,
    })
}

fn record_comment_change(
    conn: &mut DbConn,
    req: &IngestRequest,
    action: &str,
    existing: Option<(String, String, String)>,
    at: &str,
) -> Result<IngestOutcome, StoreError> {
    let task_id = existing.as_ref().map(|(id, _, _)| id.as_str());
    insert_delivery(conn, req, "recorded", Some(action), task_id, None, at)?;
    let actor = format!("gitea:user:{}", req.sender.as_deref().unwrap_or("unknown"));
    let mut event = Audit::new(action, &actor)
        .delivery(&req.delivery_id)
        .comment(req.subject.as_ref().and_then(|s| s.comment_id))
        .meta(serde_json::json!({
            "taskState": existing.as_ref().map(|(_, s, _)| s),
            "effect": "recorded; a comment change never creates a second task",
        }));
    event.task_id = task_id;
    audit::record(conn, &event)?;
    Ok(IngestOutcome::Ignored {
        reason: action.replace('.', "_"),
        task_id: task_id.map(str::to_owned),
    })
}

fn create_task(
    conn: &mut DbConn,
    req: &IngestRequest,
    trigger_key: &str,
    text: &str,
    written_at: &str,
    at: &str,
) -> Result<IngestOutcome, StoreError> {
    let subject = req
        .subject
        .as_ref()
        .ok_or_else(|| StoreError::Query("a triggering event must name its Issue/PR".into()))?;
    let repo_key = subject.repo.repo_key();
    let repo = ensure_repository(conn, &subject.repo, &repo_key, at)?;
    if repo.status == "disabled" {
        insert_delivery(
            conn,
            req,
            "rejected",
            Some("repository_disabled"),
            None,
            None,
            at,
        )?;
        audit::record(
            conn,
            &Audit::new("webhook.rejected", "system")
                .delivery(&req.delivery_id)
                .comment(subject.comment_id)
                .error("repository_disabled")
                .meta(serde_json::json!({ "repoKey": repo_key })),
        )?;
        return Ok(IngestOutcome::RepositoryDisabled { repo_key });
    }
    if let Some((task_id, _, original_delivery)) = task_for_trigger(conn, trigger_key)? {
        // The comment already has its task (a replay with another updated_at).
        return record_duplicate(conn, req, &original_delivery, Some(&task_id), at);
    }
    let session_key = subject.resource_key();
    ensure_session(conn, subject, &session_key, &repo_key, at)?;
    // Most sessions never had 256 entries at all: count them first (a cheap,
    // cached query), and only then count the unfinished ones.
    let total: i64 = with_conn!(conn, |c| outbox_entries::table
        .filter(outbox_entries::session_key.eq(&session_key))
        .count()
        .get_result(c))?;
    let pending: i64 = if total < OUTBOX_CAPACITY {
        total
    } else {
        with_conn!(conn, |c| outbox_entries::table
            .inner_join(tasks::table.on(tasks::task_id.eq(outbox_entries::task_id)))
            .filter(outbox_entries::session_key.eq(&session_key))
            .filter(tasks::state.ne_all(TaskState::TERMINAL.map(TaskState::as_str)))
            .count()
            .get_result(c))?
    };
    if pending >= OUTBOX_CAPACITY {
        insert_delivery(conn, req, "rejected", Some("outbox_full"), None, None, at)?;
        audit::record(
            conn,
            &Audit::new("webhook.rejected", "system")
                .delivery(&req.delivery_id)
                .comment(subject.comment_id)
                .error("outbox_full")
                .meta(
                    serde_json::json!({ "sessionKey": session_key, "capacity": OUTBOX_CAPACITY }),
                ),
        )?;
        return Ok(IngestOutcome::OutboxFull { session_key });
    }

    let task_id = task_id_for(&req.delivery_key);
    insert_delivery(conn, req, "accepted", None, Some(&task_id), None, at)?;
    let task = NewTask {
        task_id: &task_id,
        delivery_key: &req.delivery_key,
        repo_key: &repo_key,
        session_key: &session_key,
        resource_key: &session_key,
        trigger_key,
        comment_id: subject.comment_id,
        author: &subject.author,
        state: TaskState::Queued.as_str(),
        state_version: 2,
        head_ref: subject.head_ref.as_deref(),
        base_ref: subject.base_ref.as_deref(),
        created_at: at,
        updated_at: at,
    };
    with_conn!(conn, |c| diesel::insert_into(tasks::table)
        .values(&task)
        .execute(c))?;
    let actor = format!("gitea:user:{}", subject.author);
    append_history(
        conn,
        &NewTransition {
            task_id: &task_id,
            from_state: None,
            to_state: TaskState::Received.as_str(),
            state_version: 1,
            actor: &actor,
            reason: Some("webhook accepted"),
            error_code: None,
            at,
        },
    )?;
    append_history(
        conn,
        &NewTransition {
            task_id: &task_id,
            from_state: Some(TaskState::Received.as_str()),
            to_state: TaskState::Queued.as_str(),
            state_version: 2,
            actor: "system",
            reason: Some("normalised and queued"),
            error_code: None,
            at,
        },
    )?;

    let queue_id = format!("q-{}", uuid::Uuid::now_v7().simple());
    let operation_id = format!("op-{}", uuid::Uuid::now_v7().simple());
    let fingerprint = fingerprint(&session_key, &queue_id, text, subject, written_at);
    let entry = NewOutboxEntry {
        queue_id: &queue_id,
        session_key: &session_key,
        task_id: &task_id,
        operation_id: &operation_id,
        fingerprint: &fingerprint,
        mode: "enqueue",
        status: "queued",
        auto_drain: true,
        user_text: text,
        created_at: at,
        updated_at: at,
        version: 1,
    };
    with_conn!(conn, |c| {
        diesel::insert_into(outbox_entries::table)
            .values(&entry)
            .execute(c)?;
        diesel::update(sessions::table.find(&session_key))
            .set((
                sessions::last_task_id.eq(&task_id),
                sessions::updated_at.eq(at),
            ))
            .execute(c)
    })?;
    audit::record(
        conn,
        &Audit::new("webhook.accept", &actor)
            .task(&task_id)
            .delivery(&req.delivery_id)
            .comment(subject.comment_id)
            .meta(serde_json::json!({
                "eventType": req.event_type,
                "repoKey": repo_key,
                "resourceKey": session_key,
                "queueId": queue_id,
                "operationId": operation_id,
            })),
    )?;
    Ok(IngestOutcome::Accepted {
        task_id,
        state: TaskState::Queued.as_str().to_owned(),
    })
}

/// SHA-256 over the canonical request fields (DESIGN §2): the same operation id
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

/// Finds the repository, creating it on first sight. Concurrent first sightings
/// (two writers on PostgreSQL) yield one row: the loser's insert does nothing.
fn ensure_repository(
    conn: &mut DbConn,
    repo: &RepoRef,
    repo_key: &str,
    at: &str,
) -> Result<Repository, StoreError> {
    let row = NewRepository {
        repo_key,
        instance_id: &repo.instance_id,
        owner: &repo.owner,
        name: &repo.name,
        clone_url: repo.clone_url.as_deref(),
        default_branch: repo.default_branch.as_deref(),
        status: "active",
        registered_at: at,
        updated_at: at,
        version: 1,
    };
    let inserted = with_conn!(conn, |c| diesel::insert_into(repositories::table)
        .values(&row)
        .on_conflict_do_nothing()
        .execute(c))?;
    if inserted == 1 {
        audit::record(
            conn,
            &Audit::new("repository.registered", "system")
                .meta(serde_json::json!({ "repoKey": repo_key })),
        )?;
    }
    Ok(with_conn!(conn, |c| repositories::table
        .find(repo_key)
        .select(Repository::as_select())
        .first(c))?)
}

fn ensure_session(
    conn: &mut DbConn,
    subject: &Subject,
    session_key: &str,
    repo_key: &str,
    at: &str,
) -> Result<(), StoreError> {
    let row = NewSession {
        session_key,
        repo_key,
        kind: subject.kind.as_str(),
        number: subject.number,
        status: "active",
        created_at: at,
        updated_at: at,
        version: 1,
    };
    with_conn!(conn, |c| diesel::insert_into(sessions::table)
        .values(&row)
        .on_conflict_do_nothing()
        .execute(c))?;
    Ok(())
}
