//! `GET /api/gitea-workflow/actors`: the live actor tree; and the controls that
//! act through it: repository disable/enable, task cancel/abort/reconcile.

use super::ControlBody;
use crate::actors::health::RegistryHealth;
use crate::actors::registry::{AbortTask, RunCommands, Snapshot};
use crate::domain::{RepoKey, TaskId};
use crate::store::audit::AuditView;
use crate::store::control;
use crate::store::instances;
use crate::store::signals::Signal;
use crate::store::tasks::{self, Verdict};
use crate::web::auth::Admin;
use crate::web::error::ApiError;
use crate::web::state::AppState;
use actix_web::{web, HttpResponse};
use serde::Deserialize;

pub async fn tree(_: Admin, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(tree_json(&state).await?))
}

/// The actor tree document (also the live view's `actors` event): this
/// process's tree, and under `instances` the trees the other live
/// processes on the same database wrote with their last heartbeat.
pub async fn tree_json(state: &AppState) -> Result<serde_json::Value, ApiError> {
    let health = match &state.registry {
        Some(registry) => registry
            .send(Snapshot)
            .await
            .map_err(|_| ApiError::Unavailable)?,
        None => RegistryHealth {
            runtime: "none".into(),
            server_id: state.server_id.clone(),
            ..Default::default()
        },
    };
    let (window, me) = (
        super::instances::alive_window(state),
        state.server_id.clone(),
    );
    let others = state
        .store
        .read(move |c| {
            let since = instances::alive_since(c, window)?;
            instances::find_alive_actors(c, &since, &me)
        })
        .await?;
    Ok(serde_json::json!({
        "registry": {
            "owner": health.owner,
            "serverId": health.server_id,
            "runtime": health.runtime,
            "repoActors": health.repo_actors,
            "sessionActors": health.session_actors,
            "held": health.held,
        },
        "repositories": health.repositories,
        "instances": others,
    }))
}

/// Path values may arrive with `/` and `:` percent-encoded.
pub(super) fn decode_key(raw: &str) -> String {
    raw.replace("%2F", "/")
        .replace("%2f", "/")
        .replace("%3A", ":")
        .replace("%3a", ":")
}

async fn set_repo(
    state: web::Data<AppState>,
    key: String,
    body: ControlBody,
    enabled: bool,
) -> Result<HttpResponse, ApiError> {
    let req = body.into_request()?;
    let repo_key = RepoKey::parse(&decode_key(&key))
        .map_err(|e| ApiError::bad_request("invalid_repo_key", e.to_string()))?;
    let k = repo_key.clone();
    let event = state
        .store
        .write(move |c| control::set_repository_enabled(c, &req, &k, enabled))
        .await?;
    state.wake_repo(&repo_key);
    Ok(HttpResponse::Ok().json(event))
}

/// `POST /sessions/{sessionKey}/resume`: a session the storm guard paused
/// may start its queued tasks again.
pub async fn resume_session(
    _: Admin,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<ControlBody>,
) -> Result<HttpResponse, ApiError> {
    let req = body.into_inner().into_request()?;
    let session = crate::domain::ResourceKey::parse(&decode_key(&path.into_inner()))
        .map_err(|e| ApiError::bad_request("invalid_session_key", e.to_string()))?;
    let key = session.clone();
    let event = state
        .store
        .write(move |c| crate::store::storm::resume(c, &req, &key))
        .await?;
    state.wake_repo(session.repo());
    Ok(HttpResponse::Ok().json(event))
}

pub async fn disable_repo(
    _: Admin,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<ControlBody>,
) -> Result<HttpResponse, ApiError> {
    set_repo(state, path.into_inner(), body.into_inner(), false).await
}

pub async fn enable_repo(
    _: Admin,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<ControlBody>,
) -> Result<HttpResponse, ApiError> {
    set_repo(state, path.into_inner(), body.into_inner(), true).await
}

/// After a task control: wake its repository (and, for abort, its session).
pub(crate) async fn after_task_control(
    state: &AppState,
    task_id: &TaskId,
    abort: bool,
) -> Result<(), ApiError> {
    let id = task_id.clone();
    let Some(task) = state.store.read(move |c| tasks::find(c, &id)).await? else {
        return Ok(());
    };
    // The session running the turn may be in another process on the same
    // database; the repository may be free for one there.
    if abort {
        state.store.signal(Signal::Abort {
            session_key: task.session_key.clone(),
            repo_key: task.repo_key.clone(),
            task_id: task.task_id.clone(),
        });
    }
    if let (true, Some(registry)) = (abort, &state.registry) {
        registry.do_send(AbortTask {
            session_key: task.session_key.clone(),
            repo_key: task.repo_key.clone(),
            task_id: task.task_id.clone(),
        });
    }
    state.wake_repo(&task.repo_key);
    Ok(())
}

/// A task control (`cancel`, `abort`, `clear-workspace`): one store write that
/// answers with its audit event, then the actors hear of it.
async fn task_control(
    state: web::Data<AppState>,
    path: String,
    body: ControlBody,
    op: fn(
        &mut crate::store::DbConn,
        &control::ControlRequest,
        &TaskId,
    ) -> Result<AuditView, crate::store::StoreError>,
    abort: bool,
) -> Result<HttpResponse, ApiError> {
    let req = body.into_request()?;
    let task_id = super::task_in_path(&path)?;
    let id = task_id.clone();
    let event = state.store.write(move |c| op(c, &req, &id)).await?;
    after_task_control(&state, &task_id, abort).await?;
    Ok(HttpResponse::Ok().json(event))
}

pub async fn cancel(
    _: Admin,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<ControlBody>,
) -> Result<HttpResponse, ApiError> {
    task_control(
        state,
        path.into_inner(),
        body.into_inner(),
        control::cancel_task,
        false,
    )
    .await
}

pub async fn abort(
    _: Admin,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<ControlBody>,
) -> Result<HttpResponse, ApiError> {
    task_control(
        state,
        path.into_inner(),
        body.into_inner(),
        control::abort_task,
        true,
    )
    .await
}

/// `POST /outbox/{queueId}/drop`: a held entry is given up; its task ends
/// `cancelled` and its repository, if the task held it, goes on.
pub async fn drop_entry(
    _: Admin,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<ControlBody>,
) -> Result<HttpResponse, ApiError> {
    entry_control(
        state,
        path.into_inner(),
        body.into_inner(),
        control::drop_entry,
    )
    .await
}

/// `POST /outbox/{queueId}/send-now`: "stop and send now" of a held entry;
/// its session takes it through the handoff's phases (the entry's
/// `handoffPhase` shows where it stands).
pub async fn send_now(
    _: Admin,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<ControlBody>,
) -> Result<HttpResponse, ApiError> {
    entry_control(
        state,
        path.into_inner(),
        body.into_inner(),
        crate::store::handoff::request,
    )
    .await
}

/// An outbox entry's control: one store write that answers with its audit
/// event, then its session and repository hear of it.
async fn entry_control(
    state: web::Data<AppState>,
    queue_id: String,
    body: ControlBody,
    op: fn(
        &mut crate::store::DbConn,
        &control::ControlRequest,
        &str,
    ) -> Result<AuditView, crate::store::StoreError>,
) -> Result<HttpResponse, ApiError> {
    let req = body.into_request()?;
    let well_formed = queue_id
        .strip_prefix("q-")
        .is_some_and(|hex| hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()));
    if !well_formed {
        return Err(ApiError::NotFound(format!("outbox entry {queue_id}")));
    }
    let q = queue_id.clone();
    let event = state.store.write(move |c| op(c, &req, &q)).await?;
    let found = state
        .store
        .read(move |c| crate::store::sessions::entry_by_queue_id(c, &queue_id))
        .await?;
    if let Some(entry) = found {
        if let Some(registry) = &state.registry {
            registry.do_send(RunCommands {
                session_key: entry.session_key.clone(),
                repo_key: entry.session_key.repo().clone(),
            });
        }
        after_task_control(&state, &entry.task_id, false).await?;
    }
    Ok(HttpResponse::Ok().json(event))
}

/// `POST /tasks/{id}/clear-workspace`: the operator has looked at the dirty
/// workspace of a `blocked_workspace` task; it goes back to `queued`.
pub async fn clear_workspace(
    _: Admin,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<ControlBody>,
) -> Result<HttpResponse, ApiError> {
    task_control(
        state,
        path.into_inner(),
        body.into_inner(),
        control::clear_workspace,
        false,
    )
    .await
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReconcileBody {
    #[serde(flatten)]
    control: ControlBody,
    attempt_id: Option<String>,
    verdict: Option<String>,
    #[serde(default)]
    confirm_no_active_turn: bool,
}

pub async fn reconcile(
    _: Admin,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<ReconcileBody>,
) -> Result<HttpResponse, ApiError> {
    let body = body.into_inner();
    if !body.confirm_no_active_turn {
        return Err(ApiError::bad_request(
            "confirmation_required",
            "set confirmNoActiveTurn: true after checking that no Codex turn of this attempt is still running; reconciliation never re-runs anything",
        ));
    }
    let verdict = match body.verdict.as_deref() {
        Some("failed") => Verdict::Failed,
        Some("succeeded") => Verdict::Succeeded,
        _ => {
            return Err(ApiError::bad_request(
                "invalid_verdict",
                "verdict must be failed or succeeded",
            ))
        }
    };
    let attempt = body.attempt_id.filter(|a| !a.is_empty()).ok_or_else(|| {
        ApiError::bad_request(
            "invalid_attempt",
            "attemptId is required (see the task's attempts)",
        )
    })?;
    let req = body.control.into_request()?;
    let task_id = super::task_in_path(&path.into_inner())?;
    let id = task_id.clone();
    let event = state
        .store
        .write(move |c| control::reconcile_task(c, &req, &id, &attempt, verdict))
        .await?;
    after_task_control(&state, &task_id, false).await?;
    Ok(HttpResponse::Ok().json(event))
}
