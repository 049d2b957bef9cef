//! A git smart-HTTP server for tests, and the start of the Gitea simulator:
//! bare repositories under a temp dir, served by `git http-backend` (CGI)
//! behind Gitea's token check, on 127.0.0.1:0.
//!
//! - Auth as Gitea does it for the bot: `Authorization: token <expected>`, else
//!   401 with `WWW-Authenticate: Basic realm="Gitea"`. [`GitSim::set_token`]
//!   switches the expected token (`None`: anonymous access).
//! - Every request is recorded with all its headers, so a test can assert where
//!   the token travelled ([`GitSim::requests`]).
//! - Faults: [`GitSim::fail_next`] answers the next N requests with 500.
//! - Repositories: [`GitSim::create_repo`], [`GitSim::commit`],
//!   [`GitSim::create_pull`], [`GitSim::delete_branch`],
//!   [`GitSim::branch_head`]; commits are made with plumbing straight in the
//!   bare repository, no work tree needed.
//!
//! The server is actix-web in its own thread with its own `System`. The
//! repositories and the CGI bridge live in [`GitRepos`], which the Gitea
//! simulator (`crate::giteasim`, with users, REST and webhooks) shares.

use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use std::io::Write;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

// Named by path: benches include this file by path too.
#[path = "gitsim/forks.rs"]
mod forks;

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct SeenRequest {
    pub method: String,
    /// The path, without the query.
    pub path: String,
    pub query: String,
    /// The `Authorization` header, verbatim.
    pub authorization: Option<String>,
    /// Every header (lower-case names), `Authorization` included.
    pub headers: Vec<(String, String)>,
    /// What the server answered.
    pub status: u16,
}

struct State {
    git: Arc<GitRepos>,
    /// `None`: no authentication required.
    token: Mutex<Option<String>>,
    /// How many of the next requests get a 500.
    fail_next: AtomicUsize,
    /// Every answer waits this long first (slow-server fault), in milliseconds.
    delay_ms: AtomicUsize,
    requests: Mutex<Vec<SeenRequest>>,
}

/// A running simulator; stopped and removed on drop.
pub struct GitSim {
    state: Arc<State>,
    server: crate::support::TestHttpServer,
}

impl GitSim {
    /// Start a server that expects `token` (or none).
    pub fn start(token: Option<&str>) -> GitSim {
        let state = Arc::new(State {
            git: Arc::new(GitRepos::new()),
            token: Mutex::new(token.map(str::to_owned)),
            fail_next: AtomicUsize::new(0),
            delay_ms: AtomicUsize::new(0),
            requests: Mutex::new(Vec::new()),
        });
        let data = web::Data::from(state.clone());
        let server = crate::support::TestHttpServer::start("gitsim", move |cfg| {
            cfg.app_data(data.clone())
                .app_data(web::PayloadConfig::new(256 << 20))
                .default_service(web::to(git_http));
        });
        GitSim { state, server }
    }

    /// `http://127.0.0.1:PORT` (no trailing slash), like Gitea's ROOT_URL.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.server.addr)
    }

    /// Gitea's `clone_url` of a repository.
    pub fn clone_url(&self, owner: &str, name: &str) -> String {
        format!("{}/{owner}/{name}.git", self.base_url())
    }

    /// Expect this token from now on (`None`: anonymous access).
    pub fn set_token(&self, token: Option<&str>) {
        *self.state.token.lock().unwrap() = token.map(str::to_owned);
    }

    /// Answer the next `n` requests with 500, whatever they are.
    pub fn fail_next(&self, n: usize) {
        self.state.fail_next.store(n, Ordering::SeqCst);
    }

    /// Make every answer wait `delay` first (0 to stop).
    pub fn set_delay(&self, delay: std::time::Duration) {
        self.state
            .delay_ms
            .store(delay.as_millis() as usize, Ordering::SeqCst);
    }

    /// Every request so far, oldest first.
    pub fn requests(&self) -> Vec<SeenRequest> {
        self.state.requests.lock().unwrap().clone()
    }

    /// See [`GitRepos::create_repo`].
    pub fn create_repo(&self, owner: &str, name: &str) -> String {
        self.state.git.create_repo(owner, name)
    }

    /// See [`GitRepos::commit`].
    pub fn commit(
        &self,
        owner: &str,
        name: &str,
        branch: &str,
        file: &str,
        contents: &str,
        message: &str,
    ) -> String {
        self.state
            .git
            .commit(owner, name, branch, file, contents, message)
    }

    /// Point `refs/pull/<number>/head` at the tip of `branch`, as Gitea does
    /// when a pull request is opened or pushed to; returns that commit.
    pub fn create_pull(&self, owner: &str, name: &str, number: i64, branch: &str) -> String {
        self.state.git.set_pull_ref(owner, name, number, branch)
    }

    /// See [`GitRepos::delete_branch`].
    pub fn delete_branch(&self, owner: &str, name: &str, branch: &str) {
        self.state.git.delete_branch(owner, name, branch)
    }

    /// See [`GitRepos::branch_head`].
    pub fn branch_head(&self, owner: &str, name: &str, branch: &str) -> String {
        self.state.git.branch_head(owner, name, branch)
    }
}

/// Bare repositories `owner/name.git` under a temp dir, with plumbing helpers
/// to commit into them and `git http-backend` to serve them. Shared by
/// [`GitSim`] and the Gitea simulator (`crate::giteasim`).
pub struct GitRepos {
    /// Where `owner/name.git` live (`GIT_PROJECT_ROOT`).
    root: PathBuf,
    /// HOME of every git the simulator runs, so no user config leaks in.
    home: PathBuf,
    /// Unique names for the temporary index files of [`GitRepos::commit`].
    scratch: AtomicUsize,
    _dir: tempfile::TempDir,
}

impl GitRepos {
    pub fn new() -> GitRepos {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("repos");
        let home = dir.path().join("home");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        GitRepos {
            root,
            home,
            scratch: AtomicUsize::new(0),
            _dir: dir,
        }
    }

    /// Serve one smart-HTTP request with `git http-backend`; `user` becomes
    /// `REMOTE_USER` (http-backend serves pushes only to someone).
    pub async fn serve(
        self: &Arc<Self>,
        req: &HttpRequest,
        headers: &[(String, String)],
        body: web::Bytes,
        user: Option<String>,
    ) -> HttpResponse {
        let cgi = Cgi {
            method: req.method().as_str().to_owned(),
            path: req.path().to_owned(),
            query: req.query_string().to_owned(),
            remote_addr: req
                .peer_addr()
                .map(|a| a.ip().to_string())
                .unwrap_or_default(),
            user,
            headers: headers.to_vec(),
            body,
        };
        let repos = self.clone();
        match web::block(move || cgi.run(&repos.root, &repos.home)).await {
            Ok(Ok(resp)) => resp.into_response(),
            Ok(Err(e)) => HttpResponse::InternalServerError().body(format!("gitsim: {e}")),
            Err(e) => HttpResponse::InternalServerError().body(format!("gitsim: {e}")),
        }
    }

    /// The bare repository of `owner/name`.
    pub fn repo_path(&self, owner: &str, name: &str) -> PathBuf {
        self.root.join(owner).join(format!("{name}.git"))
    }

    /// A bare repository `owner/name.git` with one commit on `main`
    /// (`README.md`); returns that commit.
    pub fn create_repo(&self, owner: &str, name: &str) -> String {
        let path = self.repo_path(owner, name);
        std::fs::create_dir_all(&path).unwrap();
        self.git(
            &path,
            &["init", "--quiet", "--bare", "--initial-branch=main"],
            None,
            &[],
        );
        self.commit(
            owner,
            name,
            "main",
            "README.md",
            &format!("# {name}\n"),
            "initial commit",
        )
    }

    /// Commit `file` with `contents` on `branch` (created from `main` if it does
    /// not exist yet); returns the new commit.
    pub fn commit(
        &self,
        owner: &str,
        name: &str,
        branch: &str,
        file: &str,
        contents: &str,
        message: &str,
    ) -> String {
        self.commit_by(owner, name, branch, file, contents, message, None)
    }

    /// As [`GitRepos::commit`], authored by `author` (name, e-mail) instead
    /// of the fixed test identity.
    #[expect(
        clippy::too_many_arguments,
        reason = "a commit's fields, as git takes them"
    )]
    pub fn commit_by(
        &self,
        owner: &str,
        name: &str,
        branch: &str,
        file: &str,
        contents: &str,
        message: &str,
        author: Option<(&str, &str)>,
    ) -> String {
        let repo = self.repo_path(owner, name);
        let parent = self
            .try_git(
                &repo,
                &[
                    "rev-parse",
                    "--verify",
                    "-q",
                    &format!("refs/heads/{branch}"),
                ],
            )
            .or_else(|| self.try_git(&repo, &["rev-parse", "--verify", "-q", "refs/heads/main"]));
        let blob = self.git(
            &repo,
            &["hash-object", "-w", "--stdin"],
            Some(contents.as_bytes()),
            &[],
        );
        let n = self.scratch.fetch_add(1, Ordering::SeqCst);
        let index = self.home.join(format!("index-{n}"));
        let env = [("GIT_INDEX_FILE", index.as_path())];
        if let Some(parent) = &parent {
            self.git(&repo, &["read-tree", parent], None, &env);
        }
        let cacheinfo = format!("100644,{blob},{file}");
        self.git(
            &repo,
            &["update-index", "--add", "--cacheinfo", &cacheinfo],
            None,
            &env,
        );
        let tree = self.git(&repo, &["write-tree"], None, &env);
        let _ = std::fs::remove_file(&index);
        let mut args = vec!["commit-tree", tree.as_str(), "-m", message];
        if let Some(parent) = &parent {
            args.extend(["-p", parent.as_str()]);
        }
        let who: Vec<(&str, &Path)> = match author {
            Some((n, e)) => vec![
                ("GIT_AUTHOR_NAME", Path::new(n)),
                ("GIT_AUTHOR_EMAIL", Path::new(e)),
            ],
            None => Vec::new(),
        };
        let commit = self.git(&repo, &args, None, &who);
        self.git(
            &repo,
            &["update-ref", &format!("refs/heads/{branch}"), &commit],
            None,
            &[],
        );
        commit
    }

    /// Point `refs/pull/<number>/head` at the tip of `branch`, as Gitea does
    /// when a pull request is opened or pushed to; returns that commit.
    pub fn set_pull_ref(&self, owner: &str, name: &str, number: i64, branch: &str) -> String {
        let repo = self.repo_path(owner, name);
        let sha = self.branch_head(owner, name, branch);
        self.git(
            &repo,
            &["update-ref", &format!("refs/pull/{number}/head"), &sha],
            None,
            &[],
        );
        sha
    }

    /// The files changed between the merge base of `base` and `head` and
    /// `head`, as Gitea lists a pull request's: (status, name, additions,
    /// deletions), status in Gitea's words.
    pub fn changed_files(
        &self,
        owner: &str,
        name: &str,
        base: &str,
        head: &str,
    ) -> Vec<(String, String, i64, i64)> {
        let repo = self.repo_path(owner, name);
        let Some(merge_base) = self.try_git(&repo, &["merge-base", base, head]) else {
            return Vec::new();
        };
        let range = [merge_base.trim(), head];
        let numstat = self.git(
            &repo,
            &["diff", "--numstat", "--no-renames", range[0], range[1]],
            None,
            &[],
        );
        let status = self.git(
            &repo,
            &["diff", "--name-status", "--no-renames", range[0], range[1]],
            None,
            &[],
        );
        numstat
            .lines()
            .zip(status.lines())
            .filter_map(|(n, s)| {
                let mut n = n.split('\t');
                let adds = n.next()?.parse().unwrap_or(0);
                let dels = n.next()?.parse().unwrap_or(0);
                let file = n.next()?.to_owned();
                let word = match s.split('\t').next()? {
                    "A" => "added",
                    "D" => "deleted",
                    _ => "changed",
                };
                Some((word.to_owned(), file, adds, dels))
            })
            .collect()
    }

    /// Delete a branch (its commits stay reachable from any other ref).
    pub fn delete_branch(&self, owner: &str, name: &str, branch: &str) {
        let repo = self.repo_path(owner, name);
        self.git(
            &repo,
            &["update-ref", "-d", &format!("refs/heads/{branch}")],
            None,
            &[],
        );
    }

    /// The commit at the tip of `branch`.
    pub fn branch_head(&self, owner: &str, name: &str, branch: &str) -> String {
        let repo = self.repo_path(owner, name);
        self.git(
            &repo,
            &[
                "rev-parse",
                "--verify",
                &format!("refs/heads/{branch}^{{commit}}"),
            ],
            None,
            &[],
        )
    }

    /// The commit at the tip of `branch`, if the branch exists.
    pub fn try_branch_head(&self, owner: &str, name: &str, branch: &str) -> Option<String> {
        let repo = self.repo_path(owner, name);
        let spec = format!("refs/heads/{branch}^{{commit}}");
        self.try_git(&repo, &["rev-parse", "--verify", "-q", &spec])
    }

    /// The commit `rev` names (a full or short id, a branch, a tag), as
    /// Gitea's `GetCommit` resolves it; `None` when it names none.
    pub fn resolve_commit(&self, owner: &str, name: &str, rev: &str) -> Option<String> {
        if rev.starts_with('-') {
            return None;
        }
        let repo = self.repo_path(owner, name);
        let spec = format!("{rev}^{{commit}}");
        self.try_git(&repo, &["rev-parse", "--verify", "-q", &spec])
    }

    pub(crate) fn git(
        &self,
        repo: &Path,
        args: &[&str],
        input: Option<&[u8]>,
        env: &[(&str, &Path)],
    ) -> String {
        match self.run_git(repo, args, input, env) {
            Ok(out) => out,
            Err(e) => panic!("gitsim: git {args:?} in {}: {e}", repo.display()),
        }
    }

    pub(crate) fn try_git(&self, repo: &Path, args: &[&str]) -> Option<String> {
        self.run_git(repo, args, None, &[]).ok()
    }

    fn run_git(
        &self,
        repo: &Path,
        args: &[&str],
        input: Option<&[u8]>,
        env: &[(&str, &Path)],
    ) -> Result<String, String> {
        let mut cmd = Command::new("git");
        cmd.args(args)
            .current_dir(repo)
            .env("GIT_DIR", repo)
            .stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        plain_git_env(&mut cmd, &self.home);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().map_err(|e| e.to_string())?;
        if let Some(input) = input {
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input)
                .map_err(|e| e.to_string())?;
        }
        let out = child.wait_with_output().map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
        }
    }
}

/// The environment of every git the simulator runs: nothing from the user's
/// configuration, a fixed identity for commits.
fn plain_git_env(cmd: &mut Command, home: &Path) {
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("LC_ALL", "C")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "test")
        .env("GIT_AUTHOR_EMAIL", "test@example.com")
        .env("GIT_COMMITTER_NAME", "test")
        .env("GIT_COMMITTER_EMAIL", "test@example.com");
}

/// Every request: record it, inject a fault or check the token, then hand it
/// to `git http-backend`.
async fn git_http(req: HttpRequest, body: web::Bytes, state: web::Data<State>) -> HttpResponse {
    let delay = state.delay_ms.load(Ordering::SeqCst);
    if delay > 0 {
        // The slow-server fault a test injected: the wait is the fault.
        tokio::time::sleep(std::time::Duration::from_millis(delay as u64)).await;
    }
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
    let authorization = header(&headers, "authorization").map(str::to_owned);
    let expected = state.token.lock().unwrap().clone();
    let fault = state
        .fail_next
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok();

    let response = if fault {
        HttpResponse::InternalServerError().body("injected fault")
    } else if expected
        .as_ref()
        .is_some_and(|t| authorization.as_deref() != Some(&format!("token {t}")))
    {
        HttpResponse::Unauthorized()
            .insert_header(("WWW-Authenticate", r#"Basic realm="Gitea""#))
            .body("Unauthorized\n")
    } else {
        let user = expected.map(|_| "bot".to_owned());
        state.git.serve(&req, &headers, body, user).await
    };

    state.requests.lock().unwrap().push(SeenRequest {
        method: req.method().as_str().to_owned(),
        path: req.path().to_owned(),
        query: req.query_string().to_owned(),
        authorization,
        headers,
        status: response.status().as_u16(),
    });
    response
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// One CGI call of `git http-backend`.
struct Cgi {
    method: String,
    path: String,
    query: String,
    remote_addr: String,
    /// `REMOTE_USER`: set when the request was authenticated, which is what
    /// http-backend wants before it serves a push.
    user: Option<String>,
    headers: Vec<(String, String)>,
    body: web::Bytes,
}

impl Cgi {
    fn run(self, repos: &Path, home: &Path) -> Result<CgiResponse, String> {
        let mut cmd = Command::new("git");
        cmd.arg("http-backend")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        plain_git_env(&mut cmd, home);
        cmd.env("GIT_PROJECT_ROOT", repos)
            .env("GIT_HTTP_EXPORT_ALL", "1")
            .env("GATEWAY_INTERFACE", "CGI/1.1")
            .env("SERVER_PROTOCOL", "HTTP/1.1")
            .env("REQUEST_METHOD", &self.method)
            .env("PATH_INFO", &self.path)
            .env("QUERY_STRING", &self.query)
            .env("REMOTE_ADDR", &self.remote_addr)
            .env("CONTENT_LENGTH", self.body.len().to_string())
            .env(
                "CONTENT_TYPE",
                header(&self.headers, "content-type").unwrap_or_default(),
            );
        if let Some(user) = &self.user {
            cmd.env("REMOTE_USER", user);
        }
        // HTTP_CONTENT_ENCODING (git gzips large request bodies; http-backend
        // inflates them), HTTP_GIT_PROTOCOL (protocol v2), and the rest. The
        // body arrives de-chunked, so CONTENT_LENGTH is exact.
        for (name, value) in &self.headers {
            if matches!(
                name.as_str(),
                "authorization" | "content-type" | "content-length" | "transfer-encoding"
            ) {
                continue;
            }
            let var = format!("HTTP_{}", name.to_ascii_uppercase().replace('-', "_"));
            cmd.env(var, value);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot run git http-backend: {e}"))?;
        let mut stdin = child.stdin.take().ok_or("no stdin")?;
        let body = self.body.clone();
        // Written on its own thread: http-backend may answer before it has read
        // everything, and neither side may block the other.
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(&body);
        });
        let out = child.wait_with_output().map_err(|e| e.to_string())?;
        let _ = writer.join();
        if !out.status.success() && out.stdout.is_empty() {
            return Err(format!(
                "git http-backend failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        parse_cgi(&out.stdout)
    }
}

/// What http-backend answered (an `HttpResponse` is not `Send`, so it is built
/// back on the server thread).
struct CgiResponse {
    status: StatusCode,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl CgiResponse {
    fn into_response(self) -> HttpResponse {
        let mut resp = HttpResponse::build(self.status);
        for h in self.headers {
            resp.append_header(h);
        }
        resp.body(self.body)
    }
}

/// A CGI response: header lines, a blank line, the body. `Status:` sets the
/// status (200 if absent).
fn parse_cgi(raw: &[u8]) -> Result<CgiResponse, String> {
    let (head, body) = match find(raw, b"\r\n\r\n") {
        Some(i) => (&raw[..i], &raw[i + 4..]),
        None => match find(raw, b"\n\n") {
            Some(i) => (&raw[..i], &raw[i + 2..]),
            None => return Err("http-backend wrote no header block".into()),
        },
    };
    let head = String::from_utf8_lossy(head);
    let mut status = StatusCode::OK;
    let mut headers = Vec::new();
    for line in head.lines() {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            let code = value.split_whitespace().next().unwrap_or("500");
            status = code
                .parse::<u16>()
                .ok()
                .and_then(|c| StatusCode::from_u16(c).ok())
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        } else if !name.eq_ignore_ascii_case("content-length") {
            headers.push((name.trim().to_owned(), value.to_owned()));
        }
    }
    Ok(CgiResponse {
        status,
        headers,
        body: body.to_vec(),
    })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[test]
fn gitsim_serves_clones_and_enforces_the_token() {
    let sim = GitSim::start(Some("sim-token"));
    let first = sim.create_repo("acme", "widgets");
    let work = tempfile::tempdir().unwrap();
    let clone = |token: Option<&str>, dest: &str| {
        let mut cmd = Command::new("git");
        plain_git_env(&mut cmd, work.path());
        cmd.env("GIT_TERMINAL_PROMPT", "0").current_dir(work.path());
        if let Some(t) = token {
            cmd.args(["-c", &format!("http.extraHeader=Authorization: token {t}")]);
        }
        cmd.args(["clone", "--quiet", &sim.clone_url("acme", "widgets"), dest])
            .output()
            .unwrap()
    };
    let ok = clone(Some("sim-token"), "a");
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let head = std::fs::read_to_string(work.path().join("a/README.md")).unwrap();
    assert_eq!(head, "# widgets\n");
    assert_eq!(sim.branch_head("acme", "widgets", "main"), first);

    let denied = clone(None, "b");
    assert!(!denied.status.success());
    let last = sim.requests().pop().unwrap();
    assert_eq!(last.status, 401);
    assert!(last.authorization.is_none());

    sim.fail_next(1);
    let failed = clone(Some("sim-token"), "c");
    assert!(String::from_utf8_lossy(&failed.stderr).contains("500"));
    assert!(sim.requests().iter().any(|r| r.status == 500));

    // Enough branches that git's fetch request is over 1 KiB, which git
    // gzips: http-backend inflates it (HTTP_CONTENT_ENCODING).
    for i in 0..40 {
        sim.commit(
            "acme",
            "widgets",
            &format!("b{i}"),
            "f.txt",
            &format!("{i}\n"),
            "b",
        );
    }
    let ok = clone(Some("sim-token"), "d");
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let gzipped = sim.requests().into_iter().find(|r| {
        r.method == "POST"
            && r.headers
                .iter()
                .any(|(k, v)| k == "content-encoding" && v == "gzip")
    });
    assert_eq!(gzipped.map(|r| r.status), Some(200));
}
