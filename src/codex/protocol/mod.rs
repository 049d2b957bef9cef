//! The part of the Codex app-server protocol that codex-bridge speaks, as
//! serde types: what it sends (requests, their params, its answers to the
//! server's requests) and the fields it reads (responses, notifications,
//! server requests). Field names are Codex's (camelCase); each type's doc
//! names the definition it mirrors in the schema that
//! `codex app-server generate-json-schema --experimental` prints, and a test
//! checks them against the pinned codex's schema.
//!
//! Read types hold only what the bridge uses: everything else in a message is
//! skipped, so Codex may add fields freely. A message of a method the bridge
//! does not use is [`ServerNotification::Unused`], and a request of one gets
//! a [`Refusal`]; a message of a known method that does not parse is an
//! [`Unreadable`] error for the caller to log and report, never a panic.

mod account;
mod item;
mod jsonrpc;
mod notification;
mod server_request;
mod turn;

pub use account::*;
pub use item::*;
pub use jsonrpc::*;
pub use notification::*;
pub use server_request::*;
pub use turn::*;

use serde::de::{DeserializeOwned, IgnoredAny};
use serde::Serialize;
use serde_json::Value;

/// A request the bridge sends: its method and the type of its answer.
pub trait Request: Serialize {
    const METHOD: &'static str;
    /// What the bridge reads of the answer ([`IgnoredAny`]: nothing).
    type Response: DeserializeOwned;
}

/// A message of a known method whose params the bridge cannot read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("codex-bridge cannot read the app-server's {method}: {error}")]
pub struct Unreadable {
    pub method: String,
    pub error: String,
}

fn parse<T: DeserializeOwned>(method: &str, params: Value) -> Result<T, Unreadable> {
    serde_json::from_value(params).map_err(|e| Unreadable {
        method: method.to_owned(),
        error: e.to_string(),
    })
}

// Start-up

/// `initialize` (`InitializeParams`).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Initialize {
    pub client_info: ClientInfo,
    pub capabilities: InitializeCapabilities,
}

impl Request for Initialize {
    const METHOD: &'static str = "initialize";
    type Response = IgnoredAny;
}

/// Who the client is (`ClientInfo`).
#[derive(Debug, Clone, Serialize)]
pub struct ClientInfo {
    pub name: String,
    pub title: String,
    pub version: String,
}

/// `InitializeCapabilities`: the bridge opts into the experimental API.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeCapabilities {
    pub experimental_api: bool,
}

/// The notification that ends the handshake (`ClientNotification`).
pub const INITIALIZED: &str = "initialized";

/// `collaborationMode/list` (`CollaborationModeListParams`): a capability
/// probe; its answer is not read.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CollaborationModeList {}

impl Request for CollaborationModeList {
    const METHOD: &'static str = "collaborationMode/list";
    type Response = IgnoredAny;
}
