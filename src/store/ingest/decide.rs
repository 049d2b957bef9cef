//! The decision per delivery, made in memory in arrival order against what
//! the batch has looked up and decided so far: a repeat, a duplicate, an
//! ignored event, a comment change, a rejection or a new task.

use super::lookups::BatchLookups;
use super::refuse::{refuse, Refusal};
use super::rows::{
    AcceptMetadata, AuditDraft, BatchRows, ChangeRow, OutboxRow, ReceiptRow, RepoRow, SessionRow,
    TaskRow, TransitionRow,
};
use super::{IngestOutcome, IngestRules, OUTBOX_CAPACITY};
use crate::domain::command::{Command, CommandLine};
use crate::domain::fingerprint::{prompt_text, Fingerprint};
use crate::domain::states::{ChangeKind, OutboxStatus, SendMode};
use crate::domain::{IngestRequest, Intent, OperationId, Subject, TaskId};
use crate::lifecycle::TaskState;
use crate::store::models::Delivery;
use crate::store::StoreError;
use std::collections::hash_map::Entry;

/// Why an accepted task went from `received` to `queued` (its first history row).
const ACCEPT_REASON: &str = "webhook accepted and queued";

pub(super) fn delivery_row(
    req: &IngestRequest,
    status: &str,
    reason: Option<&str>,
    task_id: Option<&TaskId>,
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
        task_id: task_id.cloned(),
        sender: req.sender.clone(),
        payload_hash: req.payload_hash.as_str().to_owned(),
        received_at: at.to_owned(),
    }
}

/// Records the delivery among the batch's rows and in what later deliveries
/// of the batch see.
pub(super) fn record(lookups: &mut BatchLookups, rows: &mut BatchRows, row: Delivery) {
    if let Some(k) = &row.content_key {
        lookups
            .content
            .insert(k.clone(), (row.delivery_key.clone(), row.task_id.clone()));
    }
    lookups
        .deliveries
        .insert(row.delivery_key.clone(), row.clone());
    rows.deliveries.push(row);
}

pub(super) fn delivery(
    req: &IngestRequest,
    rules: &IngestRules,
    lookups: &mut BatchLookups,
    rows: &mut BatchRows,
    at: &str,
) -> Result<IngestOutcome, StoreError> {
    // 1. The same delivery again (a client retry): the first answer again.
    // The same id over other signed bytes is not a retry: the first stands,
    // the second is refused and the conflict recorded. A row hashed another
    // way (stored before the hash changed) cannot tell, and is taken as the
    // retry its id says it is: answering it again runs nothing twice.
    if let Some(original) = lookups.deliveries.get(&req.delivery_key) {
        if req.payload_hash.matches(&original.payload_hash) == Some(false) {
            let task_id = original.task_id.clone();
            rows.audit(
                AuditDraft {
                    delivery_id: Some(&req.delivery_id),
                    task_id: task_id.as_ref(),
                    ..AuditDraft::new(
                        "webhook.delivery_conflict",
                        "system",
                        serde_json::json!({
                            "firstPayloadHash": original.payload_hash,
                            "payloadHash": req.payload_hash,
                            "eventType": req.event_type,
                        }),
                    )
                },
                at,
            );
            return Ok(IngestOutcome::DeliveryConflict { task_id });
        }
        return Ok(replay_answer(lookups, original));
    }
    // 2. The same content under a new delivery id (Gitea's manual replay).
    if let Some((original, task_id)) = req
        .content_key
        .as_ref()
        .and_then(|k| lookups.content.get(k))
        .cloned()
    {
        return Ok(duplicate(
            req,
            lookups,
            rows,
            &original,
            task_id.as_ref(),
            at,
        ));
    }
    match &req.intent {
        Intent::Ignore { reason } => {
            record(
                lookups,
                rows,
                delivery_row(req, "ignored", Some(reason), None, None, at),
            );
            rows.audit(
                AuditDraft {
                    delivery_id: Some(&req.delivery_id),
                    comment_id: req.subject.as_ref().and_then(|s| s.comment_id),
                    ..AuditDraft::new(
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
            command,
            written_at,
            attachments,
        } => create_task(
            req,
            rules,
            lookups,
            rows,
            TriggerText {
                key: trigger_key,
                text,
                written_at,
                command: command.as_ref(),
                attachments,
            },
            at,
        ),
        Intent::Edit {
            trigger_key,
            text,
            command,
            written_at,
            attachments,
            mention_added,
        } => {
            let existing = lookups.triggers.get(trigger_key).cloned();
            if existing.is_none() && *mention_added {
                let trigger = TriggerText {
                    key: trigger_key,
                    text,
                    written_at,
                    command: command.as_ref(),
                    attachments,
                };
                create_task(req, rules, lookups, rows, trigger, at)
            } else {
                if let Some((task_id, _, _)) = &existing {
                    queue_change(
                        req,
                        rows,
                        task_id,
                        ChangeKind::Edited,
                        Some((text, command.as_ref(), attachments)),
                        written_at,
                        at,
                    );
                }
                Ok(comment_change(
                    req,
                    lookups,
                    rows,
                    "comment.edited",
                    existing,
                    at,
                ))
            }
        }
        Intent::Delete { trigger_key } => {
            let existing = lookups.triggers.get(trigger_key).cloned();
            if let Some((task_id, _, _)) = &existing {
                queue_change(req, rows, task_id, ChangeKind::Deleted, None, at, at);
            }
            Ok(comment_change(
                req,
                lookups,
                rows,
                "comment.deleted",
                existing,
                at,
            ))
        }
    }
}

/// The answer a repeated delivery gets: what the first one got.
fn replay_answer(lookups: &BatchLookups, original: &Delivery) -> IngestOutcome {
    let state_of = |id: &Option<TaskId>| {
        id.as_ref()
            .and_then(|t| lookups.task_states.get(t).cloned())
    };
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
            task_id: original.task_id.clone(),
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
    lookups: &mut BatchLookups,
    rows: &mut BatchRows,
    original_delivery: &str,
    task_id: Option<&TaskId>,
    at: &str,
) -> IngestOutcome {
    record(
        lookups,
        rows,
        delivery_row(
            req,
            "duplicate",
            Some("same_content"),
            task_id,
            Some(original_delivery),
            at,
        ),
    );
    rows.audit(
        AuditDraft {
            task_id,
            delivery_id: Some(&req.delivery_id),
            ..AuditDraft::new(
                "webhook.duplicate",
                "system",
                serde_json::json!({ "originalDeliveryKey": original_delivery }),
            )
        },
        at,
    );
    IngestOutcome::Duplicate {
        task_id: task_id.cloned(),
        state: task_id.and_then(|t| lookups.task_states.get(t).cloned()),
    }
}

/// Queues an edit or deletion of a task's comment for its session, which
/// decides what it means for the task (only the session knows whether its
/// message was admitted).
fn queue_change(
    req: &IngestRequest,
    rows: &mut BatchRows,
    task_id: &TaskId,
    kind: ChangeKind,
    edit: Option<(&String, Option<&CommandLine>, &[i64])>,
    written_at: &str,
    at: &str,
) {
    let Some(subject) = req.subject.as_ref() else {
        return;
    };
    let line = edit.and_then(|(_, l, _)| l);
    let attachments = edit.map(|(_, _, a)| a).unwrap_or_default();
    rows.changes.push(ChangeRow {
        task_id: task_id.clone(),
        session_key: subject.resource_key(),
        kind,
        body: edit.map(|(text, _, _)| text.clone()),
        command: line.map(|l| l.command),
        command_argument: line.map(|l| l.argument.clone()).filter(|a| !a.is_empty()),
        written_at: written_at.to_owned(),
        status: "pending".into(),
        created_at: at.to_owned(),
        attachments: serde_json::Value::from(attachments.to_vec()).to_string(),
    });
}

fn comment_change(
    req: &IngestRequest,
    lookups: &mut BatchLookups,
    rows: &mut BatchRows,
    action: &str,
    existing: Option<(TaskId, String, String)>,
    at: &str,
) -> IngestOutcome {
    let task_id = existing.as_ref().map(|(id, _, _)| id);
    record(
        lookups,
        rows,
        delivery_row(req, "recorded", Some(action), task_id, None, at),
    );
    let actor = format!("gitea:user:{}", req.sender.as_deref().unwrap_or("unknown"));
    rows.audit(
        AuditDraft {
            task_id,
            delivery_id: Some(&req.delivery_id),
            comment_id: req.subject.as_ref().and_then(|s| s.comment_id),
            ..AuditDraft::new(
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
        task_id: task_id.cloned(),
    }
}

/// The comment a task is created for.
struct TriggerText<'a> {
    /// One task per triggering comment or review, ever.
    key: &'a str,
    text: &'a str,
    written_at: &'a str,
    command: Option<&'a CommandLine>,
    attachments: &'a [i64],
}

fn create_task(
    req: &IngestRequest,
    rules: &IngestRules,
    lookups: &mut BatchLookups,
    rows: &mut BatchRows,
    trigger: TriggerText<'_>,
    at: &str,
) -> Result<IngestOutcome, StoreError> {
    let TriggerText {
        key: trigger_key,
        text,
        written_at,
        command: line,
        attachments,
    } = trigger;
    let command = line.map(|l| l.command);
    let subject = req
        .subject
        .as_ref()
        .ok_or_else(|| StoreError::Query("a triggering event must name its Issue/PR".into()))?;
    let repo_key = subject.repo.repo_key().clone();
    let status = match lookups.repos.get(&repo_key) {
        Some(status) => status.clone(),
        None => {
            // Registered on first sight (audited when the row is really written).
            rows.repos.push(RepoRow {
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
            lookups.repos.insert(repo_key.clone(), "active".into());
            "active".to_owned()
        }
    };
    if status == "disabled" {
        record(
            lookups,
            rows,
            delivery_row(req, "rejected", Some("repository_disabled"), None, None, at),
        );
        rows.audit(
            AuditDraft {
                delivery_id: Some(&req.delivery_id),
                comment_id: subject.comment_id,
                error_code: Some("repository_disabled"),
                ..AuditDraft::new(
                    "webhook.rejected",
                    "system",
                    serde_json::json!({ "repoKey": repo_key }),
                )
            },
            at,
        );
        return Ok(IngestOutcome::RepositoryDisabled { repo_key });
    }
    if let Some((task_id, _, original_delivery)) = lookups.triggers.get(trigger_key).cloned() {
        // The comment already has its task (a replay with another updated_at).
        return Ok(duplicate(
            req,
            lookups,
            rows,
            &original_delivery,
            Some(&task_id),
            at,
        ));
    }
    let session_key = subject.resource_key();
    let open_now = *match lookups.open_entries.entry(session_key.clone()) {
        Entry::Occupied(e) => e.into_mut(),
        Entry::Vacant(e) => {
            rows.sessions.push(SessionRow {
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
    if open_now >= OUTBOX_CAPACITY {
        let reason = format!("the session already holds {OUTBOX_CAPACITY} unfinished requests");
        let task_id = refuse(
            req,
            lookups,
            rows,
            (&repo_key, &session_key, trigger_key),
            command,
            Refusal {
                code: "outbox_full",
                meta: serde_json::json!({
                    "reason": reason, "sessionKey": session_key, "capacity": OUTBOX_CAPACITY,
                }),
                reason,
            },
            at,
        );
        return Ok(IngestOutcome::OutboxFull {
            session_key,
            task_id,
        });
    }
    // A commenter starts at most `user_triggers_per_hour` turns an hour; a
    // turnless command (`/stop`, `/cancel`) is never held back by it.
    let limit = rules.user_triggers_per_hour;
    if limit > 0 && !command.is_some_and(|c| c.is_turnless()) {
        let started = lookups
            .recent_triggers
            .get(&subject.author)
            .copied()
            .unwrap_or(0);
        if started >= limit {
            let reason = format!(
                "{} started {limit} tasks in the last hour (user_triggers_per_hour)",
                subject.author
            );
            let refused = refuse(
                req,
                lookups,
                rows,
                (&repo_key, &session_key, trigger_key),
                command,
                Refusal {
                    code: "rate_limited",
                    meta: serde_json::json!({
                        "reason": reason, "limit": "user_triggers_per_hour", "value": limit,
                    }),
                    reason,
                },
                at,
            );
            if let Some(task_id) = refused {
                return Ok(IngestOutcome::RateLimited { task_id, limit });
            }
        }
        lookups
            .recent_triggers
            .insert(subject.author.clone(), started + 1);
    }
    let open = lookups.open_entries.entry(session_key.clone()).or_insert(0);
    *open += 1;

    // Time-ordered: the task id keys the tasks row and, through it, every
    // child row the accept writes (history, outbox entry, receipt, audit
    // events), so new ids append to those indexes. A replayed delivery still
    // gets its original task: the stored delivery row names it.
    let task_id = TaskId::mint();
    record(
        lookups,
        rows,
        delivery_row(req, "accepted", None, Some(&task_id), None, at),
    );
    rows.tasks.push(task_row(
        req,
        (&task_id, &repo_key, &session_key, trigger_key),
        (TaskState::Queued, None),
        command,
        at,
    ));
    let actor = format!("gitea:user:{}", subject.author);
    // The task is born `received` (state version 1) and leaves it in this same
    // transaction: its history starts with that one transition, and the accept's
    // audit event is the transition's event (one history row and one audit event
    // per state change). Nothing can read the task before.
    rows.transitions.push(TransitionRow {
        task_id: task_id.clone(),
        from_state: Some(TaskState::Received),
        to_state: TaskState::Queued,
        state_version: 2,
        actor: actor.clone(),
        reason: Some(ACCEPT_REASON.into()),
        error_code: None,
        at: at.to_owned(),
    });
    let queue_id = crate::domain::keys::mint_with_prefix("q-");
    // Derived from the comment: a redelivery claims the same operation, an
    // edit a new one.
    let operation_id = OperationId::of_comment(trigger_key, written_at);
    let on_pull = subject.kind == crate::domain::ResourceKind::Pull;
    if !line.is_some_and(|l| l.command.answered_by_lane(Some(&l.argument), on_pull)) {
        // A command its lane answers has one comment, its answer, written
        // when it is carried out; a "received" before it would be noise.
        rows.receipts.push(ReceiptRow::pending(
            &task_id,
            TaskState::Received,
            &session_key,
            at,
        ));
    }
    *rows.opened.entry(session_key.clone()).or_insert(0) += 1;
    rows.outbox.push(OutboxRow {
        fingerprint: {
            let thread = lookups
                .threads
                .get(&session_key)
                .cloned()
                .unwrap_or_default();
            Fingerprint {
                session_key: session_key.as_str(),
                queue_id: &queue_id,
                user_text: text,
                prompt_text: prompt_text(text, command, line.map(|l| l.argument.as_str())),
                attachments,
                thread_id: thread.thread_id.as_deref(),
                thread_generation: thread.generation,
                access_mode: thread.access_mode.map(|t| t.as_str()),
                rollback_before_send: command == Some(Command::Replace),
                created_at: written_at,
            }
            .hash()
        },
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
        command,
        command_argument: line.map(|l| l.argument.clone()).filter(|a| !a.is_empty()),
    });
    rows.audit(
        AuditDraft {
            task_id: Some(&task_id),
            states: (Some(TaskState::Received), Some(TaskState::Queued)),
            delivery_id: Some(&req.delivery_id),
            comment_id: subject.comment_id,
            ..AuditDraft::serialized(
                "webhook.accept",
                &actor,
                AcceptMetadata {
                    event_type: &req.event_type,
                    operation_id: &operation_id,
                    queue_id: &queue_id,
                    reason: ACCEPT_REASON,
                    repo_key: &repo_key,
                    resource_key: &session_key,
                    state_version: 2,
                }
                .to_json(),
            )
        },
        at,
    );
    lookups.remember_task(trigger_key, &task_id, TaskState::Queued, &req.delivery_key);
    Ok(IngestOutcome::Accepted {
        task_id,
        state: TaskState::Queued.as_str().to_owned(),
    })
}

/// A task born from a triggering comment, in `state` (state version 2: it
/// left `received` in the same transaction).
pub(super) fn task_row(
    req: &IngestRequest,
    (task_id, repo_key, session_key, trigger_key): (
        &TaskId,
        &crate::domain::RepoKey,
        &crate::domain::ResourceKey,
        &str,
    ),
    (state, error_code): (TaskState, Option<&str>),
    command: Option<Command>,
    at: &str,
) -> TaskRow {
    let subject = req.subject.as_ref();
    TaskRow {
        task_id: task_id.clone(),
        delivery_key: req.delivery_key.clone(),
        repo_key: repo_key.clone(),
        session_key: session_key.clone(),
        resource_key: session_key.clone(),
        trigger_key: trigger_key.to_owned(),
        comment_id: subject.and_then(|s| s.comment_id),
        author: subject.map(|s| s.author.clone()).unwrap_or_default(),
        state,
        state_version: 2,
        head_ref: subject.and_then(|s| s.head_ref.clone()),
        base_ref: subject.and_then(|s| s.base_ref.clone()),
        created_at: at.to_owned(),
        updated_at: at.to_owned(),
        command,
        error_code: error_code.map(str::to_owned),
    }
}
