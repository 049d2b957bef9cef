//! A registered remote worker's id: what attempts it runs name as their owner
//! (`worker:<workerId>`), and what every layer that speaks of a worker carries,
//! from the store to the agent runtime that reports which worker ran a turn.

use serde::Serialize;
use std::fmt;

/// How a worker's id begins.
const ID_PREFIX: &str = "wrk-";

/// `wrk-<32 hex>`: one registered worker.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct WorkerId(String);

impl WorkerId {
    /// A new id, time-ordered (UUID v7) like the bridge's other ids.
    pub fn mint() -> WorkerId {
        WorkerId(format!("{ID_PREFIX}{}", uuid::Uuid::now_v7().simple()))
    }

    /// The id a text names, if it has the shape of one (`None`: it names no
    /// worker).
    pub fn parse(text: &str) -> Option<WorkerId> {
        let hex = text.strip_prefix(ID_PREFIX)?;
        let ok = hex.len() == 32 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        ok.then(|| WorkerId(text.to_owned()))
    }

    /// An id read back from the store's own column, which holds only ids
    /// minted here.
    pub fn stored(text: String) -> WorkerId {
        WorkerId(text)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for WorkerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
