//! The circuit breaker, shared by every actor of the process (which report
//! turns to it and ask it before starting one) and by `/readyz`, the
//! overview and `/metrics` (which show it). The decision is
//! [`crate::domain::breaker`]'s; this holds its state on a monotonic clock.

use crate::domain::breaker::{observe, Breaker, BreakerConfig, Outcome};
use serde::Serialize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The process's breaker.
#[derive(Debug, Clone)]
pub struct Circuit {
    state: Arc<Mutex<Breaker>>,
    epoch: Instant,
    config: BreakerConfig,
}

/// The breaker as `/readyz` and the overview show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CircuitView {
    /// `closed` or `open`.
    pub state: &'static str,
    /// While open: when turns start again (RFC 3339, UTC).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
}

/// What a report changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Opened { for_ms: u64 },
    Closed,
    None,
}

impl Default for Circuit {
    /// Off: never opens (`breaker_failures = 0`).
    fn default() -> Self {
        Circuit::new(BreakerConfig::with_failures(0))
    }
}

impl CircuitView {
    /// A circuit that lets turns start.
    pub fn closed() -> CircuitView {
        CircuitView {
            state: "closed",
            until: None,
        }
    }
}

impl Circuit {
    pub fn new(config: BreakerConfig) -> Self {
        Circuit {
            state: Arc::default(),
            epoch: Instant::now(),
            config,
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn get(&self) -> Breaker {
        self.state.lock().map(|b| *b).unwrap_or_default()
    }

    /// Reports a turn's outcome; what it changed.
    pub fn report(&self, outcome: Outcome) -> Change {
        let now = self.now();
        let Ok(mut b) = self.state.lock() else {
            return Change::None;
        };
        let before = *b;
        *b = observe(before, outcome, now, self.config);
        match (before.open_until, b.open_until) {
            (_, Some(until)) if Some(until) != before.open_until => Change::Opened {
                for_ms: until.saturating_sub(now),
            },
            (Some(_), None) => Change::Closed,
            _ => Change::None,
        }
    }

    /// Whether starting a turn is refused now.
    pub fn is_open(&self) -> bool {
        self.get().is_open(self.now())
    }

    pub fn view(&self) -> CircuitView {
        let (b, now) = (self.get(), self.now());
        match b.open_until.filter(|_| b.is_open(now)) {
            Some(until) => CircuitView {
                state: "open",
                until: Some(
                    (chrono::Utc::now() + Duration::from_millis(until.saturating_sub(now)))
                        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                ),
            },
            None => CircuitView::closed(),
        }
    }
}
