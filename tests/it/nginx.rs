//! A real nginx running `deploy/codex-bridge.nginx.conf` (or the site for
//! several instances, `deploy/codex-bridge-instances.nginx.conf`) in front of
//! test servers, for tests of the deployment (`deploy.rs`,
//! `nginx_instances.rs`, `topology/`) and of anything that must survive the
//! proxy (such as the live event stream, unbuffered).
//!
//! The deploy file is the template: [`site_for_test`] keeps its upstream block
//! and its TLS server block as they are and rewrites only the lines that name
//! the machine (listen, server_name, certificate, log paths, the upstream's
//! `server` addresses, and `client_max_body_size` to the test server's limit). It
//! adds a plain-HTTP copy of the TLS server block (the same locations and
//! headers, without the `ssl_` lines) so that ordinary HTTP clients can use it;
//! the port-80 block of the deploy file only redirects, and is left out.
//!
//! nginx runs in the foreground as one process (`daemon off; master_process
//! off;`), so it needs no user switch, root or not, and dies with its `Child`;
//! its pid, logs and temp files live in a temp dir. It connects to the
//! upstream from [`Nginx::PROXY_ADDR`], an address no test client uses, so a
//! test can tell the proxy (the peer) from the client (X-Forwarded-For).
//!
//! The event stream: nginx passes a small piece of a response on at once even
//! with `proxy_buffering on`; what holds events back is an output filter such
//! as gzip, which waits for the flush only an unbuffered upstream gives. So
//! the test nginx compresses `text/event-stream` (as an operator's
//! `gzip_types` may), [`EventStream`] asks for gzip, and the server's own
//! `X-Accel-Buffering: no` is ignored: events then arrive at once only because
//! of the site's `proxy_buffering off`.
//!
//! Missing `nginx`, `openssl` or `python3` (the event stream's client, for
//! its zlib) makes a test fail, saying how to install them (`scripts/test`
//! does, as root).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The single-instance deploy file.
pub fn site_template() -> String {
    deploy_file("codex-bridge.nginx.conf")
}

/// A file of deploy/.
pub fn deploy_file(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// Where the site's test copy puts things.
pub struct SiteParams<'a> {
    /// The upstream's servers (`host:port`), in this order.
    pub upstreams: &'a [&'a str],
    pub body_limit: usize,
    pub https_port: u16,
    pub http_port: u16,
    pub cert: &'a Path,
    pub key: &'a Path,
    pub dir: &'a Path,
}

/// Top-level blocks of an nginx file (`upstream x {...}`, `server {...}`),
/// with comments and blank lines between them dropped.
fn top_level_blocks(text: &str) -> Vec<Vec<String>> {
    let mut blocks = Vec::new();
    let mut current: Vec<String> = Vec::new();
    let mut depth = 0i32;
    for line in text.lines() {
        let code = line.split('#').next().unwrap_or("");
        if depth == 0 && code.trim().is_empty() {
            continue;
        }
        current.push(line.to_owned());
        depth += code.matches('{').count() as i32 - code.matches('}').count() as i32;
        if depth == 0 {
            blocks.push(std::mem::take(&mut current));
        }
    }
    assert_eq!(depth, 0, "unbalanced braces in the nginx site");
    blocks
}

/// The deploy site rewritten for this machine (see the module doc).
pub fn site_for_test(template: &str, p: &SiteParams<'_>) -> String {
    let blocks = top_level_blocks(template);
    let mut out = String::new();
    let mut tls_blocks = 0;
    let mut upstreams = 0;
    for block in &blocks {
        let first = block[0].trim_start();
        if first.starts_with("upstream ") {
            upstreams += 1;
            out.push_str(&upstream_for_test(block, p.upstreams));
            continue;
        }
        if !block
            .iter()
            .any(|l| l.trim_start().starts_with("ssl_certificate"))
        {
            // The port-80 block only redirects to HTTPS.
            assert!(
                block.iter().any(|l| l.contains("return 301 https://")),
                "a server block without TLS that does not redirect: the test does not know it"
            );
            continue;
        }
        tls_blocks += 1;
        let rewrite = |tls: bool| -> String {
            let mut s = String::new();
            let mut listened = false;
            for line in block {
                let t = line.trim_start();
                let indent = &line[..line.len() - t.len()];
                let replaced = if t.starts_with("listen ") {
                    if t.contains("[::]") || listened {
                        None
                    } else {
                        listened = true;
                        Some(if tls {
                            // "listen 443 ssl http2;" keeps its parameters.
                            let params = t
                                .trim_end_matches(';')
                                .split_whitespace()
                                .skip(2)
                                .collect::<Vec<_>>()
                                .join(" ");
                            format!("listen 127.0.0.1:{} ssl {params};", p.https_port)
                        } else {
                            format!("listen 127.0.0.1:{};", p.http_port)
                        })
                    }
                } else if t.starts_with("server_name ") {
                    Some("server_name localhost;".into())
                } else if t.starts_with("ssl_") && !tls {
                    None
                } else if t.starts_with("ssl_certificate_key ") {
                    Some(format!("ssl_certificate_key {};", p.key.display()))
                } else if t.starts_with("ssl_certificate ") {
                    Some(format!("ssl_certificate {};", p.cert.display()))
                } else if t.starts_with("access_log ") {
                    Some(format!(
                        "access_log {} combined;",
                        p.dir.join("site.access.log").display()
                    ))
                } else if t.starts_with("error_log ") {
                    Some(format!(
                        "error_log {} info;",
                        p.dir.join("site.error.log").display()
                    ))
                } else if t.starts_with("client_max_body_size ") {
                    Some(format!("client_max_body_size {};", p.body_limit))
                } else {
                    Some(t.to_owned())
                };
                if let Some(r) = replaced {
                    s.push_str(indent);
                    s.push_str(&r);
                    s.push('\n');
                }
            }
            s
        };
        out.push_str(&rewrite(true));
        out.push_str(&rewrite(false));
    }
    assert_eq!(
        upstreams, 1,
        "the deploy site should have one upstream block"
    );
    assert_eq!(
        tls_blocks, 1,
        "the deploy site should have one TLS server block"
    );
    out
}

/// The upstream block with the test's servers in place of the file's: the
/// i-th test server keeps the parameters (`max_fails=...`) of the file's i-th
/// `server` line, or of its last one when the test has more; the file's lines
/// past the test's servers are left out.
fn upstream_for_test(block: &[String], servers: &[&str]) -> String {
    let params: Vec<String> = block
        .iter()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter_map(|l| l.strip_prefix("server "))
        .map(|l| {
            let words: Vec<&str> = l.trim_end_matches(';').split_whitespace().collect();
            words[1..].iter().map(|w| format!(" {w}")).collect()
        })
        .collect();
    assert!(!params.is_empty(), "the upstream block lists no server");
    let mut out = String::new();
    let mut listed = false;
    for line in block {
        if !line.trim_start().starts_with("server ") {
            out.push_str(line);
            out.push('\n');
        } else if !listed {
            listed = true;
            for (i, server) in servers.iter().enumerate() {
                let params = &params[i.min(params.len() - 1)];
                out.push_str(&format!("    server {server}{params};\n"));
            }
        }
    }
    out
}

/// A self-signed certificate for `localhost` and 127.0.0.1 in `dir`.
pub fn test_certificate(dir: &Path) -> (PathBuf, PathBuf) {
    let openssl = find_binary("openssl", "apt-get install openssl");
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let out = Command::new(&openssl)
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
        .arg("ec_paramgen_curve:prime256v1")
        .args(["-nodes", "-days", "2", "-subj", "/CN=localhost"])
        .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openssl could not make a test certificate: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (cert, key)
}

/// nginx's main configuration in `dir`, including `dir/site.conf`: one
/// foreground process, every path inside `dir`. `proxy` binds the upstream
/// connections to [`Nginx::PROXY_ADDR`], ignores `X-Accel-Buffering` and
/// compresses the event stream (see the module doc). Its path.
pub fn write_main_conf(dir: &Path, proxy: bool) -> PathBuf {
    for sub in ["client_body", "proxy", "fastcgi", "uwsgi", "scgi", "logs"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    let d = dir.display();
    let proxy = if proxy {
        format!(
            "\x20   proxy_bind {};\n\x20   proxy_ignore_headers X-Accel-Buffering;\n\
             \x20   gzip on;\n\x20   gzip_types text/event-stream;\n\x20   gzip_http_version 1.0;\n",
            Nginx::PROXY_ADDR
        )
    } else {
        String::new()
    };
    let main = format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\n\
         error_log {d}/error.log info;\n\
         events {{ worker_connections 256; }}\n\
         http {{\n\
         \x20   access_log {d}/access.log;\n\
         \x20   client_body_temp_path {d}/client_body;\n\
         \x20   proxy_temp_path {d}/proxy;\n\
         \x20   fastcgi_temp_path {d}/fastcgi;\n\
         \x20   uwsgi_temp_path {d}/uwsgi;\n\
         \x20   scgi_temp_path {d}/scgi;\n\
         {proxy}\
         \x20   include {d}/site.conf;\n\
         }}\n"
    );
    let conf = dir.join("nginx.conf");
    std::fs::write(&conf, main).unwrap();
    conf
}

pub fn find_binary(name: &str, install: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into(), "/usr/bin".into()])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "`{name}` is not installed: the deployment tests run it. Run scripts/test (it \
                 installs it as root) or install it with `{install}`"
            )
        })
}

/// A port nothing listens on now (another process may take it before the
/// caller binds it).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The admin token as a request header, for [`Nginx::http_request`].
pub fn bearer() -> (String, String) {
    (
        "Authorization".to_owned(),
        format!("Bearer {}", crate::support::ADMIN_TOKEN),
    )
}

/// The instances view (`GET /api/gitea-workflow/instances`) through the
/// site, from whichever instance nginx picks.
pub fn instances(nginx: &Nginx) -> Vec<serde_json::Value> {
    let r = nginx.http_request("GET", "/api/gitea-workflow/instances", &[bearer()], b"");
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["instances"].as_array().unwrap().clone()
}

/// The instance row of process `pid` (its serverId names the pid).
pub fn row_of(listed: &[serde_json::Value], pid: u32) -> Option<serde_json::Value> {
    listed
        .iter()
        .find(|i| {
            i["serverId"]
                .as_str()
                .is_some_and(|id| id.contains(&format!(":{pid}:")))
        })
        .cloned()
}

/// A raw HTTP answer: status, headers (lower-case names) and body.
#[derive(Debug)]
pub struct RawReply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawReply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }

    /// Parses a whole HTTP/1.1 response (Content-Length, chunked, or to EOF).
    pub fn parse(raw: &[u8]) -> RawReply {
        let split = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .unwrap_or_else(|| panic!("no HTTP head in: {}", String::from_utf8_lossy(raw)));
        let head = String::from_utf8_lossy(&raw[..split]).into_owned();
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap_or_default();
        let status = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("bad status line: {status_line}"));
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let rest = &raw[split + 4..];
        let chunked = headers
            .iter()
            .any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
        let body = if chunked {
            let mut body = Vec::new();
            let mut at = 0;
            loop {
                let end = at
                    + rest[at..]
                        .windows(2)
                        .position(|w| w == b"\r\n")
                        .expect("chunk size line");
                let size_text = String::from_utf8_lossy(&rest[at..end]);
                let size = usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16)
                    .expect("chunk size");
                at = end + 2;
                if size == 0 {
                    break;
                }
                body.extend_from_slice(&rest[at..at + size]);
                at += size + 2;
            }
            body
        } else {
            match headers
                .iter()
                .find(|(k, _)| k == "content-length")
                .and_then(|(_, v)| v.parse::<usize>().ok())
            {
                Some(n) => rest[..n.min(rest.len())].to_vec(),
                None => rest.to_vec(),
            }
        };
        RawReply {
            status,
            headers,
            body,
        }
    }
}

/// nginx with the deploy site in front of `upstream`. Stopped on drop.
pub struct Nginx {
    child: Child,
    dir: tempfile::TempDir,
    http_port: u16,
    https_port: u16,
    cert: PathBuf,
}

impl Nginx {
    /// The address nginx connects to the upstream from: the test server's
    /// `trusted_proxies` names it, and no test client uses it.
    pub const PROXY_ADDR: &'static str = "127.0.0.3";

    /// Starts nginx with the deploy site in front of `upstream` (`host:port`),
    /// refusing bodies over `body_limit` bytes as the server's `max_body_bytes`.
    pub fn start(upstream: &str, body_limit: usize) -> Nginx {
        Self::start_site(&site_template(), &[upstream], body_limit)
    }

    /// Starts nginx with the site `template` (a deploy file's text) in front
    /// of `upstreams` (`host:port` each), refusing bodies over `body_limit`.
    pub fn start_site(template: &str, upstreams: &[&str], body_limit: usize) -> Nginx {
        let nginx = find_binary("nginx", "apt-get install nginx");
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = test_certificate(dir.path());
        let mut last_error = String::new();
        // The ports are picked free and then bound by nginx: another process
        // may take one in between, so try a few times.
        for _ in 0..5 {
            let (http_port, https_port) = (free_port(), free_port());
            let site = site_for_test(
                template,
                &SiteParams {
                    upstreams,
                    body_limit,
                    https_port,
                    http_port,
                    cert: &cert,
                    key: &key,
                    dir: dir.path(),
                },
            );
            std::fs::write(dir.path().join("site.conf"), &site).unwrap();
            let d = dir.path().display();
            let conf = write_main_conf(dir.path(), true);
            let mut child = Command::new(&nginx)
                .arg("-p")
                .arg(format!("{d}/"))
                .arg("-e")
                .arg(dir.path().join("error.log"))
                .arg("-c")
                .arg(&conf)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let up = |port| TcpStream::connect(("127.0.0.1", port)).is_ok();
            let mut exited = false;
            let listening = crate::support::poll_until(Duration::from_secs(10), || {
                exited = matches!(child.try_wait(), Ok(Some(_)));
                exited || (up(http_port) && up(https_port))
            });
            if listening && !exited {
                return Nginx {
                    child,
                    dir,
                    http_port,
                    https_port,
                    cert,
                };
            }
            let _ = child.kill();
            let mut stderr = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut stderr);
            }
            let _ = child.wait();
            last_error = format!(
                "{stderr}{}",
                std::fs::read_to_string(dir.path().join("error.log")).unwrap_or_default()
            );
            if !exited || !last_error.contains("Address already in use") {
                break;
            }
        }
        panic!("nginx did not start:\n{last_error}");
    }

    /// A URL of the plain-HTTP copy of the site.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.http_port)
    }

    /// nginx's error log and the site's (for failure messages).
    pub fn error_log(&self) -> String {
        ["error.log", "site.error.log"]
            .iter()
            .map(|f| std::fs::read_to_string(self.dir.path().join(f)).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The site's access log.
    pub fn access_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("site.access.log")).unwrap_or_default()
    }

    /// One request over the plain-HTTP copy, raw (`Connection: close`), so a
    /// test controls every header byte (a forged X-Forwarded-For, say).
    pub fn http_request(
        &self,
        method: &str,
        path: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> RawReply {
        let mut stream = TcpStream::connect(("127.0.0.1", self.http_port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let request = raw_request(method, path, "127.0.0.1", headers, body);
        // nginx may answer (413) and close before the whole body is written.
        let _ = stream.write_all(&request);
        let mut raw = Vec::new();
        let _ = stream.read_to_end(&mut raw);
        RawReply::parse(&raw)
    }

    /// One request through the TLS server block, with `openssl s_client` as
    /// the client, which also checks the certificate and the host name.
    pub fn https_request(
        &self,
        method: &str,
        path: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> RawReply {
        let openssl = find_binary("openssl", "apt-get install openssl");
        let mut child = Command::new(openssl)
            .args(["s_client", "-quiet", "-verify_return_error"])
            .args(["-connect", &format!("127.0.0.1:{}", self.https_port)])
            .args(["-servername", "localhost", "-verify_hostname", "localhost"])
            .arg("-CAfile")
            .arg(&self.cert)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let request = raw_request(method, path, "localhost", headers, body);
        let mut stdin = child.stdin.take().unwrap();
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(&request);
        });
        let out = child.wait_with_output().unwrap();
        let _ = writer.join();
        assert!(
            !out.stdout.is_empty(),
            "no answer over TLS: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.error_log()
        );
        RawReply::parse(&out.stdout)
    }
}

fn raw_request(
    method: &str,
    path: &str,
    host: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Vec<u8> {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    let mut request = head.into_bytes();
    request.extend_from_slice(body);
    request
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The client of the admin event stream: HTTP/1.0 with `Accept-Encoding:
/// gzip`, printing the answer's head lines (an empty one last), then the
/// inflated stream as it comes (Python for its zlib, which inflates a stream piece by piece).
const EVENT_CLIENT: &str = r#"
import socket, sys, zlib
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(("GET /api/gitea-workflow/events HTTP/1.0\r\nHost: localhost\r\n"
           "Authorization: Bearer %s\r\nAccept-Encoding: gzip\r\n\r\n" % sys.argv[2]).encode())
raw = b""
while b"\r\n\r\n" not in raw:
    more = s.recv(65536)
    if not more:
        break
    raw += more
head, _, body = raw.partition(b"\r\n\r\n")
for line in head.decode("latin-1").split("\r\n") + [""]:
    print("head: " + line, flush=True)
inflate = zlib.decompressobj(31)
while body:
    sys.stdout.write(inflate.decompress(body).decode("utf-8", "replace"))
    sys.stdout.flush()
    body = s.recv(65536)
"#;

/// The admin event stream through the site's plain-HTTP copy, compressed
/// (see the module doc): each event's arrival, name and `data:` line.
pub struct EventStream {
    child: Child,
    rx: std::sync::mpsc::Receiver<(std::time::Instant, String, String)>,
}

impl EventStream {
    /// Opens the stream with the admin `token`; asserts nginx answered 200
    /// with a gzip-compressed `text/event-stream`.
    pub fn open(nginx: &Nginx, token: &str) -> EventStream {
        use std::io::{BufRead, BufReader};
        let python = find_binary("python3", "apt-get install python3");
        let mut child = Command::new(python)
            .args(["-u", "-c", EVENT_CLIENT])
            .arg(nginx.http_port.to_string())
            .arg(token)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let (tx, rx) = std::sync::mpsc::channel();
        // Head lines come as `("head", line)`, then each event as its name
        // and `data:`; read on a thread, so that a stream nginx holds back
        // fails the test instead of blocking it.
        std::thread::spawn(move || {
            let mut event = String::new();
            for line in lines {
                let Ok(line) = line else { break };
                let item = if let Some(h) = line.strip_prefix("head: ") {
                    ("head".to_owned(), h.to_ascii_lowercase())
                } else if let Some(name) = line.strip_prefix("event: ") {
                    event = name.to_owned();
                    continue;
                } else if let Some(data) = line.strip_prefix("data: ") {
                    (std::mem::take(&mut event), data.to_owned())
                } else {
                    continue;
                };
                if tx
                    .send((std::time::Instant::now(), item.0, item.1))
                    .is_err()
                {
                    break;
                }
            }
        });
        let stream = EventStream { child, rx };
        let mut head = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match stream.rx.recv_timeout(left) {
                Ok((_, name, line)) if name == "head" && line.is_empty() => break,
                Ok((_, name, line)) if name == "head" => head.push(line),
                other => panic!("no answer head through nginx within 10 s: {other:?} {head:?}"),
            }
        }
        let has = |want: &str| head.iter().any(|h| h.starts_with(want));
        assert!(
            has("http/1.1 200") && has("content-type: text/event-stream"),
            "{head:?}"
        );
        // Compressed, or the test would not see a buffering site hold events.
        assert!(has("content-encoding: gzip"), "{head:?}");
        stream
    }

    /// When the next `want` event arrived, and its data; panics after `within`.
    pub fn next(&self, want: &str, within: Duration) -> (std::time::Instant, serde_json::Value) {
        let deadline = std::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.rx.recv_timeout(left) {
                Ok((at, name, data)) if name == want => {
                    return (at, serde_json::from_str(&data).unwrap());
                }
                Ok(_) => {}
                Err(_) => panic!("no `{want}` event through nginx within {within:?}"),
            }
        }
    }
}

impl Drop for EventStream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
