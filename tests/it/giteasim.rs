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
//! - `GET /version`, `GET /user`
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
//! - `GET /repos/{o}/{r}/collaborators/{user}/permission`: `{permission,
//!   role_name, user}`; 403 unless the caller is site admin, repo admin or asks
//!   about itself; 404 unknown user
//! - anything else under `/api/`: 404 with Gitea's not-found body.
//!
//! JSON answers are compact with a trailing newline, HTML-escaped like Go
//! (`\u003c`), `Content-Type: application/json;charset=utf-8`; errors are
//! `{"message","url":"<base>/api/swagger"}`, not-found adds `"errors":null`.
//! Comment ids are global and increasing; timestamps RFC 3339 UTC, second
//! precision, from a clock a test can move ([`GiteaSim::advance_clock`]).
//!
//! # Webhooks
//!
//! [`GiteaSim::set_webhook`] configures one repository-independent hook (all
//! events, JSON content). Every comment created, edited or deleted — from the
//! test side *or through the REST API, the bot's own included* — makes a
//! `HookTask` whose body is `json.MarshalIndent(payload, "", "  ")` of an
//! `IssueCommentPayload` (with the top-level `pull_request` for PRs), and
//! headers `X-Gitea-*`, `X-Gogs-*`, `X-GitHub-*`, `X-Hub-Signature(-256)`,
//! `User-Agent: Go-http-client/1.1`. One background worker delivers tasks in
//! order (5 s timeout, no retry, like Gitea); [`GiteaSim::deliveries`] gives
//! status and response body per delivery, [`GiteaSim::wait_idle`] waits for
//! the queue, [`GiteaSim::redeliver`] is Gitea's "Replay" (same bytes, new
//! delivery id), [`GiteaSim::set_auto_deliver`]`(false)` keeps new tasks
//! undelivered until [`GiteaSim::deliver_pending`].
//! [`GiteaSim::set_issue_events`]`(true)` adds `issues`/`opened` deliveries
//! for [`GiteaSim::create_issue`].
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
//! never stored and fires no webhook), [`GiteaSim::deny_comments_for`] (403).
//!
//! Git: `clone_url(owner, name)` = `<base>/<owner>/<name>.git`; clone/fetch
//! need credentials of a user who can read the repository (the bridge sends
//! `Authorization: token <t>`; basic auth works too), pushes need write.
//!
//! # Known differences from a real Gitea
//!
//! - Webhook requests carry an extra `Accept: */*` (ureq always sets it); the
//!   sender asks for gzip like Go but records a gzipped answer undecoded.
//! - One webhook; no `pull_request`, `issues` edited/closed, review or push
//!   events; no labels, milestones, assignees, closing or merging.
//! - A user without read access gets 404 (as Gitea does for private
//!   repositories), never 403; 403 on comment creation comes from a locked
//!   issue or [`GiteaSim::deny_comments_for`].
//! - Wrong method on a known path answers 404, not 405.

use crate::gitsim::GitRepos;
use crate::support::{TestHttpServer, BOT, GITEA_TOKEN};
use actix_web::{web, HttpRequest, HttpResponse};
use hmac::{Hmac, Mac};
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Deserialize, Serialize};
use std::collections::{HashSet, VecDeque};
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

/// What `GET /api/v1/version` answers.
pub const GITEA_VERSION: &str = "1.24.6";
/// Gitea's default `[ui] REACTIONS`.
pub const ALLOWED_REACTIONS: &[&str] = &[
    "+1", "-1", "laugh", "hooray", "confused", "heart", "rocket", "eyes",
];
const JSON_CT: &str = "application/json;charset=utf-8";

// ---------------------------------------------------------------------------
// Ordered JSON, encoded the way Go's encoding/json does.
// ---------------------------------------------------------------------------

/// A JSON value whose objects keep their field order (Go structs marshal in
/// declaration order; serde_json's `Value` would sort the keys).
#[derive(Clone, Debug, PartialEq)]
pub enum J {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Arr(Vec<J>),
    Obj(Vec<(String, J)>),
}

impl J {
    /// As a `serde_json::Value` (key order lost), for assertions.
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::from_slice(&go_json(self, false)).unwrap()
    }
}

fn obj(fields: Vec<(&str, J)>) -> J {
    J::Obj(fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

impl From<&str> for J {
    fn from(s: &str) -> J {
        J::Str(s.to_owned())
    }
}
impl From<String> for J {
    fn from(s: String) -> J {
        J::Str(s)
    }
}
impl From<&String> for J {
    fn from(s: &String) -> J {
        J::Str(s.clone())
    }
}
impl From<i64> for J {
    fn from(n: i64) -> J {
        J::Int(n)
    }
}
impl From<bool> for J {
    fn from(b: bool) -> J {
        J::Bool(b)
    }
}

impl Serialize for J {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            J::Null => s.serialize_unit(),
            J::Bool(b) => s.serialize_bool(*b),
            J::Int(n) => s.serialize_i64(*n),
            J::Float(f) => s.serialize_f64(*f),
            J::Str(v) => s.serialize_str(v),
            J::Arr(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            J::Obj(fields) => {
                let mut map = s.serialize_map(Some(fields.len()))?;
                for (k, v) in fields {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for J {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<J, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = J;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("JSON")
            }
            fn visit_unit<E>(self) -> Result<J, E> {
                Ok(J::Null)
            }
            fn visit_none<E>(self) -> Result<J, E> {
                Ok(J::Null)
            }
            fn visit_bool<E>(self, b: bool) -> Result<J, E> {
                Ok(J::Bool(b))
            }
            fn visit_i64<E>(self, n: i64) -> Result<J, E> {
                Ok(J::Int(n))
            }
            fn visit_u64<E>(self, n: u64) -> Result<J, E> {
                Ok(J::Int(n as i64))
            }
            fn visit_f64<E>(self, f: f64) -> Result<J, E> {
                Ok(J::Float(f))
            }
            fn visit_str<E>(self, s: &str) -> Result<J, E> {
                Ok(J::Str(s.to_owned()))
            }
            fn visit_string<E>(self, s: String) -> Result<J, E> {
                Ok(J::Str(s))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<J, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = a.next_element()? {
                    items.push(item);
                }
                Ok(J::Arr(items))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<J, A::Error> {
                let mut fields = Vec::new();
                while let Some((k, v)) = a.next_entry::<String, J>()? {
                    fields.push((k, v));
                }
                Ok(J::Obj(fields))
            }
        }
        d.deserialize_any(V)
    }
}

/// A serde_json formatter that escapes like Go's encoder: `<`, `>`, `&`,
/// U+2028 and U+2029 as `\uXXXX`; everything else as serde_json does (which
/// matches Go ≥ 1.22 for control characters).
struct GoEscape<F>(F);

macro_rules! delegate {
    ($($name:ident),*) => {$(
        fn $name<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
            self.0.$name(w)
        }
    )*};
}
macro_rules! delegate_first {
    ($($name:ident),*) => {$(
        fn $name<W: ?Sized + io::Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
            self.0.$name(w, first)
        }
    )*};
}

impl<F: serde_json::ser::Formatter> serde_json::ser::Formatter for GoEscape<F> {
    delegate!(
        begin_array,
        end_array,
        end_array_value,
        begin_object,
        end_object,
        end_object_key,
        begin_object_value,
        end_object_value
    );
    delegate_first!(begin_array_value, begin_object_key);

    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            let escaped = match c {
                '<' => "\\u003c",
                '>' => "\\u003e",
                '&' => "\\u0026",
                '\u{2028}' => "\\u2028",
                '\u{2029}' => "\\u2029",
                _ => continue,
            };
            w.write_all(&fragment.as_bytes()[start..i])?;
            w.write_all(escaped.as_bytes())?;
            start = i + c.len_utf8();
        }
        w.write_all(&fragment.as_bytes()[start..])
    }
}

/// Go's `json.MarshalIndent(v, "", "  ")` (`indent`) or `json.Marshal(v)`.
pub fn go_json(v: &J, indent: bool) -> Vec<u8> {
    let mut out = Vec::new();
    if indent {
        let fmt = GoEscape(serde_json::ser::PrettyFormatter::with_indent(b"  "));
        v.serialize(&mut serde_json::Serializer::with_formatter(&mut out, fmt))
            .unwrap();
    } else {
        let fmt = GoEscape(serde_json::ser::CompactFormatter);
        v.serialize(&mut serde_json::Serializer::with_formatter(&mut out, fmt))
            .unwrap();
    }
    out
}

// ---------------------------------------------------------------------------
// The simulated instance.
// ---------------------------------------------------------------------------

/// A user's access to a repository.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Perm {
    None,
    Read,
    Write,
    Admin,
}

impl Perm {
    pub fn as_str(self) -> &'static str {
        match self {
            Perm::None => "none",
            Perm::Read => "read",
            Perm::Write => "write",
            Perm::Admin => "admin",
        }
    }
}

struct User {
    id: i64,
    login: String,
    full_name: String,
    is_admin: bool,
    token: Option<String>,
    created: i64,
}

struct Repo {
    id: i64,
    owner: String,
    name: String,
    private: bool,
    default_branch: String,
    perms: Vec<(String, Perm)>,
    created: i64,
    next_index: i64,
}

struct Pull {
    id: i64,
    head: String,
    base: String,
    /// Tips when the PR was opened, used if a branch is gone.
    head_sha: String,
    base_sha: String,
}

struct Issue {
    id: i64,
    repo_id: i64,
    number: i64,
    title: String,
    body: String,
    author: String,
    locked: bool,
    created: i64,
    updated: i64,
    pull: Option<Pull>,
}

#[derive(Clone)]
struct Reaction {
    user: String,
    content: String,
    created: i64,
}

struct Comment {
    id: i64,
    issue_id: i64,
    author: String,
    body: String,
    /// `false` for timeline events (label changes, commits pushed, ...), which
    /// share the comment table in Gitea but are not "comments" to the API.
    plain: bool,
    created: i64,
    updated: i64,
    reactions: Vec<Reaction>,
}

#[derive(Default)]
struct Data {
    next_id: i64,
    users: Vec<User>,
    repos: Vec<Repo>,
    issues: Vec<Issue>,
    comments: Vec<Comment>,
    /// Added to the wall clock, in seconds.
    clock_offset: i64,
}

/// Which requests a fault applies to.
#[derive(Clone, Debug, Default)]
struct Match {
    method: Option<String>,
    prefix: Option<String>,
    suffix: Option<String>,
}

impl Match {
    fn hits(&self, method: &str, path: &str) -> bool {
        self.method
            .as_deref()
            .is_none_or(|m| m.eq_ignore_ascii_case(method))
            && self.prefix.as_deref().is_none_or(|p| path.starts_with(p))
            && self.suffix.as_deref().is_none_or(|s| path.ends_with(s))
    }
}

#[derive(Clone, Debug)]
enum FaultKind {
    Fail500,
    Delay(Duration),
}

#[derive(Clone, Debug)]
struct Fault {
    left: usize,
    on: Match,
    kind: FaultKind,
}

#[derive(Default)]
struct Faults {
    list: Vec<Fault>,
    delay: Duration,
    drop_comments: usize,
    denied: HashSet<String>,
}

/// One request as the simulator saw it.
#[derive(Debug, Clone)]
pub struct LoggedRequest {
    pub method: String,
    /// Without the query.
    pub path: String,
    pub query: String,
    /// The `Authorization` header, verbatim.
    pub authorization: Option<String>,
    /// Every header (lower-case names).
    pub headers: Vec<(String, String)>,
    /// The request body (lossy UTF-8; empty for git's binary bodies too).
    pub body: String,
    pub status: u16,
    /// When the simulator had the whole request (before any injected delay).
    pub received: std::time::Instant,
}

/// One webhook delivery attempt (Gitea's `HookTask`).
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
struct Hooks {
    url: Option<String>,
    secret: String,
    manual: bool,
    issue_events: bool,
    tasks: Vec<Delivery>,
    queue: VecDeque<usize>,
    busy: bool,
    shutdown: bool,
}

struct Sim {
    base: OnceLock<String>,
    git: Arc<GitRepos>,
    data: Mutex<Data>,
    faults: Mutex<Faults>,
    requests: Mutex<Vec<LoggedRequest>>,
    hooks: Mutex<Hooks>,
    hooks_cv: Condvar,
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

fn rfc3339(t: i64) -> String {
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
                .default_service(web::to(handle));
        });
        sim.base
            .set(format!("http://{}", server.addr))
            .expect("base set once");
        let worker_sim = sim.clone();
        let worker = std::thread::Builder::new()
            .name("giteasim-hooks".into())
            .spawn(move || hook_worker(&worker_sim))
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

    // -- users -------------------------------------------------------------

    /// Create a user with a fresh access token; returns the token.
    pub fn add_user(&self, login: &str) -> String {
        let token = format!("tok-{login}-{}", uuid::Uuid::new_v4().simple());
        self.add_user_with_token(login, &token);
        token
    }

    /// Create a user (or give an existing one) this access token.
    pub fn add_user_with_token(&self, login: &str, token: &str) {
        let mut d = self.sim.data.lock().unwrap();
        let id = d.ensure_user(login);
        d.users.iter_mut().find(|u| u.id == id).unwrap().token = Some(token.to_owned());
    }

    /// The token of a user made by [`GiteaSim::add_user`].
    pub fn token_of(&self, login: &str) -> String {
        let d = self.sim.data.lock().unwrap();
        d.user(login)
            .and_then(|u| u.token.clone())
            .unwrap_or_else(|| panic!("giteasim: user {login} has no token"))
    }

    /// Make a user a site administrator (admin on every repository).
    pub fn set_site_admin(&self, login: &str, admin: bool) {
        let mut d = self.sim.data.lock().unwrap();
        let id = d.ensure_user(login);
        d.users.iter_mut().find(|u| u.id == id).unwrap().is_admin = admin;
    }

    // -- repositories and git ------------------------------------------------

    /// A private repository `owner/name` (owner created as needed) with one
    /// commit on `main`; the bot gets write access. Returns that commit.
    pub fn create_repo(&self, owner: &str, name: &str) -> String {
        let sha = self.sim.git.create_repo(owner, name);
        let mut d = self.sim.data.lock().unwrap();
        d.ensure_user(owner);
        let id = d.alloc();
        let now = d.now();
        d.repos.push(Repo {
            id,
            owner: owner.to_owned(),
            name: name.to_owned(),
            private: true,
            default_branch: "main".into(),
            perms: vec![(BOT.to_owned(), Perm::Write)],
            created: now,
            next_index: 1,
        });
        sha
    }

    /// Make a repository public (anonymous git reads) or private again.
    pub fn set_private(&self, owner: &str, name: &str, private: bool) {
        let mut d = self.sim.data.lock().unwrap();
        d.repo_mut(owner, name).private = private;
    }

    /// Give `user` (created as needed) this access to `owner/name`.
    pub fn set_permission(&self, owner: &str, name: &str, user: &str, perm: Perm) {
        let mut d = self.sim.data.lock().unwrap();
        d.ensure_user(user);
        let repo = d.repo_mut(owner, name);
        repo.perms.retain(|(u, _)| !u.eq_ignore_ascii_case(user));
        repo.perms.push((user.to_owned(), perm));
    }

    /// The bare repository of `owner/name`.
    pub fn repo_path(&self, owner: &str, name: &str) -> PathBuf {
        self.sim.git.repo_path(owner, name)
    }

    /// Commit `file` with `contents` on `branch` (created from `main` if
    /// missing); returns the commit.
    pub fn commit(
        &self,
        owner: &str,
        name: &str,
        branch: &str,
        file: &str,
        contents: &str,
        message: &str,
    ) -> String {
        self.sim
            .git
            .commit(owner, name, branch, file, contents, message)
    }

    /// The commit at the tip of `branch`.
    pub fn branch_head(&self, owner: &str, name: &str, branch: &str) -> String {
        self.sim.git.branch_head(owner, name, branch)
    }

    /// Delete a branch.
    pub fn delete_branch(&self, owner: &str, name: &str, branch: &str) {
        self.sim.git.delete_branch(owner, name, branch)
    }

    // -- issues, pulls, comments -----------------------------------------------

    /// Open an issue; returns its number (shared index with PRs). Fires the
    /// `issues` `opened` webhook if [`GiteaSim::set_issue_events`] is on.
    pub fn create_issue(
        &self,
        owner: &str,
        repo: &str,
        title: &str,
        body: &str,
        author: &str,
    ) -> i64 {
        let mut d = self.sim.data.lock().unwrap();
        let number = d.new_issue(owner, repo, title, body, author, None);
        let id = d.issue_id(owner, repo, number).unwrap();
        self.sim.issue_opened_hook(&d, id);
        number
    }

    /// Open a pull request from `head` into `base` (branches of the same
    /// repository; `head` must exist, see [`GiteaSim::commit`]); sets
    /// `refs/pull/<n>/head` like Gitea. Returns its number.
    #[expect(
        clippy::too_many_arguments,
        reason = "a Gitea request's fields, as the simulator records them"
    )]
    pub fn create_pull(
        &self,
        owner: &str,
        repo: &str,
        title: &str,
        body: &str,
        author: &str,
        head: &str,
        base: &str,
    ) -> i64 {
        let head_sha = self.branch_head(owner, repo, head);
        let base_sha = self.branch_head(owner, repo, base);
        let number = {
            let mut d = self.sim.data.lock().unwrap();
            let id = d.alloc();
            d.new_issue(
                owner,
                repo,
                title,
                body,
                author,
                Some(Pull {
                    id,
                    head: head.to_owned(),
                    base: base.to_owned(),
                    head_sha,
                    base_sha,
                }),
            )
        };
        self.sim.git.set_pull_ref(owner, repo, number, head);
        number
    }

    /// Lock or unlock an issue's conversation.
    pub fn set_locked(&self, owner: &str, repo: &str, number: i64, locked: bool) {
        let mut d = self.sim.data.lock().unwrap();
        let id = d.issue_id(owner, repo, number).expect("no such issue");
        d.issues.iter_mut().find(|i| i.id == id).unwrap().locked = locked;
    }

    /// The plain comments of an issue/PR as `GET .../comments` shows them.
    pub fn comments(&self, owner: &str, repo: &str, number: i64) -> Vec<serde_json::Value> {
        let d = self.sim.data.lock().unwrap();
        let base = self.sim.base();
        let id = d.issue_id(owner, repo, number).expect("no such issue");
        d.comments
            .iter()
            .filter(|c| c.issue_id == id && c.plain)
            .map(|c| d.comment_json(base, c).to_value())
            .collect()
    }

    /// One comment by id, plain or not (`None` once deleted or never stored).
    pub fn comment(&self, id: i64) -> Option<serde_json::Value> {
        let d = self.sim.data.lock().unwrap();
        d.comments
            .iter()
            .find(|c| c.id == id)
            .map(|c| d.comment_json(self.sim.base(), c).to_value())
    }

    /// `(user, content)` of a comment's reactions.
    pub fn reactions(&self, comment_id: i64) -> Vec<(String, String)> {
        let d = self.sim.data.lock().unwrap();
        d.comments
            .iter()
            .find(|c| c.id == comment_id)
            .map(|c| {
                c.reactions
                    .iter()
                    .map(|r| (r.user.clone(), r.content.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Post a comment as the web UI does (no permission checks, `\r\n` line
    /// endings as a browser sends them); fires the `created` webhook. Returns
    /// the comment as the API shows it.
    pub fn post_comment_as(
        &self,
        user: &str,
        owner: &str,
        repo: &str,
        number: i64,
        body: &str,
    ) -> serde_json::Value {
        let body = body.replace("\r\n", "\n").replace('\n', "\r\n");
        let mut d = self.sim.data.lock().unwrap();
        d.ensure_user(user);
        let issue_id = d.issue_id(owner, repo, number).expect("no such issue");
        let id = d.add_comment(issue_id, user, &body, true);
        let comment = d.comment_json(self.sim.base(), d.comment(id).unwrap());
        self.sim.comment_hook(&d, "created", id, user, None);
        comment.to_value()
    }

    /// A non-plain timeline comment (e.g. a label change): hidden from the
    /// comment listing, 204 on `GET /issues/comments/{id}`. Returns its id.
    pub fn add_event_comment(&self, owner: &str, repo: &str, number: i64, author: &str) -> i64 {
        let mut d = self.sim.data.lock().unwrap();
        d.ensure_user(author);
        let issue_id = d.issue_id(owner, repo, number).expect("no such issue");
        d.add_comment(issue_id, author, "", false)
    }

    /// Edit a comment as `user` (web UI); fires the `edited` webhook with
    /// `changes.body.from`.
    pub fn edit_comment_as(&self, user: &str, id: i64, body: &str) {
        let mut d = self.sim.data.lock().unwrap();
        let now = d.now();
        let c = d.comment_mut(id).expect("no such comment");
        let old = std::mem::replace(&mut c.body, body.to_owned());
        c.updated = now;
        self.sim.comment_hook(&d, "edited", id, user, Some(&old));
    }

    /// Delete a comment as `user` (web UI); fires the `deleted` webhook.
    pub fn delete_comment_as(&self, user: &str, id: i64) {
        let mut d = self.sim.data.lock().unwrap();
        self.sim.comment_hook(&d, "deleted", id, user, None);
        d.comments.retain(|c| c.id != id);
    }

    /// Move the simulator's clock (timestamps of new comments, edits).
    pub fn advance_clock(&self, by: Duration) {
        self.sim.data.lock().unwrap().clock_offset += by.as_secs() as i64;
    }

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

    // -- request log and faults ------------------------------------------------

    /// Every request so far, oldest first.
    pub fn requests(&self) -> Vec<LoggedRequest> {
        self.sim.requests.lock().unwrap().clone()
    }

    /// Answer the next `n` requests (any) with 500.
    pub fn fail_next(&self, n: usize) {
        self.push_fault(n, Match::default(), FaultKind::Fail500);
    }

    /// Answer the next `n` requests with this method (`None`: any) whose
    /// path starts with `prefix` (e.g. `/api/v1/repos/acme/widgets/issues/1/comments`) with 500.
    pub fn fail_next_matching(&self, n: usize, method: Option<&str>, prefix: &str) {
        let on = Match {
            method: method.map(str::to_owned),
            prefix: Some(prefix.to_owned()),
            suffix: None,
        };
        self.push_fault(n, on, FaultKind::Fail500);
    }

    /// The next `n` comment listings (`GET .../comments`) answer 500.
    pub fn fail_comment_listings(&self, n: usize) {
        let on = Match {
            method: Some("GET".into()),
            prefix: Some("/api/v1/repos/".into()),
            suffix: Some("/comments".into()),
        };
        self.push_fault(n, on, FaultKind::Fail500);
    }

    /// Every answer waits `delay` first (zero to stop).
    pub fn set_delay(&self, delay: Duration) {
        self.sim.faults.lock().unwrap().delay = delay;
    }

    /// The next `n` matching requests wait `delay` before being answered.
    pub fn delay_next_matching(
        &self,
        n: usize,
        method: Option<&str>,
        prefix: &str,
        delay: Duration,
    ) {
        let on = Match {
            method: method.map(str::to_owned),
            prefix: Some(prefix.to_owned()),
            suffix: None,
        };
        self.push_fault(n, on, FaultKind::Delay(delay));
    }

    /// The next `n` API comment creations answer 201 with a comment that is
    /// never stored (absent from listings and GET, no webhook).
    pub fn drop_next_comments(&self, n: usize) {
        self.sim.faults.lock().unwrap().drop_comments = n;
    }

    /// API comment creation by `user` answers 403 (`user is blocked`).
    pub fn deny_comments_for(&self, user: &str, deny: bool) {
        let mut f = self.sim.faults.lock().unwrap();
        if deny {
            f.denied.insert(user.to_ascii_lowercase());
        } else {
            f.denied.remove(&user.to_ascii_lowercase());
        }
    }

    fn push_fault(&self, n: usize, on: Match, kind: FaultKind) {
        self.sim
            .faults
            .lock()
            .unwrap()
            .list
            .push(Fault { left: n, on, kind });
    }
}

// ---------------------------------------------------------------------------
// Model helpers and Gitea's JSON shapes.
// ---------------------------------------------------------------------------

impl Data {
    fn alloc(&mut self) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    fn now(&self) -> i64 {
        chrono::Utc::now().timestamp() + self.clock_offset
    }

    fn user(&self, login: &str) -> Option<&User> {
        self.users
            .iter()
            .find(|u| u.login.eq_ignore_ascii_case(login))
    }

    fn ensure_user(&mut self, login: &str) -> i64 {
        if let Some(u) = self.user(login) {
            return u.id;
        }
        let id = self.alloc();
        let created = self.now();
        self.users.push(User {
            id,
            login: login.to_owned(),
            full_name: String::new(),
            is_admin: false,
            token: None,
            created,
        });
        id
    }

    fn repo(&self, owner: &str, name: &str) -> Option<&Repo> {
        self.repos
            .iter()
            .find(|r| r.owner.eq_ignore_ascii_case(owner) && r.name.eq_ignore_ascii_case(name))
    }

    fn repo_mut(&mut self, owner: &str, name: &str) -> &mut Repo {
        self.repos
            .iter_mut()
            .find(|r| r.owner.eq_ignore_ascii_case(owner) && r.name.eq_ignore_ascii_case(name))
            .unwrap_or_else(|| panic!("giteasim: no repository {owner}/{name}"))
    }

    fn repo_by_id(&self, id: i64) -> &Repo {
        self.repos.iter().find(|r| r.id == id).unwrap()
    }

    fn issue_id(&self, owner: &str, name: &str, number: i64) -> Option<i64> {
        let repo = self.repo(owner, name)?;
        self.issues
            .iter()
            .find(|i| i.repo_id == repo.id && i.number == number)
            .map(|i| i.id)
    }

    fn issue(&self, id: i64) -> &Issue {
        self.issues.iter().find(|i| i.id == id).unwrap()
    }

    fn comment(&self, id: i64) -> Option<&Comment> {
        self.comments.iter().find(|c| c.id == id)
    }

    fn comment_mut(&mut self, id: i64) -> Option<&mut Comment> {
        self.comments.iter_mut().find(|c| c.id == id)
    }

    /// `login`'s access to the repository (`None` for anonymous).
    fn perm(&self, repo: &Repo, login: Option<&str>) -> Perm {
        let Some(login) = login else {
            return if repo.private { Perm::None } else { Perm::Read };
        };
        if repo.owner.eq_ignore_ascii_case(login) || self.user(login).is_some_and(|u| u.is_admin) {
            return Perm::Admin;
        }
        let explicit = repo
            .perms
            .iter()
            .find(|(u, _)| u.eq_ignore_ascii_case(login))
            .map(|(_, p)| *p)
            .unwrap_or(Perm::None);
        if repo.private {
            explicit
        } else {
            explicit.max(Perm::Read)
        }
    }

    fn new_issue(
        &mut self,
        owner: &str,
        repo: &str,
        title: &str,
        body: &str,
        author: &str,
        pull: Option<Pull>,
    ) -> i64 {
        self.ensure_user(author);
        let id = self.alloc();
        let now = self.now();
        let r = self.repo_mut(owner, repo);
        let number = r.next_index;
        r.next_index += 1;
        let repo_id = r.id;
        self.issues.push(Issue {
            id,
            repo_id,
            number,
            title: title.to_owned(),
            body: body.to_owned(),
            author: author.to_owned(),
            locked: false,
            created: now,
            updated: now,
            pull,
        });
        number
    }

    fn add_comment(&mut self, issue_id: i64, author: &str, body: &str, plain: bool) -> i64 {
        let id = self.alloc();
        let now = self.now();
        self.comments.push(Comment {
            id,
            issue_id,
            author: author.to_owned(),
            body: body.to_owned(),
            plain,
            created: now,
            updated: now,
            reactions: Vec::new(),
        });
        if let Some(issue) = self.issues.iter_mut().find(|i| i.id == issue_id) {
            issue.updated = now;
        }
        id
    }

    /// `api.User`. `full`: as the user sees itself (real e-mail, admin flag);
    /// otherwise as converted without a viewer (no-reply e-mail, zero login).
    fn user_json(&self, base: &str, login: &str, full: bool) -> J {
        let (id, login, full_name, is_admin, created) = match self.user(login) {
            Some(u) => (
                u.id,
                u.login.clone(),
                u.full_name.clone(),
                u.is_admin,
                u.created,
            ),
            None => (-1, "Ghost".to_owned(), String::new(), false, 0),
        };
        let lower = login.to_ascii_lowercase();
        let email = if full {
            format!("{lower}@example.com")
        } else {
            format!("{lower}@noreply.localhost")
        };
        obj(vec![
            ("id", id.into()),
            ("login", (&login).into()),
            ("login_name", "".into()),
            ("source_id", 0.into()),
            ("full_name", full_name.into()),
            ("email", email.into()),
            (
                "avatar_url",
                format!("{base}/avatars/{:032x}", id.max(0)).into(),
            ),
            ("html_url", format!("{base}/{login}").into()),
            ("language", "".into()),
            ("is_admin", (full && is_admin).into()),
            (
                "last_login",
                if full {
                    rfc3339(created)
                } else {
                    "0001-01-01T00:00:00Z".into()
                }
                .into(),
            ),
            ("created", rfc3339(created).into()),
            ("restricted", false.into()),
            ("active", full.into()),
            ("prohibit_login", false.into()),
            ("location", "".into()),
            ("website", "".into()),
            ("description", "".into()),
            ("visibility", "public".into()),
            ("followers_count", 0.into()),
            ("following_count", 0.into()),
            ("starred_repos_count", 0.into()),
            ("username", (&login).into()),
        ])
    }

    /// `api.Repository`, `permissions` those of `viewer`.
    fn repo_json(&self, base: &str, repo: &Repo, viewer: Option<&str>) -> J {
        let perm = self.perm(repo, viewer);
        let full = format!("{}/{}", repo.owner, repo.name);
        let open_issues = self
            .issues
            .iter()
            .filter(|i| i.repo_id == repo.id && i.pull.is_none())
            .count() as i64;
        let open_pulls = self
            .issues
            .iter()
            .filter(|i| i.repo_id == repo.id && i.pull.is_some())
            .count() as i64;
        let host = base.trim_start_matches("http://");
        obj(vec![
            ("id", repo.id.into()),
            ("owner", self.user_json(base, &repo.owner, false)),
            ("name", (&repo.name).into()),
            ("full_name", (&full).into()),
            ("description", "".into()),
            ("empty", false.into()),
            ("private", repo.private.into()),
            ("fork", false.into()),
            ("template", false.into()),
            ("mirror", false.into()),
            ("size", 0.into()),
            ("language", "".into()),
            (
                "languages_url",
                format!("{base}/api/v1/repos/{full}/languages").into(),
            ),
            ("html_url", format!("{base}/{full}").into()),
            ("url", format!("{base}/api/v1/repos/{full}").into()),
            ("link", "".into()),
            ("ssh_url", format!("git@{host}:{full}.git").into()),
            ("clone_url", format!("{base}/{full}.git").into()),
            ("original_url", "".into()),
            ("website", "".into()),
            ("stars_count", 0.into()),
            ("forks_count", 0.into()),
            ("watchers_count", 0.into()),
            ("open_issues_count", open_issues.into()),
            ("open_pr_counter", open_pulls.into()),
            ("release_counter", 0.into()),
            ("default_branch", (&repo.default_branch).into()),
            ("archived", false.into()),
            ("created_at", rfc3339(repo.created).into()),
            ("updated_at", rfc3339(repo.created).into()),
            ("archived_at", "1970-01-01T00:00:00Z".into()),
            (
                "permissions",
                obj(vec![
                    ("admin", (perm >= Perm::Admin).into()),
                    ("push", (perm >= Perm::Write).into()),
                    ("pull", (perm >= Perm::Read).into()),
                ]),
            ),
            ("has_code", true.into()),
            ("has_issues", true.into()),
            (
                "internal_tracker",
                obj(vec![
                    ("enable_time_tracker", true.into()),
                    ("allow_only_contributors_to_track_time", true.into()),
                    ("enable_issue_dependencies", true.into()),
                ]),
            ),
            ("has_wiki", true.into()),
            ("has_pull_requests", true.into()),
            ("has_projects", true.into()),
            ("projects_mode", "all".into()),
            ("has_releases", true.into()),
            ("has_packages", true.into()),
            ("has_actions", true.into()),
            ("ignore_whitespace_conflicts", false.into()),
            ("allow_merge_commits", true.into()),
            ("allow_rebase", true.into()),
            ("allow_rebase_explicit", true.into()),
            ("allow_squash_merge", true.into()),
            ("allow_fast_forward_only_merge", true.into()),
            ("allow_rebase_update", true.into()),
            ("allow_manual_merge", false.into()),
            ("autodetect_manual_merge", false.into()),
            ("default_delete_branch_after_merge", false.into()),
            ("default_merge_style", "merge".into()),
            ("default_allow_maintainer_edit", false.into()),
            ("avatar_url", "".into()),
            ("internal", false.into()),
            ("mirror_interval", "".into()),
            ("object_format_name", "sha1".into()),
            ("mirror_updated", "0001-01-01T00:00:00Z".into()),
            ("topics", J::Arr(Vec::new())),
            ("licenses", J::Arr(Vec::new())),
        ])
    }

    fn issue_html_url(&self, base: &str, issue: &Issue) -> String {
        let repo = self.repo_by_id(issue.repo_id);
        let kind = if issue.pull.is_some() {
            "pulls"
        } else {
            "issues"
        };
        format!(
            "{base}/{}/{}/{kind}/{}",
            repo.owner, repo.name, issue.number
        )
    }

    fn comment_count(&self, issue_id: i64) -> i64 {
        self.comments
            .iter()
            .filter(|c| c.issue_id == issue_id && c.plain)
            .count() as i64
    }

    /// `api.Issue`.
    fn issue_json(&self, base: &str, issue: &Issue, viewer: Option<&str>) -> J {
        let repo = self.repo_by_id(issue.repo_id);
        let html = self.issue_html_url(base, issue);
        let full_view = viewer.is_some_and(|v| v.eq_ignore_ascii_case(&issue.author));
        let pull_request = match &issue.pull {
            None => J::Null,
            Some(_) => obj(vec![
                ("merged", false.into()),
                ("merged_at", J::Null),
                ("draft", false.into()),
                ("html_url", (&html).into()),
            ]),
        };
        obj(vec![
            ("id", issue.id.into()),
            (
                "url",
                format!(
                    "{base}/api/v1/repos/{}/{}/issues/{}",
                    repo.owner, repo.name, issue.number
                )
                .into(),
            ),
            ("html_url", (&html).into()),
            ("number", issue.number.into()),
            ("user", self.user_json(base, &issue.author, full_view)),
            ("original_author", "".into()),
            ("original_author_id", 0.into()),
            ("title", (&issue.title).into()),
            ("body", (&issue.body).into()),
            ("ref", "".into()),
            ("assets", J::Arr(Vec::new())),
            ("labels", J::Arr(Vec::new())),
            ("milestone", J::Null),
            ("assignee", J::Null),
            ("assignees", J::Null),
            ("state", "open".into()),
            ("is_locked", issue.locked.into()),
            ("comments", self.comment_count(issue.id).into()),
            ("created_at", rfc3339(issue.created).into()),
            ("updated_at", rfc3339(issue.updated).into()),
            ("closed_at", J::Null),
            ("due_date", J::Null),
            ("time_estimate", 0.into()),
            ("pull_request", pull_request),
            (
                "repository",
                obj(vec![
                    ("id", repo.id.into()),
                    ("name", (&repo.name).into()),
                    ("owner", (&repo.owner).into()),
                    ("full_name", format!("{}/{}", repo.owner, repo.name).into()),
                ]),
            ),
            ("pin_order", 0.into()),
            ("content_version", 0.into()),
        ])
    }

    /// `api.PullRequest` (`git` resolves the branch tips now).
    fn pull_json(&self, base: &str, git: &GitRepos, issue: &Issue, viewer: Option<&str>) -> J {
        let repo = self.repo_by_id(issue.repo_id);
        let pull = issue.pull.as_ref().unwrap();
        let html = self.issue_html_url(base, issue);
        let tip = |branch: &str, fallback: &str| {
            git.try_branch_head(&repo.owner, &repo.name, branch)
                .unwrap_or_else(|| fallback.to_owned())
        };
        let branch = |name: &str, sha: String| {
            obj(vec![
                ("label", name.into()),
                ("ref", name.into()),
                ("sha", sha.into()),
                ("repo_id", repo.id.into()),
                ("repo", self.repo_json(base, repo, viewer)),
            ])
        };
        let base_sha = tip(&pull.base, &pull.base_sha);
        obj(vec![
            ("id", pull.id.into()),
            ("url", (&html).into()),
            ("number", issue.number.into()),
            ("user", self.user_json(base, &issue.author, false)),
            ("title", (&issue.title).into()),
            ("body", (&issue.body).into()),
            ("labels", J::Arr(Vec::new())),
            ("milestone", J::Null),
            ("assignee", J::Null),
            ("assignees", J::Null),
            ("requested_reviewers", J::Arr(Vec::new())),
            ("requested_reviewers_teams", J::Arr(Vec::new())),
            ("state", "open".into()),
            ("draft", false.into()),
            ("is_locked", issue.locked.into()),
            ("comments", self.comment_count(issue.id).into()),
            ("additions", 0.into()),
            ("deletions", 0.into()),
            ("changed_files", 0.into()),
            ("html_url", (&html).into()),
            ("diff_url", format!("{html}.diff").into()),
            ("patch_url", format!("{html}.patch").into()),
            ("mergeable", true.into()),
            ("merged", false.into()),
            ("merged_at", J::Null),
            ("merge_commit_sha", J::Null),
            ("merged_by", J::Null),
            ("allow_maintainer_edit", false.into()),
            ("base", branch(&pull.base, base_sha.clone())),
            ("head", branch(&pull.head, tip(&pull.head, &pull.head_sha))),
            ("merge_base", base_sha.into()),
            ("due_date", J::Null),
            ("created_at", rfc3339(issue.created).into()),
            ("updated_at", rfc3339(issue.updated).into()),
            ("closed_at", J::Null),
            ("pin_order", 0.into()),
            ("content_version", 0.into()),
        ])
    }

    /// `api.Comment`.
    fn comment_json(&self, base: &str, c: &Comment) -> J {
        let issue = self.issue(c.issue_id);
        let page = self.issue_html_url(base, issue);
        let (pr_url, issue_url) = if issue.pull.is_some() {
            (page.clone(), String::new())
        } else {
            (String::new(), page.clone())
        };
        obj(vec![
            ("id", c.id.into()),
            ("html_url", format!("{page}#issuecomment-{}", c.id).into()),
            ("pull_request_url", pr_url.into()),
            ("issue_url", issue_url.into()),
            ("user", self.user_json(base, &c.author, false)),
            ("original_author", "".into()),
            ("original_author_id", 0.into()),
            ("body", (&c.body).into()),
            ("assets", J::Arr(Vec::new())),
            ("created_at", rfc3339(c.created).into()),
            ("updated_at", rfc3339(c.updated).into()),
        ])
    }

    fn reaction_json(&self, base: &str, r: &Reaction) -> J {
        obj(vec![
            ("user", self.user_json(base, &r.user, false)),
            ("content", (&r.content).into()),
            ("created_at", rfc3339(r.created).into()),
        ])
    }
}

impl Sim {
    fn base(&self) -> &str {
        self.base.get().map(String::as_str).unwrap_or("")
    }

    /// Create the `issue_comment` hook task for `action` on comment `id`
    /// (which must still be in `d`), as `sender`.
    fn comment_hook(&self, d: &Data, action: &str, id: i64, sender: &str, old_body: Option<&str>) {
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
    fn issue_opened_hook(&self, d: &Data, issue_id: i64) {
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

    fn enqueue(&self, h: &mut Hooks, event: &str, event_type: &str, body: Vec<u8>) {
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

// ---------------------------------------------------------------------------
// Webhook delivery.
// ---------------------------------------------------------------------------

fn hmac_hex<M: Mac + hmac::digest::KeyInit>(secret: &[u8], body: &[u8]) -> String {
    let mut mac = <M as hmac::digest::KeyInit>::new_from_slice(secret).unwrap();
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// The headers Gitea's `addDefaultHeaders` sets, plus Go's transport ones.
fn hook_headers(t: &Delivery, secret: &str) -> Vec<(String, String)> {
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
fn hook_worker(sim: &Sim) {
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

// ---------------------------------------------------------------------------
// The server: request log, faults, auth, git, REST.
// ---------------------------------------------------------------------------

/// An API answer, turned into an `HttpResponse` on the server thread.
struct Answer {
    status: u16,
    body: Option<J>,
    headers: Vec<(&'static str, String)>,
}

fn json(status: u16, body: J) -> Answer {
    Answer {
        status,
        body: Some(body),
        headers: Vec::new(),
    }
}

fn empty(status: u16) -> Answer {
    Answer {
        status,
        body: None,
        headers: Vec::new(),
    }
}

/// Gitea's `APIError` body.
fn error(base: &str, status: u16, message: &str) -> Answer {
    json(
        status,
        obj(vec![
            ("message", message.into()),
            ("url", format!("{base}/api/swagger").into()),
        ]),
    )
}

/// Gitea's `APIErrorNotFound` body (a Go map: keys sorted).
fn not_found(base: &str) -> Answer {
    json(
        404,
        obj(vec![
            ("errors", J::Null),
            ("message", "The target couldn't be found.".into()),
            ("url", format!("{base}/api/swagger").into()),
        ]),
    )
}

impl Answer {
    fn into_response(self) -> HttpResponse {
        let status = actix_web::http::StatusCode::from_u16(self.status).unwrap();
        let mut resp = HttpResponse::build(status);
        for (k, v) in self.headers {
            resp.insert_header((k, v));
        }
        match self.body {
            Some(body) => {
                // Go's json.Encoder: compact, HTML-escaped, trailing newline.
                let mut bytes = go_json(&body, false);
                bytes.push(b'\n');
                resp.insert_header(("Content-Type", JSON_CT)).body(bytes)
            }
            None => resp.finish(),
        }
    }
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

fn query_param(query: &str, name: &str) -> Option<String> {
    form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// Standard base64 (padding optional), for HTTP basic credentials.
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for c in s.trim_end_matches('=').bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

enum Auth {
    Anonymous,
    User(String),
    /// Credentials that match no token.
    Invalid,
}

/// Gitea's `parseToken` plus basic auth with a token.
fn authenticate(d: &Data, headers: &[(String, String)], query: &str) -> Auth {
    let by_token = |t: &str| {
        d.users
            .iter()
            .find(|u| u.token.as_deref() == Some(t))
            .map(|u| u.login.clone())
    };
    let found = |login: Option<String>| login.map_or(Auth::Invalid, Auth::User);
    if let Some(value) = header(headers, "authorization") {
        let (scheme, rest) = value.trim().split_once(' ').unwrap_or((value, ""));
        let rest = rest.trim();
        if scheme.eq_ignore_ascii_case("token") || scheme.eq_ignore_ascii_case("bearer") {
            return found(by_token(rest));
        }
        if scheme.eq_ignore_ascii_case("basic") {
            let decoded = base64_decode(rest).and_then(|b| String::from_utf8(b).ok());
            let Some((user, pass)) = decoded.as_deref().and_then(|s| s.split_once(':')) else {
                return Auth::Invalid;
            };
            return found(by_token(pass).or_else(|| by_token(user)));
        }
        return Auth::Invalid;
    }
    match query_param(query, "token").or_else(|| query_param(query, "access_token")) {
        Some(t) => found(by_token(&t)),
        None => Auth::Anonymous,
    }
}

/// Every request: log it, apply faults, then git or the API.
async fn handle(req: HttpRequest, body: web::Bytes, sim: web::Data<Sim>) -> HttpResponse {
    let received = std::time::Instant::now();
    let method = req.method().as_str().to_owned();
    let path = req.path().to_owned();
    let query = req.query_string().to_owned();
    let headers: Vec<(String, String)> = req
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let (delay, fail) = {
        let mut f = sim.faults.lock().unwrap();
        let mut delay = f.delay;
        let (mut fail, mut delayed) = (false, false);
        for fault in f.list.iter_mut().filter(|x| x.on.hits(&method, &path)) {
            match fault.kind {
                FaultKind::Fail500 if !fail => {
                    fail = true;
                    fault.left -= 1;
                }
                FaultKind::Delay(d) if !delayed => {
                    delayed = true;
                    delay += d;
                    fault.left -= 1;
                }
                _ => {}
            }
        }
        f.list.retain(|x| x.left > 0);
        (delay, fail)
    };
    if !delay.is_zero() {
        // The slow-server fault a test injected: the wait is the fault.
        tokio::time::sleep(delay).await;
    }
    let api = path.starts_with("/api/");
    let response = if fail && api {
        // Production Gitea hides the message of a 500 from non-admins.
        error(sim.base(), 500, "").into_response()
    } else if fail {
        HttpResponse::InternalServerError().body("injected fault\n")
    } else if api {
        api_answer(&sim, &method, &path, &query, &headers, &body).into_response()
    } else {
        git_http(&sim, &req, &headers, body.clone()).await
    };
    sim.requests.lock().unwrap().push(LoggedRequest {
        method,
        path,
        query,
        authorization: header(&headers, "authorization").map(str::to_owned),
        headers,
        body: if api {
            String::from_utf8_lossy(&body).into_owned()
        } else {
            String::new()
        },
        status: response.status().as_u16(),
        received,
    });
    response
}

/// Smart HTTP for `/<owner>/<name>.git/...`: read needs read access, push
/// write access; anonymous requests to private repositories get Gitea's 401.
async fn git_http(
    sim: &Sim,
    req: &HttpRequest,
    headers: &[(String, String)],
    body: web::Bytes,
) -> HttpResponse {
    let path = req.path();
    let mut segs = path.trim_start_matches('/').splitn(3, '/');
    let owner = segs.next().unwrap_or_default();
    let name = segs.next().unwrap_or_default().trim_end_matches(".git");
    let push = path.ends_with("/git-receive-pack")
        || query_param(req.query_string(), "service").as_deref() == Some("git-receive-pack");
    let unauthorized = || {
        HttpResponse::Unauthorized()
            .insert_header(("WWW-Authenticate", r#"Basic realm="Gitea""#))
            .body("Unauthorized\n")
    };
    let user = {
        let d = sim.data.lock().unwrap();
        let user = match authenticate(&d, headers, req.query_string()) {
            Auth::Invalid => return unauthorized(),
            Auth::Anonymous => None,
            Auth::User(login) => Some(login),
        };
        let Some(repo) = d.repo(owner, name) else {
            return HttpResponse::NotFound().body("Not found.\n");
        };
        let perm = d.perm(repo, user.as_deref());
        let needed = if push { Perm::Write } else { Perm::Read };
        if perm < needed {
            return match (&user, perm) {
                (None, _) => unauthorized(),
                (Some(_), Perm::None) => HttpResponse::NotFound().body("Not found.\n"),
                (Some(_), _) => HttpResponse::Forbidden().body("Forbidden\n"),
            };
        }
        user
    };
    sim.git.serve(req, headers, body, user).await
}

#[derive(Deserialize)]
struct BodyOption {
    #[serde(default)]
    body: Option<String>,
}

#[derive(Deserialize)]
struct ReactionOption {
    #[serde(default)]
    content: Option<String>,
}

/// Parse a JSON request body as binding does: malformed → 422.
fn bind<T: serde::de::DeserializeOwned>(base: &str, body: &[u8]) -> Result<T, Answer> {
    serde_json::from_slice(body).map_err(|e| error(base, 422, &e.to_string()))
}

fn api_answer(
    sim: &Sim,
    method: &str,
    path: &str,
    query: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Answer {
    let base = sim.base();
    let mut d = sim.data.lock().unwrap();
    let doer = match authenticate(&d, headers, query) {
        Auth::Invalid => return error(base, 401, "user does not exist [uid: 0, name: ]"),
        Auth::Anonymous => None,
        Auth::User(login) => Some(login),
    };
    let Some(rest) = path.strip_prefix("/api/v1/") else {
        return not_found(base);
    };
    let segs: Vec<&str> = rest.trim_end_matches('/').split('/').collect();
    if method == "GET" && segs == ["version"] {
        return json(200, obj(vec![("version", GITEA_VERSION.into())]));
    }
    let Some(doer) = doer else {
        return error(base, 401, "token is required");
    };
    match (method, segs.as_slice()) {
        ("GET", ["user"]) => json(200, d.user_json(base, &doer, true)),
        (_, ["repos", owner, name, rest @ ..]) => {
            repo_api(sim, &mut d, &doer, method, owner, name, rest, query, body)
        }
        _ => not_found(base),
    }
}

#[expect(
    clippy::too_many_arguments,
    reason = "a Gitea request's fields, as the simulator records them"
)]
fn repo_api(
    sim: &Sim,
    d: &mut Data,
    doer: &str,
    method: &str,
    owner: &str,
    name: &str,
    rest: &[&str],
    query: &str,
    body: &[u8],
) -> Answer {
    let base = sim.base();
    let Some(repo) = d.repo(owner, name) else {
        return not_found(base);
    };
    let perm = d.perm(repo, Some(doer));
    if perm == Perm::None {
        return not_found(base);
    }
    let repo_id = repo.id;
    let issue_of = |d: &Data, n: &str| {
        let n: i64 = n.parse().ok()?;
        d.issues
            .iter()
            .find(|i| i.repo_id == repo_id && i.number == n)
            .map(|i| i.id)
    };
    // A comment of this repository, by id.
    let comment_of = |d: &Data, id: &str| {
        let id: i64 = id.parse().ok()?;
        let c = d.comment(id)?;
        (d.issue(c.issue_id).repo_id == repo_id).then_some(id)
    };
    match (method, rest) {
        ("GET", []) => json(200, d.repo_json(base, d.repo_by_id(repo_id), Some(doer))),
        ("GET", ["issues", "comments", id]) => match comment_of(d, id) {
            None => not_found(base),
            Some(id) if !d.comment(id).unwrap().plain => empty(204),
            Some(id) => json(200, d.comment_json(base, d.comment(id).unwrap())),
        },
        ("PATCH" | "DELETE", ["issues", "comments", id]) => {
            let Some(id) = comment_of(d, id) else {
                return not_found(base);
            };
            let c = d.comment(id).unwrap();
            if !c.plain {
                return empty(204);
            }
            if !c.author.eq_ignore_ascii_case(doer) && perm < Perm::Write {
                return empty(403);
            }
            if method == "DELETE" {
                sim.comment_hook(d, "deleted", id, doer, None);
                d.comments.retain(|c| c.id != id);
                return empty(204);
            }
            let new_body = match bind::<BodyOption>(base, body) {
                Ok(BodyOption { body: Some(b) }) if !b.is_empty() => b,
                Ok(_) => return error(base, 422, "[Body]: Required"),
                Err(answer) => return answer,
            };
            let now = d.now();
            let c = d.comment_mut(id).unwrap();
            let old = std::mem::replace(&mut c.body, new_body);
            c.updated = now;
            sim.comment_hook(d, "edited", id, doer, Some(&old));
            json(200, d.comment_json(base, d.comment(id).unwrap()))
        }
        (_, ["issues", "comments", id, "reactions"]) => {
            let Some(id) = comment_of(d, id) else {
                return not_found(base);
            };
            reactions_api(d, base, doer, perm, method, id, body)
        }
        ("GET", ["issues", n, "comments"]) => {
            let Some(issue_id) = issue_of(d, n) else {
                return not_found(base);
            };
            let mut bounds = [i64::MIN, i64::MAX];
            for (i, key) in ["since", "before"].into_iter().enumerate() {
                if let Some(v) = query_param(query, key).filter(|v| !v.is_empty()) {
                    match chrono::DateTime::parse_from_rfc3339(&v) {
                        Ok(t) => bounds[i] = t.timestamp(),
                        Err(e) => return error(base, 422, &format!("parsing time {v:?}: {e}")),
                    }
                }
            }
            let list: Vec<J> = d
                .comments
                .iter()
                .filter(|c| c.issue_id == issue_id && c.plain)
                .filter(|c| c.updated >= bounds[0] && c.updated <= bounds[1])
                .map(|c| d.comment_json(base, c))
                .collect();
            Answer {
                status: 200,
                headers: vec![
                    ("X-Total-Count", list.len().to_string()),
                    ("Access-Control-Expose-Headers", "X-Total-Count".into()),
                ],
                body: Some(J::Arr(list)),
            }
        }
        ("POST", ["issues", n, "comments"]) => {
            let text = match bind::<BodyOption>(base, body) {
                Ok(BodyOption { body: Some(b) }) if !b.is_empty() => b,
                Ok(_) => return error(base, 422, "[Body]: Required"),
                Err(answer) => return answer,
            };
            let Some(issue_id) = issue_of(d, n) else {
                return not_found(base);
            };
            if d.issue(issue_id).locked && perm < Perm::Write {
                return error(base, 403, "You cannot comment on a locked issue.");
            }
            let (denied, dropped) = {
                let mut f = sim.faults.lock().unwrap();
                let denied = f.denied.contains(&doer.to_ascii_lowercase());
                let dropped = !denied && f.drop_comments > 0;
                if dropped {
                    f.drop_comments -= 1;
                }
                (denied, dropped)
            };
            if denied {
                return error(base, 403, "user is blocked");
            }
            if dropped {
                let now = d.now();
                let ghost = Comment {
                    id: d.alloc(),
                    issue_id,
                    author: doer.to_owned(),
                    body: text,
                    plain: true,
                    created: now,
                    updated: now,
                    reactions: Vec::new(),
                };
                return json(201, d.comment_json(base, &ghost));
            }
            let id = d.add_comment(issue_id, doer, &text, true);
            sim.comment_hook(d, "created", id, doer, None);
            json(201, d.comment_json(base, d.comment(id).unwrap()))
        }
        ("GET", ["issues", n]) => match issue_of(d, n) {
            Some(id) => json(200, d.issue_json(base, d.issue(id), Some(doer))),
            None => not_found(base),
        },
        ("GET", ["pulls", n]) => match issue_of(d, n).filter(|id| d.issue(*id).pull.is_some()) {
            Some(id) => json(200, d.pull_json(base, &sim.git, d.issue(id), Some(doer))),
            None => not_found(base),
        },
        ("GET", ["collaborators", user, "permission"]) => {
            let site_admin = d.user(doer).is_some_and(|u| u.is_admin);
            if !site_admin && !doer.eq_ignore_ascii_case(user) && perm < Perm::Admin {
                return error(
                    base,
                    403,
                    "Only admins can query all permissions, repo admins can query all repo \
                     permissions, collaborators can query only their own",
                );
            }
            let Some(target) = d.user(user).map(|u| u.login.clone()) else {
                return error(
                    base,
                    404,
                    &format!("user does not exist [uid: 0, name: {user}]"),
                );
            };
            let repo = d.repo_by_id(repo_id);
            let p = d.perm(repo, Some(&target));
            let role = if repo.owner.eq_ignore_ascii_case(&target) {
                "owner"
            } else {
                p.as_str()
            };
            json(
                200,
                obj(vec![
                    ("permission", p.as_str().into()),
                    ("role_name", role.into()),
                    ("user", d.user_json(base, &target, false)),
                ]),
            )
        }
        _ => not_found(base),
    }
}

fn reactions_api(
    d: &mut Data,
    base: &str,
    doer: &str,
    perm: Perm,
    method: &str,
    id: i64,
    body: &[u8],
) -> Answer {
    if method == "GET" {
        let c = d.comment(id).unwrap();
        let list = c
            .reactions
            .iter()
            .map(|r| d.reaction_json(base, r))
            .collect();
        return json(200, J::Arr(list));
    }
    if method != "POST" && method != "DELETE" {
        return not_found(base);
    }
    let content = match bind::<ReactionOption>(base, body) {
        Ok(ReactionOption { content: Some(c) }) if !c.is_empty() => c,
        Ok(_) => return error(base, 422, "[Content]: Required"),
        Err(answer) => return answer,
    };
    let issue = d.issue(d.comment(id).unwrap().issue_id);
    if issue.locked && perm < Perm::Write {
        return error(base, 403, "no permission to change reaction");
    }
    if !ALLOWED_REACTIONS.contains(&content.as_str()) {
        return error(
            base,
            403,
            &format!("'{content}' is not an allowed reaction"),
        );
    }
    let now = d.now();
    let c = d.comment_mut(id).unwrap();
    let mine = |r: &Reaction| r.user.eq_ignore_ascii_case(doer) && r.content == content;
    if method == "DELETE" {
        c.reactions.retain(|r| !mine(r));
        return empty(200);
    }
    if let Some(existing) = c.reactions.iter().find(|r| mine(r)).cloned() {
        return json(200, d.reaction_json(base, &existing));
    }
    let reaction = Reaction {
        user: doer.to_owned(),
        content,
        created: now,
    };
    c.reactions.push(reaction.clone());
    json(201, d.reaction_json(base, &reaction))
}
