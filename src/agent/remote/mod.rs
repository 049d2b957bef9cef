//! The remote runtime: the agent runtime's calls handed to remote workers
//! (`codex-bridge worker`) over the worker API. The session actors keep all
//! their logic (admission, the ledger, history lookup, reply verification);
//! a worker that holds a repository's lease is only the runtime behind
//! them, running each call on its own Codex.

mod agent;
pub mod convert;
pub mod hub;
mod reference;

pub use agent::{relative_cwd, RemoteAgent};
pub use hub::{Answered, CallRoute};
pub use reference::{NotRemote, RemoteRef};
