//! The worker's side of the worker API: blocking requests (run on tokio's
//! blocking pool) with the worker's bearer token. The token goes into the
//! Authorization header and nowhere else: not a URL, a log line or an error.

use crate::worker_api::{
    Answer, CallBatch, EventBatch, LateFinalRequest, LeaseGrant, LeaseRequest, ReconcileRequest,
    Refusal, API_PREFIX, PROTOCOL_VERSION,
};
use secrecy::{ExposeSecret, SecretString};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::time::Duration;

/// What a request came to, besides success.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// An operator revoked this worker: stop.
    #[error("an operator revoked this worker on the server; it stops (register a new worker to run it again)")]
    Revoked,
    /// The token is not a worker's the server knows.
    #[error("the server does not know this worker's token; check --token-file")]
    Unauthorized,
    /// The lease ended: lease again.
    #[error("the lease ended on the server")]
    LeaseLost,
    /// Another worker holds the repository.
    #[error("another worker holds the repository")]
    Held,
    /// The server refused the request as it is.
    #[error("the server refused ({code}): {message}")]
    Refused { code: String, message: String },
    /// No answer (network, a 5xx): try again later.
    #[error("the server cannot be reached: {0}")]
    Transport(String),
}

impl ClientError {
    /// Whether the worker must stop altogether.
    pub fn is_fatal(&self) -> bool {
        matches!(self, ClientError::Revoked | ClientError::Unauthorized)
    }
}

/// The server's worker API, as this worker reaches it.
#[derive(Clone)]
pub struct ServerClient {
    base: String,
    token: SecretString,
    agent: ureq::Agent,
}

impl ServerClient {
    pub fn new(server: &str, token: SecretString) -> ServerClient {
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(Duration::from_secs(10))
            // Long enough for the longest poll the server holds open.
            .timeout_read(Duration::from_millis(
                crate::worker_api::MAX_POLL_WAIT_MS + 15_000,
            ))
            .build();
        ServerClient {
            base: format!("{}{API_PREFIX}", server.trim_end_matches('/')),
            token,
            agent,
        }
    }

    fn send<T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: Option<&impl Serialize>,
    ) -> Result<Option<T>, ClientError> {
        let req = self
            .agent
            .request(method, &format!("{}{path}", self.base))
            .set(
                "Authorization",
                &format!("Bearer {}", self.token.expose_secret()),
            );
        let result = match body {
            Some(b) => {
                let json = serde_json::to_value(b).map_err(|e| {
                    ClientError::Transport(format!("cannot write the request: {e}"))
                })?;
                req.send_json(json)
            }
            None => req.call(),
        };
        match result {
            Ok(resp) if resp.status() == 204 => Ok(None),
            Ok(resp) => resp.into_json::<T>().map(Some).map_err(|e| {
                ClientError::Transport(format!("the server's answer to {path} is unreadable: {e}"))
            }),
            Err(ureq::Error::Status(status, resp)) => {
                let refusal: Option<Refusal> = resp.into_json().ok();
                let (code, message) = refusal
                    .map(|r| (r.code, r.message))
                    .unwrap_or_else(|| (String::new(), format!("HTTP {status}")));
                Err(match (status, code.as_str()) {
                    (401, _) => ClientError::Unauthorized,
                    (403, "worker_revoked") => ClientError::Revoked,
                    (409, "lease_lost") => ClientError::LeaseLost,
                    (409, "lease_held") => ClientError::Held,
                    (s, _) if s >= 500 => ClientError::Transport(format!("HTTP {s}: {message}")),
                    _ => ClientError::Refused { code, message },
                })
            }
            Err(e) => Err(ClientError::Transport(e.to_string())),
        }
    }

    /// Tells the server this worker runs `version` and its journal holds
    /// `uncertain_turns` uncertain turns (`None`: it could not count
    /// them); who the token says this worker is, and what it may work on.
    pub fn heartbeat(
        &self,
        version: &str,
        uncertain_turns: Option<u32>,
    ) -> Result<Vec<String>, ClientError> {
        #[derive(serde::Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Beat<'a> {
            version: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            uncertain_turns: Option<u32>,
        }
        #[derive(serde::Deserialize)]
        struct Beaten {
            repositories: Vec<String>,
        }
        let beat: Option<Beaten> = self.send(
            "POST",
            "/heartbeat",
            Some(&Beat {
                version,
                uncertain_turns,
            }),
        )?;
        Ok(beat.map(|b| b.repositories).unwrap_or_default())
    }

    /// Asks for `repository`'s lease, saying which Codex home this worker
    /// runs its threads in.
    pub fn lease(
        &self,
        repository: &str,
        codex_home: Option<&str>,
    ) -> Result<LeaseGrant, ClientError> {
        let body = LeaseRequest {
            protocol: PROTOCOL_VERSION,
            repository: repository.to_owned(),
            codex_home: codex_home.map(str::to_owned),
        };
        self.send("POST", "/leases", Some(&body))?
            .ok_or_else(|| ClientError::Transport("an empty answer to a lease".into()))
    }

    pub fn renew(&self, lease_id: &str) -> Result<LeaseGrant, ClientError> {
        self.send(
            "POST",
            &format!("/leases/{lease_id}/renew"),
            Some(&serde_json::json!({})),
        )?
        .ok_or_else(|| ClientError::Transport("an empty answer to a renewal".into()))
    }

    pub fn poll(&self, lease_id: &str, wait: Duration) -> Result<CallBatch, ClientError> {
        let path = format!("/leases/{lease_id}/calls?waitMs={}", wait.as_millis());
        Ok(self
            .send::<CallBatch>("GET", &path, None::<&()>)?
            .unwrap_or(CallBatch { calls: vec![] }))
    }

    pub fn answer(&self, lease_id: &str, answer: &Answer) -> Result<(), ClientError> {
        self.send::<serde_json::Value>("POST", &format!("/leases/{lease_id}/answers"), Some(answer))
            .map(|_| ())
    }

    pub fn events(&self, lease_id: &str, batch: &EventBatch) -> Result<(), ClientError> {
        self.send::<serde_json::Value>("POST", &format!("/leases/{lease_id}/events"), Some(batch))
            .map(|_| ())
    }

    /// Offers a turn's durable final the server no longer follows; the
    /// audit event of its taking.
    pub fn late_final(&self, req: &LateFinalRequest) -> Result<serde_json::Value, ClientError> {
        self.send("POST", "/finals", Some(req))?
            .ok_or_else(|| ClientError::Transport("an empty answer to a late final".into()))
    }

    /// Settles an uncertain attempt on the server; its audit event.
    pub fn reconcile(&self, req: &ReconcileRequest) -> Result<serde_json::Value, ClientError> {
        self.send("POST", "/reconcile", Some(req))?
            .ok_or_else(|| ClientError::Transport("an empty answer to a reconcile".into()))
    }
}
