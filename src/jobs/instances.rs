//! This process in the registry of server processes: registered when it
//! starts, a heartbeat every `lease_heartbeat_secs` (the same beat as its
//! leases), marked stopped when it stops cleanly. Each heartbeat reads back
//! whether an operator asked it to drain and publishes the answer in the
//! [`DrainRequested`] handle the actors share.

use crate::actors::drain::DrainRequested;
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
        InstanceHeartbeat {
            store: store.clone(),
            server_id: ActorSettings::new_server_id(&config.instance_id),
            instance_id: config.instance_id.clone(),
            interval: Duration::from_secs(config.lease_heartbeat_secs),
            drain_requested: DrainRequested::default(),
        }
    }

    /// Registers the process, then beats in the background. A registration
    /// the store refuses is only logged: the server can take webhooks
    /// without it, and the next heartbeat registers the process again.
    pub async fn start(self) -> Beating {
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
        loop {
            ticks.tick().await;
            self.beat().await;
        }
    }

    /// One heartbeat; a store error leaves the last drain answer as it was.
    async fn beat(&self) {
        let (id, instance) = (self.server_id.clone(), self.instance_id.clone());
        let beat = self
            .store
            .write(move |c| instances::heartbeat(c, &id, &instance, VERSION))
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
            }
            Err(e) => {
                tracing::warn!(server_id = %self.server_id, error = %e, "heartbeat not stored")
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
