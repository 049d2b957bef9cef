//! `codex-bridge worker --server URL --token-file FILE`: a remote worker.
//! It leases the repositories an operator gave it on the server, long-polls
//! for the agent calls of each, runs them on its own Codex (its own
//! `codex_bin`, `codex_home`) in its own workspaces (its own
//! `workspace_root`, cloned with its own `gitea_token`), and answers.
//!
//! Everything it owes the server goes through its journal's outbox first
//! ([`journal`]): after a restart it re-sends that before anything else,
//! and a turn it lost track of (sent to Codex, no end recorded) makes it
//! take no new lease until an operator settles it: it declares the
//! uncertainty rather than guessing. A revoked worker stops.

mod calls;
pub mod client;
pub mod journal;
mod late_final;
pub mod reconcile;

use crate::config::Config;
use crate::worker_api::{Answer, Call, CallBody, EventBatch, LeaseGrant};
use calls::{Pump, Runtime};
use client::{ClientError, ServerClient};
use futures_util::StreamExt;
use journal::{Journal, Kind};
use secrecy::SecretString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How long a poll waits on the server for a call.
const POLL_WAIT: Duration = Duration::from_secs(20);
/// How long the worker waits before asking again after a refusal or a
/// network failure.
const BACKOFF: Duration = Duration::from_secs(2);
/// How often a worker holding for uncertain turns looks at its journal
/// again: an operator settles them from another process.
const SETTLED_CHECK: Duration = Duration::from_secs(2);
/// How often the worker tells the server it is alive (the server takes it
/// for offline after a minute without), and how often an owed final is
/// offered again at the most.
const HEARTBEAT: Duration = Duration::from_secs(10);

/// Reads the worker's token: the file's one line, trimmed. Never logged.
pub fn read_token(path: &Path) -> anyhow::Result<SecretString> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        anyhow::anyhow!(
            "cannot read the worker token file {} (--token-file): {e}",
            path.display()
        )
    })?;
    let token = text.trim();
    if token.is_empty() {
        anyhow::bail!(
            "the worker token file {} is empty; put the token the server showed when the worker \
             was registered in it",
            path.display()
        );
    }
    Ok(SecretString::from(token.to_owned()))
}

/// Why the worker stopped, for the others to see.
type Stop = watch::Sender<Option<String>>;

#[derive(Clone)]
struct Worker {
    client: ServerClient,
    runtime: Runtime,
    journal: Journal,
    stop: Arc<Stop>,
    /// Held while an owed final is offered (see [`late_final`]).
    offering: Arc<tokio::sync::Mutex<()>>,
    /// Streams whose refused batches were already logged
    /// ([`late_final::first_refusal`]).
    refused_streams: Arc<std::sync::Mutex<std::collections::VecDeque<String>>>,
}

/// Marks the journal's uncertain turns settled (the operator reconciled
/// their tasks on the server and saw no turn still running here); says how
/// many. Runs nothing.
pub fn settle_uncertain(config: &Config) -> anyhow::Result<usize> {
    let journal = Journal::open(&config.journal_path)?;
    let uncertain = journal.uncertain()?;
    for u in &uncertain {
        tracing::warn!(
            repository = %u.repository,
            operation.id = %u.operation_id,
            "an operator settled an uncertain turn of this worker"
        );
    }
    journal.settle_uncertain()
}

/// Runs the worker until it is revoked (or its token is refused).
pub async fn run(config: Config, server: String, token: SecretString) -> anyhow::Result<()> {
    let journal = Journal::open(&config.journal_path)?;
    let (notices, mut notice_rx) = crate::codex::notice_channel();
    tokio::spawn(async move {
        while let Some(n) = notice_rx.recv().await {
            tracing::info!(action = n.action(), "codex notice");
        }
    });
    let codex = crate::codex::CodexAgent::new(crate::app::codex_settings(&config)?, notices);
    let root = crate::workspace::WorkspaceManager::new(
        config.workspace_root.clone(),
        config.instance_id.clone(),
        None,
    );
    std::fs::create_dir_all(&config.workspace_root).map_err(|e| {
        anyhow::anyhow!(
            "cannot create workspace_root {}: {e}",
            config.workspace_root.display()
        )
    })?;
    let root: PathBuf = root
        .root()
        .map_err(|e| anyhow::anyhow!("config key `workspace_root`: {e}"))?;
    let (stop, mut stopped) = watch::channel(None);
    let worker = Worker {
        client: ServerClient::new(&server, token),
        runtime: Runtime {
            agent: Arc::new(codex),
            root,
            workspace_root: config.workspace_root.clone(),
            gitea_url: config.gitea_url.clone(),
            gitea_token: config.gitea_token.clone(),
            journal: journal.clone(),
        },
        journal,
        stop: Arc::new(stop),
        offering: Arc::default(),
        refused_streams: Arc::default(),
    };

    // The outbox first: what the server may be waiting for.
    worker.resend_outbox().await?;
    let uncertain = worker.journal.uncertain()?;
    for u in &uncertain {
        tracing::error!(
            repository = %u.repository,
            operation.id = %u.operation_id,
            turn.id = u.turn_id.as_deref().unwrap_or("(none)"),
            task.id = u.task_id.as_deref().unwrap_or("(not named)"),
            attempt.id = u.attempt_id.as_deref().unwrap_or("(not named)"),
            "a turn this worker sent to Codex has no recorded end: it may have run. This worker \
             takes no new work until an operator settles it (the server's task is reconciled, \
             never run again)"
        );
    }
    let repositories = loop {
        match worker.heartbeat().await {
            Ok(r) => break r,
            Err(e) if e.is_fatal() => return Err(e.into()),
            Err(e) => {
                tracing::warn!(error = %e, "the server's heartbeat failed; trying again");
                tokio::time::sleep(BACKOFF).await;
            }
        }
    };
    tracing::info!(repositories = ?repositories, "worker registered with the server");
    if uncertain.is_empty() {
        for repo in repositories {
            tokio::spawn(worker.clone().lease_loop(repo));
        }
    } else {
        tracing::warn!(
            uncertain = uncertain.len(),
            "holding: no lease is taken until an operator checks that no Codex turn still runs \
             here and settles each uncertain attempt: on this machine, `codex-bridge reconcile \
             TASK ATTEMPT failed --confirm-no-active-turn --server URL --token-file FILE` (the \
             server's task and this journal at once; this worker then leases again), or on the \
             server and then a restart of this worker with --settle-uncertain \
             --confirm-no-active-turn"
        );
        tokio::spawn(worker.clone().hold_until_settled(repositories));
    }
    let beat = worker.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(HEARTBEAT).await;
            if let Err(e) = beat.heartbeat().await {
                beat.fail(&e);
            }
        }
    });
    // Apart from the heartbeat, so that a server slow to answer an offer
    // never makes the worker look offline.
    let offers = worker.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(HEARTBEAT).await;
            offers.offer_open_finals().await;
        }
    });
    let why = loop {
        if let Some(why) = stopped.borrow_and_update().clone() {
            break why;
        }
        if stopped.changed().await.is_err() {
            break "the worker's control channel closed".to_owned();
        }
    };
    anyhow::bail!("{why}")
}

impl Worker {
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&ServerClient) -> Result<T, ClientError> + Send + 'static,
    ) -> Result<T, ClientError> {
        let client = self.client.clone();
        tokio::task::spawn_blocking(move || f(&client))
            .await
            .map_err(|e| ClientError::Transport(format!("the request stopped: {e}")))?
    }

    /// Tells the server this worker is alive, its version and how many
    /// uncertain turns its journal holds; what it may work on.
    async fn heartbeat(&self) -> Result<Vec<String>, ClientError> {
        let uncertain = match self.journal.uncertain() {
            Ok(u) => u32::try_from(u.len()).ok(),
            Err(e) => {
                tracing::warn!(error = %e, "cannot count the journal's uncertain turns; the heartbeat does not say");
                None
            }
        };
        self.blocking(move |c| c.heartbeat(env!("CARGO_PKG_VERSION"), uncertain))
            .await
    }

    /// A fatal refusal stops the whole worker.
    fn fail(&self, e: &ClientError) {
        if e.is_fatal() {
            tracing::error!(error = %e, "the worker stops");
            self.stop.send_replace(Some(e.to_string()));
        }
    }

    fn stopping(&self) -> bool {
        self.stop.borrow().is_some()
    }

    /// Leases the repositories once the journal has no uncertain turn left
    /// (an operator settled them from another process).
    async fn hold_until_settled(self, repositories: Vec<String>) {
        loop {
            tokio::time::sleep(SETTLED_CHECK).await;
            if self.stopping() {
                return;
            }
            match self.journal.uncertain() {
                Ok(left) if left.is_empty() => break,
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "cannot read the journal's uncertain turns"),
            }
        }
        tracing::info!("no uncertain turn is left in the journal: taking leases again");
        // Said before the first lease, so that the admin view stops showing
        // the worker as uncertain as soon as it works again, not a
        // heartbeat later.
        if let Err(e) = self.heartbeat().await {
            tracing::warn!(error = %e, "the server's heartbeat failed; the next one says it");
            self.fail(&e);
        }
        for repo in repositories {
            tokio::spawn(self.clone().lease_loop(repo));
        }
    }

    /// Sends what the journal says is owed, oldest first.
    async fn resend_outbox(&self) -> anyhow::Result<()> {
        for owed in self.journal.owed()? {
            self.deliver(owed.id, &owed.lease_id, owed.kind, owed.body)
                .await;
        }
        Ok(())
    }

    /// Sends one owed request until the server took it, or no longer waits
    /// for it (its lease ended: the server reconciles the call instead).
    async fn deliver(&self, id: i64, lease_id: &str, kind: Kind, body: String) {
        loop {
            let (l, b) = (lease_id.to_owned(), body.clone());
            let sent = self
                .blocking(move |c| match kind {
                    Kind::Answer => {
                        let a: Answer = serde_json::from_str(&b)
                            .map_err(|e| ClientError::Transport(e.to_string()))?;
                        c.answer(&l, &a)
                    }
                    Kind::Events => {
                        let e: EventBatch = serde_json::from_str(&b)
                            .map_err(|e| ClientError::Transport(e.to_string()))?;
                        c.events(&l, &e)
                    }
                })
                .await;
            match sent {
                Ok(()) => break,
                Err(ClientError::Transport(e)) if !self.stopping() => {
                    tracing::warn!(error = %e, "sending to the server failed; the journal keeps it, trying again");
                    tokio::time::sleep(BACKOFF).await;
                }
                Err(e) => {
                    self.fail(&e);
                    if late_final::offers_final(kind, &e) {
                        self.stream_refused(&body, &e).await;
                    } else {
                        tracing::warn!(error = %e, "the server no longer waits for this; it stays in the journal");
                    }
                    break;
                }
            }
        }
        if let Err(e) = self.journal.sent(id) {
            tracing::error!(error = %e, "the journal did not take a delivery");
        }
    }

    /// Journals, then sends.
    async fn owe(&self, lease_id: &str, kind: Kind, body: String) {
        match self.journal.owe(lease_id, kind, &body) {
            Ok(id) => self.deliver(id, lease_id, kind, body).await,
            Err(e) => tracing::error!(error = %e, "not sent: the journal must take it first"),
        }
    }

    async fn lease_loop(self, repository: String) {
        while !self.stopping() {
            let repo = repository.clone();
            let home = self.runtime.agent.home();
            match self
                .blocking(move |c| c.lease(&repo, home.as_deref()))
                .await
            {
                Ok(grant) => {
                    tracing::info!(repository = %repository, lease.id = %grant.lease_id, fence = grant.fence, "lease taken");
                    self.serve(grant).await;
                }
                Err(ClientError::Held) => tokio::time::sleep(BACKOFF).await,
                Err(e) => {
                    self.fail(&e);
                    tracing::warn!(repository = %repository, error = %e, "cannot lease the repository");
                    tokio::time::sleep(BACKOFF).await;
                }
            }
        }
    }

    /// Polls the lease's calls and runs them until the lease ends.
    async fn serve(&self, grant: LeaseGrant) {
        let (lost_tx, lost_rx) = watch::channel(false);
        let renewer = {
            let w = self.clone();
            let lease_id = grant.lease_id.clone();
            let every = Duration::from_secs((grant.ttl_secs / 3).max(1));
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    let l = lease_id.clone();
                    match w.blocking(move |c| c.renew(&l)).await {
                        Ok(_) => {}
                        Err(ClientError::Transport(e)) => {
                            tracing::warn!(error = %e, "cannot renew the lease; trying again");
                        }
                        Err(e) => {
                            w.fail(&e);
                            let _ = lost_tx.send(true);
                            return;
                        }
                    }
                }
            })
        };
        while !*lost_rx.borrow() && !self.stopping() {
            let l = grant.lease_id.clone();
            match self.blocking(move |c| c.poll(&l, POLL_WAIT)).await {
                Ok(batch) => {
                    for call in batch.calls {
                        tokio::spawn(self.clone().execute(grant.repository.clone(), call));
                    }
                }
                Err(ClientError::Transport(e)) => {
                    tracing::warn!(error = %e, "polling the server failed; trying again");
                    tokio::time::sleep(BACKOFF).await;
                }
                Err(e) => {
                    self.fail(&e);
                    tracing::warn!(error = %e, lease.id = %grant.lease_id, "the lease ended");
                    break;
                }
            }
        }
        renewer.abort();
    }

    async fn execute(self, repository: String, call: Call) {
        let kind = call.body.kind();
        tracing::debug!(call.id = %call.call_id, kind, "running a call");
        if let CallBody::StartTurn {
            attempt: Some(a), ..
        }
        | CallBody::StartReview {
            attempt: Some(a), ..
        } = &call.body
        {
            // Before the turn is journalled as sent: an uncertain turn
            // always names the attempt an operator reconciles.
            if let Err(e) = self
                .journal
                .turn_attempt(&call.call_id, &a.task_id, &a.attempt_id)
            {
                tracing::error!(error = %e, "the journal did not take a turn's attempt");
            }
        }
        let (outcome, pump) = self
            .runtime
            .run(&call.call_id, &repository, call.body)
            .await;
        let answer = Answer {
            call_id: call.call_id.clone(),
            outcome,
        };
        match serde_json::to_string(&answer) {
            Ok(body) => self.owe(&call.lease_id, Kind::Answer, body).await,
            Err(e) => tracing::error!(error = %e, "cannot write an answer"),
        }
        if let Some(pump) = pump {
            self.pump(&call.lease_id, pump).await;
        }
    }

    /// Sends a turn's events as they come, each journalled first.
    async fn pump(&self, lease_id: &str, mut pump: Pump) {
        let mut place = 0;
        while let Some(event) = pump.events.next().await {
            let wire = crate::agent::remote::convert::to_wire(event);
            let ends = wire.ends_turn();
            if ends {
                self.runtime.turn_ended(&pump.stream, &wire);
            }
            let batch = EventBatch {
                stream: pump.stream.clone(),
                first: place,
                events: vec![wire],
            };
            place += 1;
            match serde_json::to_string(&batch) {
                Ok(body) => self.owe(lease_id, Kind::Events, body).await,
                Err(e) => tracing::error!(error = %e, "cannot write an event batch"),
            }
            if ends {
                break;
            }
        }
    }
}
