//! One integration binary with a module per area (one binary, so the
//! crate and its dependencies are linked once).
//! PostgreSQL tests need `TEST_DATABASE_URL`, which `scripts/test` provides.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod actors;
mod admin;
mod browser;
mod browser_charts;
mod browser_codex;
mod browser_transcript;
mod catchup;
mod cli;
mod codex_availability;
mod codex_login;
mod codex_paths;
mod codex_protocol;
mod codex_resume;
mod codex_runtime;
mod codex_smoke;
mod codexhome;
mod commands;
mod deploy;
mod doctor;
mod e2e;
mod e2e_commands;
mod fakemodel;
mod floors;
mod fork;
mod gitea_client;
mod gitea_client_admin;
mod gitea_hook;
mod giteasim;
mod giteasim_selftest;
mod gitsim;
mod hook_state;
mod ingest;
mod leases;
mod lifecycle;
mod logs;
mod metrics;
mod migrations;
mod nginx;
mod readiness;
mod receipts;
mod recovery;
mod scheduling;
mod schema;
mod session;
mod stats;
mod statuses;
mod support;
mod testapp;
mod transcripts;
mod walkthrough;
mod walvfs;
mod webhook;
mod workspace;
