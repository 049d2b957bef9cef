//! A faithful Gitea simulator for end-to-end tests: one actix-web server on
//! 127.0.0.1:0 that serves git over smart HTTP, the parts of Gitea's REST API
//! (`/api/v1`) the bridge uses, and sends webhooks the way Gitea does. The
//! facts it follows are in the shared Gitea fact sheet (webhook delivery,
//! payload shapes, REST codes); `tests/fixtures/gitea` holds real-shaped
//! payloads, and the self-test checks the simulator's payloads against them.
//!
//! # Starting it
//!
//! ```ignore
//! let sim = GiteaSim::start();                 // bot `ccbot`, token support::GITEA_TOKEN
//! sim.create_repo("acme", "widgets");          // private repo, `main` with README.md
//! let bob = sim.add_user("bob");               // returns bob's token
//! sim.set_permission("acme", "widgets", "bob", Perm::Write);
//! let n = sim.create_issue("acme", "widgets", "Flaky test", "body", "bob");
//! sim.set_webhook(&format!("{}/api/gitea/webhook", bridge.base), support::SECRET);
//! sim.post_comment_as("bob", "acme", "widgets", n, "@ccbot look");  // fires issue_comment
//! sim.wait_idle();                              // all webhook deliveries done
//! let d = sim.deliveries();                     // status + response body per delivery
//! ```
//!
//! `base_url()` is Gitea's ROOT_URL (no trailing slash); the API is under
//! `api_url()` = `<base>/api/v1`. The PyPI gitea-mcp wants `GITEA_URL=<base>`.
//!
//! # Users, tokens, permissions
//!
//! Users are created with [`GiteaSim::add_user`] (returns a token) or
//! implicitly as repository owners (no token). The bot `ccbot` exists from the
//! start with token `support::GITEA_TOKEN`. Authentication as in Gitea's
//! `parseToken`: `Authorization: token <t>` or `Bearer <t>` (scheme in any
//! case, as newer Gitea), HTTP basic with the token as password (or as user
//! name), `?token=` / `?access_token=`. An unknown token is 401
//! `user does not exist [uid: 0, name: ]`; no credentials is 401
//! `token is required` on every API route but `/version` (the simulated
//! instance requires sign-in to view). Repositories are private: a user
//! without read access gets Gitea's 404 shape.
//!
//! Permissions per repository: the owner is admin (role `owner`), a site
//! admin ([`GiteaSim::set_site_admin`]) is admin, others get what
//! [`GiteaSim::set_permission`] says (default none). The bot gets **write**
//! on every repository [`GiteaSim::create_repo`] makes — note that real Gitea
//! lets a writer query only its *own* collaborator permission (403 for other
//! users) unless it is a repository or site admin.
//!
//! # REST endpoints (codes and bodies as Gitea's)
//!
//! - `GET /version`, `GET /user`, `GET /user/repos` (owned and collaborated
//!   repositories by name, each with the caller's `permissions`; paged)
//! - `GET /repos/{o}/{r}` (Repository, `permissions` = the caller's)
//! - `GET /repos/{o}/{r}/issues/{n}` (Issue, also for PRs; issues and PRs share
//!   one index per repository), `GET /repos/{o}/{r}/pulls/{n}` (PullRequest;
//!   head/base sha read from git at request time)
//! - `GET /repos/{o}/{r}/issues/{n}/comments?since=&before=`: all plain
//!   comments (no paging), `X-Total-Count`, filter on *updated* time
//!   (inclusive, RFC 3339; bad value 422)
//! - `POST /repos/{o}/{r}/issues/{n}/comments` `{"body"}`: 201; 422 empty body;
//!   404 unknown issue; 403 locked issue without write, or a user denied with
//!   [`GiteaSim::deny_comments_for`] (`user is blocked`)
//! - `GET/PATCH/DELETE /repos/{o}/{r}/issues/comments/{id}`: 200/200/204; 204
//!   for a non-plain comment (see [`GiteaSim::add_event_comment`]); 404; PATCH
//!   and DELETE by someone neither author nor writer: 403 with empty body
//! - `GET/POST/DELETE /repos/{o}/{r}/issues/comments/{id}/reactions`: POST 201
//!   new, 200 already there, 403 `'x' is not an allowed reaction`; DELETE 200
//! - `GET /repos/{o}/{r}/issues/comments?since=&before=&page=&limit=`: the
//!   repository's plain comments by creation time (then id); `since`/`before`
//!   on the updated time; paged only when `page` is given (Gitea then lists
//!   them all, whatever `limit`); `X-Total-Count`, no `Link`
//! - `GET /repos/{o}/{r}/git/commits/{sha}`: `api.Commit` with `author` the
//!   user whose address (`<login>@example.com`) the commit's author has, else
//!   `null`; 404 for an unknown commit. [`GiteaSim::commit`] authors as the
//!   repository's owner, [`GiteaSim::commit_as`] as anyone.
//! - Forks: [`GiteaSim::fork_repo`], then [`GiteaSim::create_fork_pull`]: the
//!   pull request's `head.repo` is the fork, and the base repository's
//!   `refs/pull/<n>/head` holds the fork's commit.
//! - `GET /repos/{o}/{r}/collaborators/{user}/permission`: `{permission,
//!   role_name, user}`; 403 unless the caller is site admin, repo admin or asks
//!   about itself; 404 unknown user
//! - `GET/POST /repos/{o}/{r}/hooks`, `GET/PATCH/DELETE .../hooks/{id}`:
//!   repository (or site) admins only (403 `user should be an owner or a
//!   collaborator with admin write of a repository`); POST 201 (made inactive
//!   unless `active: true`; no events means `push`; the same URL twice makes
//!   two hooks; 422 for a bad type, config or URL), PATCH 200 (the secret
//!   cannot change; the events are rewritten, left out meaning `push`),
//!   DELETE 204; `config` shows `url` and `content_type`, never the secret
//! - `POST /repos/{o}/{r}/statuses/{sha}` `{state, target_url, description,
//!   context}`: 201 (write needed: 403 `user should have a permission to
//!   write to a repo`; a commit that does not exist: bare 500);
//!   `GET .../statuses/{sha}` and `GET .../commits/{ref}/statuses` (newest
//!   first, `sort`, `state`, paged with `Link`), `GET .../commits/{ref}/status`
//!   (latest per context, combined state)
//! - `POST /repos/{o}/{r}/pulls/{n}/reviews` `{body, commit_id, event,
//!   comments:[{path, body, old_position, new_position}]}`: 200 with an
//!   `api.PullReview` (`id, user, team: null, state, body, commit_id, stale:
//!   false, official, dismissed, comments_count, submitted_at, updated_at,
//!   html_url` = the PR page `#issuecomment-<id of the review's timeline
//!   entry>`, `pull_request_url`); read access suffices. `event`
//!   `APPROVED`/`REQUEST_CHANGES` on one's own PR is 422 (`approve your own
//!   pull is not allowed` / `reject your own pull is not allowed`);
//!   `REQUEST_CHANGES` needs a non-blank body, `COMMENT` a body or comments
//!   (422 `review event X requires a body` / `... requires a body or a
//!   comment`); any other event (or none) makes a `PENDING` review, which
//!   needs a body too. No `commit_id`: the PR's head. An issue's number or
//!   no such index: 404. A user's pending review is what their next review
//!   of that PR becomes (same id). Approvals and requests for changes are
//!   `official` when their reviewer may write, and a new one dismisses the
//!   reviewer's earlier ones.
//! - `GET /repos/{o}/{r}/pulls/{n}/reviews?page=&limit=`: oldest first,
//!   paged only when `page` is given, `X-Total-Count` (every review), no
//!   `Link`; other users' pending reviews are left out (after paging, as
//!   Gitea does), except for a site admin
//! - anything else under `/api/`: 404 with Gitea's not-found body.
//!
//! JSON answers are compact with a trailing newline, HTML-escaped like Go
//! (`\u003c`), `Content-Type: application/json;charset=utf-8`; errors are
//! `{"message","url":"<base>/api/swagger"}`, not-found adds `"errors":null`.
//! Comment ids are global and increasing; timestamps RFC 3339 UTC, second
//! precision, from a clock a test can move ([`GiteaSim::advance_clock`],
//! [`GiteaSim::rewind_clock`]).
//!
//! # Webhooks
//!
//! Repository webhooks are made through the API (above) or with
//! [`GiteaSim::add_webhook`]; [`GiteaSim::set_webhook`] is the test's own
//! hook, which hears every repository like a system hook (every comment
//! and review event, JSON). Every comment created, edited or deleted — from
//! the test side *or through the REST API, the bot's own included* — makes
//! one `HookTask` per active repository hook subscribed to its event
//! (`issue_comment`, or `pull_request_comment` on a PR), then one for the
//! test's hook; its body is an `IssueCommentPayload` (with the top-level
//! `pull_request` for PRs). So does every review submitted through the API
//! (not a pending one): event `pull_request_approved` /
//! `pull_request_rejected` / `pull_request_comment`, event type
//! `pull_request_review_approved` / `_rejected` / `_comment` (all three
//! count under the `pull_request_review` subscription), body a
//! `PullRequestPayload` (`action: "reviewed"`, `number`, `pull_request`,
//! `requested_reviewer` and `sender` the reviewer, `repository`,
//! `commit_id: ""`, `review: {type, content}`). Bodies are
//! `json.MarshalIndent(payload, "", "  ")`, the headers `X-Gitea-*`,
//! `X-Gogs-*`, `X-GitHub-*`, `X-Hub-Signature(-256)` signed with that
//! hook's secret, `User-Agent: Go-http-client/1.1` (a `form` hook sends
//! `payload=<JSON>`, still signed over the JSON; a hook's authorization
//! header goes as `Authorization`). One background worker delivers tasks in
//! order (5 s timeout, no retry, the hook read when the task runs, like
//! Gitea); [`GiteaSim::deliveries`] gives hook, URL, status and response body
//! per delivery, [`GiteaSim::wait_idle`] waits for the queue,
//! [`GiteaSim::redeliver`] is Gitea's "Replay" (same bytes, new delivery
//! id), [`GiteaSim::set_auto_deliver`]`(false)` keeps new tasks undelivered
//! until [`GiteaSim::deliver_pending`]. [`GiteaSim::set_issue_events`]`(true)`
//! adds `issues`/`opened` deliveries for [`GiteaSim::create_issue`] to the
//! test's hook. For a catch-up to find: [`GiteaSim::lose_webhooks`]`(true)`
//! (events make no task at all) and
//! [`GiteaSim::post_comment_without_webhook`].
//!
//! # Commit statuses and reviews
//!
//! [`GiteaSim::statuses`] shows what was set on a commit, oldest first;
//! [`GiteaSim::reviews`] every review of a pull request, pending ones
//! included, oldest first, each as its reviewer sees it.
//!
//! # Request log and faults
//!
//! [`GiteaSim::requests`] lists every request (method, path, query,
//! `Authorization`, headers, body, status, receive time). Faults:
//! [`GiteaSim::fail_next`] / [`GiteaSim::fail_next_matching`] (500 with
//! Gitea's empty-message body), [`GiteaSim::fail_comment_listings`] (GET
//! `.../comments` → 500), [`GiteaSim::set_delay`] /
//! [`GiteaSim::delay_next_matching`] (slow answers),
//! [`GiteaSim::drop_next_comments`] (POST answers 201 with a comment that is
//! never stored and fires no webhook), [`GiteaSim::deny_comments_for`] (403),
//! [`GiteaSim::drop_next_review_answer`] (the next review created through
//! the API is stored and fires its webhook, but the answer is a 500 with
//! Gitea's empty-message body).
//!
//! Git: `clone_url(owner, name)` = `<base>/<owner>/<name>.git`; clone/fetch
//! need credentials of a user who can read the repository (the bridge sends
//! `Authorization: token <t>`; basic auth works too), pushes need write.
//!
//! # Known differences from a real Gitea
//!
//! - Webhook requests carry an extra `Accept: */*` (ureq always sets it); the
//!   sender asks for gzip like Go but records a gzipped answer undecoded.
//! - No owner (organization) hooks; no `pull_request`, `issues`
//!   edited/closed, review request or push events (a hook may subscribe to
//!   them and hears nothing); review events only for reviews made through
//!   the API; no hook test deliveries; no labels, milestones, assignees,
//!   closing or merging.
//! - Reviews: only creating and listing them (no single review, submitting
//!   a pending one, deleting, dismissing, inline comment listings or review
//!   requests); inline comments are only counted; `stale` is always false
//!   (Gitea compares the diffs when a review names an older commit) and
//!   there is no branch protection, so write access alone makes a review
//!   official.
//! - A hook lists its events in a fixed order; Gitea's order is not stable
//!   (a Go map): compare them as sets.
//! - A user without read access gets 404 (as Gitea does for private
//!   repositories), never 403; 403 on comment creation comes from a locked
//!   issue or [`GiteaSim::deny_comments_for`].
//! - Wrong method on a known path answers 404, not 405.
//!
//! # Layout
//!
//! [`json`] is Go's JSON encoder; [`data`] the records and model rules;
//! [`shapes`] Gitea's JSON shapes; [`control`] what a test does directly;
//! [`hooks`] and [`deliver`] the webhooks; [`faults`] the request log and
//! injected faults; [`server`] the HTTP side (log, faults, auth, git);
//! [`routes`] the REST API.

mod control;
mod data;
mod deliver;
mod faults;
mod hooks;
mod json;
mod routes;
mod server;
mod shapes;

pub use data::Perm;
pub use faults::LoggedRequest;
pub use hooks::{Delivery, TEST_HOOK};
pub use json::{go_json, J};

use crate::gitsim::GitRepos;
use crate::support::{TestHttpServer, BOT, GITEA_TOKEN};
use actix_web::web;
use data::Data;
use faults::Faults;
use hooks::Hooks;
use std::sync::{Arc, Condvar, Mutex, OnceLock};

/// What `GET /api/v1/version` answers.
pub const GITEA_VERSION: &str = "1.24.6";
/// Gitea's default `[ui] REACTIONS`.
pub const ALLOWED_REACTIONS: &[&str] = &[
    "+1", "-1", "laugh", "hooray", "confused", "heart", "rocket", "eyes",
];
const JSON_CT: &str = "application/json;charset=utf-8";

/// The state the server thread, the webhook worker and the test share.
pub(crate) struct Sim {
    pub(crate) base: OnceLock<String>,
    pub(crate) git: Arc<GitRepos>,
    pub(crate) data: Mutex<Data>,
    pub(crate) faults: Mutex<Faults>,
    pub(crate) requests: Mutex<Vec<LoggedRequest>>,
    pub(crate) hooks: Mutex<Hooks>,
    pub(crate) hooks_cv: Condvar,
}

impl Sim {
    pub(crate) fn base(&self) -> &str {
        self.base.get().map(String::as_str).unwrap_or("")
    }
}

/// A running simulator; the server and webhook worker stop on drop.
pub struct GiteaSim {
    sim: Arc<Sim>,
    server: Option<TestHttpServer>,
    worker: Option<std::thread::JoinHandle<()>>,
}

impl Drop for GiteaSim {
    fn drop(&mut self) {
        self.sim.hooks.lock().unwrap().shutdown = true;
        self.sim.hooks_cv.notify_all();
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
        self.server.take();
    }
}

/// A timestamp as Gitea writes it: RFC 3339, UTC, whole seconds.
pub(crate) fn rfc3339(t: i64) -> String {
    chrono::DateTime::from_timestamp(t, 0)
        .unwrap()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

impl GiteaSim {
    /// Start the simulator with the bot `ccbot` (token `support::GITEA_TOKEN`).
    pub fn start() -> GiteaSim {
        let sim = Arc::new(Sim {
            base: OnceLock::new(),
            git: Arc::new(GitRepos::new()),
            data: Mutex::new(Data {
                next_id: 1,
                ..Data::default()
            }),
            faults: Mutex::new(Faults::default()),
            requests: Mutex::new(Vec::new()),
            hooks: Mutex::new(Hooks::default()),
            hooks_cv: Condvar::new(),
        });
        let data = web::Data::from(sim.clone());
        let server = TestHttpServer::start("giteasim", move |cfg| {
            cfg.app_data(data.clone())
                .app_data(web::PayloadConfig::new(256 << 20))
                .default_service(web::to(server::handle));
        });
        sim.base
            .set(format!("http://{}", server.addr))
            .expect("base set once");
        let worker_sim = sim.clone();
        let worker = std::thread::Builder::new()
            .name("giteasim-hooks".into())
            .spawn(move || deliver::hook_worker(&worker_sim))
            .unwrap();
        let gitea = GiteaSim {
            sim,
            server: Some(server),
            worker: Some(worker),
        };
        gitea.add_user_with_token(BOT, GITEA_TOKEN);
        gitea
    }

    /// Gitea's ROOT_URL without the trailing slash, e.g. `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        self.sim.base().to_owned()
    }

    /// `<base>/api/v1`.
    pub fn api_url(&self) -> String {
        format!("{}/api/v1", self.sim.base())
    }

    /// Gitea's `clone_url` of a repository.
    pub fn clone_url(&self, owner: &str, name: &str) -> String {
        format!("{}/{owner}/{name}.git", self.sim.base())
    }
}
