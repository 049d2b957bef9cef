//! Wiring: the store, the actors, the background jobs and the HTTP server.
//! [`run`] is the whole server on a listener it is given, until a shutdown
//! future completes; [`serve`], what the binary runs, binds `listen` and
//! stops on SIGINT/SIGTERM. Tests run the binary, or [`run`] in process on
//! 127.0.0.1:0.

use crate::config::Config;
use crate::store::Store;
use crate::web::span::BridgeRootSpan;
use crate::web::state::AppState;
use crate::webhook::event::Normalizer;
use actix_web::{web, App, HttpServer};
use anyhow::Context;
use std::future::Future;
use std::net::TcpListener;
use std::sync::Arc;
use tracing_actix_web::TracingLogger;

/// The Gitea REST client, when `gitea_url` and `gitea_token` are both set.
fn gitea_client(config: &Config) -> Option<crate::gitea::GiteaClient> {
    match (&config.gitea_url, &config.gitea_token) {
        (Some(url), Some(token)) => Some(crate::gitea::GiteaClient::new(url, token.clone())),
        _ => None,
    }
}

/// The actor tree (`None`: intake only) with its lease holder name and the
/// id of its runtime's Codex home (if it has one), whether its agent
/// runtime can run turns now, and how it is signed in (Codex only).
type Actors = (
    Option<(
        actix::Addr<crate::actors::registry::Registry>,
        String,
        Option<String>,
    )>,
    crate::agent::Availability,
    Option<Arc<dyn crate::agent::account::AccountControl>>,
);

/// The workspace manager of `workspace_root`, with the bot's token.
fn workspace_names(config: &Config) -> anyhow::Result<crate::workspace::WorkspaceManager> {
    let mut workspaces = crate::workspace::WorkspaceManager::new(
        config.workspace_root.clone(),
        config.instance_id.clone(),
        config.gitea_token.clone(),
    );
    if let Some(url) = &config.gitea_url {
        workspaces = workspaces
            .with_gitea_url(url)
            .map_err(|e| anyhow::anyhow!("config key `gitea_url`: {e}"))?;
    }
    Ok(workspaces)
}

/// What checks replies on Gitea: the Gitea forge, or (not configured) one
/// that says why the scheduler holds every task.
fn gitea_verifier(config: &Config) -> Arc<dyn crate::forge::Forge> {
    match gitea_client(config) {
        Some(client) => Arc::new(crate::gitea::GiteaForge::new(
            client,
            &config.bot_login,
            crate::gitea::TriggerPolicy::from_config(config),
        )),
        None => Arc::new(crate::gitea::ForgeNotConfigured {
            reason: crate::readiness::gitea_not_configured(config)
                .map(|b| format!("{}; {}", b.message, b.action))
                .unwrap_or_default(),
        }),
    }
}

/// The configured agent runtime: its turns, the forge that checks its
/// replies, whether it can run now, and how it is signed in (Codex only).
type Runtime = (
    Arc<dyn crate::agent::Agent>,
    Arc<dyn crate::forge::Forge>,
    crate::agent::Availability,
    Option<Arc<dyn crate::agent::account::AccountControl>>,
);

/// Starts the actor tree for the configured agent runtime (`None`: intake
/// only); for Codex also its keeper, which starts the app-server now and
/// publishes whether turns can run (a Codex that cannot run never stops the
/// server: tasks wait `queued` until it can).
/// The handles the actors share with the rest of the process.
struct Shared<'a> {
    draining: &'a crate::actors::drain::Draining,
    circuit: &'a crate::agent::circuit::Circuit,
    drain_requested: &'a crate::actors::drain::DrainRequested,
    /// The calls a remote runtime hands to workers (the worker API serves them).
    worker_calls: &'a crate::actors::worker_calls::WorkerCalls,
}

fn start_actors(
    config: &Config,
    store: &Store,
    secrets: &crate::config::ServerSecrets,
    server_id: &str,
    shared: Shared<'_>,
) -> anyhow::Result<Actors> {
    let Shared {
        draining,
        circuit,
        drain_requested,
        worker_calls,
    } = shared;
    use crate::actors::{registry::Registry, ActorDeps};
    use crate::agent::account::AccountControl;
    use crate::agent::scripted::ScriptedAgent;
    use crate::agent::Availability;
    use crate::config::AgentRuntimeKind;
    use crate::forge::scripted::ScriptedForge;
    use actix::Actor;

    let (runtime, verifier, agent, account): Runtime = match config.agent_runtime {
        AgentRuntimeKind::None => {
            tracing::warn!(
                "agent_runtime = none: webhooks are stored and queued, but no turn runs \
                 (set agent_runtime = \"codex\" to run them)"
            );
            return Ok((None, Availability::always(), None));
        }
        AgentRuntimeKind::Codex => {
            use crate::codex::CodexAgent;
            let (notices, notice_rx) = crate::codex::notice_channel();
            actix::spawn(record_notices(store.clone(), notice_rx));
            let codex = CodexAgent::new(codex_settings(config)?, notices);
            let (status, agent) = Availability::channel();
            actix::spawn(codex.clone().keep_available(status));
            let verifier = gitea_verifier(config);
            let account: Arc<dyn AccountControl> = Arc::new(codex.clone());
            (Arc::new(codex), verifier, agent, Some(account))
        }
        AgentRuntimeKind::Remote => {
            tracing::info!(
                "agent_runtime = remote: registered workers run the turns; a repository's work \
                 waits until a worker given it leases it"
            );
            // Made now, so that the root every folder is named under is
            // its canonical path from the first call on.
            std::fs::create_dir_all(&config.workspace_root).with_context(|| {
                format!(
                    "cannot create workspace_root {}",
                    config.workspace_root.display()
                )
            })?;
            let root = workspace_names(config)?
                .root()
                .map_err(|e| anyhow::anyhow!("config key `workspace_root`: {e}"))?;
            (
                Arc::new(crate::agent::remote::RemoteAgent::new(
                    Arc::new(worker_calls.clone()),
                    root,
                    // How long a call waits for a worker's answer.
                    std::time::Duration::from_secs(config.worker_call_timeout_secs),
                )),
                gitea_verifier(config),
                Availability::always(),
                None,
            )
        }
        AgentRuntimeKind::Scripted => {
            tracing::warn!(
                "agent_runtime = scripted: turns play [directives] from the comment text and no model runs; \
                 this mode is for tests"
            );
            std::fs::create_dir_all(&config.state_dir).with_context(|| {
                format!("cannot create state_dir {}", config.state_dir.display())
            })?;
            (
                Arc::new(ScriptedAgent::with_directives(
                    config.state_dir.join("scripted-history.json"),
                )),
                Arc::new(ScriptedForge::default()),
                Availability::always(),
                None,
            )
        }
    };
    let workspaces: Arc<dyn crate::actors::Workspaces> = match config.agent_runtime {
        // The worker clones with its own token under its own root; the
        // server only names the folders.
        AgentRuntimeKind::Remote => {
            Arc::new(crate::actors::remote_workspaces::RemoteWorkspaces::new(
                Arc::new(worker_calls.clone()),
                workspace_names(config)?,
                config.instance_id.clone(),
                crate::workspace::DEFAULT_TIMEOUT,
            ))
        }
        _ => Arc::new(workspace_names(config)?),
    };
    if let Some(client) = gitea_client(config) {
        let statuses = crate::jobs::statuses::StatusWorker {
            store: store.clone(),
            client: client.clone(),
            public_url: config.public_url.clone(),
            safety_interval: crate::jobs::statuses::StatusWorker::SAFETY_INTERVAL,
        };
        actix::spawn(statuses.run());
        let worker = crate::jobs::receipts::ReceiptWorker {
            store: store.clone(),
            client,
            forge: verifier.clone(),
            bot_login: config.bot_login.clone(),
            mode: config.receipt_mode.into(),
            safety_interval: crate::jobs::receipts::ReceiptWorker::SAFETY_INTERVAL,
        };
        actix::spawn(worker.run());
    }
    let mut settings = crate::actors::ActorSettings::from_config(config);
    settings.owner = server_id.to_owned();
    settings.drain_requested = drain_requested.clone();
    settings.hold = crate::readiness::blockers(config);
    settings.redactor = settings
        .redactor
        .with([secrets.webhook_secret.clone(), secrets.admin_token.clone()]);
    settings.agent = agent.clone();
    settings.draining = draining.clone();
    settings.circuit = circuit.clone();
    let owner = settings.owner.clone();
    let home = runtime.home();
    let deps = Arc::new(ActorDeps {
        store: store.clone(),
        runtime,
        verifier,
        workspaces,
        settings,
    });
    Ok((
        Some((Registry::new(deps).start(), owner, home)),
        agent,
        account,
    ))
}

/// Starts the catch-up of comments whose webhook never arrived, unless
/// `catchup_interval_secs` is 0 or no Gitea client is configured. It is part
/// of intake: it runs whatever the agent runtime, `none` included.
fn start_catchup(
    config: &Config,
    store: &Store,
    normalizer: &Normalizer,
    registry: Option<actix::Addr<crate::actors::registry::Registry>>,
) {
    use crate::jobs::catchup::{CatchupSettings, CatchupWorker};
    let Some(settings) = CatchupSettings::from_config(config) else {
        tracing::info!(
            "catchup_interval_secs = 0: comments whose webhook never arrived are not caught up"
        );
        return;
    };
    let Some(client) = gitea_client(config) else {
        tracing::info!(
            "no catch-up of missed webhooks: it reads comments through Gitea's API, which needs gitea_url and gitea_token"
        );
        return;
    };
    let worker = CatchupWorker::new(
        store.clone(),
        client,
        Arc::new(normalizer.clone()),
        registry,
        settings,
    );
    actix::spawn(worker.run());
}

/// Records what the Codex client reports about itself ([`CodexNotice`]s) in
/// the audit log, until the client is gone. A notice the store refuses is
/// only logged: the client logged it as well when it arose.
///
/// [`CodexNotice`]: crate::codex::CodexNotice
pub async fn record_notices(
    store: Store,
    mut notices: tokio::sync::mpsc::Receiver<crate::codex::CodexNotice>,
) {
    use crate::store::audit::{self, Audit};
    while let Some(notice) = notices.recv().await {
        let action = notice.action();
        let meta = notice.meta();
        let written = store
            .write(move |c| {
                audit::record(c, &Audit::new(action, "codex").meta(meta.clone())).map(|_| ())
            })
            .await;
        if let Err(e) = written {
            tracing::warn!(action, error = %e, "could not audit a codex client notice");
        }
    }
}

/// How long the server keeps an idle client connection: far longer than a
/// reverse proxy keeps its idle connections to us (the shipped nginx sites:
/// 4 s), so the proxy always drops one first and never writes a request into
/// a connection the server is closing. That holds even for a server that
/// was paused: its own timer, run out during the pause, would close the
/// connection on waking before reading the request the proxy had sent, and
/// the proxy answers that request 502 without trying it elsewhere.
const KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(75);

/// Binds `listen` and runs the server until SIGINT/SIGTERM (graceful:
/// requests in flight finish, and their writes commit, before exit).
pub async fn serve(config: Config) -> anyhow::Result<()> {
    let listener = TcpListener::bind(&config.listen).with_context(|| {
        format!(
            "cannot listen on {} (config key `listen`): is the port free?",
            config.listen
        )
    })?;
    run(config, listener, shutdown_signal()).await
}

/// Runs the whole server on `listener` until `shutdown` completes: opens the
/// store (applying migrations), starts the actor tree and the background
/// jobs for the configured runtime, and serves HTTP (and `metrics_listen`,
/// if set). On shutdown the live streams end first, then both listeners stop
/// gracefully: requests in flight finish, and their writes commit. Call it
/// inside an actix `System`, which the actors run on; `config.listen` is not
/// read (the listener is bound already).
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + 'static,
) -> anyhow::Result<()> {
    let secrets = config.server_secrets()?;
    if let Some(file) = &secrets.generated_file {
        tracing::warn!(
            file = %file.display(),
            "webhook_secret and/or admin_token are not configured: using generated ones stored in this file \
             (set them in the config to choose your own)"
        );
    }
    let settings = crate::store::StoreSettings::from_config(&config);
    let store = tokio::task::spawn_blocking(move || Store::open(&settings))
        .await
        .context("opening the store")??;
    tracing::info!(database = %config.database_url.redacted(), "store ready, migrations applied");
    // Before any turn runs: what was carried to a parent and not
    // acknowledged may not have been read.
    let (limits, instance) = (config.workflow_limits(), config.instance_id.clone());
    let reconciled = store
        .write(move |c| crate::store::workflows::results::after_restart(c, limits, &instance))
        .await
        .context("reconciling children's results after the restart")?;
    if reconciled.redelivered + reconciled.terminalised > 0 {
        tracing::info!(
            redelivered = reconciled.redelivered,
            terminalised = reconciled.terminalised,
            "children's results reconciled after the restart"
        );
    }

    // Registered before the actors start, so that the holder of the
    // first lease they take is already listed.
    let heartbeat = crate::jobs::instances::InstanceHeartbeat::from_config(&store, &config);
    let (server_id, drain_requested) = (
        heartbeat.server_id.clone(),
        heartbeat.drain_requested.clone(),
    );
    heartbeat.register().await;

    let draining = crate::actors::drain::Draining::default();
    let circuit = crate::agent::circuit::Circuit::new(crate::domain::breaker::BreakerConfig::new(
        config.breaker_failures,
        config.breaker_open_secs,
    ));
    // Calls to remote workers live in the store: a worker may poll any
    // process of the deployment, whichever process's session waits.
    let worker_calls = crate::actors::worker_calls::WorkerCalls::new(
        store.clone(),
        &server_id,
        crate::actors::worker_calls::WorkerCalls::caller_window(
            std::time::Duration::from_secs(config.lease_ttl_secs),
            std::time::Duration::from_secs(config.lease_heartbeat_secs),
        ),
    );
    actix::spawn(worker_calls.clone().keep_sweeping());
    let (actors, agent, account) = start_actors(
        &config,
        &store,
        &secrets,
        &server_id,
        Shared {
            draining: &draining,
            circuit: &circuit,
            drain_requested: &drain_requested,
            worker_calls: &worker_calls,
        },
    )?;
    let registry = actors.as_ref().map(|(r, ..)| r.clone());
    let home = actors.as_ref().and_then(|(_, _, home)| home.clone());
    let beating = heartbeat.start(registry.clone(), home);
    // Work other processes on the same PostgreSQL committed: their signals
    // wake the actors here as this process's own commits do.
    let woken = registry.clone();
    let calls_woken = worker_calls.clone();
    store.listen(move |signal| {
        calls_woken.on_signal(&signal);
        if let Some(registry) = &woken {
            crate::actors::registry::wake_for(registry, signal);
        }
    })?;
    let normalizer = Normalizer {
        instance_id: config.instance_id.clone(),
        bot_login: config.bot_login.clone(),
        ignore_logins: config.ignore_logins.clone(),
    };
    start_catchup(&config, &store, &normalizer, registry.clone());
    actix::spawn(
        crate::jobs::retention::RetentionWorker {
            store: store.clone(),
            policy: crate::domain::retention::Policy {
                delivery_days: config.delivery_retention_days,
                turn_event_days: config.turn_event_retention_days,
            },
        }
        .run(),
    );

    let addr = listener.local_addr()?;
    let state = web::Data::new(AppState {
        normalizer,
        server_id,
        config: Arc::new(config),
        registry,
        agent,
        account,
        sessions: crate::web::auth::Sessions::new(&secrets.admin_token),
        secrets,
        store,
        live: crate::web::live::Hub::default(),
        refusals: crate::web::refusals::Refusals::default(),
        circuit,
        worker_calls,
    });
    state.refusals.keep_flushing(state.store.clone());
    let metrics_server = match &state.config.metrics_listen {
        Some(listen) => Some(metrics_server(listen, state.clone())?),
        None => None,
    };
    crate::web::live::Hub::start(state.clone()).await;
    let live_state = state.clone();
    let (request_timeout, max_connections) =
        (state.config.request_timeout, state.config.max_connections);
    // `max_connections` is the server's; actix counts per worker.
    let workers = std::thread::available_parallelism().map_or(1, usize::from);
    let server = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .app_data(
                web::JsonConfig::default()
                    .limit(ADMIN_BODY_LIMIT)
                    .error_handler(json_error),
            )
            .app_data(web::QueryConfig::default().error_handler(|err, _| {
                crate::web::error::ApiError::bad_request("invalid_query", err.to_string()).into()
            }))
            .wrap(actix_web::middleware::from_fn(
                crate::web::deadline::body_deadline,
            ))
            .wrap(TracingLogger::<BridgeRootSpan>::new())
            .configure(crate::webhook::config)
            .configure(crate::web::config)
    })
    .workers(workers)
    .client_request_timeout(request_timeout)
    .keep_alive(KEEP_ALIVE)
    .max_connections(max_connections.div_ceil(workers))
    .listen(listener)?
    .disable_signals()
    .run();
    // Our own shutdown handling: end the live streams first, or open admin
    // pages would hold a graceful stop up until its timeout.
    let handle = server.handle();
    let metrics_handle = metrics_server.as_ref().map(|s| s.handle());
    actix_web::rt::spawn(async move {
        shutdown.await;
        tracing::info!("shutdown requested: draining, then stopping");
        // Webhooks are still taken while the turns under way finish.
        draining.begin();
        if let Some((registry, owner, _)) = &actors {
            let drained = crate::actors::drain::drain(
                &live_state.store,
                registry,
                owner,
                live_state.config.drain_timeout,
                DRAIN_SETTLE,
            )
            .await;
            tracing::info!(
                under_way = drained.under_way,
                interrupted = drained.interrupted,
                left = drained.left,
                "drained"
            );
        }
        // After the drain: while its turns finish the process still runs.
        beating.stop().await;
        live_state.live.shutdown();
        if let Some(m) = metrics_handle {
            m.stop(true).await;
        }
        handle.stop(true).await;
    });
    tracing::info!(%addr, "listening");
    // A plain line on stdout as well, for people and scripts, whatever the log format.
    println!("codex-bridge listening on http://{addr}");
    // Both stop on `shutdown`; the metrics listener is `None` unless configured.
    let metrics = async move {
        match metrics_server {
            Some(server) => server.await,
            None => Ok(()),
        }
    };
    tokio::try_join!(server, metrics)?;
    tracing::info!("stopped");
    Ok(())
}

/// How long a drain waits, after interrupting what was left, for those
/// turns to stop (an interrupt is confirmed within 15 s, or the task is
/// reconciled).
const DRAIN_SETTLE: std::time::Duration = std::time::Duration::from_secs(30);

/// The largest JSON body an admin route reads.
const ADMIN_BODY_LIMIT: usize = 64 * 1024;

/// A JSON body an admin route could not read, said as what it was: too
/// large (413), too slow (408), or not the JSON the route takes (400).
fn json_error(
    err: actix_web::error::JsonPayloadError,
    req: &actix_web::HttpRequest,
) -> actix_web::Error {
    use crate::web::error::ApiError;
    use actix_web::error::JsonPayloadError as E;
    match &err {
        E::Overflow { .. } | E::OverflowKnownLength { .. } => ApiError::PayloadTooLarge {
            limit: ADMIN_BODY_LIMIT,
        },
        E::Payload(p) if crate::web::deadline::is_timeout(p) => ApiError::RequestTimeout(
            req.app_data::<web::Data<AppState>>()
                .map_or(0, |s| s.config.request_timeout.as_secs()),
        ),
        _ => ApiError::bad_request("invalid_json", err.to_string()),
    }
    .into()
}

/// The separate `metrics_listen` listener: `/metrics` without a token, and the
/// health probes. One worker is plenty for a scraper.
fn metrics_server(
    listen: &str,
    state: web::Data<AppState>,
) -> anyhow::Result<actix_web::dev::Server> {
    let listener = TcpListener::bind(listen).with_context(|| {
        format!("cannot listen on {listen} (config key `metrics_listen`): is the port free?")
    })?;
    let addr = listener.local_addr()?;
    let server = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .wrap(TracingLogger::<BridgeRootSpan>::new())
            .configure(crate::web::metrics::config_open)
    })
    .workers(1)
    .disable_signals()
    .listen(listener)?
    .run();
    tracing::info!(%addr, "metrics listening");
    println!("codex-bridge metrics on http://{addr}");
    Ok(server)
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {},
                    _ = tokio::signal::ctrl_c() => {},
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; stopping on SIGINT only");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// How the server runs its app-server: the binary, CODEX_HOME, and the
/// thread-level Gitea MCP server (its URL in thread config, its token only
/// in the app-server's environment, by reference). `doctor` starts its probe
/// from the same settings.
pub fn codex_settings(config: &Config) -> anyhow::Result<crate::codex::CodexSettings> {
    use crate::codex::{developer_instructions, CodexSettings, GiteaMcp};
    let mut thread_config = serde_json::Map::new();
    let mut env = Vec::new();
    if let Some(command) = &config.gitea_mcp_command {
        let url = config.gitea_url.clone().ok_or_else(|| {
            anyhow::anyhow!("config key `gitea_url` is required when gitea_mcp_command is set")
        })?;
        let mcp = GiteaMcp {
            command: command.clone(),
            args: config.gitea_mcp_args.clone(),
            url_env: config.gitea_mcp_url_env.clone(),
            url,
            token_env: config.gitea_mcp_token_env.clone(),
        };
        thread_config = mcp.thread_config();
        // The agent gets its own token when one is configured: the bot's is
        // a repository admin's, more than commenting needs.
        if let Some(token) = config.agent_gitea_token() {
            env.push((config.gitea_mcp_token_env.clone(), token.clone()));
        }
    }
    Ok(CodexSettings {
        codex_bin: config.codex_bin.clone(),
        codex_home: config.codex_home.clone(),
        developer_instructions: developer_instructions(&config.bot_login),
        thread_config,
        env,
        request_timeout: std::time::Duration::from_secs(30),
        nice: config.codex_nice,
        workflow_tools: config.workflows,
    })
}
