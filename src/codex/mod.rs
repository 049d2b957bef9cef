//! The Codex app-server client: one long-lived `codex app-server` process,
//! JSON-RPC over its stdio ([`rpc`]), and the [`AgentRuntime`] the session
//! actors drive ([`runtime::CodexRuntime`]). It speaks the protocol and returns
//! typed events; it knows nothing of the store or the actors.
//!
//! [`AgentRuntime`]: crate::runtime::AgentRuntime

mod route;
pub mod rpc;
pub mod runtime;
mod thread;
