//! Remote workers: the machines that run `codex-bridge worker` and lease
//! tasks over the worker API. An operator registers one (a name and the
//! repositories it may work on) and gets its token, once; the worker presents
//! that token with every request; revoking the worker refuses the token from
//! then on.
//!
//! The token never reaches a row: only its SHA-256 is stored, and the audit
//! log names the worker, never the token nor its hash. The token is 32 random
//! bytes, so a plain hash is enough: nobody can guess it, and the stored hash
//! does not lead back to it.

use super::audit::{self, Audit, AuditView};
use super::control::{self, ControlRequest};
use super::schema::workers;
use super::{sha256_hex, shared_now, DbConn, StoreError};
use crate::domain::worker::excerpt;
#[cfg(test)]
use crate::domain::worker::REPOSITORIES_MAX;
pub use crate::domain::worker::{Invalid, RepoName, WorkerId};
use crate::with_conn;
use diesel::prelude::*;
use secrecy::{ExposeSecret, SecretString};
use serde::Serialize;
use std::fmt;

/// How a worker's token begins: it tells an operator (and a secret scanner)
/// what a leaked string is.
const TOKEN_PREFIX: &str = "cbw_";
/// The longest worker name, in characters.
const NAME_MAX: usize = 100;
/// The longest version a heartbeat may report, in bytes.
const VERSION_MAX: usize = 100;
impl From<Invalid> for StoreError {
    fn from(e: Invalid) -> Self {
        StoreError::Refused {
            code: e.code,
            message: e.message,
        }
    }
}

/// What an operator calls a worker: any text of 1 to 100 characters without
/// control characters, trimmed. Names need not be unique; the id is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct WorkerName(String);

impl WorkerName {
    pub fn parse(text: &str) -> Result<WorkerName, Invalid> {
        let name = text.trim();
        let count = name.chars().count();
        if count == 0 || count > NAME_MAX || name.chars().any(char::is_control) {
            return Err(Invalid {
                code: "invalid_worker_name",
                message: format!(
                    "name must be 1 to {NAME_MAX} characters without control characters (got {})",
                    excerpt(text)
                ),
            });
        }
        Ok(WorkerName(name.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What a worker says it runs (its build's version): 1 to 100 bytes of
/// printable ASCII, trimmed. Shown to operators, never interpreted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct WorkerVersion(String);

impl WorkerVersion {
    pub fn parse(text: &str) -> Result<WorkerVersion, Invalid> {
        let version = text.trim();
        if version.is_empty()
            || version.len() > VERSION_MAX
            || !version.bytes().all(|b| b.is_ascii_graphic() || b == b' ')
        {
            return Err(Invalid {
                code: "invalid_version",
                message: format!(
                    "version must be 1 to {VERSION_MAX} printable ASCII characters (got {})",
                    excerpt(text)
                ),
            });
        }
        Ok(WorkerVersion(version.to_owned()))
    }
}

/// A worker's bearer token: `cbw_` and the 64 hex digits of 32 random bytes.
/// Shown once when the worker is created; the store keeps only its hash.
/// `Debug` shows no part of it.
#[derive(Clone)]
pub struct WorkerToken(SecretString);

impl WorkerToken {
    /// 32 bytes from the operating system's random source, hex-encoded.
    fn mint() -> Result<WorkerToken, StoreError> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|e| {
            StoreError::Query(format!(
                "the operating system gave no random bytes for a worker token ({e}); nothing \
                 was registered, try again"
            ))
        })?;
        Ok(WorkerToken(SecretString::from(format!(
            "{TOKEN_PREFIX}{}",
            hex::encode(bytes)
        ))))
    }

    /// What a request presented, if it has a token's shape (`None`: it cannot
    /// be any worker's token, and the store need not be asked).
    pub fn from_presented(text: &str) -> Option<WorkerToken> {
        let hex = text.strip_prefix(TOKEN_PREFIX)?;
        let ok = hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        ok.then(|| WorkerToken(SecretString::from(text)))
    }

    /// The token itself: only for the one answer that shows it.
    pub fn expose(&self) -> &str {
        self.0.expose_secret()
    }

    /// What the store keeps and looks the token up by.
    pub(super) fn hash(&self) -> String {
        sha256_hex(self.0.expose_secret().as_bytes())
    }
}

impl fmt::Debug for WorkerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WorkerToken([redacted])")
    }
}

/// A worker as its row holds it (all but the token's hash).
#[derive(Queryable, Selectable, Debug, Clone)]
#[diesel(table_name = workers)]
struct Row {
    worker_id: String,
    name: String,
    repositories: String,
    created_at: String,
    revoked_at: Option<String>,
    last_seen_at: Option<String>,
    version: Option<String>,
    uncertain_turns: Option<i64>,
}

impl Row {
    fn repositories(&self) -> Result<Vec<RepoName>, StoreError> {
        let texts: Vec<String> = serde_json::from_str(&self.repositories).map_err(|e| {
            StoreError::Query(format!(
                "worker {}: its repositories are not a JSON array of strings ({e}); revoke it \
                 and register it again",
                self.worker_id
            ))
        })?;
        // Written by `create`, which checked them: taken as they are.
        Ok(texts.into_iter().map(RepoName::stored).collect())
    }

    fn view(self) -> Result<WorkerView, StoreError> {
        Ok(WorkerView {
            repositories: self.repositories()?,
            worker_id: WorkerId::stored(self.worker_id),
            name: WorkerName(self.name),
            created_at: self.created_at,
            revoked_at: self.revoked_at,
            last_seen_at: self.last_seen_at,
            version: self.version,
            uncertain_turns: self.uncertain_turns,
        })
    }
}

/// A worker as the admin API shows it. Never its token, nor the token's hash.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct WorkerView {
    pub worker_id: WorkerId,
    pub name: WorkerName,
    pub repositories: Vec<RepoName>,
    pub created_at: String,
    /// Set once the worker was revoked: its token is refused from then on.
    pub revoked_at: Option<String>,
    /// When it last sent a heartbeat (`None`: never).
    pub last_seen_at: Option<String>,
    /// The version its last heartbeat reported.
    pub version: Option<String>,
    /// How many turns its last heartbeat said its journal holds as
    /// uncertain (sent to Codex, no end recorded): the worker's own count,
    /// beside the uncertain tasks the server knows of. `None`: never said.
    pub uncertain_turns: Option<i64>,
}

/// A worker that presented a valid token, not revoked: who is asking, and
/// what it may work on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Worker {
    pub worker_id: WorkerId,
    pub name: WorkerName,
    pub repositories: Vec<RepoName>,
}

/// A worker just registered, with its token: the one time the token is seen.
#[derive(Debug, Clone)]
pub struct Created {
    pub worker: WorkerView,
    pub token: WorkerToken,
    /// The `worker.created` audit event.
    pub event: AuditView,
}

/// Registers a worker and mints its token. Idempotent on the `requestId`
/// as every control is, except that the answer cannot be repeated: the token
/// is not kept, so it cannot be shown twice. A repeated `requestId` mints
/// nothing and is refused with `request_replayed`, naming the worker the
/// first request created (revoke it and register another if its token was
/// lost); the same `requestId` with another name or other repositories is a
/// `request_id_conflict`.
pub fn create(
    conn: &mut DbConn,
    req: &ControlRequest,
    name: &WorkerName,
    repositories: &[RepoName],
) -> Result<Created, StoreError> {
    const ACTION: &str = "worker.created";
    let target = serde_json::json!({ "name": name, "repositories": repositories }).to_string();
    let mut minted = None;
    let event = control::idempotent(conn, req, ACTION, &target, |conn| {
        let worker_id = WorkerId::mint();
        let token = WorkerToken::mint()?;
        let at = shared_now(conn)?;
        let repos_text = serde_json::to_string(repositories)
            .map_err(|e| StoreError::Query(format!("cannot write the repositories: {e}")))?;
        with_conn!(conn, |c| diesel::insert_into(workers::table)
            .values((
                workers::worker_id.eq(worker_id.as_str()),
                workers::name.eq(name.as_str()),
                workers::token_hash.eq(token.hash()),
                workers::repositories.eq(&repos_text),
                workers::created_at.eq(&at),
            ))
            .execute(c))?;
        let event = audit::record(
            conn,
            &Audit::new(ACTION, &req.actor).meta(serde_json::json!({
                "requestId": req.request_id,
                "reason": req.reason,
                "workerId": worker_id,
                "name": name,
                "repositories": repositories,
            })),
        )?;
        minted = Some((
            WorkerView {
                worker_id,
                name: name.clone(),
                repositories: repositories.to_vec(),
                created_at: at,
                revoked_at: None,
                last_seen_at: None,
                version: None,
                uncertain_turns: None,
            },
            token,
        ));
        Ok(event)
    })?;
    match minted {
        Some((worker, token)) => Ok(Created {
            worker,
            token,
            event,
        }),
        None => {
            let first = event
                .metadata
                .get("workerId")
                .and_then(|v| v.as_str())
                .unwrap_or("(unknown)");
            Err(StoreError::Refused {
                code: "request_replayed",
                message: format!(
                    "requestId {} already created worker {first}; its token was shown once and \
                     cannot be shown again: use that token, or revoke the worker and create \
                     another with a new requestId",
                    req.request_id
                ),
            })
        }
    }
}

/// Every worker ever registered, revoked ones included, oldest first.
pub fn list(conn: &mut DbConn) -> Result<Vec<WorkerView>, StoreError> {
    let rows: Vec<Row> = with_conn!(conn, |c| workers::table
        .select(Row::as_select())
        .order((workers::created_at.asc(), workers::worker_id.asc()))
        .load(c))?;
    rows.into_iter().map(Row::view).collect()
}

/// One worker, revoked or not.
pub fn find(conn: &mut DbConn, worker_id: &WorkerId) -> Result<Option<WorkerView>, StoreError> {
    let row: Option<Row> = with_conn!(conn, |c| workers::table
        .find(worker_id.as_str())
        .select(Row::as_select())
        .first(c)
        .optional())?;
    row.map(Row::view).transpose()
}

/// Revokes a worker: its token is refused from then on. Idempotent on the
/// `requestId`; revoking a worker already revoked (under another
/// `requestId`) keeps the first revocation's time and is audited again with
/// `wasRevoked`. An unknown worker is `NotFound` and records nothing.
pub fn revoke(
    conn: &mut DbConn,
    req: &ControlRequest,
    worker_id: &WorkerId,
) -> Result<AuditView, StoreError> {
    const ACTION: &str = "worker.revoked";
    control::idempotent(conn, req, ACTION, worker_id.as_str(), |conn| {
        let before = find(conn, worker_id)?
            .ok_or_else(|| StoreError::NotFound(format!("worker {worker_id}")))?;
        let revoked_at = match &before.revoked_at {
            Some(at) => at.clone(),
            None => {
                let at = shared_now(conn)?;
                with_conn!(conn, |c| diesel::update(
                    workers::table
                        .find(worker_id.as_str())
                        .filter(workers::revoked_at.is_null())
                )
                .set(workers::revoked_at.eq(&at))
                .execute(c))?;
                // Its leases end with it: calls under them fail closed.
                super::worker_leases::end_all_of(conn, worker_id, &at)?;
                at
            }
        };
        audit::record(
            conn,
            &Audit::new(ACTION, &req.actor).meta(serde_json::json!({
                "requestId": req.request_id,
                "reason": req.reason,
                "workerId": worker_id,
                "name": before.name,
                "wasRevoked": before.revoked_at.is_some(),
                "revokedAt": revoked_at,
            })),
        )
    })
}

/// The worker a token belongs to, unless it was revoked. Looked up by the
/// token's hash, the only form the store knows it in.
pub fn authenticate(conn: &mut DbConn, token: &WorkerToken) -> Result<Option<Worker>, StoreError> {
    let hash = token.hash();
    let row: Option<Row> = with_conn!(conn, |c| workers::table
        .filter(workers::token_hash.eq(&hash))
        .filter(workers::revoked_at.is_null())
        .select(Row::as_select())
        .first(c)
        .optional())?;
    let Some(row) = row else {
        return Ok(None);
    };
    Ok(Some(Worker {
        repositories: row.repositories()?,
        worker_id: WorkerId::stored(row.worker_id),
        name: WorkerName(row.name),
    }))
}

/// Records a heartbeat: the worker was seen now, running `version`, its
/// journal holding `uncertain_turns` uncertain turns (`None`: it did not
/// say). The time is the clock leases are judged by (the database's on
/// PostgreSQL), so that later judgements of whether a worker still runs
/// compare like with like. `false`: no such worker, or it was revoked
/// meanwhile (its request is then refused like any revoked worker's).
pub fn seen(
    conn: &mut DbConn,
    worker_id: &WorkerId,
    version: &WorkerVersion,
    uncertain_turns: Option<u32>,
) -> Result<bool, StoreError> {
    let at = shared_now(conn)?;
    let n = with_conn!(conn, |c| diesel::update(
        workers::table
            .find(worker_id.as_str())
            .filter(workers::revoked_at.is_null())
    )
    .set((
        workers::last_seen_at.eq(&at),
        workers::version.eq(version.0.as_str()),
        workers::uncertain_turns.eq(uncertain_turns.map(i64::from)),
    ))
    .execute(c))?;
    Ok(n == 1)
}

pub mod reconcile;
pub mod status;

#[cfg(test)]
mod tests;
