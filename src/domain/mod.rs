//! The words every floor shares: the keys that name repositories, resources,
//! tasks and operations, the states and modes stored in columns, and the
//! requests the webhook hands to the store. Nothing here does I/O or imports a
//! module above it; `store/` maps these types to columns.

pub mod keys;
pub mod limits;
pub(crate) mod sql;

pub use keys::{
    GateId, KeyError, OperationId, RepoKey, ResourceKey, ResourceKind, ResultId, TaskId, WorkflowId,
};
pub mod request;

pub use request::{IngestRequest, Intent, PayloadHash, RepoRef, Subject};
pub mod breaker;
pub mod command;
pub mod fingerprint;
pub mod policy;
pub mod refusals;
pub mod retention;
pub mod states;
pub mod statuses;
pub mod trust;
pub mod worker;
pub mod workflow;
pub mod worktree;
