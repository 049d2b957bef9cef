//! The checks, one module per area.

pub mod codex;
pub mod config;
pub mod gitea;
pub mod mcp;
pub mod store;
pub mod workspace;
