//! One integration binary with a module per area (see STYLE.md, Testing).
//! PostgreSQL tests need `TEST_DATABASE_URL`, which `scripts/test` provides.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod actors;
mod admin;
mod browser;
mod cli;
mod codex_runtime;
mod codex_smoke;
mod codexhome;
mod fakemodel;
mod gitsim;
mod ingest;
mod leases;
mod lifecycle;
mod logs;
mod migrations;
mod recovery;
mod support;
mod webhook;
mod workspace;
