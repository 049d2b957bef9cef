//! The bridge's own cost per turn (the turn benchmark's figure, and one for
//! metrics): from the runtime's `turn/completed` reaching the session actor to
//! the turn's result and the task's next state being committed. Kept as the
//! most recent samples, process-wide, lock held only to push or copy.

use std::sync::Mutex;
use std::time::Duration;

/// How many recent samples are kept.
const KEEP: usize = 65_536;

struct Ring {
    samples: Vec<Duration>,
    next: usize,
}

static SETTLE: Mutex<Ring> = Mutex::new(Ring {
    samples: Vec::new(),
    next: 0,
});

/// Records one turn's completion-to-commit time.
pub fn record_turn_settle(took: Duration) {
    crate::metrics::turn_settle(took);
    if let Ok(mut ring) = SETTLE.lock() {
        if ring.samples.len() < KEEP {
            ring.samples.push(took);
        } else {
            let i = ring.next;
            ring.samples[i] = took;
        }
        ring.next = (ring.next + 1) % KEEP;
    }
}

/// The recent completion-to-commit times, oldest first not guaranteed.
pub fn turn_settle_samples() -> Vec<Duration> {
    SETTLE.lock().map(|r| r.samples.clone()).unwrap_or_default()
}

/// Forgets every sample (a benchmark between its phases).
pub fn reset_turn_settle() {
    if let Ok(mut ring) = SETTLE.lock() {
        ring.samples.clear();
        ring.next = 0;
    }
}
