//! The ingest benchmark's results: one report per scenario, the table, the
//! targets checked against the ceiling of the same run, and the JSON record.

use super::*;

pub(super) struct Report {
    pub(super) name: &'static str,
    pub(super) sent: u64,
    pub(super) accepted: u64,
    pub(super) errors: u64,
    pub(super) errors_by_kind: BTreeMap<String, u64>,
    pub(super) error_samples: Vec<String>,
    pub(super) accepted_per_s: f64,
    pub(super) p50_ms: Option<f64>,
    pub(super) p99_ms: Option<f64>,
    pub(super) max_ms: Option<f64>,
    pub(super) each_second: Vec<u64>,
    pub(super) elapsed_s: f64,
    pub(super) pool_exhausted: bool,
    pub(super) warmup_rate: Option<f64>,
    /// Share of one core used during the measured phase.
    pub(super) client_cpu: Option<f64>,
    pub(super) server_cpu: Option<f64>,
    pub(super) db_cpu: Option<f64>,
    pub(super) other_cpu: Option<f64>,
    pub(super) server_log_lines: u64,
    pub(super) server_warnings: u64,
    pub(super) notes: Vec<String>,
    pub(super) failure: Option<String>,
}

impl Report {
    pub(super) fn failed(scenario: Scenario, why: String) -> Report {
        eprintln!("[{}] FAILED: {why}", scenario.name());
        Report {
            name: scenario.name(),
            sent: 0,
            accepted: 0,
            errors: 0,
            errors_by_kind: BTreeMap::new(),
            error_samples: Vec::new(),
            accepted_per_s: 0.0,
            p50_ms: None,
            p99_ms: None,
            max_ms: None,
            each_second: Vec::new(),
            elapsed_s: 0.0,
            pool_exhausted: false,
            warmup_rate: None,
            client_cpu: None,
            server_cpu: None,
            db_cpu: None,
            other_cpu: None,
            server_log_lines: 0,
            server_warnings: 0,
            notes: Vec::new(),
            failure: Some(why),
        }
    }

    pub(super) fn from_outcome(
        scenario: Scenario,
        mut o: PhaseOutcome,
        warmup_rate: Option<f64>,
    ) -> Report {
        o.latencies_us.sort_unstable();
        let elapsed = o.elapsed.as_secs_f64().max(1e-9);
        Report {
            name: scenario.name(),
            sent: o.sent,
            accepted: o.accepted,
            errors: o.error_count(),
            accepted_per_s: o.accepted as f64 / elapsed,
            p50_ms: percentile_ms(&o.latencies_us, 0.50),
            p99_ms: percentile_ms(&o.latencies_us, 0.99),
            max_ms: o.latencies_us.last().map(|&us| f64::from(us) / 1000.0),
            elapsed_s: elapsed,
            each_second: std::mem::take(&mut o.each_second),
            pool_exhausted: o.pool_exhausted,
            warmup_rate,
            client_cpu: o.client_cpu,
            server_cpu: o.server_cpu,
            db_cpu: o.db_cpu,
            other_cpu: o.other_cpu,
            server_log_lines: 0,
            server_warnings: 0,
            errors_by_kind: o.errors,
            error_samples: o.error_samples,
            notes: Vec::new(),
            failure: None,
        }
    }

    pub(super) fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "scenario": self.name,
            "ok": self.failure.is_none(),
            "failure": self.failure,
            "sent": self.sent,
            "accepted": self.accepted,
            "errors": self.errors,
            "errorsByKind": self.errors_by_kind,
            "acceptedPerSecond": self.accepted_per_s,
            "p50Ms": self.p50_ms,
            "p99Ms": self.p99_ms,
            "maxMs": self.max_ms,
            "acceptedEachSecond": self.each_second,
            "measuredSeconds": self.elapsed_s,
            "warmupRequestsPerSecond": self.warmup_rate,
            "clientCpuCores": self.client_cpu,
            "serverCpuCores": self.server_cpu,
            "postgresBackendsCpuCores": self.db_cpu,
            "otherCpuCores": self.other_cpu,
            "serverLogLines": self.server_log_lines,
            "serverWarnings": self.server_warnings,
            "notes": self.notes,
        })
    }
}

/// Nearest-rank percentile of sorted microseconds, in milliseconds.
pub(super) fn percentile_ms(sorted_us: &[u32], p: f64) -> Option<f64> {
    let n = sorted_us.len();
    if n == 0 {
        return None;
    }
    let rank = ((p * n as f64).ceil() as usize).clamp(1, n);
    Some(f64::from(sorted_us[rank - 1]) / 1000.0)
}

pub(super) fn fmt_opt(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.decimals$}"))
}

pub(super) fn fmt_cpu(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{:.0}%", v * 100.0))
}

pub(super) fn print_table(reports: &[Report]) {
    println!(
        "{:<15} {:>11} {:>8} {:>8} {:>8} {:>7} {:>9} {:>8} {:>8} {:>7} {:>9}  status",
        "scenario",
        "accepted/s",
        "p50 ms",
        "p99 ms",
        "max ms",
        "errors",
        "requests",
        "cli cpu",
        "srv cpu",
        "pg cpu",
        "other cpu"
    );
    for r in reports {
        let status = match &r.failure {
            None => "ok".to_string(),
            Some(f) => format!("FAILED: {f}"),
        };
        println!(
            "{:<15} {:>11.1} {:>8} {:>8} {:>8} {:>7} {:>9} {:>8} {:>8} {:>7} {:>9}  {status}",
            r.name,
            r.accepted_per_s,
            fmt_opt(r.p50_ms, 2),
            fmt_opt(r.p99_ms, 2),
            fmt_opt(r.max_ms, 2),
            r.errors,
            r.sent,
            fmt_cpu(r.client_cpu),
            fmt_cpu(r.server_cpu),
            fmt_cpu(r.db_cpu),
            fmt_cpu(r.other_cpu),
        );
        for note in &r.notes {
            println!("{:<15} note: {note}", "");
        }
    }
    println!(
        "(cpu = share of one core during the measured phase, from /proc: cli = this load generator, \
         srv = the server process (SQLite runs inside it), pg = the PostgreSQL backends serving the \
         server, other = everything else on the machine: a large `other` means the run was disturbed)"
    );
    if reports.iter().any(|r| r.each_second.len() > 1) {
        // A falling series means the server slows down as its database grows.
        println!("\naccepted in each second of the measured phase");
        for r in reports.iter().filter(|r| !r.each_second.is_empty()) {
            let series: Vec<String> = r.each_second.iter().map(u64::to_string).collect();
            println!("  {:<15} {}", r.name, series.join(" "));
        }
    }
}

pub(super) struct Check {
    pub(super) label: String,
    pub(super) value: Option<f64>,
    pub(super) unit: &'static str,
    pub(super) target: String,
    pub(super) pass: Option<bool>,
}

pub(super) fn checks(reports: &[Report], connections: usize) -> Vec<Check> {
    let ok = |name: &str| {
        reports
            .iter()
            .find(|r| r.name == name && r.failure.is_none())
    };
    let rate = |name: &str| ok(name).map(|r| r.accepted_per_s).filter(|r| *r > 0.0);
    let ratio = |a: &str, b: &str| Some(rate(a)? / rate(b)?);
    let mut out = Vec::new();
    for (group, naive) in [
        ("sqlite-group", "sqlite-naive"),
        ("postgres-group", "postgres-naive"),
    ] {
        let share = ratio(group, "hmac-only");
        out.push(Check {
            label: format!("{group} / hmac-only"),
            value: share,
            unit: "",
            target: format!(">= {TARGET_CEILING_SHARE}"),
            pass: share.map(|v| v >= TARGET_CEILING_SHARE),
        });
        let p99 = ok(group).and_then(|r| r.p99_ms);
        out.push(Check {
            label: format!("{group} p99 at {connections} connections"),
            value: p99,
            unit: " ms",
            target: format!("<= {TARGET_P99_MS} ms"),
            pass: p99.map(|v| v <= TARGET_P99_MS),
        });
        let factor = ratio(group, naive);
        out.push(Check {
            label: format!("{group} / {naive}"),
            value: factor,
            unit: "x",
            target: format!(">= {TARGET_NAIVE_FACTOR}x"),
            pass: factor.map(|v| v >= TARGET_NAIVE_FACTOR),
        });
    }
    out
}

pub(super) fn print_checks(checks: &[Check], connections: usize) {
    println!("\nratios and targets (targets: 2 cores, SQLite synchronous=FULL, 64 connections)");
    for c in checks {
        let verdict = match c.pass {
            Some(true) => "PASS",
            Some(false) => "MISS",
            None => "n/a",
        };
        println!(
            "  {:<42} {:>9} {:<3}  target {:<10} {verdict}",
            c.label,
            fmt_opt(c.value, 2),
            if c.value.is_some() { c.unit } else { "" },
            c.target
        );
    }
    if connections != 64 {
        println!("  (the p99 target is stated for 64 connections; this run used {connections})");
    }
    println!(
        "  (postgres rows: see the `postgres:` settings line at the top; scripts/bench starts its cluster with \
         fsync on; with fsync=off, as the test cluster runs, a commit flushes nothing and group commit has little to save)"
    );
}

pub(super) fn write_json(
    reports: &[Report],
    checks: &[Check],
    plan: &Plan,
    cores: usize,
    store_only: Option<f64>,
    outside: &[outside::OutsideReport],
) -> Result<PathBuf> {
    let doc = serde_json::json!({
        "sqliteStoreOnlyPerSecond": store_only,
        "outsideGenerator": outside.iter().map(outside::OutsideReport::json).collect::<Vec<_>>(),
        "benchmark": "ingest",
        "connections": plan.connections,
        "warmupSeconds": plan.warmup.map(|d| d.as_secs_f64()),
        "measuredSeconds": plan.measured.as_secs_f64(),
        "cores": cores,
        "clientThreads": 1,
        "scenarios": reports.iter().map(Report::json).collect::<Vec<_>>(),
        "checks": checks.iter().map(|c| serde_json::json!({
            "check": c.label,
            "value": c.value,
            "target": c.target,
            "pass": c.pass,
        })).collect::<Vec<_>>(),
    });
    let dir = target_dir();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join("bench-ingest.json");
    std::fs::write(&path, serde_json::to_string_pretty(&doc)? + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// Cargo's target directory: the ancestor of this executable that Cargo tagged.
pub(super) fn target_dir() -> PathBuf {
    if let Ok(exe) = std::env::current_exe() {
        if let Some(dir) = exe.ancestors().find(|a| a.join("CACHEDIR.TAG").is_file()) {
            return dir.to_path_buf();
        }
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target")
}

pub(super) fn describe_errors(o: &PhaseOutcome) -> String {
    describe_error_map(&o.errors, &o.error_samples)
}

pub(super) fn describe_error_map(errors: &BTreeMap<String, u64>, samples: &[String]) -> String {
    if errors.is_empty() {
        return String::new();
    }
    let kinds: Vec<String> = errors.iter().map(|(k, n)| format!("{k}: {n}")).collect();
    let mut text = format!(" ({})", kinds.join(", "));
    for s in samples {
        text.push_str(&format!("\n    e.g. {s}"));
    }
    text
}
