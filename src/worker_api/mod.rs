//! The worker protocol: the messages a remote worker (`codex-bridge worker`)
//! and the server exchange over `/api/worker/v1/*`, as serde types and
//! nothing else, so that both ends build them from one definition.
//!
//! The server keeps every decision a turn needs (admission, the ledger,
//! history lookup, reply verification); the worker is the agent runtime
//! behind them. So the protocol is the agent runtime's calls made remote:
//! the worker leases a repository, long-polls for [`Call`]s on it, runs each
//! on its own Codex and answers with an [`Answer`]; a turn's events travel as
//! [`EventBatch`]es. Every message names the lease it was made under: a call
//! or an answer under a lease that has ended (expired, released, its worker
//! revoked) is refused, so a worker cut off past its lease can never write
//! into the turn of its successor.
//!
//! Versioned by path (`/api/worker/v1`) and by [`PROTOCOL_VERSION`], which a
//! worker sends when it leases: a server that speaks another version
//! refuses the lease with `protocol_unsupported` before any work is handed
//! out, rather than misreading a message later.

mod wire;

pub use wire::*;

/// The version of these messages. A change that an older peer would misread
/// gets a new number (and a new path); adding an optional field does not.
pub const PROTOCOL_VERSION: u32 = 1;

/// Where the worker API lives on the server.
pub const API_PREFIX: &str = "/api/worker/v1";

/// The longest a poll for calls is held open, in milliseconds: short enough
/// that proxies in front of the server keep the request open.
pub const MAX_POLL_WAIT_MS: u64 = 25_000;

/// The largest body `POST /leases/{leaseId}/events` takes (other routes
/// take the server's usual 64 KiB). A worker posts one event per batch and
/// cuts a transcript item to [`MAX_ITEM_BYTES`] first, so what it sends
/// fits: a batch the server refused would leave a gap in the turn's events
/// that no later batch could fill.
pub const MAX_EVENTS_BODY: usize = 2 * 1024 * 1024;

/// The most JSON a transcript item's body may take on the wire; a larger
/// one (a file change whose diffs are mostly escapes) crosses as its kind
/// only.
pub const MAX_ITEM_BYTES: usize = 1024 * 1024;
