//! How long a dead instance's repositories wait: instance A holds every
//! repository's lease with a turn running in each, the others run beside it,
//! then A stops abruptly. For each repository, the time from A's last
//! renewal to another instance's taking the lease, both by PostgreSQL's
//! clock (the one leases are written by).

use crate::pg::PgDatabase;
use crate::rig::{self, Instance, Observer, Timings};
use anyhow::{bail, ensure, Context as _, Result};
use codex_bridge::agent::scripted::{Script, ScriptedAgent, Step};
use codex_bridge::store::ingest::IngestOutcome;
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Figures {
    pub repos: usize,
    pub timings: Timings,
    /// Seconds from A's last renewal to the new holder's, one per repository.
    pub moves: Vec<f64>,
    /// Taken from A's expired lease directly (`lease.taken_over`), or after
    /// a sweep had released it (`lease.handed_over`).
    pub taken_over: usize,
    pub handed_over: usize,
    /// Repositories each surviving instance took, in launch order.
    pub by_instance: Vec<usize>,
}

/// What each instance's runtime does with the bench's turns: run until
/// stopped, so that A holds its leases for as long as it lives.
fn runtime() -> ScriptedAgent {
    let runtime = ScriptedAgent::new();
    runtime.on("slow", Script::steps(vec![Step::Hang]));
    runtime
}

pub fn run(db: &PgDatabase, repos: usize, survivors: usize, timings: Timings) -> Result<Figures> {
    let mut stores = rig::open_stores(&db.url, 1 + survivors, &[])?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    for r in 0..repos {
        let req = crate::common::trigger_request(
            &format!("repo{r}"),
            1,
            r as i64 + 1,
            &format!("takeover-{r}"),
            format!("@ccbot slow {r}"),
        );
        match rt.block_on(stores[0].ingest(req))? {
            IngestOutcome::Accepted { .. } => {}
            other => bail!("a task was not accepted: {other:?}"),
        }
    }
    let ws = tempfile::tempdir()?;
    let a_store = stores.remove(0);
    let mut a = Instance::launch("a", a_store, runtime(), timings, ws.path().join("a"))?;
    let mut db_view = Observer::connect(&db.url)?;
    a.go();
    let a_owner = a.owner.clone();
    rig::wait_until(
        "instance A running a turn in every repository, under its lease",
        Duration::from_secs(60),
        Duration::from_millis(20),
        || {
            let held = db_view
                .leases()?
                .iter()
                .filter(|l| l.owner == a_owner && l.released_at.is_none())
                .count();
            Ok(a.runtime.calls().len() == repos && held == repos)
        },
    )?;
    let mut others = stores
        .into_iter()
        .enumerate()
        .map(|(i, store)| {
            Instance::launch(
                &format!("s{i}"),
                store,
                runtime(),
                timings,
                ws.path().join(format!("s{i}")),
            )
        })
        .collect::<Result<Vec<_>>>()?;
    for o in &mut others {
        o.go();
    }
    // The others sweep and try the repositories while A renews: none may
    // take a lease A still holds.
    std::thread::sleep(2 * timings.sweep.max(timings.heartbeat));
    let early = db_view
        .leases()?
        .into_iter()
        .filter(|l| l.owner != a_owner)
        .count();
    ensure!(early == 0, "{early} leases moved while A was alive");
    a.crash()?;
    let limit = timings.lease_ttl + timings.sweep + Duration::from_secs(20);
    rig::wait_until(
        "every repository taken over from A",
        limit,
        Duration::from_millis(20),
        || Ok(db_view.leases()?.iter().all(|l| l.owner != a_owner)),
    )?;
    let figures = moves(&mut db_view, &a_owner, &others, repos, timings)?;
    drop(others);
    Ok(figures)
}

/// Reads each move from the audit of the takeover (A's expiry, so its last
/// renewal) and the new holder's lease row (its acquisition).
fn moves(
    db_view: &mut Observer,
    a_owner: &str,
    others: &[Instance],
    repos: usize,
    timings: Timings,
) -> Result<Figures> {
    let leases: BTreeMap<String, rig::LeaseRow> = db_view
        .leases()?
        .into_iter()
        .map(|l| (l.repo_key.clone(), l))
        .collect();
    let ttl = timings.lease_ttl.as_secs_f64();
    let (mut moves, mut taken_over, mut handed_over) = (Vec::new(), 0, 0);
    let mut by_instance = vec![0; others.len()];
    for audit in db_view.lease_audits()? {
        let meta: serde_json::Value = serde_json::from_str(&audit.metadata)?;
        let text = |k: &str| meta.get(k).and_then(|v| v.as_str()).unwrap_or_default();
        if text("previousOwner") != a_owner {
            continue;
        }
        match audit.action.as_str() {
            "lease.taken_over" => taken_over += 1,
            "lease.handed_over" => handed_over += 1,
            _ => continue,
        }
        let lease = leases
            .get(text("repoKey"))
            .context("a takeover of a repository with no lease row")?;
        // The row's acquisition time is PostgreSQL's; the audit's own time
        // is the writing process's, used only if the lease moved again.
        let acquired = if lease.lease_id == text("leaseId") {
            lease.acquired_at.as_str()
        } else {
            audit.at.as_str()
        };
        let since_expiry = rig::seconds_between(text("previousExpiresAt"), acquired)?;
        ensure!(
            since_expiry >= 0.0,
            "{} was taken {:.3} s before A's lease expired",
            text("repoKey"),
            -since_expiry
        );
        moves.push(ttl + since_expiry);
        if let Some(i) = others.iter().position(|o| o.owner == text("owner")) {
            by_instance[i] += 1;
        }
    }
    ensure!(
        moves.len() == repos,
        "{} takeovers from A audited for {repos} repositories",
        moves.len()
    );
    moves.sort_by(f64::total_cmp);
    Ok(Figures {
        repos,
        timings,
        moves,
        taken_over,
        handed_over,
        by_instance,
    })
}
