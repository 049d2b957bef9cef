//! The admin web view in a real browser: headless Chromium driven through
//! WebDriver (chromedriver, started here on a free port) against the real
//! binary with the scripted runtime (and once with a Codex that cannot start). `scripts/test` installs Debian's
//! `chromium` and `chromium-driver`; without them these tests fail and say so.
//!
//! A failing browser test leaves a screenshot in
//! `target/browser-screenshots/<test>-failure.png`; the tour test also saves
//! `overview.png` and `actors.png` there on success.

use crate::support::*;
use crate::testapp::*;
use fantoccini::{Client, ClientBuilder, Locator};
use futures_util::FutureExt;
use serde_json::json;
use std::future::Future;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(20);
const REPO: &str = "default:acme/widgets";

fn find_program(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in names {
        for dir in std::env::split_paths(&path).chain([PathBuf::from("/usr/bin")]) {
            let p = dir.join(name);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}

fn missing(what: &str) -> ! {
    panic!(
        "{what} not found: the browser tests need Debian's `chromium` and `chromium-driver` \
         (scripts/test installs them as root; otherwise: sudo apt-get install chromium chromium-driver)"
    )
}

pub fn screenshot_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"));
    let dir = target.join("browser-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// chromedriver on its own port plus one headless Chromium session.
struct Browser {
    driver: Child,
    client: Option<Client>,
    _profile: tempfile::TempDir,
}

impl Browser {
    async fn start() -> Browser {
        let chromium =
            find_program(&["chromium", "chromium-browser"]).unwrap_or_else(|| missing("chromium"));
        let chromedriver =
            find_program(&["chromedriver"]).unwrap_or_else(|| missing("chromedriver"));
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", chromedriver.display()));
        let status = format!("http://127.0.0.1:{port}/status");
        wait_until_async(&format!("chromedriver on port {port}"), WAIT, || async {
            ureq::get(&status).call().is_ok()
        })
        .await;
        let profile = tempfile::tempdir().unwrap();
        let mut args = vec![
            "--headless".to_owned(),
            "--disable-gpu".to_owned(),
            "--disable-quic".to_owned(),
            "--no-first-run".to_owned(),
            "--disable-background-networking".to_owned(),
            "--disable-component-update".to_owned(),
            "--disable-sync".to_owned(),
            "--disable-dev-shm-usage".to_owned(),
            "--window-size=1280,1000".to_owned(),
            format!("--user-data-dir={}", profile.path().display()),
        ];
        // Chromium refuses to run as root with its sandbox.
        if rustix_is_root() {
            args.push("--no-sandbox".to_owned());
        }
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({ "binary": chromium.to_str().unwrap(), "args": args }),
        );
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .unwrap_or_else(|e| {
                panic!("cannot start a Chromium session through chromedriver: {e}")
            });
        Browser {
            driver,
            client: Some(client),
            _profile: profile,
        }
    }

    fn c(&self) -> &Client {
        self.client.as_ref().unwrap()
    }

    async fn shutdown(mut self) {
        if let Some(c) = self.client.take() {
            let _ = c.close().await;
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn rustix_is_root() -> bool {
    // `id -u` rather than a libc dependency for one number.
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

pub(crate) async fn save_screenshot(c: &Client, name: &str) -> PathBuf {
    let png = c.screenshot().await.unwrap();
    let path = screenshot_dir().join(format!("{name}.png"));
    std::fs::write(&path, png).unwrap();
    path
}

/// Runs `body` with a fresh browser; on failure saves a screenshot first.
pub(crate) fn browser_test<F, Fut>(name: &str, body: F)
where
    F: FnOnce(Client) -> Fut,
    Fut: Future<Output = ()>,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let browser = Browser::start().await;
        let result = std::panic::AssertUnwindSafe(body(browser.c().clone()))
            .catch_unwind()
            .await;
        if let Err(panic) = result {
            match browser.c().screenshot().await {
                Ok(png) => {
                    let path = screenshot_dir().join(format!("{name}-failure.png"));
                    std::fs::write(&path, png).unwrap();
                    eprintln!("browser test {name} failed; screenshot: {}", path.display());
                }
                Err(e) => eprintln!("browser test {name} failed; no screenshot: {e}"),
            }
            browser.shutdown().await;
            std::panic::resume_unwind(panic);
        }
        browser.shutdown().await;
    });
}

/// A server with the scripted runtime whose repository clones from a git stand-in.
fn scripted_app() -> TestApp {
    let s = TestApp::builder()
        .git_sim()
        .scripted()
        .env("CODEX_BRIDGE_SCHEDULER_SWEEP_MS", "100")
        .env("CODEX_BRIDGE_RETRY_BACKOFF_SECS", "0")
        .start();
    s.git().create_repo("acme", "widgets");
    s
}

/// A comment on Issue `number` of `acme/widgets`; its task.
fn comment(s: &TestApp, delivery: &str, comment_id: i64, text: &str, number: i64) -> String {
    s.task_comment(delivery, comment_id, text, "widgets", number)
}

fn state(s: &TestApp, task: &str) -> String {
    s.admin_get(&format!("/api/gitea-workflow/tasks/{task}"))
        .json["task"]["state"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn wait_state(s: &TestApp, task: &str, state: &str) {
    wait_task_state(&s.db_url, task, state, WAIT);
}

pub(crate) async fn el(c: &Client, css: &str) -> fantoccini::elements::Element {
    match c.wait().at_most(WAIT).for_element(Locator::Css(css)).await {
        Ok(e) => e,
        Err(e) => {
            let page = page_now(c).await;
            panic!("no element {css} appeared: {e}; the page: {page}")
        }
    }
}

/// What the page shows now, for a failure's message: where it is, its text,
/// and the markup of its rows (the attributes a selector waits on).
async fn page_now(c: &Client) -> String {
    let read = "return [location.hash, document.body.innerText.slice(0, 2000), \
                Array.from(document.querySelectorAll('tr')).slice(0, 40) \
                .map(r => r.outerHTML.slice(0, 300))]";
    c.execute(read, vec![])
        .await
        .map(|v| v.to_string())
        .unwrap_or_else(|e| format!("(unreadable: {e})"))
}

/// Waits until the text of `css` satisfies `ok`; returns it.
pub(crate) async fn text_until(c: &Client, css: &str, ok: impl Fn(&str) -> bool) -> String {
    // `None` until the element was found once: a failure then says whether
    // the element never appeared or showed other text.
    let last = std::cell::RefCell::new(None::<String>);
    let shown = poll_until_async(WAIT, || async {
        let Ok(e) = c.find(Locator::Css(css)).await else {
            return false;
        };
        let Ok(t) = e.text().await else {
            return false;
        };
        let done = ok(&t);
        *last.borrow_mut() = Some(t);
        done
    })
    .await;
    match last.into_inner() {
        Some(last) if shown => last,
        Some(last) => panic!("{css} never showed the expected text; last: {last:?}"),
        None => {
            let page = page_now(c).await;
            panic!("{css} never appeared in {WAIT:?}; the page: {page}")
        }
    }
}

/// Waits until the `title` of `css` satisfies `ok`; returns it. Read in one
/// script, so a live update that re-renders the element between finding it
/// and reading it costs a retry, not a stale element.
pub(crate) async fn title_until(c: &Client, css: &str, ok: impl Fn(&str) -> bool) -> String {
    let last = std::cell::RefCell::new(String::new());
    let read = "const e = document.querySelector(arguments[0]); return e ? e.title : null;";
    let shown = poll_until_async(WAIT, || async {
        let Ok(v) = c.execute(read, vec![json!(css)]).await else {
            return false;
        };
        let t = v.as_str().unwrap_or_default().to_owned();
        let done = ok(&t);
        *last.borrow_mut() = t;
        done
    })
    .await;
    let last = last.into_inner();
    assert!(shown, "{css} never had the expected title; last: {last:?}");
    last
}

/// Clicks `css`, finding it again if a live update re-rendered it meanwhile.
pub(crate) async fn click(c: &Client, css: &str) {
    let last = std::cell::RefCell::new(String::new());
    let clicked = poll_until_async(WAIT, || async {
        let failed = match c.find(Locator::Css(css)).await {
            Ok(e) => match e.click().await {
                Ok(()) => return true,
                Err(e) => e.to_string(),
            },
            Err(e) => e.to_string(),
        };
        *last.borrow_mut() = failed;
        false
    })
    .await;
    assert!(clicked, "cannot click {css}: {}", last.into_inner());
}

/// Waits until the page is laid out for a phone's width (the style sheet's
/// narrow rules apply) and a frame of that layout was drawn.
pub(crate) async fn wait_narrow_layout(c: &Client) {
    let narrow = "return window.matchMedia('(max-width: 640px)').matches";
    wait_until_async("the page to take the narrow layout", WAIT, || async {
        c.execute(narrow, vec![]).await.unwrap() == json!(true)
    })
    .await;
    let drawn = "const done = arguments[arguments.length - 1];\
                 requestAnimationFrame(() => requestAnimationFrame(() => done(true)));";
    c.execute_async(drawn, vec![]).await.unwrap();
}

pub(crate) async fn sign_in(c: &Client, s: &TestApp, token: &str) {
    c.goto(&s.url("/admin")).await.unwrap();
    let input = el(c, "#token").await;
    input.send_keys(token).await.unwrap();
    click(c, "#sign-in").await;
    // The click only submits the form: until its answer has loaded, a
    // `goto` of the caller races the form's redirect, and whichever lands
    // last is the page the test sees.
    let settled = "return document.readyState === 'complete' && \
                   !!document.querySelector('#sign-out, #login-error')";
    wait_until_async("the sign-in's answer to load", WAIT, || async {
        c.execute(settled, vec![]).await.ok() == Some(json!(true))
    })
    .await;
}

/// Fills the open action dialog and confirms; returns the audit action shown.
pub(crate) async fn confirm_action(c: &Client, reason: &str) -> String {
    let reason_box = el(c, "#action-reason").await;
    reason_box.send_keys(reason).await.unwrap();
    click(c, "#action-submit").await;
    let shown = text_until(c, "#action-event-action", |t| !t.is_empty()).await;
    click(c, "#action-cancel").await;
    shown
}

#[test]
fn browser_sign_in_refuses_a_wrong_token_and_the_tree_fills_live() {
    let s = &scripted_app();
    browser_test("sign_in_and_live_tree", |c| async move {
        // A wrong token: refused, no session.
        sign_in(&c, s, "not-the-admin-token-at-all").await;
        let msg = el(&c, "#login-error").await.text().await.unwrap();
        assert!(msg.contains("refused"), "{msg}");
        assert!(c.find(Locator::Css("#intake-status")).await.is_err());
        let source = c.source().await.unwrap();
        assert!(!source.contains(ADMIN_TOKEN), "the token is never rendered");

        // The right one: the overview, with a cookie scripts cannot read.
        el(&c, "#token").await.clear().await.unwrap();
        el(&c, "#token").await.send_keys(ADMIN_TOKEN).await.unwrap();
        click(&c, "#sign-in").await;
        text_until(&c, "#intake-status", |t| t == "running").await;
        text_until(&c, "#live", |t| t == "live").await;
        let cookie = c.execute("return document.cookie", vec![]).await.unwrap();
        assert_eq!(cookie, json!(""), "the session cookie is HttpOnly");
        assert!(!c.source().await.unwrap().contains(ADMIN_TOKEN));

        // The actor tree is empty; a webhook makes a repository and a session
        // appear without a reload (the marker survives).
        c.goto(&s.url("/admin#actors")).await.unwrap();
        el(&c, "#registry").await;
        text_until(&c, "#tree", |t| t.contains("No repository actor")).await;
        c.execute("window.__notReloaded = true", vec![])
            .await
            .unwrap();
        let done = comment(s, "d-1", 1, "@ccbot quick one", 1);
        let busy = comment(s, "d-2", 2, "@ccbot a longer one [sleep:20000]", 2);
        el(&c, &format!(r#".repo[data-repo="{REPO}"]"#)).await;
        el(
            &c,
            r#".session[data-session="default:acme/widgets:issue:1"]"#,
        )
        .await;
        el(
            &c,
            r#".session[data-session="default:acme/widgets:issue:2"] .badge[data-status="busy"]"#,
        )
        .await;
        assert_eq!(
            c.execute("return window.__notReloaded === true", vec![])
                .await
                .unwrap(),
            json!(true),
            "the tree updated without a reload"
        );
        wait_state(s, &done, "succeeded");
        text_until(
            &c,
            r#".session[data-session="default:acme/widgets:issue:1"] .badge"#,
            |t| t == "idle",
        )
        .await;
        // The repository's hook fact: this rig's Gitea is a git server
        // without the REST API and no public_url is set, so the state is
        // unknown, with why in its title.
        let hook = format!(r#".repo[data-repo="{REPO}"] .hook-fact .badge"#);
        text_until(&c, &hook, |t| t == "unknown").await;
        title_until(&c, &hook, |t| t.contains("public_url")).await;
        let shot = save_screenshot(&c, "actors").await;
        eprintln!("saved {}", shot.display());
        // A phone's width: the same tree, still readable.
        c.set_window_size(390, 844).await.unwrap();
        wait_narrow_layout(&c).await;
        save_screenshot(&c, "actors-phone").await;
        c.set_window_size(1280, 1000).await.unwrap();

        // The task list filters by state and links to the task page.
        c.goto(&s.url("/admin#tasks?state=succeeded"))
            .await
            .unwrap();
        el(&c, &format!(r#"#task-table tr[data-task="{done}"]"#)).await;
        assert!(c
            .find(Locator::Css(&format!(
                r#"#task-table tr[data-task="{busy}"]"#
            )))
            .await
            .is_err());
        c.goto(&s.url(&format!("/admin#task/{done}")))
            .await
            .unwrap();
        text_until(&c, "#timeline", |t| t.contains("succeeded")).await;
        save_screenshot(&c, "task").await;

        c.goto(&s.url("/admin#overview")).await.unwrap();
        text_until(&c, "#running-count", |t| t == "1").await;
        let shot = save_screenshot(&c, "overview").await;
        eprintln!("saved {}", shot.display());
        let page = c.source().await.unwrap();
        for secret in [ADMIN_TOKEN, SECRET, GITEA_TOKEN] {
            assert!(!page.contains(secret), "a secret reached the page");
        }
        assert_eq!(state(s, &busy), "running");

        // Sign out: back to the form, and the old page's API calls are refused.
        click(&c, "#sign-out").await;
        el(&c, "#token").await;
        c.goto(&s.url("/admin")).await.unwrap();
        el(&c, "#token").await;
    });
}

#[test]
fn browser_pause_intake_keeps_the_next_webhook_queued() {
    let s = &scripted_app();
    browser_test("pause_intake", |c| async move {
        sign_in(&c, s, ADMIN_TOKEN).await;
        text_until(&c, "#intake-status", |t| t == "running").await;
        click(&c, "#pause-intake").await;
        let action = confirm_action(&c, "deploying gitea").await;
        assert_eq!(action, "control.pause");
        text_until(&c, "#intake-status", |t| t == "paused").await;
        let overview = s.admin_get("/api/gitea-workflow/overview");
        assert_eq!(overview.json["paused"], true);
        assert_eq!(overview.json["pauseReason"], "deploying gitea");

        let task = comment(s, "p-1", 1, "@ccbot while paused", 1);
        text_until(&c, "#queue-depth", |t| t == "1").await;
        s.wait_repo_passes(REPO, "paused");
        assert_eq!(state(s, &task), "queued", "paused: the task waits");

        click(&c, "#resume-intake").await;
        assert_eq!(confirm_action(&c, "gitea is back").await, "control.resume");
        wait_state(s, &task, "succeeded");
        text_until(&c, "#queue-depth", |t| t == "0").await;
        text_until(&c, "#intake-status", |t| t == "running").await;
    });
}

/// A Codex that cannot start: a banner on every page says why and what to
/// do, and goes, through the live overview, once codex is installed where
/// `codex_bin` points.
#[test]
fn browser_a_codex_that_cannot_start_shows_a_banner_until_it_is_installed() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("codex");
    let s = &TestApp::builder()
        .codex()
        .env("CODEX_BRIDGE_CODEX_BIN", bin.to_str().unwrap())
        .start();
    let bin = &bin;
    browser_test("codex_banner", |c| async move {
        sign_in(&c, s, ADMIN_TOKEN).await;
        let item = "#banner [data-code=codex_not_installed]";
        let text = text_until(&c, item, |t| t.contains("codex_bin")).await;
        assert!(text.contains("What to do: install codex"), "{text}");
        click(&c, "a[data-view=actors]").await;
        text_until(&c, item, |t| t.contains("codex_bin")).await;

        std::os::unix::fs::symlink(crate::codexhome::codex_bin(), bin).unwrap();
        // The keeper tries again within its backoff, then the overview's next tick.
        wait_until_async("the banner to go", Duration::from_secs(60), || async {
            c.execute("return document.getElementById('banner').hidden", vec![])
                .await
                .unwrap()
                == json!(true)
        })
        .await;
        assert!(c.find(Locator::Css(item)).await.is_err());
    });
}

#[test]
fn browser_approve_a_pending_approval() {
    let s = &scripted_app();
    browser_test("approve", |c| async move {
        sign_in(&c, s, ADMIN_TOKEN).await;
        el(&c, "#intake-status").await;
        c.goto(&s.url("/admin#actors")).await.unwrap();
        el(&c, "#registry").await;
        let task = comment(s, "a-1", 1, "@ccbot may I? [approval]", 1);
        // The tree says so at a glance.
        el(
            &c,
            r#".session[data-session="default:acme/widgets:issue:1"] .badge[data-status="awaiting_approval"]"#,
        )
        .await;
        text_until(&c, "#attention-count", |t| t == "1").await;

        c.goto(&s.url("/admin#attention")).await.unwrap();
        el(&c, "#pending-approvals button.approve").await;
        save_screenshot(&c, "attention").await;
        click(&c, "#pending-approvals button.approve").await;
        assert_eq!(
            confirm_action(&c, "the command is harmless").await,
            "approval.decided"
        );
        wait_state(s, &task, "succeeded");
        let detail = s.admin_get(&format!("/api/gitea-workflow/tasks/{task}"));
        assert_eq!(detail.json["approvals"][0]["decision"], "accept");
        assert_eq!(detail.json["approvals"][0]["decidedBy"], "admin:admin");
        text_until(&c, "#pending-approvals", |t| {
            t.contains("No approval waiting")
        })
        .await;
    });
}

#[test]
fn browser_reconcile_an_uncertain_task() {
    let s = &scripted_app();
    browser_test("reconcile", |c| async move {
        let task = comment(s, "u-1", 1, "@ccbot unsure [start:uncertain]", 1);
        wait_state(s, &task, "needs_reconciliation");
        sign_in(&c, s, ADMIN_TOKEN).await;
        el(&c, "#intake-status").await;
        c.goto(&s.url("/admin#attention")).await.unwrap();
        click(
            &c,
            &format!(r#"#needs-reconciliation tr[data-task="{task}"] button.reconcile"#),
        )
        .await;
        // The dialog names the attempt and what the confirmation means.
        let attempt = el(&c, "#reconcile-attempt option")
            .await
            .text()
            .await
            .unwrap();
        let detail = s.admin_get(&format!("/api/gitea-workflow/tasks/{task}"));
        let attempt_id = detail.json["attempts"][0]["attemptId"].as_str().unwrap();
        assert!(attempt.contains(attempt_id), "{attempt}");
        let dialog = el(&c, "#action").await.text().await.unwrap();
        assert!(dialog.contains("--confirm-no-active-turn"), "{dialog}");
        assert!(dialog.contains("never re-runs"), "{dialog}");

        // Without the confirmation: refused in the page, nothing sent.
        el(&c, "#action-reason")
            .await
            .send_keys("checked codex: nothing ran")
            .await
            .unwrap();
        click(&c, "#action-submit").await;
        let refused = text_until(&c, "#action-result", |t| !t.is_empty()).await;
        assert!(refused.contains("tick the confirmation"), "{refused}");
        assert_eq!(state(s, &task), "needs_reconciliation");

        click(&c, "#reconcile-confirm").await;
        click(&c, "#action-submit").await;
        let shown = text_until(&c, "#action-event-action", |t| !t.is_empty()).await;
        assert_eq!(shown, "task.reconciled");
        click(&c, "#action-cancel").await;
        assert_eq!(state(s, &task), "failed");
        text_until(&c, "#needs-reconciliation", |t| t.contains("None.")).await;

        // The task page shows the operator's decision in its timeline and audit.
        c.goto(&s.url(&format!("/admin#task/{task}")))
            .await
            .unwrap();
        let timeline = text_until(&c, "#timeline", |t| t.contains("failed")).await;
        assert!(timeline.contains("needs reconciliation"), "{timeline}");
        let page = c.source().await.unwrap();
        assert!(page.contains("task.reconciled"));
    });
}

#[test]
fn browser_disable_a_repository_and_abort_a_running_task() {
    let s = &scripted_app();
    browser_test("disable_and_abort", |c| async move {
        let task = comment(s, "h-1", 1, "@ccbot forever [hang]", 1);
        wait_state(s, &task, "running");
        sign_in(&c, s, ADMIN_TOKEN).await;
        el(&c, "#intake-status").await;

        // Abort from the task page: the turn is interrupted.
        c.goto(&s.url(&format!("/admin#task/{task}")))
            .await
            .unwrap();
        click(&c, "#task-abort").await;
        assert_eq!(confirm_action(&c, "stuck").await, "task.abort");
        wait_state(s, &task, "aborted");
        text_until(&c, "#timeline", |t| t.contains("aborted")).await;

        // Disable the repository from the tree: webhooks are refused.
        c.goto(&s.url("/admin#actors")).await.unwrap();
        click(&c, &format!(r#".repo[data-repo="{REPO}"] button"#)).await;
        assert_eq!(confirm_action(&c, "moving it").await, "repository.disable");
        el(
            &c,
            &format!(r#".repo[data-repo="{REPO}"] .badge[data-status="disabled"]"#),
        )
        .await;
        let body = comment_body(2, "@ccbot again", "widgets", 2);
        let refused = s.webhook(
            &gitea_headers("h-2", "issue_comment", "issue_comment", &body),
            &body,
        );
        assert_eq!(refused.status, 409, "{:?}", refused.json);
        click(&c, &format!(r#".repo[data-repo="{REPO}"] button"#)).await;
        assert_eq!(confirm_action(&c, "moved").await, "repository.enable");
        el(
            &c,
            &format!(r#".repo[data-repo="{REPO}"] .badge[data-status="idle"]"#),
        )
        .await;
    });
}
