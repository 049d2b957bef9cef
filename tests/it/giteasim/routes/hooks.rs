//! Repository webhooks: `GET/POST /repos/{o}/{r}/hooks`, `GET/PATCH/DELETE
//! /repos/{o}/{r}/hooks/{id}`, for repository (or site) administrators only,
//! as Gitea's `reqAdmin` has it.
//!
//! Gitea's own pitfalls are kept: a hook is made inactive unless the form
//! says `active: true`; creating never checks for a hook with the same URL
//! (a second POST makes a second hook); the secret is never shown, and an
//! edit cannot change it (`config.secret` is ignored); an edit always
//! rewrites the events (left out: `push` only), the branch filter and the
//! authorization header.

use super::{bind, listed, InRepo, ListOptions};
use crate::giteasim::data::{Data, Perm};
use crate::giteasim::hooks::{chosen_events, ContentType, Webhook, HOOK_TYPES};
use crate::giteasim::server::{empty, error, json, not_found, Answer};
use serde::Deserialize;
use std::collections::HashMap;

/// Gitea's `CreateHookOption`.
#[derive(Deserialize)]
struct CreateHookOption {
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    config: Option<HashMap<String, String>>,
    #[serde(default)]
    events: Option<Vec<String>>,
    #[serde(default)]
    branch_filter: Option<String>,
    #[serde(default)]
    authorization_header: Option<String>,
    #[serde(default)]
    active: Option<bool>,
}

/// Gitea's `EditHookOption` (only `active` is a pointer there: the rest
/// is taken as sent, absent meaning empty).
#[derive(Deserialize)]
struct EditHookOption {
    #[serde(default)]
    config: Option<HashMap<String, String>>,
    #[serde(default)]
    events: Option<Vec<String>>,
    #[serde(default)]
    branch_filter: Option<String>,
    #[serde(default)]
    authorization_header: Option<String>,
    #[serde(default)]
    active: Option<bool>,
}

const NOT_ADMIN: &str =
    "user should be an owner or a collaborator with admin write of a repository";

fn valid_url(url: &str) -> bool {
    ["http://", "https://"].iter().any(|scheme| {
        url.strip_prefix(scheme)
            .is_some_and(|rest| !rest.is_empty())
    })
}

pub(super) fn route(r: &InRepo, d: &mut Data, rest: &[&str]) -> Option<Answer> {
    let ["hooks", tail @ ..] = rest else {
        return None;
    };
    let call = r.call;
    let base = call.base;
    if tail.len() > 1 {
        return None;
    }
    if r.perm < Perm::Admin {
        return Some(error(base, 403, NOT_ADMIN));
    }
    let now = d.now();
    let mut h = call.sim.hooks.lock().unwrap();
    let index = |id: &str| -> Option<usize> {
        let id: i64 = id.parse().ok()?;
        h.webhooks
            .iter()
            .position(|w| w.id == id && w.repo_id == r.repo_id)
    };
    let answer = match (call.method, tail) {
        ("GET", []) => {
            let mine: Vec<&Webhook> = h
                .webhooks
                .iter()
                .filter(|w| w.repo_id == r.repo_id)
                .collect();
            let total = mine.len();
            let page = ListOptions::from_query(call.query).page_of(mine);
            listed(call, page.iter().map(|w| w.json()).collect(), total, None)
        }
        ("POST", []) => {
            let form = match bind::<CreateHookOption>(base, call.body) {
                Ok(form) => form,
                Err(answer) => return Some(answer),
            };
            let kind = match form.kind.filter(|k| !k.is_empty()) {
                Some(kind) => kind,
                None => return Some(error(base, 422, "[Type]: Required")),
            };
            let Some(config) = form.config.filter(|c| !c.is_empty()) else {
                return Some(error(base, 422, "[Config]: Required"));
            };
            if !HOOK_TYPES.contains(&kind.as_str()) {
                return Some(error(base, 422, &format!("Invalid hook type: {kind}")));
            }
            for key in ["url", "content_type"] {
                if !config.contains_key(key) {
                    return Some(error(base, 422, &format!("Missing config option: {key}")));
                }
            }
            let Some(content_type) = ContentType::parse(&config["content_type"]) else {
                return Some(error(base, 422, "Invalid content type"));
            };
            if !valid_url(&config["url"]) {
                return Some(error(base, 422, "Invalid url"));
            }
            let id = h.next_hook_id();
            let hook = Webhook {
                id,
                repo_id: r.repo_id,
                kind,
                url: config["url"].clone(),
                content_type,
                secret: config.get("secret").cloned().unwrap_or_default(),
                events: chosen_events(&form.events.unwrap_or_default(), None),
                branch_filter: form.branch_filter.unwrap_or_default(),
                authorization_header: form.authorization_header.unwrap_or_default(),
                active: form.active.unwrap_or(false),
                created: now,
                updated: now,
            };
            let shown = hook.json();
            h.webhooks.push(hook);
            json(201, shown)
        }
        ("GET", [id]) => match index(id) {
            Some(i) => json(200, h.webhooks[i].json()),
            None => not_found(base),
        },
        ("PATCH", [id]) => {
            let Some(i) = index(id) else {
                return Some(not_found(base));
            };
            let form = match bind::<EditHookOption>(base, call.body) {
                Ok(form) => form,
                Err(answer) => return Some(answer),
            };
            let config = form.config.unwrap_or_default();
            let content_type = match config.get("content_type") {
                None => None,
                Some(ct) => match ContentType::parse(ct) {
                    Some(ct) => Some(ct),
                    None => return Some(error(base, 422, "Invalid content type")),
                },
            };
            let hook = &mut h.webhooks[i];
            if let Some(url) = config.get("url") {
                hook.url = url.clone();
            }
            if let Some(ct) = content_type {
                hook.content_type = ct;
            }
            hook.events = chosen_events(&form.events.unwrap_or_default(), Some(&hook.events));
            hook.branch_filter = form.branch_filter.unwrap_or_default();
            hook.authorization_header = form.authorization_header.unwrap_or_default();
            if let Some(active) = form.active {
                hook.active = active;
            }
            hook.updated = now;
            json(200, hook.json())
        }
        ("DELETE", [id]) => match index(id) {
            Some(i) => {
                h.webhooks.remove(i);
                empty(204)
            }
            None => not_found(base),
        },
        _ => return None,
    };
    Some(answer)
}
