//! Webhook delivery: one worker sends the queued hook tasks in order, signed
//! and with the headers Gitea's `addDefaultHeaders` sets.

use crate::giteasim::hooks::{ContentType, Delivery, Hooks, TEST_HOOK};
use crate::giteasim::Sim;
use hmac::{Hmac, Mac};
use std::time::Duration;

pub(crate) fn hmac_hex<M: Mac + hmac::digest::KeyInit>(secret: &[u8], body: &[u8]) -> String {
    let mut mac = <M as hmac::digest::KeyInit>::new_from_slice(secret).unwrap();
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// Where a task goes, read when it is sent (as Gitea loads the webhook).
struct Target {
    url: String,
    secret: String,
    content_type: ContentType,
    authorization: String,
}

/// The headers Gitea's `addDefaultHeaders` sets, plus Go's transport ones.
/// The signatures are over the JSON whatever the content type.
pub(crate) fn hook_headers(
    t: &Delivery,
    secret: &str,
    content_type: ContentType,
) -> Vec<(String, String)> {
    let sha256 = hmac_hex::<Hmac<sha2::Sha256>>(secret.as_bytes(), &t.body);
    let sha1 = hmac_hex::<Hmac<sha1::Sha1>>(secret.as_bytes(), &t.body);
    let mime = match content_type {
        ContentType::Json => "application/json",
        ContentType::Form => "application/x-www-form-urlencoded",
    };
    let mut headers = vec![("Content-Type".to_owned(), mime.to_owned())];
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

fn target(h: &Hooks, hook_id: i64) -> Option<Target> {
    if hook_id == TEST_HOOK {
        return h.test_hook.as_ref().map(|t| Target {
            url: t.url.clone(),
            secret: t.secret.clone(),
            content_type: ContentType::Json,
            authorization: String::new(),
        });
    }
    h.webhooks.iter().find(|w| w.id == hook_id).map(|w| Target {
        url: w.url.clone(),
        secret: w.secret.clone(),
        content_type: w.content_type,
        authorization: w.authorization_header.clone(),
    })
}

/// One worker, like a one-worker `webhook_sender` queue: tasks in order, no
/// retry, the task marked delivered before the HTTP call.
pub(crate) fn hook_worker(sim: &Sim) {
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(5))
        .build();
    loop {
        let (i, task, target) = {
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
            (i, h.tasks[i].clone(), target(&h, h.tasks[i].hook_id))
        };
        let (url, headers, status, response_body, error) = match target {
            None => (
                String::new(),
                Vec::new(),
                None,
                String::new(),
                Some(format!("webhook {} no longer exists", task.hook_id)),
            ),
            Some(target) => {
                let mut headers = hook_headers(&task, &target.secret, target.content_type);
                if !target.authorization.is_empty() {
                    headers.push(("Authorization".to_owned(), target.authorization.clone()));
                }
                let body = match target.content_type {
                    ContentType::Json => task.body.clone(),
                    ContentType::Form => form_urlencoded::Serializer::new(String::new())
                        .append_pair("payload", &String::from_utf8_lossy(&task.body))
                        .finish()
                        .into_bytes(),
                };
                let mut req = agent.post(&target.url);
                for (k, v) in &headers {
                    req = req.set(k, v);
                }
                let (status, response_body, error) = match req.send_bytes(&body) {
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
                (target.url, headers, status, response_body, error)
            }
        };
        let mut h = sim.hooks.lock().unwrap();
        let t = &mut h.tasks[i];
        t.url = url;
        t.headers = headers;
        t.status = status;
        t.response_body = response_body;
        t.error = error;
        h.busy = false;
        sim.hooks_cv.notify_all();
    }
}
