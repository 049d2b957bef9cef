//! Webhooks: the hook tasks Gitea creates for an event, and what a test
//! controls about them (where they go, when they are delivered, replays).

use crate::giteasim::data::Data;
use crate::giteasim::json::{go_json, obj};
use crate::giteasim::{GiteaSim, Sim, J};
use std::collections::VecDeque;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Delivery {
    /// `X-Gitea-Delivery`.
    pub id: String,
    /// `X-Gitea-Event`, e.g. `issue_comment`.
    pub event: String,
    /// `X-Gitea-Event-Type`, e.g. `pull_request_comment`.
    pub event_type: String,
    /// The exact body bytes.
    pub body: Vec<u8>,
    /// Request headers sent (empty until delivered).
    pub headers: Vec<(String, String)>,
    /// `true` once attempted.
    pub delivered: bool,
    /// The receiver's status (`None`: not delivered, or no answer).
    pub status: Option<u16>,
    pub response_body: String,
    /// Transport error (connect refused, timeout).
    pub error: Option<String>,
}

impl Delivery {
    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

#[derive(Default)]
pub(crate) struct Hooks {
    pub(crate) url: Option<String>,
    pub(crate) secret: String,
    pub(crate) manual: bool,
    pub(crate) issue_events: bool,
    pub(crate) tasks: Vec<Delivery>,
    pub(crate) queue: VecDeque<usize>,
    pub(crate) busy: bool,
    pub(crate) shutdown: bool,
}

impl GiteaSim {
    // -- webhooks ------------------------------------------------------------

    /// Deliver every event to `url`, signed with `secret`.
    pub fn set_webhook(&self, url: &str, secret: &str) {
        let mut h = self.sim.hooks.lock().unwrap();
        h.url = Some(url.to_owned());
        h.secret = secret.to_owned();
    }

    /// Also send `issues` events (`opened` from [`GiteaSim::create_issue`]),
    /// as a hook subscribed to "Issues" does. Off by default: the bridge's
    /// hook subscribes to comment events.
    pub fn set_issue_events(&self, on: bool) {
        self.sim.hooks.lock().unwrap().issue_events = on;
    }

    /// `false`: new tasks stay undelivered until [`GiteaSim::deliver_pending`]
    /// (as when Gitea restarts before its queue ran).
    pub fn set_auto_deliver(&self, auto: bool) {
        self.sim.hooks.lock().unwrap().manual = !auto;
    }

    /// Queue every undelivered task.
    pub fn deliver_pending(&self) {
        let mut h = self.sim.hooks.lock().unwrap();
        let pending: Vec<usize> = (0..h.tasks.len())
            .filter(|i| !h.tasks[*i].delivered && !h.queue.contains(i))
            .collect();
        h.queue.extend(pending);
        self.sim.hooks_cv.notify_all();
    }

    /// Gitea's "Replay": a new task with a new delivery id and the identical
    /// body; returns the new id.
    pub fn redeliver(&self, delivery_id: &str) -> String {
        let mut h = self.sim.hooks.lock().unwrap();
        let old = h
            .tasks
            .iter()
            .find(|t| t.id == delivery_id)
            .unwrap_or_else(|| panic!("giteasim: no delivery {delivery_id}"))
            .clone();
        let id = uuid::Uuid::new_v4().to_string();
        h.tasks.push(Delivery {
            id: id.clone(),
            headers: Vec::new(),
            delivered: false,
            status: None,
            response_body: String::new(),
            error: None,
            ..old
        });
        let i = h.tasks.len() - 1;
        h.queue.push_back(i);
        self.sim.hooks_cv.notify_all();
        id
    }

    /// Every webhook task so far, oldest first.
    pub fn deliveries(&self) -> Vec<Delivery> {
        self.sim.hooks.lock().unwrap().tasks.clone()
    }

    /// Wait (up to 30 s) until no delivery is queued or running.
    pub fn wait_idle(&self) {
        let h = self.sim.hooks.lock().unwrap();
        let (_h, timeout) = self
            .sim
            .hooks_cv
            .wait_timeout_while(h, Duration::from_secs(30), |h| {
                !h.queue.is_empty() || h.busy
            })
            .unwrap();
        assert!(
            !timeout.timed_out(),
            "giteasim: webhook queue still busy after 30 s"
        );
    }
}

impl Sim {
    /// Create the `issue_comment` hook task for `action` on comment `id`
    /// (which must still be in `d`), as `sender`.
    pub(crate) fn comment_hook(
        &self,
        d: &Data,
        action: &str,
        id: i64,
        sender: &str,
        old_body: Option<&str>,
    ) {
        let mut h = self.hooks.lock().unwrap();
        if h.url.is_none() {
            return;
        }
        let base = self.base();
        let c = d.comment(id).expect("comment exists");
        let issue = d.issue(c.issue_id);
        let repo = d.repo_by_id(issue.repo_id);
        let mut fields = vec![
            ("action", J::from(action)),
            ("issue", d.issue_json(base, issue, Some(sender))),
        ];
        if issue.pull.is_some() {
            fields.push((
                "pull_request",
                d.pull_json(base, &self.git, issue, Some(sender)),
            ));
        }
        fields.push(("comment", d.comment_json(base, c)));
        if let Some(old) = old_body {
            fields.push((
                "changes",
                obj(vec![("body", obj(vec![("from", old.into())]))]),
            ));
        }
        fields.push(("repository", d.repo_json(base, repo, Some(sender))));
        fields.push(("sender", d.user_json(base, sender, false)));
        fields.push(("is_pull", issue.pull.is_some().into()));
        let body = go_json(&obj(fields), true);
        let event_type = if issue.pull.is_some() {
            "pull_request_comment"
        } else {
            "issue_comment"
        };
        self.enqueue(&mut h, "issue_comment", event_type, body);
    }

    /// The `issues` `opened` task for a new issue (only with
    /// [`GiteaSim::set_issue_events`]).
    pub(crate) fn issue_opened_hook(&self, d: &Data, issue_id: i64) {
        let mut h = self.hooks.lock().unwrap();
        if h.url.is_none() || !h.issue_events {
            return;
        }
        let base = self.base();
        let issue = d.issue(issue_id);
        let repo = d.repo_by_id(issue.repo_id);
        let payload = obj(vec![
            ("action", "opened".into()),
            ("number", issue.number.into()),
            ("issue", d.issue_json(base, issue, Some(&issue.author))),
            ("repository", d.repo_json(base, repo, Some(&issue.author))),
            ("sender", d.user_json(base, &issue.author, false)),
            ("commit_id", "".into()),
        ]);
        self.enqueue(&mut h, "issues", "issues", go_json(&payload, true));
    }

    pub(crate) fn enqueue(&self, h: &mut Hooks, event: &str, event_type: &str, body: Vec<u8>) {
        h.tasks.push(Delivery {
            id: uuid::Uuid::new_v4().to_string(),
            event: event.into(),
            event_type: event_type.into(),
            body,
            headers: Vec::new(),
            delivered: false,
            status: None,
            response_body: String::new(),
            error: None,
        });
        if !h.manual {
            let i = h.tasks.len() - 1;
            h.queue.push_back(i);
            self.hooks_cv.notify_all();
        }
    }
}
