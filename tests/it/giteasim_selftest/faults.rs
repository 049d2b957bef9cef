//! Injected faults, the request log, and git served to readers only.

use super::*;

// ---------------------------------------------------------------------------
// Faults and the request log
// ---------------------------------------------------------------------------

#[test]
fn giteasim_faults_and_request_log() {
    let sim = GiteaSim::start();
    let rx = Receiver::start();
    sim.set_webhook(&rx.url(), SECRET);
    sim.create_repo("acme", "widgets");
    let issue = sim.create_issue("acme", "widgets", "t", "b", "acme");
    let api = sim.api_url();
    let comments = format!("{api}/repos/acme/widgets/issues/{issue}/comments");
    let swagger = format!("{}/api/swagger", sim.base_url());

    // Any request → 500 with Gitea's empty-message body.
    sim.fail_next(1);
    let failed = call("GET", &format!("{api}/version"), None, None);
    assert_eq!(failed.status, 500);
    assert_eq!(failed.json(), json!({"message": "", "url": swagger}));
    assert_eq!(
        call("GET", &format!("{api}/version"), None, None).status,
        200
    );

    // Matching method + path prefix only.
    sim.fail_next_matching(2, Some("POST"), "/api/v1/repos/acme/widgets/issues/");
    assert_eq!(call("GET", &comments, Some(&bot()), None).status, 200);
    assert_eq!(
        call("POST", &comments, Some(&bot()), Some(json!({"body": "a"}))).status,
        500
    );
    assert_eq!(
        call("POST", &comments, Some(&bot()), Some(json!({"body": "b"}))).status,
        500
    );
    assert_eq!(
        call("POST", &comments, Some(&bot()), Some(json!({"body": "c"}))).status,
        201
    );
    assert_eq!(sim.comments("acme", "widgets", issue).len(), 1);

    // Listing failures.
    sim.fail_comment_listings(1);
    assert_eq!(call("GET", &comments, Some(&bot()), None).status, 500);
    assert_eq!(call("GET", &comments, Some(&bot()), None).status, 200);

    // Accepted but never stored: 201, yet absent from GET and listings, no webhook.
    sim.wait_idle();
    let hooks_before = sim.deliveries().len();
    sim.drop_next_comments(1);
    let ghost = call(
        "POST",
        &comments,
        Some(&bot()),
        Some(json!({"body": "ghost"})),
    );
    assert_eq!(ghost.status, 201);
    assert_eq!(ghost.json()["body"], "ghost");
    let ghost_url = format!(
        "{api}/repos/acme/widgets/issues/comments/{}",
        ghost.json()["id"]
    );
    assert_eq!(call("GET", &ghost_url, Some(&bot()), None).status, 404);
    assert_eq!(
        call("GET", &comments, Some(&bot()), None).header("x-total-count"),
        Some("1")
    );
    sim.wait_idle();
    assert_eq!(sim.deliveries().len(), hooks_before);
    assert_eq!(
        call(
            "POST",
            &comments,
            Some(&bot()),
            Some(json!({"body": "real"}))
        )
        .status,
        201
    );
    assert_eq!(sim.comments("acme", "widgets", issue).len(), 2);

    // Permission denied for one user.
    sim.deny_comments_for(BOT, true);
    let blocked = call("POST", &comments, Some(&bot()), Some(json!({"body": "x"})));
    assert_eq!(blocked.status, 403);
    assert_eq!(blocked.json()["message"], "user is blocked");
    sim.deny_comments_for(BOT, false);
    assert_eq!(
        call("POST", &comments, Some(&bot()), Some(json!({"body": "x"}))).status,
        201
    );

    // Slow answers: only the matching request waits.
    sim.delay_next_matching(
        1,
        Some("GET"),
        "/api/v1/version",
        Duration::from_millis(1200),
    );
    let t = std::time::Instant::now();
    call("GET", &format!("{api}/version"), None, None);
    assert!(t.elapsed() >= Duration::from_millis(1200));
    let t = std::time::Instant::now();
    call("GET", &format!("{api}/version"), None, None);
    assert!(t.elapsed() < Duration::from_millis(900));
    sim.set_delay(Duration::from_millis(300));
    let t = std::time::Instant::now();
    call("GET", &format!("{api}/version"), None, None);
    assert!(t.elapsed() >= Duration::from_millis(300));
    sim.set_delay(Duration::ZERO);

    // The log: method, path, query, auth header, body, status.
    call(
        "GET",
        &format!("{comments}?since=2020-01-01T00:00:00Z"),
        Some(&bot()),
        None,
    );
    let log = sim.requests();
    let post = log
        .iter()
        .find(|r| r.method == "POST" && r.body.contains("\"real\""))
        .unwrap();
    assert_eq!(
        post.path,
        format!("/api/v1/repos/acme/widgets/issues/{issue}/comments")
    );
    assert_eq!(post.authorization.as_deref(), Some(bot().as_str()));
    assert_eq!(post.status, 201);
    let last = log.last().unwrap();
    assert_eq!(
        (last.method.as_str(), last.query.as_str()),
        ("GET", "since=2020-01-01T00:00:00Z")
    );
    assert_eq!(log.iter().filter(|r| r.status == 500).count(), 4);
}

// ---------------------------------------------------------------------------
// Git
// ---------------------------------------------------------------------------

#[test]
fn giteasim_serves_git_to_readers_only() {
    let sim = GiteaSim::start();
    sim.create_repo("acme", "widgets");
    let eve = sim.add_user("eve");
    let work = tempfile::tempdir().unwrap();
    let clone = |auth: Option<&str>, dest: &str| {
        let mut cmd = Command::new("git");
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", work.path())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_TERMINAL_PROMPT", "0")
            .current_dir(work.path());
        if let Some(a) = auth {
            cmd.args(["-c", &format!("http.extraHeader=Authorization: {a}")]);
        }
        cmd.args(["clone", "--quiet", &sim.clone_url("acme", "widgets"), dest])
            .output()
            .unwrap()
    };
    let ok = clone(Some(&bot()), "a");
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(work.path().join("a/README.md")).unwrap(),
        "# widgets\n"
    );
    assert!(!clone(None, "b").status.success());
    assert_eq!(sim.requests().last().unwrap().status, 401);
    assert!(!clone(Some(&format!("token {eve}")), "c").status.success());
    assert_eq!(sim.requests().last().unwrap().status, 404);
    sim.set_permission("acme", "widgets", "eve", Perm::Read);
    let basic = format!("Basic {}", base64_encode(format!("eve:{eve}").as_bytes()));
    assert!(clone(Some(&basic), "d").status.success());
    let fetch = sim
        .requests()
        .into_iter()
        .rfind(|r| r.method == "POST")
        .unwrap();
    assert!(fetch.path.ends_with("/git-upload-pack"));
    assert!(fetch
        .headers
        .iter()
        .any(|(k, v)| k == "user-agent" && v.starts_with("git/")));
    // Public repositories: anonymous reads work; pushes need write access.
    sim.set_private("acme", "widgets", false);
    assert!(clone(None, "e").status.success());
    assert!(sim.repo_path("acme", "widgets").join("HEAD").is_file());
    let git = |auth: Option<&str>, args: &[&str]| {
        let mut cmd = Command::new("git");
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", work.path())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .current_dir(work.path().join("e"));
        if let Some(a) = auth {
            cmd.args(["-c", &format!("http.extraHeader=Authorization: {a}")]);
        }
        cmd.args(args).output().unwrap()
    };
    assert!(
        git(None, &["commit", "--allow-empty", "-q", "-m", "pushed"])
            .status
            .success()
    );
    assert!(!git(None, &["push", "-q", "origin", "HEAD:main"])
        .status
        .success());
    assert_eq!(sim.requests().last().unwrap().status, 401);
    let eve_auth = format!("token {eve}");
    assert!(
        !git(Some(&eve_auth), &["push", "-q", "origin", "HEAD:main"])
            .status
            .success()
    );
    assert_eq!(sim.requests().last().unwrap().status, 403);
    let pushed = git(Some(&bot()), &["push", "-q", "origin", "HEAD:main"]);
    assert!(
        pushed.status.success(),
        "{}",
        String::from_utf8_lossy(&pushed.stderr)
    );
    let head = git(None, &["rev-parse", "HEAD"]);
    assert_eq!(
        sim.branch_head("acme", "widgets", "main"),
        String::from_utf8_lossy(&head.stdout).trim()
    );
}
