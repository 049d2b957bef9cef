//! One pass at a time, and no wake-up lost: the gate every actor lane (a
//! session's drain, command and steer lanes; a repository's scheduling)
//! runs its passes through. A wake-up while a pass runs only marks a
//! follow-up, which the pass's end honours by starting the next one. A pass
//! reads the store after it starts, so work committed before a wake-up is
//! seen by a pass that starts after that wake-up, however close to the end
//! of the running pass the wake-up lands.
//!
//! Pure: the actors call it from their own context (messages and the ends
//! of passes are handled one at a time), and the tests below drive it
//! through every interleaving, the wake-up at a pass's very end included.

/// The state of one lane.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Gate {
    busy: bool,
    followup: bool,
    passes: u64,
}

impl Gate {
    /// A wake-up. `true`: start a pass now (counted). `false`: one is
    /// running, and another starts when it ends.
    pub fn wake(&mut self) -> bool {
        if self.busy {
            self.followup = true;
            return false;
        }
        self.busy = true;
        self.passes += 1;
        true
    }

    /// The running pass ended: the lane is free. `true`: a wake-up came
    /// while it ran, so wake it again now (before anything else runs in the
    /// actor's context).
    pub fn ended(&mut self) -> bool {
        self.busy = false;
        std::mem::take(&mut self.followup)
    }

    /// Asks for another pass after the running one (the pass itself found
    /// that something changed); the same as a wake-up while busy.
    pub fn again(&mut self) {
        if self.busy {
            self.followup = true;
        }
    }

    /// Forgets a pass that will never end (its actor restarts).
    pub fn reset(&mut self) {
        self.busy = false;
        self.followup = false;
    }

    pub fn busy(&self) -> bool {
        self.busy
    }

    pub fn followup(&self) -> bool {
        self.followup
    }

    /// Passes started since the actor started (shown by the health view).
    pub fn passes(&self) -> u64 {
        self.passes
    }
}

/// Which lane a pass belongs to (named to a [`PassEndProbe`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaneKind {
    /// A session's drive of its leased task.
    Drain,
    /// A session's turnless commands and comment changes.
    Commands,
    /// A session's steers, interrupts and handoffs.
    Steer,
}

/// Called at the very end of a lane's pass — after its last read of the
/// store, before the actor frees the lane — with the lane and the session
/// key. Tests use it to land a wake-up exactly there; a server never sets it.
#[derive(Clone)]
pub struct PassEndProbe(
    pub  std::sync::Arc<
        dyn Fn(LaneKind, String) -> futures_util::future::BoxFuture<'static, ()> + Send + Sync,
    >,
);

impl std::fmt::Debug for PassEndProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PassEndProbe")
    }
}

/// `pass`, then the probe (if any) before its result is handed back.
pub(crate) async fn probed<T>(
    probe: Option<PassEndProbe>,
    lane: LaneKind,
    key: String,
    pass: impl std::future::Future<Output = T>,
) -> T {
    let out = pass.await;
    if let Some(p) = probe {
        (p.0)(lane, key).await;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What can happen to a lane, one at a time as in an actor: work is
    /// committed and a wake-up sent; the running pass reads the store; the
    /// running pass ends.
    #[derive(Debug, Clone, Copy)]
    enum Step {
        CommitAndWake,
        Read,
        End,
    }

    /// Plays `steps` (reads and ends only when a pass runs), then lets the
    /// lane run dry; returns the work items never seen by a read that came
    /// after their commit.
    fn lost(steps: &[Step]) -> Vec<usize> {
        let mut gate = Gate::default();
        // Per running pass: whether it has read yet.
        let mut running: Option<bool> = None;
        let mut committed = 0usize;
        let mut seen = 0usize;
        let start = |running: &mut Option<bool>| *running = Some(false);
        for step in steps {
            match step {
                Step::CommitAndWake => {
                    committed += 1;
                    if gate.wake() {
                        start(&mut running);
                    }
                }
                Step::Read => {
                    if let Some(read) = running.as_mut() {
                        *read = true;
                        seen = committed;
                    }
                }
                Step::End => {
                    // A pass reads the store before it ends.
                    if running == Some(true) {
                        running = None;
                        if gate.ended() && gate.wake() {
                            start(&mut running);
                        }
                    }
                }
            }
        }
        // Run dry: every started pass reads, then ends.
        while running.is_some() {
            seen = committed;
            running = None;
            if gate.ended() && gate.wake() {
                start(&mut running);
            }
        }
        assert!(!gate.busy() && !gate.followup());
        (seen..committed).collect()
    }

    #[test]
    fn a_wake_up_at_the_very_end_of_a_pass_starts_another_that_sees_its_work() {
        let mut gate = Gate::default();
        assert!(gate.wake(), "the first wake-up starts a pass");
        // The pass has read the store (nothing) and is about to end: now the
        // work is committed and its wake-up handled, before the end.
        assert!(!gate.wake(), "a pass runs: no second one at once");
        assert!(gate.ended(), "the end asks for the pass the wake-up wanted");
        assert!(gate.wake(), "and it starts at once");
        assert_eq!(gate.passes(), 2);
        assert!(!gate.ended(), "then the lane is idle");
        assert!(!gate.busy());
        assert_eq!(
            lost(&[
                Step::CommitAndWake,
                Step::Read,
                Step::CommitAndWake,
                Step::End
            ]),
            Vec::<usize>::new()
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn no_interleaving_loses_a_wake_up(steps in prop::collection::vec(
            prop_oneof![Just(Step::CommitAndWake), Just(Step::Read), Just(Step::End)], 0..40)
        ) {
            prop_assert!(lost(&steps).is_empty());
        }

        #[test]
        fn one_pass_at_a_time(wakes in prop::collection::vec(any::<bool>(), 0..40)) {
            let mut gate = Gate::default();
            let mut running = 0;
            for wake in wakes {
                if wake {
                    if gate.wake() { running += 1; }
                } else if running > 0 {
                    running -= 1;
                    if gate.ended() && gate.wake() { running += 1; }
                }
                prop_assert!(running <= 1);
                prop_assert_eq!(gate.busy(), running == 1);
            }
        }
    }
}
