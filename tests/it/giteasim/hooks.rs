//! Webhooks: the repository webhooks (made through the API or by a test), the
//! test's own hook ([`GiteaSim::set_webhook`], which hears every repository
//! like a system hook), the hook tasks Gitea creates for an event, and what a
//! test controls about them (where they go, when they are delivered,
//! replays, lost events).

use crate::giteasim::data::Data;
use crate::giteasim::json::{go_json, obj};
use crate::giteasim::{rfc3339, GiteaSim, Sim, J};
use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

/// `Delivery::hook_id` of the tasks for the test's own hook.
pub const TEST_HOOK: i64 = 0;

/// Every event a repository webhook can subscribe to (Gitea's
/// `HookEventType`s that `addHook` sets), in the order the simulator lists
/// them. Gitea lists a hook's events from a Go map, so in no stable order:
/// compare them as sets.
pub(crate) const HOOK_EVENTS: &[&str] = &[
    "create",
    "delete",
    "fork",
    "push",
    "issues",
    "issue_assign",
    "issue_label",
    "issue_milestone",
    "issue_comment",
    "pull_request",
    "pull_request_assign",
    "pull_request_label",
    "pull_request_milestone",
    "pull_request_comment",
    "pull_request_review",
    "pull_request_review_request",
    "pull_request_sync",
    "wiki",
    "repository",
    "release",
    "package",
    "status",
    "workflow_job",
];

/// The events Gitea's `editHook` leaves as they were: it recomputes every
/// other one from the form.
const KEPT_ON_EDIT: &[&str] = &["package", "status", "workflow_job"];

/// The hook types `IsValidHookTaskType` accepts.
pub(crate) const HOOK_TYPES: &[&str] = &[
    "gitea",
    "gogs",
    "slack",
    "discord",
    "dingtalk",
    "telegram",
    "msteams",
    "feishu",
    "matrix",
    "wechatwork",
    "packagist",
];

/// Which events a create or edit form turns on, as Gitea's `addHook` and
/// `editHook` read `events`: names compare without regard to case; `issues`
/// turns on the whole issue family and `pull_request` the pull request one
/// (`issues_only` and `pull_request_only` the bare event); no events at all
/// means `push`. `previous`: an edit's hook, whose `KEPT_ON_EDIT` events stay.
pub(crate) fn chosen_events(
    form: &[String],
    previous: Option<&BTreeSet<String>>,
) -> BTreeSet<String> {
    let default = ["push".to_owned()];
    let form: &[String] = if form.is_empty() { &default } else { form };
    let has = |name: &str| form.iter().any(|e| e.eq_ignore_ascii_case(name));
    let mut on = BTreeSet::new();
    for &event in HOOK_EVENTS {
        let chosen = match event {
            "issues" => has("issues_only") || has("issues"),
            e if e.starts_with("issue_") => has(e) || has("issues"),
            "pull_request" => has("pull_request_only") || has("pull_request"),
            e if e.starts_with("pull_request_") => has(e) || has("pull_request"),
            e if previous.is_some() && KEPT_ON_EDIT.contains(&e) => {
                previous.is_some_and(|p| p.contains(e))
            }
            e => has(e),
        };
        if chosen {
            on.insert(event.to_owned());
        }
    }
    on
}

/// How a hook's body is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ContentType {
    /// `application/json`, the JSON as the body.
    Json,
    /// `application/x-www-form-urlencoded`, `payload=<JSON>`.
    Form,
}

impl ContentType {
    pub(crate) fn parse(s: &str) -> Option<ContentType> {
        match s {
            "json" => Some(ContentType::Json),
            "form" => Some(ContentType::Form),
            _ => None,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ContentType::Json => "json",
            ContentType::Form => "form",
        }
    }
}

/// A repository webhook (Gitea's `webhook` row).
#[derive(Clone, Debug)]
pub(crate) struct Webhook {
    pub(crate) id: i64,
    pub(crate) repo_id: i64,
    pub(crate) kind: String,
    pub(crate) url: String,
    pub(crate) content_type: ContentType,
    /// Never shown by the API; signs the deliveries.
    pub(crate) secret: String,
    /// The subscribed events (see [`chosen_events`]).
    pub(crate) events: BTreeSet<String>,
    pub(crate) branch_filter: String,
    /// Sent as `Authorization` with every delivery when not empty.
    pub(crate) authorization_header: String,
    pub(crate) active: bool,
    pub(crate) created: i64,
    pub(crate) updated: i64,
}

impl Webhook {
    /// Gitea's `HasEvent`: the three review events count as the
    /// `pull_request_review` subscription.
    pub(crate) fn has_event(&self, event_type: &str) -> bool {
        let event = match event_type {
            "pull_request_review_approved"
            | "pull_request_review_rejected"
            | "pull_request_review_comment" => "pull_request_review",
            e => e,
        };
        self.events.contains(event)
    }

    /// `api.Hook` (the 1.24 field set; `config` is a Go map, so its keys are
    /// sorted, and it never holds the secret).
    pub(crate) fn json(&self) -> J {
        let events = HOOK_EVENTS
            .iter()
            .filter(|e| self.events.contains(**e))
            .map(|e| J::from(*e))
            .collect();
        obj(vec![
            ("id", self.id.into()),
            ("type", (&self.kind).into()),
            ("branch_filter", (&self.branch_filter).into()),
            (
                "config",
                obj(vec![
                    ("content_type", self.content_type.as_str().into()),
                    ("url", (&self.url).into()),
                ]),
            ),
            ("events", J::Arr(events)),
            ("authorization_header", (&self.authorization_header).into()),
            ("active", self.active.into()),
            ("updated_at", rfc3339(self.updated).into()),
            ("created_at", rfc3339(self.created).into()),
        ])
    }
}

/// Where the test's own hook sends.
#[derive(Clone, Debug)]
pub(crate) struct TestHook {
    pub(crate) url: String,
    pub(crate) secret: String,
}

/// One webhook delivery attempt (Gitea's `HookTask`).
#[derive(Debug, Clone)]
pub struct Delivery {
    /// `X-Gitea-Delivery`.
    pub id: String,
    /// The webhook it is for: a repository webhook's id, or [`TEST_HOOK`].
    pub hook_id: i64,
    /// `X-Gitea-Event`, e.g. `issue_comment`.
    pub event: String,
    /// `X-Gitea-Event-Type`, e.g. `pull_request_comment`.
    pub event_type: String,
    /// The exact JSON (for a `form` hook, the value of `payload`).
    pub body: Vec<u8>,
    /// Where it went (empty until delivered).
    pub url: String,
    /// Request headers sent (empty until delivered).
    pub headers: Vec<(String, String)>,
    /// `true` once attempted.
    pub delivered: bool,
    /// The receiver's status (`None`: not delivered, or no answer).
    pub status: Option<u16>,
    pub response_body: String,
    /// Transport error (connect refused, timeout), or the webhook was gone.
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
    /// [`GiteaSim::set_webhook`]'s hook.
    pub(crate) test_hook: Option<TestHook>,
    /// Repository webhooks, oldest first.
    pub(crate) webhooks: Vec<Webhook>,
    pub(crate) last_hook_id: i64,
    pub(crate) manual: bool,
    pub(crate) issue_events: bool,
    /// [`GiteaSim::lose_webhooks`]: events make no task at all.
    pub(crate) lost: bool,
    pub(crate) tasks: Vec<Delivery>,
    pub(crate) queue: VecDeque<usize>,
    pub(crate) busy: bool,
    pub(crate) shutdown: bool,
}

impl Hooks {
    pub(crate) fn next_hook_id(&mut self) -> i64 {
        self.last_hook_id += 1;
        self.last_hook_id
    }

    /// The hooks an event of `repo_id` goes to, in Gitea's order: the
    /// repository's active hooks, then the test's hook (a system hook).
    fn targets(&self, repo_id: i64, event_type: &str) -> Vec<i64> {
        let mut ids: Vec<i64> = self
            .webhooks
            .iter()
            .filter(|w| w.repo_id == repo_id && w.active && w.has_event(event_type))
            .map(|w| w.id)
            .collect();
        let test_hears = event_type != "issues" || self.issue_events;
        if self.test_hook.is_some() && test_hears {
            ids.push(TEST_HOOK);
        }
        ids
    }
}

impl GiteaSim {
    // -- webhooks ------------------------------------------------------------

    /// The test's own hook: every comment and review event of every
    /// repository (and `issues` events with [`GiteaSim::set_issue_events`])
    /// goes to `url`, signed with `secret`, besides any repository webhook.
    pub fn set_webhook(&self, url: &str, secret: &str) {
        self.sim.hooks.lock().unwrap().test_hook = Some(TestHook {
            url: url.to_owned(),
            secret: secret.to_owned(),
        });
    }

    /// No test hook any more: only repository webhooks get deliveries.
    pub fn clear_webhook(&self) {
        self.sim.hooks.lock().unwrap().test_hook = None;
    }

    /// A repository webhook as an administrator makes it in the web UI
    /// (type gitea, JSON); `events` as the API reads them. Returns its id.
    pub fn add_webhook(
        &self,
        owner: &str,
        name: &str,
        url: &str,
        secret: &str,
        events: &[&str],
        active: bool,
    ) -> i64 {
        let (repo_id, now) = {
            let d = self.sim.data.lock().unwrap();
            let repo = d
                .repo(owner, name)
                .unwrap_or_else(|| panic!("giteasim: no repository {owner}/{name}"));
            (repo.id, d.now())
        };
        let events: Vec<String> = events.iter().map(|e| (*e).to_owned()).collect();
        let mut h = self.sim.hooks.lock().unwrap();
        let id = h.next_hook_id();
        h.webhooks.push(Webhook {
            id,
            repo_id,
            kind: "gitea".into(),
            url: url.to_owned(),
            content_type: ContentType::Json,
            secret: secret.to_owned(),
            events: chosen_events(&events, None),
            branch_filter: "*".into(),
            authorization_header: String::new(),
            active,
            created: now,
            updated: now,
        });
        id
    }

    /// A repository's webhooks as `GET /repos/{o}/{r}/hooks` shows them.
    pub fn webhooks(&self, owner: &str, name: &str) -> Vec<serde_json::Value> {
        let repo_id = {
            let d = self.sim.data.lock().unwrap();
            d.repo(owner, name)
                .unwrap_or_else(|| panic!("giteasim: no repository {owner}/{name}"))
                .id
        };
        let h = self.sim.hooks.lock().unwrap();
        h.webhooks
            .iter()
            .filter(|w| w.repo_id == repo_id)
            .map(|w| w.json().to_value())
            .collect()
    }

    /// The secret a webhook signs with (the API never shows it).
    pub fn webhook_secret(&self, hook_id: i64) -> Option<String> {
        let h = self.sim.hooks.lock().unwrap();
        h.webhooks
            .iter()
            .find(|w| w.id == hook_id)
            .map(|w| w.secret.clone())
    }

    /// Also send `issues` events (`opened` from [`GiteaSim::create_issue`])
    /// to the test's hook, as a hook subscribed to "Issues" does. Off by
    /// default: the bridge's hook subscribes to comment events.
    pub fn set_issue_events(&self, on: bool) {
        self.sim.hooks.lock().unwrap().issue_events = on;
    }

    /// `true`: events make no hook task at all, as when Gitea never sent
    /// them (a webhook missing or misconfigured at the time, a queue lost);
    /// what happened is still in the REST API.
    pub fn lose_webhooks(&self, lost: bool) {
        self.sim.hooks.lock().unwrap().lost = lost;
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

    /// Gitea's "Replay": a new task for the same hook with a new delivery
    /// id and the identical body; returns the new id.
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
            url: String::new(),
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
    /// Create the `issue_comment` hook tasks for `action` on comment `id`
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
        let c = d.comment(id).expect("comment exists");
        let issue = d.issue(c.issue_id);
        let event_type = if issue.pull.is_some() {
            "pull_request_comment"
        } else {
            "issue_comment"
        };
        let targets = h.targets(issue.repo_id, event_type);
        if targets.is_empty() || h.lost {
            return;
        }
        let base = self.base();
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
        self.enqueue(&mut h, &targets, "issue_comment", event_type, body);
    }

    /// The tasks for a submitted review, as Gitea's `PullRequestReview`
    /// notifier makes them: a `PullRequestPayload` with action `reviewed`,
    /// the reviewer as both `requested_reviewer` and `sender`, the pull
    /// request as the reviewer sees it, the repository with its author's
    /// permissions, and `review` `{type, content}`. A pending review fires
    /// nothing.
    pub(crate) fn review_hook(&self, d: &Data, review_id: i64) {
        let r = d.review(review_id).expect("review exists");
        let Some((event, event_type)) = r.state.hook_event() else {
            return;
        };
        let mut h = self.hooks.lock().unwrap();
        let issue = d.issue(r.issue_id);
        let targets = h.targets(issue.repo_id, event_type);
        if targets.is_empty() || h.lost {
            return;
        }
        let base = self.base();
        let repo = d.repo_by_id(issue.repo_id);
        let payload = obj(vec![
            ("action", "reviewed".into()),
            ("number", issue.number.into()),
            (
                "pull_request",
                d.pull_json(base, &self.git, issue, Some(&r.reviewer)),
            ),
            ("requested_reviewer", d.user_json(base, &r.reviewer, false)),
            ("repository", d.repo_json(base, repo, Some(&issue.author))),
            ("sender", d.user_json(base, &r.reviewer, false)),
            ("commit_id", "".into()),
            (
                "review",
                obj(vec![
                    ("type", event_type.into()),
                    ("content", (&r.body).into()),
                ]),
            ),
        ]);
        let body = go_json(&payload, true);
        self.enqueue(&mut h, &targets, event, event_type, body);
    }

    /// The `issues` `opened` tasks for a new issue.
    pub(crate) fn issue_opened_hook(&self, d: &Data, issue_id: i64) {
        let mut h = self.hooks.lock().unwrap();
        let issue = d.issue(issue_id);
        let targets = h.targets(issue.repo_id, "issues");
        if targets.is_empty() || h.lost {
            return;
        }
        let base = self.base();
        let repo = d.repo_by_id(issue.repo_id);
        let payload = obj(vec![
            ("action", "opened".into()),
            ("number", issue.number.into()),
            ("issue", d.issue_json(base, issue, Some(&issue.author))),
            ("repository", d.repo_json(base, repo, Some(&issue.author))),
            ("sender", d.user_json(base, &issue.author, false)),
            ("commit_id", "".into()),
        ]);
        let body = go_json(&payload, true);
        self.enqueue(&mut h, &targets, "issues", "issues", body);
    }

    /// One task per hook, queued unless delivery is manual.
    fn enqueue(
        &self,
        h: &mut Hooks,
        targets: &[i64],
        event: &str,
        event_type: &str,
        body: Vec<u8>,
    ) {
        for &hook_id in targets {
            h.tasks.push(Delivery {
                id: uuid::Uuid::new_v4().to_string(),
                hook_id,
                event: event.into(),
                event_type: event_type.into(),
                body: body.clone(),
                url: String::new(),
                headers: Vec::new(),
                delivered: false,
                status: None,
                response_body: String::new(),
                error: None,
            });
            if !h.manual {
                let i = h.tasks.len() - 1;
                h.queue.push_back(i);
            }
        }
        self.hooks_cv.notify_all();
    }
}
