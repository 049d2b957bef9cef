//! Self-test of the Gitea simulator (`crate::giteasim`): its JSON encoder
//! against the fixtures' bytes, its webhook payloads against the fixtures'
//! shapes and signatures, its REST codes and bodies, faults, git serving, and
//! the real PyPI gitea-mcp posting comments through it; its repository
//! webhooks, commit statuses, repository-wide comment listing and pull
//! request reviews.
//!
//! Here: the helpers (an HTTP client, a webhook receiver, payload shapes).

mod faults;
mod hooks;
mod listing;
mod mcp;
mod rest;
mod reviews;
mod statuses;
mod webhooks;

use crate::giteasim::{go_json, GiteaSim, Perm, J};
use crate::support::{fixture, fixtures_dir, TestHttpServer, BOT, GITEA_TOKEN, SECRET};
use actix_web::{web, HttpRequest, HttpResponse};
use hmac::Mac;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

// ---------------------------------------------------------------------------
// Helpers: an HTTP client and a webhook receiver.
// ---------------------------------------------------------------------------

struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    text: String,
}

impl Resp {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.text))
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One request; `auth` is the whole `Authorization` value.
fn call(method: &str, url: &str, auth: Option<&str>, body: Option<Value>) -> Resp {
    let mut req = ureq::request(method, url).timeout(Duration::from_secs(30));
    if let Some(a) = auth {
        req = req.set("Authorization", a);
    }
    let result = match body {
        Some(b) => req
            .set("Content-Type", "application/json")
            .send_string(&b.to_string()),
        None => req.call(),
    };
    let resp = match result {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("{method} {url}: {e}"),
    };
    let status = resp.status();
    let headers = resp
        .headers_names()
        .into_iter()
        .map(|k| {
            let v = resp.header(&k).unwrap_or_default().to_owned();
            (k, v)
        })
        .collect();
    Resp {
        status,
        headers,
        text: resp.into_string().unwrap(),
    }
}

fn bot() -> String {
    format!("token {GITEA_TOKEN}")
}

#[derive(Default)]
struct Received {
    seen: Mutex<Vec<(actix_web::http::header::HeaderMap, Vec<u8>)>>,
    status: AtomicU16,
}

/// The bridge's side of a webhook: records each request, answers
/// `status` with `ok <n>`.
struct Receiver {
    state: Arc<Received>,
    server: TestHttpServer,
}

impl Receiver {
    fn start() -> Receiver {
        let state = Arc::new(Received::default());
        state.status.store(200, Ordering::SeqCst);
        let data = web::Data::from(state.clone());
        let server = TestHttpServer::start("hook-receiver", move |cfg| {
            cfg.app_data(data.clone()).default_service(web::to(
                |req: HttpRequest, body: web::Bytes, st: web::Data<Received>| async move {
                    let n = {
                        let mut seen = st.seen.lock().unwrap();
                        seen.push((req.headers().clone(), body.to_vec()));
                        seen.len()
                    };
                    let code = st.status.load(Ordering::SeqCst);
                    HttpResponse::build(actix_web::http::StatusCode::from_u16(code).unwrap())
                        .body(format!("ok {n}"))
                },
            ));
        });
        Receiver { state, server }
    }

    fn url(&self) -> String {
        format!("http://{}/api/gitea/webhook", self.server.addr)
    }

    fn seen(&self) -> Vec<(actix_web::http::header::HeaderMap, Vec<u8>)> {
        self.state.seen.lock().unwrap().clone()
    }
}

/// For every object in `j`, its keys in order, by path (`[]`: first element).
fn shapes(j: &J, path: &str, out: &mut BTreeMap<String, Vec<String>>) {
    match j {
        J::Obj(fields) => {
            out.insert(
                path.to_owned(),
                fields.iter().map(|(k, _)| k.clone()).collect(),
            );
            for (k, v) in fields {
                shapes(v, &format!("{path}.{k}"), out);
            }
        }
        J::Arr(items) => {
            if let Some(first) = items.first() {
                shapes(first, &format!("{path}[]"), out);
            }
        }
        _ => {}
    }
}

/// `ours` has, for every object both have, exactly the fixture's keys in the
/// fixture's order, and has every object the fixture has but for those that
/// are empty or null in a fresh repository (labels, milestone, reviewers).
fn assert_same_shape(name: &str, ours: &[u8]) {
    let (theirs, _) = fixture(name);
    let theirs: J = serde_json::from_slice(&theirs).unwrap();
    let ours: J = serde_json::from_slice(ours).unwrap();
    let (mut a, mut b) = (BTreeMap::new(), BTreeMap::new());
    shapes(&theirs, "", &mut a);
    shapes(&ours, "", &mut b);
    for (path, keys) in &a {
        let optional = ["labels", "milestone", "requested_reviewers", "assignee"]
            .iter()
            .any(|o| path.contains(&format!(".{o}")));
        match b.get(path) {
            Some(ours) => assert_eq!(ours, keys, "{name}: keys of {path:?}"),
            None => assert!(optional, "{name}: the simulator's payload lacks {path:?}"),
        }
    }
}

/// Standard base64 with padding (test side of basic auth).
fn base64_encode(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
