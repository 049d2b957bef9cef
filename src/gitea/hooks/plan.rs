//! The judgement of a repository's webhooks against the one the bridge
//! wants, pure: [`plan`] says what makes it right (`gitea hook` acts on it)
//! and [`Plan::state`] names where it stands (`doctor` and the admin view
//! show it). One judgement, so the three never disagree.

use super::{Hook, HookContentType, HookEvent};
use serde::Serialize;
use std::collections::BTreeSet;
use std::fmt;

/// What the bridge's webhook endpoint acts on: comments on Issues and Pull
/// Requests, and submitted reviews (Gitea delivers those under
/// `pull_request_review_*` event types to this one subscription).
pub const BRIDGE_EVENTS: [HookEvent; 3] = [
    HookEvent::IssueComment,
    HookEvent::PullRequestComment,
    HookEvent::PullRequestReview,
];

/// How a hook at the URL differs from the bridge's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Drift {
    Inactive,
    ContentType(String),
    MissingEvents(Vec<HookEvent>),
    ExtraEvents(Vec<HookEvent>),
    BranchFilter(String),
}

/// Event names as the lines of `gitea hook` and `doctor` show them.
pub fn names(events: &[HookEvent]) -> String {
    events
        .iter()
        .map(HookEvent::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

impl fmt::Display for Drift {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Drift::Inactive => f.write_str("it was inactive"),
            Drift::ContentType(ct) => write!(f, "it sent {ct} instead of json"),
            Drift::MissingEvents(e) => write!(f, "it lacked {}", names(e)),
            Drift::ExtraEvents(e) => write!(f, "it also sent {}", names(e)),
            Drift::BranchFilter(b) => write!(f, "it filtered branches by {b:?}"),
        }
    }
}

/// Why a hook is replaced rather than edited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplaceWhy {
    /// `--recreate`.
    Asked,
    /// A `slack`, `gogs`, ... hook: an edit cannot change the type.
    Kind(String),
}

/// What to do with a repository's hooks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// No hook points at the URL.
    Create,
    /// Hook `id` already is the bridge's.
    Keep { id: i64 },
    /// Hook `id` points at the URL but differs.
    Update { id: i64, drift: Vec<Drift> },
    /// Hook `id` is replaced: a new one first, then it is deleted.
    Replace { id: i64, why: ReplaceWhy },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub action: Action,
    /// Further hooks at the URL, to delete.
    pub duplicates: Vec<i64>,
}

/// Decides, from a repository's hooks, what makes it have exactly one hook
/// to `url` that is the bridge's. Among several hooks at the URL the one
/// kept is a `gitea` one if any, the oldest first.
pub fn plan(existing: &[Hook], url: &str, recreate: bool) -> Plan {
    let mut at_url: Vec<&Hook> = existing.iter().filter(|h| h.config.url == url).collect();
    at_url.sort_by_key(|h| (h.kind != "gitea", h.id));
    let Some((kept, rest)) = at_url.split_first() else {
        return Plan {
            action: Action::Create,
            duplicates: Vec::new(),
        };
    };
    let duplicates = rest.iter().map(|h| h.id).collect();
    let action = if kept.kind != "gitea" {
        Action::Replace {
            id: kept.id,
            why: ReplaceWhy::Kind(kept.kind.clone()),
        }
    } else if recreate {
        Action::Replace {
            id: kept.id,
            why: ReplaceWhy::Asked,
        }
    } else {
        match drift(kept) {
            drift if drift.is_empty() => Action::Keep { id: kept.id },
            drift => Action::Update { id: kept.id, drift },
        }
    };
    Plan { action, duplicates }
}

fn drift(hook: &Hook) -> Vec<Drift> {
    let mut drift = Vec::new();
    if !hook.active {
        drift.push(Drift::Inactive);
    }
    match &hook.config.content_type {
        Some(HookContentType::Json) => {}
        Some(other) => drift.push(Drift::ContentType(other.as_str().to_owned())),
        None => drift.push(Drift::ContentType("nothing said".to_owned())),
    }
    let has: BTreeSet<&HookEvent> = hook.events.iter().collect();
    let wanted: BTreeSet<&HookEvent> = BRIDGE_EVENTS.iter().collect();
    let missing: Vec<HookEvent> = wanted.difference(&has).map(|e| (*e).clone()).collect();
    let extra: Vec<HookEvent> = has.difference(&wanted).map(|e| (*e).clone()).collect();
    if !missing.is_empty() {
        drift.push(Drift::MissingEvents(missing));
    }
    if !extra.is_empty() {
        drift.push(Drift::ExtraEvents(extra));
    }
    if !matches!(hook.branch_filter.as_str(), "" | "*") {
        drift.push(Drift::BranchFilter(hook.branch_filter.clone()));
    }
    drift
}

/// Where a repository's webhook to the bridge stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HookState {
    /// Exactly one hook at the URL, and it is the bridge's.
    Ok,
    /// No hook sends to the URL: comments reach the bridge only through the
    /// catch-up.
    Missing,
    /// The hook at the URL is not the bridge's (inactive, wrong events or
    /// content type, another hook type).
    Drifted,
    /// The bridge's hook, and more at the same URL: every comment arrives
    /// more than once.
    Duplicated,
}

impl HookState {
    pub fn as_str(self) -> &'static str {
        match self {
            HookState::Ok => "ok",
            HookState::Missing => "missing",
            HookState::Drifted => "drifted",
            HookState::Duplicated => "duplicated",
        }
    }
}

impl fmt::Display for HookState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Plan {
    /// The hook `gitea hook` would keep, edit or replace (`None`: it would
    /// make one).
    pub fn hook_id(&self) -> Option<i64> {
        match &self.action {
            Action::Create => None,
            Action::Keep { id } | Action::Update { id, .. } | Action::Replace { id, .. } => {
                Some(*id)
            }
        }
    }

    /// Where the repository stands: nothing to do is ok; a wrong hook is
    /// drifted even when duplicates come with it (fixing it fixes both).
    pub fn state(&self) -> HookState {
        match &self.action {
            Action::Keep { .. } if self.duplicates.is_empty() => HookState::Ok,
            Action::Keep { .. } => HookState::Duplicated,
            Action::Create => HookState::Missing,
            Action::Update { .. } | Action::Replace { .. } => HookState::Drifted,
        }
    }

    /// What was found, in a sentence (doctor's line, the admin view's title).
    pub fn describe(&self, url: &str) -> String {
        let dups = if self.duplicates.is_empty() {
            String::new()
        } else {
            format!(
                "; {} more webhook(s) at the same URL deliver every comment again",
                self.duplicates.len()
            )
        };
        match &self.action {
            Action::Keep { id } if dups.is_empty() => {
                format!("webhook {id} sends the comment and review events as JSON to {url}")
            }
            Action::Keep { id } => format!("webhook {id} is right{dups}"),
            Action::Create => format!("no webhook sends to {url}"),
            Action::Update { id, drift } => {
                let drift: Vec<String> = drift.iter().map(ToString::to_string).collect();
                format!("webhook {id} is wrong: {}{dups}", drift.join("; "))
            }
            Action::Replace { id, why } => {
                let why = match why {
                    ReplaceWhy::Kind(kind) => format!("it is a {kind} hook"),
                    ReplaceWhy::Asked => "it must be replaced".to_owned(),
                };
                format!("webhook {id} is wrong: {why}{dups}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gitea::hooks::HookConfig;

    const URL: &str = "https://bridge.example/api/gitea/webhook";

    fn hook(id: i64, url: &str, events: &[HookEvent]) -> Hook {
        Hook {
            id,
            kind: "gitea".into(),
            config: HookConfig {
                url: url.into(),
                content_type: Some(HookContentType::Json),
            },
            events: events.to_vec(),
            active: true,
            branch_filter: "*".into(),
        }
    }

    fn plan_of(hooks: &[Hook]) -> Plan {
        plan(hooks, URL, false)
    }

    #[test]
    fn no_hook_at_the_url_makes_one() {
        let elsewhere = hook(1, "https://other.example/hook", &BRIDGE_EVENTS);
        assert_eq!(
            plan_of(&[elsewhere]),
            Plan {
                action: Action::Create,
                duplicates: vec![]
            }
        );
        assert_eq!(plan_of(&[]).action, Action::Create);
    }

    #[test]
    fn the_bridges_hook_is_kept_whatever_the_event_order() {
        let mut events = BRIDGE_EVENTS.to_vec();
        events.reverse();
        let mut h = hook(4, URL, &events);
        h.branch_filter = String::new();
        assert_eq!(plan_of(&[h]).action, Action::Keep { id: 4 });
    }

    #[test]
    fn a_hook_that_differs_is_updated_saying_how() {
        let mut h = hook(5, URL, &[HookEvent::IssueComment, HookEvent::Push]);
        h.active = false;
        h.config.content_type = Some(HookContentType::Form);
        h.branch_filter = "main".into();
        assert_eq!(
            plan_of(&[h]).action,
            Action::Update {
                id: 5,
                drift: vec![
                    Drift::Inactive,
                    Drift::ContentType("form".into()),
                    Drift::MissingEvents(vec![
                        HookEvent::PullRequestComment,
                        HookEvent::PullRequestReview
                    ]),
                    Drift::ExtraEvents(vec![HookEvent::Push]),
                    Drift::BranchFilter("main".into()),
                ]
            }
        );
    }

    #[test]
    fn one_hook_stays_and_the_duplicates_go() {
        let old = hook(3, URL, &[HookEvent::IssueComment]);
        let newer = hook(9, URL, &BRIDGE_EVENTS);
        let mut slack = hook(2, URL, &BRIDGE_EVENTS);
        slack.kind = "slack".into();
        let p = plan_of(&[newer, slack, old]);
        assert!(matches!(p.action, Action::Update { id: 3, .. }), "{p:?}");
        assert_eq!(p.duplicates, vec![9, 2]);
    }

    #[test]
    fn what_an_edit_cannot_fix_is_replaced() {
        let mut gogs = hook(6, URL, &BRIDGE_EVENTS);
        gogs.kind = "gogs".into();
        assert_eq!(
            plan_of(&[gogs]).action,
            Action::Replace {
                id: 6,
                why: ReplaceWhy::Kind("gogs".into())
            }
        );
        let right = hook(7, URL, &BRIDGE_EVENTS);
        assert_eq!(
            plan(&[right], URL, true).action,
            Action::Replace {
                id: 7,
                why: ReplaceWhy::Asked
            }
        );
    }

    #[test]
    fn the_state_follows_the_plan() {
        let right = hook(3, URL, &BRIDGE_EVENTS);
        let p = plan_of(std::slice::from_ref(&right));
        assert_eq!((p.state(), p.hook_id()), (HookState::Ok, Some(3)));
        assert!(
            p.describe(URL).starts_with("webhook 3 sends"),
            "{}",
            p.describe(URL)
        );
        let twice = plan_of(&[right.clone(), hook(4, URL, &BRIDGE_EVENTS)]);
        assert_eq!(twice.state(), HookState::Duplicated);
        let none = plan_of(&[]);
        assert_eq!((none.state(), none.hook_id()), (HookState::Missing, None));
        assert_eq!(none.describe(URL), format!("no webhook sends to {URL}"));
        let mut off = right;
        off.active = false;
        let p = plan_of(&[off]);
        assert_eq!(p.state(), HookState::Drifted);
        assert_eq!(p.describe(URL), "webhook 3 is wrong: it was inactive");
        let mut slack = hook(5, URL, &BRIDGE_EVENTS);
        slack.kind = "slack".into();
        assert_eq!(plan_of(&[slack]).state(), HookState::Drifted);
    }
}
