//! This process in the registry of server processes: registered when it
//! starts, a heartbeat every `lease_heartbeat_secs` (the same beat as its
//! leases), marked stopped when it stops cleanly. Each heartbeat reads back
//! whether an operator asked it to drain and publishes the answer in the
//! [`DrainRequested`] handle the actors share. It also writes the process's
//! actor tree, which the admin view of every other process shows.

use crate::actors::drain::DrainRequested;
use crate::actors::registry::{Registry, Snapshot};
use crate::actors::ActorSettings;
use crate::config::Config;
use crate::store::{instances, Store};
use std::time::Duration;

/// The version every process reports about itself.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Who this process is, and how often it says it is still there.
#[derive(Clone)]
pub struct InstanceHeartbeat {
    pub store: Store,
    /// The holder name of its leases and attempts.
    pub server_id: String,
    /// The Gitea namespace it serves.
    pub instance_id: String,
    pub interval: Duration,
    /// Where the latest drain answer goes.
    pub drain_requested: DrainRequested,
    /// Whose tree each beat writes; `None` (intake only): the process has
    /// no actors to report. Set by [`InstanceHeartbeat::start`], as the
    /// actors start after the process registered.
    registry: Option<actix::Addr<Registry>>,
    /// The id of the Codex home the process runs its threads in, reported
    /// once (and again if its row had to be written anew); set by
    /// [`InstanceHeartbeat::start`].
    codex_home: Option<String>,
}

/// The running heartbeat; [`Beating::stop`] ends it and says the process stopped.
pub struct Beating {
    heartbeat: InstanceHeartbeat,
    task: tokio::task::JoinHandle<()>,
}

impl InstanceHeartbeat {
    /// A new `serverId` for this process, beating at the actors' heartbeat
    /// (`ActorSettings::heartbeat`), which is configured whatever the agent
    /// runtime, `none` included.
    pub fn from_config(store: &Store, config: &Config) -> InstanceHeartbeat {
        InstanceHeartbeat::new(
            store,
            &ActorSettings::new_server_id(&config.instance_id),
            &config.instance_id,
            Duration::from_secs(config.lease_heartbeat_secs),
        )
    }

    /// A process named `server_id` serving `instance_id`, beating every
    /// `interval` (a process whose actors are not configured from a
    /// [`Config`], as in a benchmark's several instances in one process).
    pub fn new(
        store: &Store,
        server_id: &str,
        instance_id: &str,
        interval: Duration,
    ) -> InstanceHeartbeat {
        InstanceHeartbeat {
            store: store.clone(),
            server_id: server_id.to_owned(),
            instance_id: instance_id.to_owned(),
            interval,
            drain_requested: DrainRequested::default(),
            registry: None,
            codex_home: None,
        }
    }

    /// Registers the process. A registration the store refuses is only
    /// logged: the server can take webhooks without it, and the next
    /// heartbeat registers the process again.
    pub async fn register(&self) {
        let (id, instance) = (self.server_id.clone(), self.instance_id.clone());
        match self
            .store
            .write(move |c| instances::register(c, &id, &instance, VERSION))
            .await
        {
            Ok(()) => {
                tracing::info!(server_id = %self.server_id, version = VERSION, "server registered")
            }
            Err(e) => tracing::warn!(
                server_id = %self.server_id,
                error = %e,
                "cannot register this server yet; the next heartbeat tries again"
            ),
        }
    }

    /// Beats in the background, writing `registry`'s tree with each beat,
    /// after saying which Codex home (`codex_home`) its threads live in.
    pub fn start(
        mut self,
        registry: Option<actix::Addr<Registry>>,
        codex_home: Option<String>,
    ) -> Beating {
        self.registry = registry;
        self.codex_home = codex_home;
        let beating = self.clone();
        Beating {
            task: actix::spawn(async move { beating.run().await }),
            heartbeat: self,
        }
    }

    async fn run(self) {
        // The first tick of an interval is immediate: registration just
        // wrote the same thing. (A zero period would make `interval` panic.)
        let mut ticks = tokio::time::interval(self.interval.max(Duration::from_millis(100)));
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        let mut home_reported = self.report_home().await;
        loop {
            ticks.tick().await;
            if self.beat().await || !home_reported {
                home_reported = self.report_home().await;
            }
        }
    }

    /// Writes the Codex home's id into the process's row; `true` once it is
    /// there (or there is none to write).
    async fn report_home(&self) -> bool {
        let Some(home) = self.codex_home.clone() else {
            return true;
        };
        let id = self.server_id.clone();
        match self
            .store
            .write(move |c| instances::report_codex_home(c, &id, &home))
            .await
        {
            Ok(written) => written,
            Err(e) => {
                tracing::warn!(server_id = %self.server_id, error = %e, "Codex home not reported; the next heartbeat tries again");
                false
            }
        }
    }

    /// One heartbeat; a store error leaves the last drain answer as it was.
    /// `true`: the process's row had to be written anew.
    async fn beat(&self) -> bool {
        let actors = self.actors().await;
        let (id, instance) = (self.server_id.clone(), self.instance_id.clone());
        let beat = self
            .store
            .write(move |c| instances::heartbeat(c, &id, &instance, VERSION, actors.as_ref()))
            .await;
        match beat {
            Ok(beat) => {
                if beat.registered_again {
                    tracing::warn!(server_id = %self.server_id, "this server's registry row was gone; registered again");
                }
                if beat.draining && !self.drain_requested.is_on() {
                    tracing::info!(server_id = %self.server_id, "an operator asked this server to drain");
                }
                self.drain_requested.set(beat.draining);
                beat.registered_again
            }
            Err(e) => {
                tracing::warn!(server_id = %self.server_id, error = %e, "heartbeat not stored");
                false
            }
        }
    }

    /// This process's repositories with their session actors, as its own
    /// `GET /actors` shows them: the repository and session entries are
    /// what an operator looks for, the registry's counters are not. `None`:
    /// no registry, or it did not answer within half a beat (the last tree
    /// written stays, and its time shows its age): a busy registry must not
    /// make the process look dead or hold up the drain answer.
    async fn actors(&self) -> Option<serde_json::Value> {
        let registry = self.registry.as_ref()?;
        let health = match registry.send(Snapshot).timeout(self.interval / 2).await {
            Ok(health) => health,
            Err(e) => {
                tracing::warn!(server_id = %self.server_id, error = %e, "actor tree not taken for the heartbeat");
                return None;
            }
        };
        match serde_json::to_value(&health.repositories) {
            Ok(tree) => Some(tree),
            Err(e) => {
                tracing::warn!(server_id = %self.server_id, error = %e, "actor tree not written for the heartbeat");
                None
            }
        }
    }
}

impl Beating {
    /// Stops beating (so no late heartbeat follows) and records that the
    /// process stopped.
    pub async fn stop(self) {
        self.task.abort();
        let id = self.heartbeat.server_id.clone();
        match self
            .heartbeat
            .store
            .write(move |c| instances::mark_stopped(c, &id))
            .await
        {
            Ok(_) => tracing::info!(server_id = %self.heartbeat.server_id, "server marked stopped"),
            Err(e) => tracing::warn!(
                server_id = %self.heartbeat.server_id,
                error = %e,
                "cannot mark this server stopped; it shows as not alive once its heartbeat is old"
            ),
        }
    }
}
