//! The outside load generator: Debian's `wrk` replaying pre-signed Gitea
//! deliveries against the same server, as a load generator that is not this
//! benchmark's own code would. Its figures sit beside the in-process
//! generator's, each next to the HMAC-only ceiling the same generator
//! measured in the same run.
//!
//! The deliveries are built (and signed) before the clock starts and written
//! to a pool file in memory (`/dev/shm` where it exists): a file on disk
//! would be written back while the server's commits wait on the same disk.
//! wrk runs one thread, as the in-process generator does, so that the
//! server keeps the other core.
//!
//! Each scenario runs wrk twice on one fresh server: first for the warm-up's
//! length (fresh database, cold caches: reported apart), then for the
//! measured phase, each from its own part of the pool, so no delivery is
//! ever sent twice to a server that stores them.

use super::{RequestFactory, Scenario};
use anyhow::{bail, Context, Result};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const SCRIPT: &str = include_str!("replay.lua");
/// Requests per pool part (about 8 MB): what wrk's thread reads at a time.
const PART: usize = 1_024;
/// Deliveries per second a pool is sized for when no rate of this scenario is
/// known yet: above the store's ceiling on this kind of machine.
pub const DEFAULT_RATE: f64 = 25_000.0;
/// Requests in the HMAC-only pool, which wrk replays in a loop (nothing is
/// stored, so a repeat costs what a new one does).
const CYCLIC_POOL: usize = 8_000;

/// What one wrk run reported.
#[derive(Debug, Clone, Default)]
pub struct WrkOutcome {
    pub requests: u64,
    pub seconds: f64,
    /// Answered with a 2xx (202 for every new delivery; a 200 could only be
    /// a delivery sent twice after the pool wrapped, which `wrapped` says).
    pub accepted: u64,
    /// Answered outside 2xx/3xx.
    pub other: u64,
    pub socket_errors: u64,
    pub wrapped: bool,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl WrkOutcome {
    /// Accepted per second for a server that stores; answered per second for
    /// the HMAC-only ceiling, where every request is answered 202 as well.
    pub fn rate(&self) -> f64 {
        self.accepted as f64 / self.seconds.max(1e-9)
    }

    fn parse(stdout: &str) -> Result<WrkOutcome> {
        let line = stdout
            .lines()
            .find_map(|l| l.strip_prefix("WRK-RESULT "))
            .with_context(|| format!("wrk printed no result line; its output:\n{stdout}"))?;
        let mut o = WrkOutcome::default();
        let mut duration_us = 0u64;
        let (mut p50, mut p99, mut max) = (0u64, 0u64, 0u64);
        let mut wrapped = 0u64;
        for field in line.split_whitespace() {
            let (k, v) = field
                .split_once('=')
                .with_context(|| format!("wrk's result `{line}`: `{field}` is not key=value"))?;
            let v: u64 = v
                .parse()
                .with_context(|| format!("wrk's result `{line}`: `{field}` is not a count"))?;
            match k {
                "requests" => o.requests = v,
                "duration_us" => duration_us = v,
                "accepted" => o.accepted = v,
                "other" => o.other = v,
                "wrapped" => wrapped = v,
                "socket_errors" => o.socket_errors = v,
                "p50_us" => p50 = v,
                "p99_us" => p99 = v,
                "max_us" => max = v,
                _ => {}
            }
        }
        o.seconds = duration_us as f64 / 1e6;
        o.wrapped = wrapped > 0;
        o.p50_ms = p50 as f64 / 1000.0;
        o.p99_ms = p99 as f64 / 1000.0;
        o.max_ms = max as f64 / 1000.0;
        Ok(o)
    }
}

/// The wrk binary, or an error saying how to get it.
pub fn wrk() -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin")])
        .map(|d| d.join("wrk"))
        .find(|p| p.is_file())
        .context(
            "the outside load generator needs Debian's `wrk` (scripts/bench installs it as root; \
             otherwise: sudo apt-get install wrk)",
        )
}

/// Pool files of one scenario: in memory where the machine has `/dev/shm`.
pub struct Pools {
    dir: tempfile::TempDir,
    next_seq: u64,
}

impl Pools {
    pub fn new() -> Result<Pools> {
        let shm = Path::new("/dev/shm");
        let mut b = tempfile::Builder::new();
        b.prefix("codex-bridge-wrk-");
        let dir = if shm.is_dir() {
            b.tempdir_in(shm)
        } else {
            b.tempdir()
        }
        .context("creating a directory for wrk's request pools")?;
        Ok(Pools { dir, next_seq: 0 })
    }

    /// Writes `count` new deliveries as the pool `name` of wrk's thread 0,
    /// in parts; returns the path wrk is given (the script appends the
    /// thread's and the part's numbers).
    pub fn write(&mut self, factory: &RequestFactory, name: &str, count: usize) -> Result<PathBuf> {
        let base = self.dir.path().join(name);
        let mut left = count;
        let mut part = 0;
        while left > 0 {
            let n = left.min(PART);
            let path = PathBuf::from(format!("{}.0.{part}", base.display()));
            let file = std::fs::File::create(&path)
                .with_context(|| format!("creating the pool file {}", path.display()))?;
            let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
            for req in factory.build(self.next_seq, n)? {
                write!(out, "{:010}", req.len())?;
                out.write_all(&req)?;
            }
            out.flush()?;
            self.next_seq += n as u64;
            left -= n;
            part += 1;
        }
        Ok(base)
    }

    /// The pool the HMAC-only server is replayed from in a loop.
    pub fn cyclic(&mut self, factory: &RequestFactory) -> Result<PathBuf> {
        self.write(factory, "cyclic", CYCLIC_POOL)
    }

    fn script(&self) -> Result<PathBuf> {
        let path = self.dir.path().join("replay.lua");
        std::fs::write(&path, SCRIPT).context("writing wrk's script")?;
        Ok(path)
    }
}

/// Pool size for a phase of `duration` at up to `rate` deliveries per second.
pub fn pool_size(rate: f64, duration: Duration, connections: usize) -> usize {
    (rate * 2.0 * duration.as_secs_f64()) as usize + connections * 32
}

/// Runs wrk against `addr` for `duration` over `connections` connections.
pub fn run(
    pools: &Pools,
    pool: &Path,
    addr: SocketAddr,
    connections: usize,
    duration: Duration,
) -> Result<WrkOutcome> {
    let script = pools.script()?;
    let secs = duration.as_secs_f64().ceil().max(1.0) as u64;
    let out = Command::new(wrk()?)
        .args(["-t1", &format!("-c{connections}"), &format!("-d{secs}s")])
        .args(["--timeout", "30s", "-s"])
        .arg(&script)
        .arg(format!("http://{addr}/api/gitea/webhook"))
        .arg("--")
        .arg(pool)
        .output()
        .context("running wrk")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "wrk exited with {}: {}{}",
            out.status,
            stdout,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    WrkOutcome::parse(&stdout)
}

/// The row of one scenario: its first seconds and its steady state.
pub struct OutsideReport {
    pub scenario: Scenario,
    pub first: WrkOutcome,
    pub steady: WrkOutcome,
}

impl OutsideReport {
    pub fn json(&self) -> serde_json::Value {
        let one = |o: &WrkOutcome| {
            serde_json::json!({
                "requests": o.requests,
                "seconds": o.seconds,
                "accepted": o.accepted,
                "otherStatus": o.other,
                "socketErrors": o.socket_errors,
                "poolWrapped": o.wrapped,
                "perSecond": o.rate(),
                "p50Ms": o.p50_ms,
                "p99Ms": o.p99_ms,
                "maxMs": o.max_ms,
            })
        };
        serde_json::json!({
            "scenario": self.scenario.name(),
            "firstSeconds": one(&self.first),
            "steady": one(&self.steady),
        })
    }

    /// What makes this row's figures unusable, if anything.
    pub fn problem(&self) -> Option<String> {
        let stores = self.scenario.stores();
        for (phase, o) in [("first seconds", &self.first), ("steady", &self.steady)] {
            let failed = o.other + o.socket_errors;
            if o.requests == 0 {
                return Some(format!("{phase}: wrk sent nothing"));
            }
            if failed as f64 > super::MAX_ERROR_RATE * o.requests as f64 {
                return Some(format!(
                    "{phase}: {} of {} requests failed ({} other status, {} socket errors)",
                    failed, o.requests, o.other, o.socket_errors
                ));
            }
            if stores && o.wrapped {
                return Some(format!(
                    "{phase}: the pool ran out, so deliveries were sent twice"
                ));
            }
        }
        None
    }
}

/// Prints the outside generator's table and its checks; returns whether the
/// targets were met.
pub fn print(reports: &[OutsideReport], connections: usize) -> bool {
    println!(
        "\noutside generator: wrk, 1 thread, {connections} connections, pre-signed {}-byte Gitea bodies",
        super::FIXTURE.len()
    );
    println!(
        "| {:<16} | {:>12} | {:>10} | {:>8} | {:>8} | {:>8} |",
        "scenario", "first s, /s", "steady /s", "p50 ms", "p99 ms", "max ms"
    );
    println!(
        "|{:-<18}|{:->14}|{:->12}|{:->10}|{:->10}|{:->10}|",
        "", "", "", "", "", ""
    );
    for r in reports {
        println!(
            "| {:<16} | {:>12.0} | {:>10.0} | {:>8.2} | {:>8.2} | {:>8.1} |",
            r.scenario.name(),
            r.first.rate(),
            r.steady.rate(),
            r.steady.p50_ms,
            r.steady.p99_ms,
            r.steady.max_ms
        );
        if let Some(p) = r.problem() {
            println!("  {}: {p}", r.scenario.name());
        }
    }
    let ceiling = reports
        .iter()
        .find(|r| r.scenario == Scenario::HmacOnly)
        .map(|r| r.steady.rate());
    let mut met = true;
    for r in reports
        .iter()
        .filter(|r| r.scenario == Scenario::SqliteGroup)
    {
        let p99_ok = r.steady.p99_ms <= super::TARGET_P99_MS;
        met &= p99_ok && r.problem().is_none();
        println!(
            "  [{}] {} p99 {:.2} ms (target <= {} ms)",
            if p99_ok { "ok" } else { "MISSED" },
            r.scenario.name(),
            r.steady.p99_ms,
            super::TARGET_P99_MS
        );
        if let Some(c) = ceiling {
            let share = r.steady.rate() / c.max(1e-9);
            let ok = share >= super::TARGET_CEILING_SHARE;
            met &= ok;
            println!(
                "  [{}] {} at {share:.2} of wrk's HMAC-only ceiling {c:.0}/s (target >= {})",
                if ok { "ok" } else { "MISSED" },
                r.scenario.name(),
                super::TARGET_CEILING_SHARE
            );
        }
    }
    met
}
