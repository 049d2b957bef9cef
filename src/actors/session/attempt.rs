//! The attempt a drive's turn belongs to, as the runtime is told it: a
//! remote worker keeps it with the turn in its journal, so an operator
//! there can reconcile exactly that attempt.

use super::drive::TaskDrive;
use crate::agent::AttemptRef;

impl TaskDrive {
    /// The task's active attempt (`None` when none is recorded).
    pub(super) fn attempt_ref(&self) -> Option<AttemptRef> {
        (!self.attempt_id.is_empty()).then(|| AttemptRef {
            task_id: self.task.task_id.clone(),
            attempt_id: self.attempt_id.clone(),
        })
    }
}
