//! Limits that both the store enforces and the bridge's comments name.

/// Most entries a session's outbox holds for unfinished tasks; a comment
/// past it is refused with one receipt that names the limit.
pub const OUTBOX_CAPACITY: i64 = 256;
