//! For the benchmarks that drive the Gitea simulator (`catchup`,
//! `receipts`): the macro that loads it from the integration tests. A file
//! of its own, loaded only by them, so the other benchmarks do not carry an
//! unused macro.

/// Declares the integration tests' Gitea simulator and what it needs
/// (`support`, `gitsim`) as modules at the benchmark's crate root, where the
/// simulator's `crate::` paths expect them. Invoke it at the top of the
/// benchmark's file, after `#[macro_use] #[path = "common/simulator.rs"] mod simulator;`.
macro_rules! gitea_simulator {
    () => {
        #[allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]
        #[path = "../tests/it/support.rs"]
        mod support;

        #[allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]
        #[path = "../tests/it/gitsim.rs"]
        mod gitsim;

        #[allow(
            dead_code,
            unused_imports,
            clippy::unwrap_used,
            clippy::expect_used,
            clippy::panic
        )]
        #[path = "../tests/it/giteasim/mod.rs"]
        mod giteasim;
    };
}
