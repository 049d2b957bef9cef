//! The Codex app-server client: one long-lived `codex app-server` process
//! (`process`), JSON-RPC over its stdio ([`rpc`]) in the protocol's own
//! types ([`protocol`]), what the server sends routed to the turns (`route`)
//! with their items and token usage read for the transcript (`transcript`),
//! and the [`Agent`] the session actors drive ([`CodexAgent`]), kept started
//! by its keeper (`keeper`, [`CodexAgent::keep_available`]), which publishes
//! whether Codex can run turns as an [`Availability`]; it is signed in and
//! out through that same process (`account`, [`AccountControl`]). It speaks the
//! protocol and returns typed events; it knows nothing of the store or the
//! actors: what the audit log should hold about it leaves as
//! [`CodexNotice`]s for the app to record.
//!
//! [`Agent`]: crate::agent::Agent
//! [`Availability`]: crate::agent::Availability
//! [`AccountControl`]: crate::agent::account::AccountControl

mod account;
mod agent;
mod home_id;
mod keeper;
mod leftover;
mod notice;
pub mod probe;
mod process;
pub mod protocol;
mod route;
pub mod rpc;
mod settings;
mod thread;
mod transcript;

pub use agent::CodexAgent;
pub use notice::{notice_channel, CodexNotice, NoticeSender, NOTICE_BACKLOG};
pub use settings::{developer_instructions, CodexSettings, GiteaMcp};
