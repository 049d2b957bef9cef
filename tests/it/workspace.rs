//! The workspace manager against the git smart-HTTP simulator: clone, fetch,
//! PR checkout, where the token goes (and where it never goes), how failures
//! are classified, and that a dirty workspace is left exactly as it was.

use crate::gitsim::GitSim;
use codex_bridge::workspace::{
    Checkout, Disposition, Prepared, RepoSpec, WorkspaceError, WorkspaceManager,
};
use secrecy::SecretString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const TOKEN: &str = "ws-token-7f3a9c1e5b2d";

pub struct Env {
    pub sim: GitSim,
    /// Holds `root`; also checked for anything created beside it.
    pub tmp: tempfile::TempDir,
    pub root: PathBuf,
    pub manager: WorkspaceManager,
}

pub fn env() -> Env {
    let sim = GitSim::start(Some(TOKEN));
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap().join("root");
    let manager = manager(&root, Some(TOKEN));
    Env {
        sim,
        tmp,
        root,
        manager,
    }
}

fn manager(root: &Path, token: Option<&str>) -> WorkspaceManager {
    WorkspaceManager::new(
        root.to_path_buf(),
        "default".into(),
        token.map(SecretString::from),
    )
    .with_timeout(Duration::from_secs(60))
}

pub fn spec(sim: &GitSim, owner: &str, name: &str) -> RepoSpec {
    RepoSpec {
        owner: owner.into(),
        name: name.into(),
        clone_url: Some(sim.clone_url(owner, name)),
    }
}

pub fn default_branch() -> Checkout {
    Checkout::DefaultBranch { name: None }
}

/// Git in a workspace as a person (or Codex) would run it.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=test", "-c", "user.email=test@example.com"])
        .args(args)
        .current_dir(dir)
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Every regular file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                stack.push(entry.path());
            } else if kind.is_file() {
                out.push(entry.path());
            }
        }
    }
    out
}

fn assert_no_token_on_disk(dir: &Path, token: &str) {
    let files = files_under(dir);
    assert!(!files.is_empty());
    for f in files {
        let bytes = std::fs::read(&f).unwrap();
        assert!(
            !bytes.windows(token.len()).any(|w| w == token.as_bytes()),
            "the token is in {}",
            f.display()
        );
    }
}

fn expect_err(res: Result<Prepared, WorkspaceError>) -> WorkspaceError {
    match res {
        Ok(p) => panic!("expected an error, got {p:?}"),
        Err(e) => e,
    }
}

#[test]
fn workspace_clones_first_then_fetches_and_fast_forwards() {
    let e = env();
    let first = e.sim.create_repo("acme", "widgets");

    let p = e
        .manager
        .prepare(&spec(&e.sim, "acme", "widgets"), &default_branch())
        .unwrap();
    assert_eq!(p.path, e.root.join("default/acme/widgets"));
    assert!(p.cloned);
    assert_eq!(p.branch, "main");
    assert_eq!(p.head, first);
    assert_eq!(
        std::fs::read_to_string(p.path.join("README.md")).unwrap(),
        "# widgets\n"
    );

    let second = e
        .sim
        .commit("acme", "widgets", "main", "src/lib.rs", "// v2\n", "second");
    let p = e
        .manager
        .prepare(
            &spec(&e.sim, "acme", "widgets"),
            &Checkout::DefaultBranch {
                name: Some("main".into()),
            },
        )
        .unwrap();
    assert!(!p.cloned);
    assert_eq!(p.head, second);
    assert_eq!(git(&p.path, &["rev-parse", "HEAD"]), second);
    assert_eq!(git(&p.path, &["symbolic-ref", "--short", "HEAD"]), "main");
    assert_eq!(
        std::fs::read_to_string(p.path.join("src/lib.rs")).unwrap(),
        "// v2\n"
    );
    // origin/HEAD lost (as after the default branch was deleted and pruned):
    // asked again from the remote.
    git(
        &p.path,
        &["symbolic-ref", "--delete", "refs/remotes/origin/HEAD"],
    );
    let again = e
        .manager
        .prepare(&spec(&e.sim, "acme", "widgets"), &default_branch())
        .unwrap();
    assert_eq!(
        (again.branch.as_str(), again.head.as_str()),
        ("main", second.as_str())
    );

    // An empty folder at the workspace path is cloned into.
    e.sim.create_repo("acme", "gadgets");
    std::fs::create_dir_all(e.root.join("default/acme/gadgets")).unwrap();
    let g = e
        .manager
        .prepare(&spec(&e.sim, "acme", "gadgets"), &default_branch())
        .unwrap();
    assert!(g.cloned && g.path.join("README.md").exists());

    // Only the workspaces and the (now empty) staging folder are under the root.
    let staging: Vec<_> = std::fs::read_dir(e.root.join(".staging"))
        .unwrap()
        .collect();
    assert!(staging.is_empty());
    let beside: Vec<_> = std::fs::read_dir(e.tmp.path()).unwrap().collect();
    assert_eq!(beside.len(), 1);
}

#[test]
fn workspace_pull_request_lands_on_the_head_branch_at_the_pr_head() {
    let e = env();
    e.sim.create_repo("acme", "widgets");
    let s = spec(&e.sim, "acme", "widgets");
    e.sim
        .commit("acme", "widgets", "feature/x", "x.txt", "x1\n", "x1");
    let pr_head = e.sim.create_pull("acme", "widgets", 7, "feature/x");

    // First contact is a PR task: clone, then fetch the PR ref.
    let pr = Checkout::PullRequest {
        number: 7,
        head_ref: "feature/x".into(),
    };
    let p = e.manager.prepare(&s, &pr).unwrap();
    assert!(p.cloned);
    assert_eq!(p.branch, "feature/x");
    assert_eq!(p.head, pr_head);
    assert_eq!(
        git(&p.path, &["symbolic-ref", "--short", "HEAD"]),
        "feature/x"
    );
    assert_eq!(
        std::fs::read_to_string(p.path.join("x.txt")).unwrap(),
        "x1\n"
    );

    // The PR moves on: the local branch is fast-forwarded.
    e.sim
        .commit("acme", "widgets", "feature/x", "x.txt", "x2\n", "x2");
    let pr_head = e.sim.create_pull("acme", "widgets", 7, "feature/x");
    let p = e.manager.prepare(&s, &pr).unwrap();
    assert!(!p.cloned);
    assert_eq!(p.head, pr_head);
    assert_eq!(
        std::fs::read_to_string(p.path.join("x.txt")).unwrap(),
        "x2\n"
    );

    // A fork PR: its head exists only as refs/pull/<n>/head in the base repo.
    e.sim.commit(
        "acme",
        "widgets",
        "fork-tmp",
        "fork.txt",
        "from a fork\n",
        "fork",
    );
    let fork_head = e.sim.create_pull("acme", "widgets", 8, "fork-tmp");
    e.sim.delete_branch("acme", "widgets", "fork-tmp");
    let p = e
        .manager
        .prepare(
            &s,
            &Checkout::PullRequest {
                number: 8,
                head_ref: "pr-8".into(),
            },
        )
        .unwrap();
    assert_eq!(
        (p.branch.as_str(), p.head.as_str()),
        ("pr-8", fork_head.as_str())
    );

    // And back to the default branch.
    let p = e.manager.prepare(&s, &default_branch()).unwrap();
    assert_eq!(p.branch, "main");
    assert!(!p.path.join("x.txt").exists());

    // A PR that does not exist is NotFound, and nothing moved.
    let err = expect_err(e.manager.prepare(
        &s,
        &Checkout::PullRequest {
            number: 99,
            head_ref: "nope".into(),
        },
    ));
    assert_eq!(err.code(), "git_not_found", "{err}");
    assert_eq!(git(&p.path, &["symbolic-ref", "--short", "HEAD"]), "main");
}

/// A `tracing` writer that keeps everything written to it.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

fn global_logs() -> Captured {
    static LOGS: std::sync::OnceLock<Captured> = std::sync::OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Captured::default();
        // Only the workspace manager's own logs, at every level.
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(
                "codex_bridge::workspace=trace",
            ))
            .with_ansi(false)
            .with_writer(logs.clone())
            .finish();
        let _ = tracing::subscriber::set_global_default(subscriber);
        logs
    })
    .clone()
}

#[test]
fn workspace_token_travels_only_in_the_authorization_header() {
    let e = env();
    e.sim.create_repo("acme", "widgets");
    e.sim
        .commit("acme", "widgets", "feature/x", "x.txt", "x\n", "x");
    e.sim.create_pull("acme", "widgets", 1, "feature/x");
    e.sim.create_repo("acme", "gadgets");

    // One process-wide subscriber (a scoped one misses events whenever
    // another test thread hit a callsite first: tracing caches interest
    // globally). Every test's logs land in it; this one's are found by its
    // workspace root, and no line at all may carry the token.
    let logs = global_logs();
    let path = {
        let s = spec(&e.sim, "acme", "widgets");
        e.manager.prepare(&s, &default_branch()).unwrap();
        e.manager
            .prepare(
                &s,
                &Checkout::PullRequest {
                    number: 1,
                    head_ref: "feature/x".into(),
                },
            )
            .unwrap();
        // A clone URL that carries the token as a password: stripped, not used.
        let mut with_userinfo = spec(&e.sim, "acme", "gadgets");
        with_userinfo.clone_url = with_userinfo
            .clone_url
            .map(|url| url.replace("http://", &format!("http://bot:{TOKEN}@")));
        e.manager
            .prepare(&with_userinfo, &default_branch())
            .unwrap();
        // A failure's message, too.
        e.sim.set_token(Some("rotated"));
        let err = expect_err(e.manager.prepare(&s, &default_branch()));
        assert!(!err.to_string().contains(TOKEN), "{err}");
        e.sim.set_token(Some(TOKEN));
        e.manager.prepare(&s, &default_branch()).unwrap().path
    };

    let logs = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    // Positive control: this test's git commands were logged (at debug level).
    let root = e.root.display().to_string();
    assert!(
        logs.lines()
            .any(|l| l.contains("running git") && l.contains(&root)),
        "debug logging is on: {logs}"
    );
    assert!(!logs.contains(TOKEN), "{logs}");

    let config = std::fs::read_to_string(path.join(".git/config")).unwrap();
    assert!(!config.contains(TOKEN), "{config}");
    assert!(!config.contains("extraHeader") && !config.contains("extraheader"));
    let remotes = git(&path, &["remote", "-v"]);
    assert!(
        remotes.contains(&e.sim.clone_url("acme", "widgets")),
        "{remotes}"
    );
    assert!(!remotes.contains(TOKEN));
    let gadgets = e.root.join("default/acme/gadgets");
    assert_eq!(
        git(&gadgets, &["remote", "get-url", "origin"]),
        e.sim.clone_url("acme", "gadgets")
    );
    assert_no_token_on_disk(&e.root, TOKEN);

    let requests = e.sim.requests();
    assert!(requests.iter().any(|r| r.method == "GET"), "{requests:?}");
    assert!(requests.iter().any(|r| r.method == "POST"), "{requests:?}");
    for r in &requests {
        assert!(!r.path.contains(TOKEN) && !r.query.contains(TOKEN), "{r:?}");
        for (name, value) in &r.headers {
            if name != "authorization" {
                assert!(!value.contains(TOKEN), "{name}: {value}");
            }
        }
        assert_eq!(
            r.authorization.as_deref(),
            Some(format!("token {TOKEN}").as_str()),
            "{r:?}"
        );
    }
}

#[test]
fn workspace_wrong_or_missing_token_is_auth_and_never_waits_for_a_prompt() {
    let e = env();
    e.sim.create_repo("acme", "widgets");
    let s = spec(&e.sim, "acme", "widgets");
    let path = e.root.join("default/acme/widgets");

    for token in [Some("wrong-token-1234"), None] {
        let m = manager(&e.root, token);
        let started = Instant::now();
        let err = expect_err(m.prepare(&s, &default_branch()));
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "took {:?}",
            started.elapsed()
        );
        assert!(matches!(err, WorkspaceError::Auth { .. }), "{err}");
        assert_eq!(err.code(), "git_auth_failed");
        assert_eq!(err.disposition(), Disposition::Transient);
        let msg = err.to_string();
        assert!(
            !msg.contains(TOKEN) && !msg.contains("wrong-token-1234"),
            "{msg}"
        );
        // A failed first clone leaves nothing behind.
        assert!(!path.exists());
        assert_eq!(
            std::fs::read_dir(e.root.join(".staging")).unwrap().count(),
            0
        );
    }

    // A fetch refused after the token was revoked: Auth, workspace untouched.
    let p = e.manager.prepare(&s, &default_branch()).unwrap();
    e.sim.set_token(Some("rotated-token"));
    let started = Instant::now();
    let err = expect_err(e.manager.prepare(&s, &default_branch()));
    assert!(started.elapsed() < Duration::from_secs(20));
    assert!(
        matches!(err, WorkspaceError::Auth { op: "fetch", .. }),
        "{err}"
    );
    assert_eq!(git(&p.path, &["rev-parse", "HEAD"]), p.head);
}

#[test]
fn workspace_server_errors_are_transient() {
    let e = env();
    e.sim.create_repo("acme", "widgets");
    let s = spec(&e.sim, "acme", "widgets");

    e.sim.fail_next(1);
    let err = expect_err(e.manager.prepare(&s, &default_branch()));
    assert!(
        matches!(err, WorkspaceError::Transient { op: "clone", .. }),
        "{err}"
    );
    assert_eq!(err.code(), "git_transient");
    assert_eq!(err.disposition(), Disposition::Transient);
    assert!(err.to_string().contains("returned error: 500"), "{err}");
    assert!(!e.root.join("default/acme/widgets").exists());

    // The retry works.
    let p = e.manager.prepare(&s, &default_branch()).unwrap();
    assert!(p.cloned);

    e.sim.fail_next(1);
    let err = expect_err(e.manager.prepare(&s, &default_branch()));
    assert!(
        matches!(err, WorkspaceError::Transient { op: "fetch", .. }),
        "{err}"
    );
    assert!(e.manager.prepare(&s, &default_branch()).is_ok());

    // Nobody listening: also transient.
    let gone = format!("http://127.0.0.1:{}/acme/widgets.git", free_port());
    let m = manager(&e.tmp.path().join("other-root"), Some(TOKEN));
    let err = expect_err(m.prepare(
        &RepoSpec {
            clone_url: Some(gone),
            ..s.clone()
        },
        &default_branch(),
    ));
    assert_eq!(err.code(), "git_transient", "{err}");
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Clone `name`, let `mess` dirty the workspace, and check that the next
/// prepare is Dirty (with `detail` in its message) and leaves it as it was.
fn assert_blocked(e: &Env, name: &str, checkout: &Checkout, mess: impl Fn(&Path), detail: &str) {
    e.sim.create_repo("acme", name);
    let s = spec(&e.sim, "acme", name);
    let p = e.manager.prepare(&s, &default_branch()).unwrap();
    mess(&p.path);
    let before_status = git(&p.path, &["status", "--porcelain"]);
    let before_refs = git(&p.path, &["for-each-ref"]);
    let before_head = git(&p.path, &["rev-parse", "HEAD"]);
    e.sim.commit(
        "acme",
        name,
        "main",
        "upstream.txt",
        "upstream\n",
        "upstream moves on",
    );

    let err = expect_err(e.manager.prepare(&s, checkout));
    assert!(matches!(err, WorkspaceError::Dirty { .. }), "{name}: {err}");
    assert_eq!(err.code(), "workspace_dirty");
    assert_eq!(err.disposition(), Disposition::NeedsOperator);
    let msg = err.to_string();
    assert!(msg.contains(detail), "{name}: {msg}");
    assert!(msg.contains("never resets"), "{msg}");

    assert_eq!(
        git(&p.path, &["status", "--porcelain"]),
        before_status,
        "{name}"
    );
    assert_eq!(git(&p.path, &["rev-parse", "HEAD"]), before_head, "{name}");
    // Local branches are exactly as they were (remote-tracking refs may move).
    let heads = |refs: &str| -> Vec<String> {
        refs.lines()
            .filter(|l| l.contains("refs/heads/"))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        heads(&git(&p.path, &["for-each-ref"])),
        heads(&before_refs),
        "{name}"
    );
}

#[test]
fn workspace_dirty_or_diverged_trees_are_blocked_and_never_reset() {
    let e = env();
    let main = default_branch();

    assert_blocked(
        &e,
        "modified",
        &main,
        |p| std::fs::write(p.join("README.md"), "local edit\n").unwrap(),
        "README.md",
    );
    let ws = e.root.join("default/acme/modified");
    assert_eq!(
        std::fs::read_to_string(ws.join("README.md")).unwrap(),
        "local edit\n"
    );

    assert_blocked(
        &e,
        "untracked",
        &main,
        |p| std::fs::write(p.join("notes.txt"), "mine\n").unwrap(),
        "?? notes.txt",
    );
    let ws = e.root.join("default/acme/untracked");
    assert_eq!(
        std::fs::read_to_string(ws.join("notes.txt")).unwrap(),
        "mine\n"
    );

    assert_blocked(
        &e,
        "merging",
        &main,
        |p| {
            let head = git(p, &["rev-parse", "HEAD"]);
            std::fs::write(p.join(".git/MERGE_HEAD"), format!("{head}\n")).unwrap();
        },
        "a merge is in progress",
    );
    assert!(e.root.join("default/acme/merging/.git/MERGE_HEAD").exists());

    assert_blocked(
        &e,
        "locked",
        &main,
        |p| std::fs::write(p.join(".git/index.lock"), "").unwrap(),
        "index lock",
    );
    assert!(e.root.join("default/acme/locked/.git/index.lock").exists());

    // A local commit on main while upstream moved on: diverged.
    assert_blocked(
        &e,
        "diverged",
        &main,
        |p| {
            std::fs::write(p.join("local.txt"), "local\n").unwrap();
            git(p, &["add", "local.txt"]);
            git(p, &["commit", "-q", "-m", "local work"]);
        },
        "cannot be fast-forwarded",
    );
    let ws = e.root.join("default/acme/diverged");
    assert_eq!(
        git(&ws, &["log", "-1", "--format=%s", "main"]),
        "local work"
    );

    // A PR branch with a local commit the PR head does not have.
    e.sim.create_repo("acme", "prlocal");
    e.sim.commit("acme", "prlocal", "feat", "f.txt", "f\n", "f");
    e.sim.create_pull("acme", "prlocal", 3, "feat");
    let s = spec(&e.sim, "acme", "prlocal");
    let pr = Checkout::PullRequest {
        number: 3,
        head_ref: "feat".into(),
    };
    let p = e.manager.prepare(&s, &pr).unwrap();
    std::fs::write(p.path.join("f.txt"), "local\n").unwrap();
    git(&p.path, &["commit", "-q", "-am", "local on feat"]);
    let local = git(&p.path, &["rev-parse", "HEAD"]);
    let err = expect_err(e.manager.prepare(&s, &pr));
    assert!(err.to_string().contains("pull request #3"), "{err}");
    assert_eq!(err.code(), "workspace_dirty");
    assert_eq!(git(&p.path, &["rev-parse", "feat"]), local);

    // A detached HEAD on a commit no branch holds would be lost by a checkout.
    let detached = p.path.clone();
    git(&detached, &["checkout", "-q", "--detach"]);
    std::fs::write(detached.join("g.txt"), "g\n").unwrap();
    git(&detached, &["add", "g.txt"]);
    git(&detached, &["commit", "-q", "-m", "orphan"]);
    let orphan = git(&detached, &["rev-parse", "HEAD"]);
    let err = expect_err(e.manager.prepare(&s, &main));
    assert!(err.to_string().contains("detached"), "{err}");
    assert_eq!(git(&detached, &["rev-parse", "HEAD"]), orphan);
}

#[test]
fn workspace_refuses_path_tricks_and_creates_nothing() {
    let e = env();
    e.sim.create_repo("acme", "widgets");
    let bad = ["../x", "a/b", "/etc", "..", ".", "", "x\0y", "a\\b", "x\ny"];
    for b in bad {
        for (owner, name) in [(b, "widgets"), ("acme", b)] {
            let s = RepoSpec {
                owner: owner.into(),
                name: name.into(),
                clone_url: Some(e.sim.clone_url("acme", "widgets")),
            };
            let err = e.manager.path_for(owner, name).unwrap_err();
            assert_eq!(err.code(), "invalid_repository_name", "{owner:?}/{name:?}");
            let err = expect_err(e.manager.prepare(&s, &default_branch()));
            assert!(matches!(err, WorkspaceError::InvalidName { .. }), "{err}");
            assert_eq!(err.disposition(), Disposition::CannotName);
        }
    }
    assert!(!e.root.exists(), "nothing is created for a refused name");
    assert_eq!(std::fs::read_dir(e.tmp.path()).unwrap().count(), 0);
    assert!(e.sim.requests().is_empty());
}

#[test]
fn workspace_refuses_bad_branches_and_clone_urls_before_any_request() {
    let e = env();
    e.sim.create_repo("acme", "widgets");
    let s = spec(&e.sim, "acme", "widgets");
    for head_ref in [
        "-x",
        "--upload-pack=touch /tmp/pwned",
        "a..b",
        "x y",
        "@{-1}",
        "a.lock",
    ] {
        let err = expect_err(e.manager.prepare(
            &s,
            &Checkout::PullRequest {
                number: 1,
                head_ref: head_ref.into(),
            },
        ));
        assert_eq!(err.code(), "invalid_ref_name", "{head_ref}: {err}");
    }
    let err = expect_err(e.manager.prepare(
        &s,
        &Checkout::PullRequest {
            number: 0,
            head_ref: "x".into(),
        },
    ));
    assert_eq!(err.code(), "invalid_ref_name");

    for url in ["file:///etc", "ext::sh -c id", "ssh://h/acme/widgets.git"] {
        let err = expect_err(e.manager.prepare(
            &RepoSpec {
                clone_url: Some(url.into()),
                ..s.clone()
            },
            &default_branch(),
        ));
        assert_eq!(err.code(), "invalid_clone_url", "{url}");
    }

    // With gitea_url set, the token only goes there.
    let pinned = manager(&e.root, Some(TOKEN))
        .with_gitea_url("https://git.example.com")
        .unwrap();
    let err = expect_err(pinned.prepare(&s, &default_branch()));
    assert_eq!(err.code(), "invalid_clone_url", "{err}");
    let pinned = manager(&e.root, Some(TOKEN))
        .with_gitea_url(&e.sim.base_url())
        .unwrap();
    assert!(e.sim.requests().is_empty());
    assert!(!e.root.exists());
    pinned.prepare(&s, &default_branch()).unwrap();
}
