//! The admin API, its live event stream, the operators' web
//! view at `/admin`, health endpoints, and the API remote workers call.
//! Handlers read through `store/` and answer JSON in camelCase; every admin
//! route needs the Bearer token or the web view's session cookie
//! (web/auth.rs), every worker route a worker's own token (web/worker/).

pub mod admin;
pub mod auth;
pub mod client;
pub mod deadline;
pub mod error;
pub mod health;
pub mod live;
pub mod metrics;
pub mod refusals;
pub mod span;
pub mod state;
pub mod ui;
pub mod worker;

use actix_web::web;

pub fn config(cfg: &mut web::ServiceConfig) {
    health::config(cfg);
    metrics::config(cfg);
    admin::config(cfg);
    ui::config(cfg);
    worker::config(cfg);
}
