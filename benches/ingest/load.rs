//! The in-process load generator: signed Gitea deliveries built before the
//! clock starts, and the keep-alive connections that send them.

use super::*;

pub(super) fn random_hex() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

/// Builds signed `issue_comment` deliveries from the Gitea fixture, each with its own
/// comment id and delivery id, spread over REPOS repositories × ISSUES_PER_REPO issues.
pub(super) struct RequestFactory {
    pub(super) template: serde_json::Value,
    pub(super) secret: Vec<u8>,
}

impl RequestFactory {
    pub(super) fn new(secret: &str) -> Result<RequestFactory> {
        let template: serde_json::Value =
            serde_json::from_str(FIXTURE).context("parsing the fixture")?;
        let body = template
            .pointer("/comment/body")
            .and_then(|b| b.as_str())
            .unwrap_or("");
        if !body.contains(&format!("@{BOT_LOGIN}")) {
            bail!(
                "the fixture's comment no longer mentions @{BOT_LOGIN}: no task would be created"
            );
        }
        Ok(RequestFactory {
            template,
            secret: secret.as_bytes().to_vec(),
        })
    }

    /// Request number `seq`, as the bytes to write on the socket.
    pub(super) fn request(&self, seq: u64) -> Result<Vec<u8>> {
        let repo_n = seq % REPOS;
        let issue = 1 + (seq / REPOS) % ISSUES_PER_REPO;
        let comment_id = 100_000_000 + seq;
        let written = chrono::DateTime::from_timestamp(1_764_000_000 + (seq / 100) as i64, 0)
            .map_or_else(String::new, |t| t.to_rfc3339());
        let repo = format!("bench-repo-{repo_n:02}");
        let full_name = format!("acme/{repo}");
        let web = format!("https://git.example.com/{full_name}");
        let api = format!("https://git.example.com/api/v1/repos/{full_name}");
        let mut v = self.template.clone();
        let fields = [
            ("/repository/id", serde_json::json!(1000 + repo_n)),
            ("/repository/name", serde_json::json!(repo)),
            ("/repository/full_name", serde_json::json!(full_name)),
            ("/repository/html_url", serde_json::json!(web)),
            ("/repository/url", serde_json::json!(api)),
            (
                "/repository/clone_url",
                serde_json::json!(format!("{web}.git")),
            ),
            (
                "/repository/ssh_url",
                serde_json::json!(format!("git@git.example.com:{full_name}.git")),
            ),
            ("/issue/id", serde_json::json!(repo_n * 1000 + issue)),
            ("/issue/number", serde_json::json!(issue)),
            (
                "/issue/url",
                serde_json::json!(format!("{api}/issues/{issue}")),
            ),
            (
                "/issue/html_url",
                serde_json::json!(format!("{web}/issues/{issue}")),
            ),
            ("/issue/repository/id", serde_json::json!(1000 + repo_n)),
            ("/issue/repository/name", serde_json::json!(repo)),
            ("/issue/repository/full_name", serde_json::json!(full_name)),
            ("/comment/id", serde_json::json!(comment_id)),
            // Written one after the other, as a real stream of comments is
            // (the operation id derived from this time leads with it).
            ("/comment/created_at", serde_json::json!(written)),
            ("/comment/updated_at", serde_json::json!(written)),
            (
                "/comment/html_url",
                serde_json::json!(format!("{web}/issues/{issue}#issuecomment-{comment_id}")),
            ),
            (
                "/comment/issue_url",
                serde_json::json!(format!("{web}/issues/{issue}")),
            ),
        ];
        for (pointer, value) in fields {
            *v.pointer_mut(pointer)
                .with_context(|| format!("the fixture has no {pointer}"))? = value;
        }
        // Gitea sends 2-space-indented JSON, and the signature covers exactly these bytes.
        let body = serde_json::to_string_pretty(&v)?;
        let signature = verify::sign(&self.secret, body.as_bytes());
        // A random UUID, as Gitea's `X-Gitea-Delivery` (`uuid.New()`): the
        // store's delivery index then takes the random inserts it takes in
        // production, which ordered ids would hide.
        let delivery = uuid::Uuid::new_v4();
        let mut bytes = format!(
            "POST /api/gitea/webhook HTTP/1.1\r\n\
             Host: 127.0.0.1\r\n\
             User-Agent: codex-bridge-bench\r\n\
             Content-Type: application/json\r\n\
             Content-Length: {}\r\n\
             X-Gitea-Delivery: {delivery}\r\n\
             X-Gitea-Event: issue_comment\r\n\
             X-Gitea-Event-Type: issue_comment\r\n\
             X-Gitea-Signature: {signature}\r\n\
             \r\n",
            body.len()
        )
        .into_bytes();
        bytes.extend_from_slice(body.as_bytes());
        Ok(bytes)
    }

    /// Requests `first..first + count`, built on all cores (the server is idle meanwhile).
    pub(super) fn build(&self, first: u64, count: usize) -> Result<Vec<Vec<u8>>> {
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .max(1);
        let chunk = count.div_ceil(threads).max(1) as u64;
        let end = first + count as u64;
        let parts: Vec<Result<Vec<Vec<u8>>>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads as u64)
                .map(|t| {
                    let lo = (first + t * chunk).min(end);
                    let hi = (lo + chunk).min(end);
                    scope.spawn(move || {
                        (lo..hi)
                            .map(|seq| self.request(seq))
                            .collect::<Result<Vec<_>>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("building requests panicked")))
                })
                .collect()
        });
        let mut all = Vec::with_capacity(count);
        for part in parts {
            all.extend(part?);
        }
        Ok(all)
    }
}

// The connections.

#[derive(Default)]
pub(super) struct PhaseOutcome {
    pub(super) sent: u64,
    pub(super) accepted: u64,
    /// "HTTP 503", "i/o: ConnectionReset", "timeout", ...
    pub(super) errors: BTreeMap<String, u64>,
    pub(super) error_samples: Vec<String>,
    pub(super) latencies_us: Vec<u32>,
    /// Accepted requests in each whole second of the phase.
    pub(super) each_second: Vec<u64>,
    pub(super) elapsed: Duration,
    pub(super) pool_exhausted: bool,
    pub(super) client_cpu: Option<f64>,
    pub(super) server_cpu: Option<f64>,
    /// The PostgreSQL backends serving the benchmark's database.
    pub(super) db_cpu: Option<f64>,
    pub(super) other_cpu: Option<f64>,
}

impl PhaseOutcome {
    pub(super) fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    pub(super) fn error(&mut self, kind: String, sample: Option<String>) {
        *self.errors.entry(kind).or_default() += 1;
        if let Some(s) = sample {
            if self.error_samples.len() < 3 {
                self.error_samples.push(s);
            }
        }
    }

    pub(super) fn merge(&mut self, other: PhaseOutcome) {
        self.sent += other.sent;
        self.accepted += other.accepted;
        for (k, n) in other.errors {
            *self.errors.entry(k).or_default() += n;
        }
        for s in other.error_samples {
            if self.error_samples.len() < 3 {
                self.error_samples.push(s);
            }
        }
        self.latencies_us.extend(other.latencies_us);
    }
}

/// What the connections of one phase share (one thread, hence `Cell`).
pub(super) struct PhaseCtx<'a> {
    pub(super) addr: SocketAddr,
    pub(super) start: Instant,
    pub(super) each_second: RefCell<Vec<u64>>,
    pub(super) pool: &'a [Vec<u8>],
    pub(super) cyclic: bool,
    pub(super) deadline: Instant,
    pub(super) next: Cell<usize>,
    pub(super) stop: Cell<bool>,
    pub(super) exhausted: Cell<bool>,
}

impl PhaseCtx<'_> {
    pub(super) fn take(&self) -> Option<&[u8]> {
        if self.stop.get() || Instant::now() >= self.deadline || self.pool.is_empty() {
            return None;
        }
        let i = self.next.get();
        if i >= self.pool.len() && !self.cyclic {
            // Every connection stops, so that the phase ends cleanly when the pool does.
            self.exhausted.set(true);
            self.stop.set(true);
            return None;
        }
        self.next.set(i + 1);
        Some(&self.pool[i % self.pool.len()])
    }
}

/// Drives `connections` keep-alive connections for `duration` (or until a non-cyclic
/// pool runs out), each sending its next request as soon as the previous answer is in.
/// Writes out what earlier scenarios left dirty in the page cache, so that the
/// kernel's writeback of one scenario's files does not run during the next
/// one's measured phase: without it, a store-only run here was comparable only
/// right after a `sync` by hand.
pub(super) fn settle_disk() {
    match std::process::Command::new("sync").status() {
        Ok(status) if status.success() => {}
        other => eprintln!("warning: `sync` before the scenario did not run cleanly: {other:?}"),
    }
    std::thread::sleep(Duration::from_millis(500));
}

pub(super) async fn run_phase(
    addr: SocketAddr,
    pool: &[Vec<u8>],
    cyclic: bool,
    connections: usize,
    duration: Duration,
    server_pid: u32,
    db_pids: &[u32],
) -> Result<PhaseOutcome> {
    // Connect before the clock starts: the phase measures requests, not handshakes.
    let mut streams = Vec::with_capacity(connections);
    for _ in 0..connections {
        streams.push(
            connect(addr)
                .await
                .with_context(|| format!("connecting to {addr}"))?,
        );
    }
    let server = server_pid.to_string();
    let cpu_before = (
        cpu_ticks("self"),
        cpu_ticks(&server),
        busy_ticks(),
        cpu_ticks_sum(db_pids),
    );
    let start = Instant::now();
    let ctx = PhaseCtx {
        addr,
        start,
        each_second: RefCell::new(Vec::new()),
        pool,
        cyclic,
        deadline: start + duration,
        next: Cell::new(0),
        stop: Cell::new(false),
        exhausted: Cell::new(false),
    };
    let per_connection =
        futures_util::future::join_all(streams.into_iter().map(|s| drive_connection(&ctx, s)))
            .await;
    let mut total = PhaseOutcome::default();
    let mut last_done = start;
    for (outcome, done) in per_connection {
        last_done = last_done.max(done);
        total.merge(outcome);
    }
    total.elapsed = last_done.duration_since(start);
    total.pool_exhausted = ctx.exhausted.get();
    // Only whole seconds: the last one would hold just the stragglers after the deadline.
    total.each_second = ctx.each_second.take();
    total.each_second.truncate(total.elapsed.as_secs() as usize);
    let seconds = total.elapsed.as_secs_f64().max(1e-9);
    let cpu_after = (
        cpu_ticks("self"),
        cpu_ticks(&server),
        busy_ticks(),
        cpu_ticks_sum(db_pids),
    );
    let share = |before: Option<u64>, after: Option<u64>| {
        Some(after?.saturating_sub(before?) as f64 / CLOCK_TICKS / seconds)
    };
    total.client_cpu = share(cpu_before.0, cpu_after.0);
    total.server_cpu = share(cpu_before.1, cpu_after.1);
    total.db_cpu = share(cpu_before.3, cpu_after.3);
    // Whatever else ran meanwhile (other builds and tests, PostgreSQL's background
    // processes) competed for the same cores: a large figure means the run was disturbed.
    total.other_cpu = share(cpu_before.2, cpu_after.2)
        .map(|busy| {
            busy - total.client_cpu.unwrap_or(0.0)
                - total.server_cpu.unwrap_or(0.0)
                - total.db_cpu.unwrap_or(0.0)
        })
        .map(|other| other.max(0.0));
    Ok(total)
}

pub(super) async fn connect(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let stream = TcpStream::connect(addr).await?;
    // Requests are written in one go; Nagle would only add delay.
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// One connection's loop; returns its outcome and when its last answer came.
pub(super) async fn drive_connection(
    ctx: &PhaseCtx<'_>,
    stream: TcpStream,
) -> (PhaseOutcome, Instant) {
    let mut out = PhaseOutcome::default();
    let mut stream = Some(stream);
    let mut buf: Vec<u8> = Vec::with_capacity(8192);
    let mut last_done = Instant::now();
    while let Some(request) = ctx.take() {
        out.sent += 1;
        let conn = match &mut stream {
            Some(s) => s,
            None => match connect(ctx.addr).await {
                Ok(s) => stream.insert(s),
                Err(e) => {
                    out.error(format!("connect: {:?}", e.kind()), Some(e.to_string()));
                    // Do not spin against a server that refuses connections.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let t0 = Instant::now();
        let result = tokio::time::timeout(REQUEST_TIMEOUT, exchange(conn, request, &mut buf)).await;
        last_done = Instant::now();
        match result {
            Ok(Ok(response)) => {
                let us = last_done
                    .duration_since(t0)
                    .as_micros()
                    .min(u128::from(u32::MAX)) as u32;
                out.latencies_us.push(us);
                let body = &buf[response.body.clone()];
                if response.status == 202 && contains(body, b"\"queued\"") {
                    out.accepted += 1;
                    let second = last_done.duration_since(ctx.start).as_secs() as usize;
                    let mut each = ctx.each_second.borrow_mut();
                    if each.len() <= second {
                        each.resize(second + 1, 0);
                    }
                    each[second] += 1;
                } else {
                    let text = String::from_utf8_lossy(body);
                    let text: String = text.chars().take(300).collect();
                    out.error(
                        format!("HTTP {}", response.status),
                        Some(format!("{}: {text}", response.status)),
                    );
                }
                if response.close {
                    stream = None;
                }
            }
            Ok(Err(e)) => {
                out.error(format!("i/o: {:?}", e.kind()), Some(e.to_string()));
                stream = None;
            }
            Err(_) => {
                out.error(
                    "timeout".into(),
                    Some(format!("no answer within {REQUEST_TIMEOUT:?}")),
                );
                stream = None;
            }
        }
    }
    (out, last_done)
}

pub(super) struct Response {
    pub(super) status: u16,
    /// Where the body sits in the read buffer.
    pub(super) body: std::ops::Range<usize>,
    /// The server said `Connection: close`.
    pub(super) close: bool,
}

/// Writes one request and reads its whole response (status line, headers, then
/// `Content-Length` bytes) into `buf`.
pub(super) async fn exchange(
    stream: &mut TcpStream,
    request: &[u8],
    buf: &mut Vec<u8>,
) -> std::io::Result<Response> {
    use std::io::{Error, ErrorKind};
    stream.write_all(request).await?;
    buf.clear();
    let head_end = loop {
        if let Some(p) = find(buf, b"\r\n\r\n") {
            break p + 4;
        }
        if buf.len() > 64 * 1024 {
            return Err(Error::new(
                ErrorKind::InvalidData,
                "response head larger than 64 KiB",
            ));
        }
        read_more(stream, buf).await?;
    };
    let head = std::str::from_utf8(&buf[..head_end])
        .map_err(|_| Error::new(ErrorKind::InvalidData, "response head is not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| Error::new(ErrorKind::InvalidData, "no status line"))?;
    let mut length = None;
    let mut close = false;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let (name, value) = (name.trim(), value.trim());
        if name.eq_ignore_ascii_case("content-length") {
            length = value.parse::<usize>().ok();
        } else if name.eq_ignore_ascii_case("connection") {
            close = value.eq_ignore_ascii_case("close");
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(Error::new(
                ErrorKind::InvalidData,
                "chunked responses are not supported here",
            ));
        }
    }
    let length = length
        .ok_or_else(|| Error::new(ErrorKind::InvalidData, "response without content-length"))?;
    let end = head_end + length;
    while buf.len() < end {
        read_more(stream, buf).await?;
    }
    Ok(Response {
        status,
        body: head_end..end,
        close,
    })
}

pub(super) async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<()> {
    buf.reserve(4096);
    if stream.read_buf(buf).await? == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

pub(super) fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

pub(super) fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    find(haystack, needle).is_some()
}

/// Linux reports process CPU time in USER_HZ ticks, 100 per second on every
/// mainstream architecture.
pub(super) const CLOCK_TICKS: f64 = 100.0;

/// Summed CPU ticks of processes (`None` for none); one that exits counts as zero.
pub(super) fn cpu_ticks_sum(pids: &[u32]) -> Option<u64> {
    if pids.is_empty() {
        return None;
    }
    Some(pids.iter().filter_map(|p| cpu_ticks(&p.to_string())).sum())
}

/// CPU time of the whole machine not spent idle, from the first line of `/proc/stat`.
pub(super) fn busy_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    let total: u64 = fields.iter().take(8).sum();
    let idle = fields.get(3)? + fields.get(4).copied().unwrap_or(0);
    Some(total - idle)
}

/// utime + stime of a process (all its threads), from `/proc/PID/stat`; `None` off Linux.
pub(super) fn cpu_ticks(pid: &str) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces; fields after it are plain.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state); utime and stime are fields 14 and 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}
