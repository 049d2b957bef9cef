//! Wiring: the store, the shared state and the HTTP server. `serve` is what the
//! binary runs; tests start the real binary on 127.0.0.1:0.

use crate::config::{Config, ServerSecrets};
use crate::store::Store;
use crate::telemetry::BridgeRootSpan;
use crate::webhook::event::Normalizer;
use actix_web::{web, App, HttpServer};
use anyhow::Context;
use std::net::TcpListener;
use std::sync::Arc;
use tracing_actix_web::TracingLogger;

/// What every handler can reach.
pub struct AppState {
    pub config: Arc<Config>,
    pub secrets: ServerSecrets,
    pub store: Store,
    pub normalizer: Normalizer,
}

/// Opens the store, binds `listen` and serves until SIGINT/SIGTERM (graceful:
/// requests in flight finish, and their writes commit, before exit).
pub async fn serve(config: Config) -> anyhow::Result<()> {
    let secrets = config.server_secrets()?;
    if let Some(file) = &secrets.generated_file {
        tracing::warn!(
            file = %file.display(),
            "webhook_secret and/or admin_token are not configured: using generated ones stored in this file \
             (set them in the config to choose your own)"
        );
    }
    let settings = config.store_settings();
    let store = tokio::task::spawn_blocking(move || Store::open(&settings))
        .await
        .context("opening the store")??;
    tracing::info!(database = %config.database_url.redacted(), "store ready, migrations applied");

    let listener = TcpListener::bind(&config.listen).with_context(|| {
        format!(
            "cannot listen on {} (config key `listen`): is the port free?",
            config.listen
        )
    })?;
    let addr = listener.local_addr()?;
    let state = web::Data::new(AppState {
        normalizer: Normalizer {
            instance_id: config.instance_id.clone(),
            bot_login: config.bot_login.clone(),
        },
        config: Arc::new(config),
        secrets,
        store,
    });
    let server = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .app_data(
                web::JsonConfig::default()
                    .limit(64 * 1024)
                    .error_handler(|err, _| {
                        crate::error::ApiError::bad_request("invalid_json", err.to_string()).into()
                    }),
            )
            .app_data(web::QueryConfig::default().error_handler(|err, _| {
                crate::error::ApiError::bad_request("invalid_query", err.to_string()).into()
            }))
            .wrap(TracingLogger::<BridgeRootSpan>::new())
            .configure(crate::webhook::config)
            .configure(crate::web::config)
    })
    .listen(listener)?
    .run();
    tracing::info!(%addr, "listening");
    // A plain line on stdout as well, for people and scripts, whatever the log format.
    println!("codex-bridge listening on http://{addr}");
    server.await?;
    tracing::info!("stopped");
    Ok(())
}
