//! JSON-RPC envelopes, as the app-server speaks it: JSON lines without a
//! `"jsonrpc"` field.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The id of a request (`RequestId`): the server counts its own from 0.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RequestId {
    Integer(i64),
    String(String),
}

/// A request of ours (`JSONRPCRequest`).
#[derive(Debug, Serialize)]
pub struct OutgoingRequest<'a, P> {
    pub id: u64,
    pub method: &'a str,
    pub params: &'a P,
}

/// A notification of ours without params (`JSONRPCNotification`).
#[derive(Debug, Serialize)]
pub struct OutgoingNotification<'a> {
    pub method: &'a str,
}

/// Our answer to a request of the server (`JSONRPCResponse`).
#[derive(Debug, Serialize)]
pub struct OutgoingResponse<'a, R> {
    pub id: &'a RequestId,
    pub result: &'a R,
}

/// Our refusal of a request of the server (`JSONRPCError`).
#[derive(Debug, Serialize)]
pub struct OutgoingError<'a> {
    pub id: &'a RequestId,
    pub error: ErrorBody,
}

/// The error of a JSON-RPC answer (`JSONRPCErrorError`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    #[serde(default)]
    pub code: i64,
    #[serde(default)]
    pub message: String,
}

/// JSON-RPC's "method not found": what a request codex-bridge does not
/// handle is answered with.
pub const METHOD_NOT_FOUND: i64 = -32601;

/// Any line from the server, before it is told apart by which fields it has
/// (`JSONRPCMessage`): a request has `id` and `method`, a notification only
/// `method`, an answer `id` and `result` or `error`.
#[derive(Debug, Deserialize)]
pub struct IncomingMessage {
    pub id: Option<RequestId>,
    pub method: Option<String>,
    #[serde(default)]
    pub params: Value,
    pub result: Option<Value>,
    pub error: Option<ErrorBody>,
}
