//! A TCP proxy a test controls, between a remote worker and the server: it
//! copies bytes both ways until told to cut the network (every connection
//! closed, new ones closed at once) or to hold the requests that carry a
//! pattern (the connection that sends it is closed before it reaches the
//! server), and until healed.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Default)]
struct Rules {
    cut: AtomicBool,
    hold: Mutex<Option<Vec<u8>>>,
    /// Every connection open now, both ends, to close them on a cut.
    open: Mutex<Vec<TcpStream>>,
}

impl Rules {
    fn held(&self, bytes: &[u8]) -> bool {
        let hold = self.hold.lock().unwrap();
        hold.as_ref()
            .is_some_and(|p| bytes.windows(p.len()).any(|w| w == p.as_slice()))
    }
}

pub struct CutProxy {
    pub base: String,
    rules: Arc<Rules>,
}

impl CutProxy {
    /// A proxy to `upstream` (`http://host:port`), listening on a port of
    /// its own.
    pub fn start(upstream: &str) -> CutProxy {
        let target = upstream
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let rules = Arc::new(Rules::default());
        let r = rules.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                if r.cut.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&target) else {
                    continue;
                };
                for s in [&client, &server] {
                    if let Ok(s) = s.try_clone() {
                        r.open.lock().unwrap().push(s);
                    }
                }
                pipe(
                    client.try_clone().unwrap(),
                    server.try_clone().unwrap(),
                    r.clone(),
                    true,
                );
                pipe(server, client, r.clone(), false);
            }
        });
        CutProxy { base, rules }
    }

    /// Closes every connection and every new one, until healed.
    pub fn cut(&self) {
        self.rules.cut.store(true, Ordering::SeqCst);
        for s in self.rules.open.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Closes each connection that sends `pattern` towards the server
    /// before it gets there, until healed.
    pub fn hold(&self, pattern: &str) {
        *self.rules.hold.lock().unwrap() = Some(pattern.as_bytes().to_vec());
    }

    /// Lets connections through again after a cut, still holding what
    /// [`CutProxy::hold`] holds.
    pub fn reconnect(&self) {
        self.rules.cut.store(false, Ordering::SeqCst);
    }

    pub fn heal(&self) {
        *self.rules.hold.lock().unwrap() = None;
        self.rules.cut.store(false, Ordering::SeqCst);
    }
}

/// Copies `from` to `to`; towards the server, a chunk that carries the
/// held pattern (with the end of the chunk before, for a pattern cut in
/// two) closes both instead.
fn pipe(mut from: TcpStream, mut to: TcpStream, rules: Arc<Rules>, upstream: bool) {
    std::thread::spawn(move || {
        let _ = from.set_read_timeout(Some(Duration::from_secs(120)));
        let mut buf = [0u8; 16 * 1024];
        let mut tail: Vec<u8> = Vec::new();
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if upstream {
                let mut seen = std::mem::take(&mut tail);
                seen.extend_from_slice(&buf[..n]);
                if rules.held(&seen) {
                    break;
                }
                tail = seen[seen.len().saturating_sub(64)..].to_vec();
            }
            if to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = from.shutdown(Shutdown::Both);
        let _ = to.shutdown(Shutdown::Both);
    });
}
