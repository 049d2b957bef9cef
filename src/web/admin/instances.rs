//! `GET /api/gitea-workflow/instances`: the server processes sharing this
//! database, what each holds and whether it still beats; and
//! `POST /instances/{serverId}/drain`, which asks one to drain (the process
//! reads the request back with its next heartbeat).

use super::ControlBody;
use crate::store::instances::{self, InstanceView};
use crate::web::auth::Admin;
use crate::web::error::ApiError;
use crate::web::state::AppState;
use actix_web::{web, HttpResponse};
use serde::Serialize;

/// Heartbeats a process may miss before it is no longer counted alive.
const MISSED_BEATS: u32 = 3;

#[derive(Serialize)]
struct Instance {
    #[serde(flatten)]
    view: InstanceView,
    alive: bool,
}

/// How long ago a process must have beaten to count alive. Every process
/// of a deployment is configured alike, so this process's beat stands for
/// the others'.
pub(super) fn alive_window(state: &AppState) -> std::time::Duration {
    std::time::Duration::from_secs(state.config.lease_heartbeat_secs).saturating_mul(MISSED_BEATS)
}

pub async fn list(_: Admin, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let window = alive_window(&state);
    let (rows, since) = state
        .store
        .read(move |c| Ok((instances::list(c)?, instances::alive_since(c, window)?)))
        .await?;
    let instances: Vec<Instance> = rows
        .into_iter()
        .map(|view| Instance {
            alive: view.alive_since(&since),
            view,
        })
        .collect();
    Ok(HttpResponse::Ok().json(serde_json::json!({ "instances": instances })))
}

/// Answers with the audit event, like every control; an unknown `serverId`
/// is a 404 and records nothing.
pub async fn drain(
    _: Admin,
    state: web::Data<AppState>,
    path: web::Path<String>,
    body: web::Json<ControlBody>,
) -> Result<HttpResponse, ApiError> {
    let req = body.into_inner().into_request()?;
    let server_id = super::actors::decode_key(&path.into_inner());
    let event = state
        .store
        .write(move |c| instances::drain(c, &req, &server_id))
        .await?;
    Ok(HttpResponse::Ok().json(event))
}
