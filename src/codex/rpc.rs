//! JSON-RPC over the app-server's stdio: JSON lines without a `"jsonrpc"`
//! field, as the app-server speaks it. Requests carry ids and deadlines; responses are matched
//! by id; notifications and the server's own requests go to the owner of the
//! connection. A line that is not JSON, or a message of no known shape, is
//! logged and skipped: it never takes the connection down.

use super::protocol::{
    ErrorBody, IncomingMessage, OutgoingError, OutgoingNotification, OutgoingRequest,
    OutgoingResponse, Request, RequestId,
};
use serde::Serialize;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};

/// Why a request got no result.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum RpcError {
    /// The request could not be written: nothing reached the app-server.
    #[error("the app-server connection is closed; the request was not sent")]
    NotSent,
    /// Sent, but the connection closed before the answer: it may have run.
    #[error("the app-server closed the connection before answering {method}")]
    ClosedAfterSend { method: String },
    /// Sent, but no answer before the deadline: it may have run.
    #[error("no answer to {method} within {secs} s")]
    Timeout { method: String, secs: u64 },
    /// The app-server answered with an error.
    #[error("{method} failed: {message} (code {code})")]
    Server {
        method: String,
        code: i64,
        message: String,
    },
    /// The app-server answered, but not in the shape codex-bridge reads: the
    /// request ran, and what it did is not known.
    #[error("the answer to {method} is not what codex-bridge reads: {error}")]
    Unreadable { method: String, error: String },
}

impl RpcError {
    /// Whether the request may have been acted on (an ambiguous failure).
    pub fn is_ambiguous(&self) -> bool {
        matches!(
            self,
            RpcError::ClosedAfterSend { .. }
                | RpcError::Timeout { .. }
                | RpcError::Unreadable { .. }
        )
    }
}

/// Something the app-server sent that is not an answer to us.
#[derive(Debug, Clone)]
pub enum Incoming {
    Notification {
        method: String,
        params: Value,
    },
    /// A request from the server (approvals, elicitations): must be answered.
    Request {
        id: RequestId,
        method: String,
        params: Value,
    },
    /// The connection ended (the process exited or closed stdout).
    Closed,
}

type Pending = Arc<Mutex<HashMap<u64, (String, oneshot::Sender<Result<Value, RpcError>>)>>>;

/// One live connection to an app-server process.
pub struct RpcConnection {
    next_id: AtomicU64,
    out: mpsc::UnboundedSender<String>,
    pending: Pending,
    open: Arc<AtomicBool>,
    /// Becomes `true` when the connection ends, for [`RpcConnection::closed`].
    closed: tokio::sync::watch::Receiver<bool>,
}

impl RpcConnection {
    /// Wires a connection over a child's stdin/stdout; what is not an answer
    /// goes to the returned receiver.
    pub fn start<W, R>(
        stdin: W,
        stdout: R,
    ) -> (Arc<RpcConnection>, mpsc::UnboundedReceiver<Incoming>)
    where
        W: tokio::io::AsyncWrite + Unpin + Send + 'static,
        R: tokio::io::AsyncRead + Unpin + Send + 'static,
    {
        let (out_tx, mut out_rx) = mpsc::unbounded_channel::<String>();
        let (in_tx, in_rx) = mpsc::unbounded_channel::<Incoming>();
        let pending: Pending = Arc::new(Mutex::new(HashMap::new()));
        let open = Arc::new(AtomicBool::new(true));
        let (closed_tx, closed) = tokio::sync::watch::channel(false);
        let closed_tx = Arc::new(closed_tx);

        let (writer_open, writer_closed) = (open.clone(), closed_tx.clone());
        tokio::spawn(async move {
            let mut stdin = stdin;
            while let Some(line) = out_rx.recv().await {
                let written = async {
                    stdin.write_all(line.as_bytes()).await?;
                    stdin.write_all(b"\n").await?;
                    stdin.flush().await
                }
                .await;
                if let Err(e) = written {
                    tracing::warn!(error = %e, "writing to the app-server failed");
                    writer_open.store(false, Ordering::SeqCst);
                    writer_closed.send_replace(true);
                    break;
                }
            }
        });

        let (reader_pending, reader_open) = (pending.clone(), open.clone());
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                dispatch(&line, &reader_pending, &in_tx);
            }
            reader_open.store(false, Ordering::SeqCst);
            closed_tx.send_replace(true);
            // Everyone still waiting learns the connection is gone.
            let waiting: Vec<_> = reader_pending
                .lock()
                .map(|mut p| p.drain().collect())
                .unwrap_or_default();
            for (_, (method, tx)) in waiting {
                let _ = tx.send(Err(RpcError::ClosedAfterSend { method }));
            }
            let _ = in_tx.send(Incoming::Closed);
        });

        (
            Arc::new(RpcConnection {
                next_id: AtomicU64::new(1),
                out: out_tx,
                pending,
                open,
                closed,
            }),
            in_rx,
        )
    }

    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::SeqCst)
    }

    /// Resolves once the connection has ended (the process exited, closed
    /// its stdout, or stopped taking input).
    pub async fn closed(&self) {
        let mut closed = self.closed.clone();
        // An error means both ends' tasks are gone: closed as well.
        let _ = closed.wait_for(|c| *c).await;
    }

    /// Sends a typed request and reads its answer.
    pub async fn call<R: Request>(
        &self,
        params: &R,
        deadline: Duration,
    ) -> Result<R::Response, RpcError> {
        let answer = self.request(R::METHOD, params, deadline).await?;
        serde_json::from_value(answer).map_err(|e| RpcError::Unreadable {
            method: R::METHOD.to_owned(),
            error: e.to_string(),
        })
    }

    /// Sends a request and waits for its answer until `deadline`.
    pub async fn request<P: Serialize>(
        &self,
        method: &str,
        params: &P,
        deadline: Duration,
    ) -> Result<Value, RpcError> {
        if !self.is_open() {
            return Err(RpcError::NotSent);
        }
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = oneshot::channel();
        if let Ok(mut p) = self.pending.lock() {
            p.insert(id, (method.to_owned(), tx));
        }
        let line = serde_json::to_string(&OutgoingRequest { id, method, params });
        if line.map(|l| self.out.send(l).is_err()).unwrap_or(true) {
            if let Ok(mut p) = self.pending.lock() {
                p.remove(&id);
            }
            return Err(RpcError::NotSent);
        }
        match tokio::time::timeout(deadline, rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(RpcError::ClosedAfterSend {
                method: method.to_owned(),
            }),
            Err(_) => {
                if let Ok(mut p) = self.pending.lock() {
                    p.remove(&id);
                }
                Err(RpcError::Timeout {
                    method: method.to_owned(),
                    secs: deadline.as_secs(),
                })
            }
        }
    }

    /// Sends a notification without params (no answer expected).
    pub fn notify(&self, method: &str) -> Result<(), RpcError> {
        self.send(&OutgoingNotification { method })
    }

    /// Answers a request from the server.
    pub fn respond<R: Serialize>(&self, id: &RequestId, result: &R) -> Result<(), RpcError> {
        self.send(&OutgoingResponse { id, result })
    }

    /// Refuses a request from the server.
    pub fn respond_error(&self, id: &RequestId, error: ErrorBody) -> Result<(), RpcError> {
        self.send(&OutgoingError { id, error })
    }

    fn send<M: Serialize>(&self, message: &M) -> Result<(), RpcError> {
        let line = serde_json::to_string(message).map_err(|_| RpcError::NotSent)?;
        self.out.send(line).map_err(|_| RpcError::NotSent)
    }
}

/// One line from the app-server, read: what it is, before anyone acts on it.
#[derive(Debug, Clone, PartialEq)]
pub enum Decoded {
    /// A request from the server: must be answered.
    Request {
        id: RequestId,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
        params: Value,
    },
    /// An answer to the request with our id `id`.
    Answer {
        id: u64,
        outcome: Result<Value, (i64, String)>,
    },
    /// An answer with an id we never use (a string, a negative number).
    ForeignAnswer,
    /// Not a JSON-RPC message: not JSON, or JSON of another shape.
    NotJsonRpc,
    /// JSON with neither a method nor an id.
    Shapeless,
}

/// Reads one line; never fails, never panics: whatever the line holds is
/// one of [`Decoded`]'s cases.
pub fn decode(line: &str) -> Decoded {
    let Ok(msg) = serde_json::from_str::<IncomingMessage>(line) else {
        return Decoded::NotJsonRpc;
    };
    match (msg.method, msg.id) {
        (Some(method), Some(id)) => Decoded::Request {
            id,
            method,
            params: msg.params,
        },
        (Some(method), None) => Decoded::Notification {
            method,
            params: msg.params,
        },
        (None, Some(RequestId::Integer(n))) => match u64::try_from(n) {
            Ok(id) => Decoded::Answer {
                id,
                outcome: match (msg.result, msg.error) {
                    (_, Some(err)) => Err((err.code, err.message)),
                    (Some(result), None) => Ok(result),
                    (None, None) => Ok(Value::Null),
                },
            },
            Err(_) => Decoded::ForeignAnswer,
        },
        (None, Some(RequestId::String(_))) => Decoded::ForeignAnswer,
        (None, None) => Decoded::Shapeless,
    }
}

fn dispatch(line: &str, pending: &Pending, incoming: &mpsc::UnboundedSender<Incoming>) {
    match decode(line) {
        Decoded::Request { id, method, params } => {
            let _ = incoming.send(Incoming::Request { id, method, params });
        }
        Decoded::Notification { method, params } => {
            let _ = incoming.send(Incoming::Notification { method, params });
        }
        Decoded::Answer { id, outcome } => {
            let Some((method, tx)) = pending.lock().ok().and_then(|mut p| p.remove(&id)) else {
                tracing::warn!(
                    id,
                    "app-server answered a request nobody waits for (late or unknown); skipped"
                );
                return;
            };
            let result = outcome.map_err(|(code, message)| RpcError::Server {
                method,
                code,
                message,
            });
            let _ = tx.send(result);
        }
        Decoded::ForeignAnswer => {
            tracing::warn!("app-server answered with an id we never used; skipped");
        }
        Decoded::NotJsonRpc => tracing::warn!(
            bytes = line.len(),
            "app-server sent a line that is not a JSON-RPC message; skipped"
        ),
        Decoded::Shapeless => {
            tracing::warn!("app-server sent a message of no known shape; skipped")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_line_decodes_to_one_case() {
        assert_eq!(
            decode(r#"{"id":3,"result":{"ok":true}}"#),
            Decoded::Answer {
                id: 3,
                outcome: Ok(json!({"ok": true}))
            }
        );
        assert_eq!(
            decode(r#"{"id":4,"error":{"code":-32600,"message":"no"}}"#),
            Decoded::Answer {
                id: 4,
                outcome: Err((-32600, "no".to_owned()))
            }
        );
        assert_eq!(decode(r#"{"id":-1,"result":1}"#), Decoded::ForeignAnswer);
        assert_eq!(decode(r#"{"id":"x","result":1}"#), Decoded::ForeignAnswer);
        assert!(matches!(
            decode(r#"{"id":"a","method":"item/commandExecution/requestApproval","params":{}}"#),
            Decoded::Request { .. }
        ));
        assert!(matches!(
            decode(r#"{"method":"turn/started"}"#),
            Decoded::Notification {
                params: Value::Null,
                ..
            }
        ));
        assert_eq!(decode(r#"{"x":1}"#), Decoded::Shapeless);
        for junk in ["", "not json", "[1,2]", "null", r#"{"id":1.5}"#, "{\"id\":"] {
            assert_eq!(decode(junk), Decoded::NotJsonRpc, "{junk:?}");
        }
    }
    use tokio::io::{duplex, AsyncBufReadExt, AsyncWriteExt, BufReader};

    #[tokio::test]
    async fn requests_match_answers_and_other_messages_are_passed_on() {
        let (client_side, server_side) = duplex(1 << 16);
        let (server_read, mut server_write) = tokio::io::split(server_side);
        let (read, write) = tokio::io::split(client_side);
        let (conn, mut incoming) = RpcConnection::start(write, read);
        let server = tokio::spawn(async move {
            let mut lines = BufReader::new(server_read).lines();
            // Noise first: garbage, an unknown answer, a notification, a server request.
            server_write
                .write_all(b"not json\n{\"id\": 999, \"result\": {}}\n")
                .await
                .unwrap();
            server_write
                .write_all(b"{\"method\":\"turn/started\",\"params\":{\"x\":1}}\n{\"id\":0,\"method\":\"item/commandExecution/requestApproval\",\"params\":{}}\n")
                .await
                .unwrap();
            let line = lines.next_line().await.unwrap().unwrap();
            let req: Value = serde_json::from_str(&line).unwrap();
            assert_eq!(req["method"], "thread/start");
            let answer = json!({ "id": req["id"], "result": { "thread": { "id": "t1" } } });
            server_write
                .write_all(format!("{answer}\n").as_bytes())
                .await
                .unwrap();
            let line = lines.next_line().await.unwrap().unwrap();
            let req: Value = serde_json::from_str(&line).unwrap();
            let answer = json!({ "id": req["id"], "error": { "code": -32600, "message": "thread not found" } });
            server_write
                .write_all(format!("{answer}\n").as_bytes())
                .await
                .unwrap();
            // The approval answer comes back to us.
            let line = lines.next_line().await.unwrap().unwrap();
            let answer: Value = serde_json::from_str(&line).unwrap();
            assert_eq!(answer["id"], 0);
            assert_eq!(answer["result"]["decision"], "decline");
        });
        let ok = conn
            .request("thread/start", &json!({}), Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(ok["thread"]["id"], "t1");
        let err = conn
            .request("turn/start", &json!({}), Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(matches!(err, RpcError::Server { code: -32600, .. }));
        assert!(!err.is_ambiguous());
        match incoming.recv().await.unwrap() {
            Incoming::Notification { method, .. } => assert_eq!(method, "turn/started"),
            other => panic!("{other:?}"),
        }
        match incoming.recv().await.unwrap() {
            Incoming::Request { id, method, .. } => {
                assert_eq!(method, "item/commandExecution/requestApproval");
                conn.respond(&id, &json!({ "decision": "decline" }))
                    .unwrap();
            }
            other => panic!("{other:?}"),
        }
        server.await.unwrap();
    }

    #[tokio::test]
    async fn a_closed_pipe_fails_waiters_as_ambiguous_and_a_silent_one_times_out() {
        let (client_side, server_side) = duplex(1 << 16);
        let (read, write) = tokio::io::split(client_side);
        let (conn, mut incoming) = RpcConnection::start(write, read);
        let silent = conn
            .request("turn/start", &json!({}), Duration::from_millis(100))
            .await
            .unwrap_err();
        assert!(matches!(silent, RpcError::Timeout { .. }) && silent.is_ambiguous());
        let waiting = {
            let conn = conn.clone();
            tokio::spawn(async move {
                conn.request("turn/start", &json!({}), Duration::from_secs(5))
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(server_side);
        let err = waiting.await.unwrap().unwrap_err();
        assert!(matches!(err, RpcError::ClosedAfterSend { .. }), "{err:?}");
        assert!(matches!(incoming.recv().await, Some(Incoming::Closed)));
        tokio::time::timeout(Duration::from_secs(5), conn.closed())
            .await
            .expect("closed() resolves once the pipe is gone");
        assert_eq!(
            conn.request("x", &json!({}), Duration::from_secs(1))
                .await
                .unwrap_err(),
            RpcError::NotSent
        );
    }
}
