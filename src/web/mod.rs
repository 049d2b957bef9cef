//! The admin API (DESIGN §11, §13) and health endpoints. Handlers read through
//! `store/` and answer JSON in camelCase; every admin route needs the Bearer token.

pub mod admin;
pub mod auth;
pub mod client;
pub mod health;
pub mod metrics;

use actix_web::web;

pub fn config(cfg: &mut web::ServiceConfig) {
    health::config(cfg);
    metrics::config(cfg);
    admin::config(cfg);
}
