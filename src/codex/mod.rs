//! The Codex app-server client: one long-lived `codex app-server` process,
//! JSON-RPC over its stdio ([`rpc`]), and the [`Agent`] the session
//! actors drive ([`runtime::CodexAgent`]). It speaks the protocol and returns
//! typed events; it knows nothing of the store or the actors.
//!
//! [`Agent`]: crate::agent::Agent

mod route;
pub mod rpc;
pub mod runtime;
mod thread;
