//! codex-bridge turns Gitea comments into Codex work.
//!
//! Where things live (imports only run down this list):
//!
//! - [`cli`], [`app`]: the command line and the wiring of the server.
//! - [`webhook`]: `POST /api/gitea/webhook`: signature ([`webhook::verify`]),
//!   normalisation ([`webhook::event`]), Gitea's mention rules ([`webhook::mention`]).
//! - [`web`]: the admin API and health endpoints.
//! - [`jobs`]: background jobs above the actors (the receipts worker, the
//!   catch-up of comments whose webhook never arrived).
//! - [`store`]: diesel over SQLite or PostgreSQL; the group-commit writer, the
//!   ingest transaction, tasks, audit, control.
//! - [`lifecycle`]: the task state machine, as data.
//! - [`readiness`]: what keeps this process from running turns, from its
//!   configuration (the scheduler's hold, `/readyz`, the admin overview).
//! - [`config`], [`error`], [`telemetry`], [`metrics`]: configuration, HTTP errors,
//!   logging, the process-wide metrics registry.

pub mod actors;
pub mod agent;
pub mod app;
pub mod cli;
pub mod codex;
pub mod config;
pub mod domain;
pub mod forge;
pub mod gitea;
pub mod jobs;
pub mod lifecycle;
pub mod metrics;
pub mod readiness;

pub mod store;
pub mod telemetry;
pub mod web;
pub mod webhook;
pub mod worker;
pub mod worker_api;
pub mod workspace;
