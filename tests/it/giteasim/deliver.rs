//! Webhook delivery: one worker sends the queued hook tasks in order, signed
//! and with the headers Gitea's `addDefaultHeaders` sets.

use crate::giteasim::hooks::Delivery;
use crate::giteasim::Sim;
use hmac::{Hmac, Mac};
use std::time::Duration;

pub(crate) fn hmac_hex<M: Mac + hmac::digest::KeyInit>(secret: &[u8], body: &[u8]) -> String {
    let mut mac = <M as hmac::digest::KeyInit>::new_from_slice(secret).unwrap();
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// The headers Gitea's `addDefaultHeaders` sets, plus Go's transport ones.
pub(crate) fn hook_headers(t: &Delivery, secret: &str) -> Vec<(String, String)> {
    let sha256 = hmac_hex::<Hmac<sha2::Sha256>>(secret.as_bytes(), &t.body);
    let sha1 = hmac_hex::<Hmac<sha1::Sha1>>(secret.as_bytes(), &t.body);
    let mut headers = vec![("Content-Type".to_owned(), "application/json".to_owned())];
    for prefix in ["X-Gitea", "X-Gogs"] {
        headers.push((format!("{prefix}-Delivery"), t.id.clone()));
        headers.push((format!("{prefix}-Event"), t.event.clone()));
        headers.push((format!("{prefix}-Event-Type"), t.event_type.clone()));
        headers.push((format!("{prefix}-Signature"), sha256.clone()));
    }
    headers.extend([
        ("X-Hub-Signature".to_owned(), format!("sha1={sha1}")),
        ("X-Hub-Signature-256".to_owned(), format!("sha256={sha256}")),
        ("X-GitHub-Delivery".to_owned(), t.id.clone()),
        ("X-GitHub-Event".to_owned(), t.event.clone()),
        ("X-GitHub-Event-Type".to_owned(), t.event_type.clone()),
        (
            "X-Gitea-Hook-Installation-Target-Type".to_owned(),
            "repository".to_owned(),
        ),
        (
            "X-GitHub-Hook-Installation-Target-Type".to_owned(),
            "repository".to_owned(),
        ),
        ("User-Agent".to_owned(), "Go-http-client/1.1".to_owned()),
        ("Accept-Encoding".to_owned(), "gzip".to_owned()),
    ]);
    headers
}

/// One worker, like a one-worker `webhook_sender` queue: tasks in order, no
/// retry, the task marked delivered before the HTTP call.
pub(crate) fn hook_worker(sim: &Sim) {
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(5))
        .build();
    loop {
        let (i, task, url, secret) = {
            let mut h = sim.hooks.lock().unwrap();
            let i = loop {
                if h.shutdown {
                    return;
                }
                if let Some(i) = h.queue.pop_front() {
                    break i;
                }
                h = sim.hooks_cv.wait(h).unwrap();
            };
            h.busy = true;
            h.tasks[i].delivered = true;
            let url = h.url.clone().unwrap_or_default();
            (i, h.tasks[i].clone(), url, h.secret.clone())
        };
        let headers = hook_headers(&task, &secret);
        let mut req = agent.post(&url);
        for (k, v) in &headers {
            req = req.set(k, v);
        }
        let (status, response_body, error) = match req.send_bytes(&task.body) {
            Ok(resp) => (
                Some(resp.status()),
                resp.into_string().unwrap_or_default(),
                None,
            ),
            Err(ureq::Error::Status(code, resp)) => {
                (Some(code), resp.into_string().unwrap_or_default(), None)
            }
            Err(e) => (None, String::new(), Some(e.to_string())),
        };
        let mut h = sim.hooks.lock().unwrap();
        let t = &mut h.tasks[i];
        t.headers = headers;
        t.status = status;
        t.response_body = response_body;
        t.error = error;
        h.busy = false;
        sim.hooks_cv.notify_all();
    }
}
