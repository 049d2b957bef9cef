//! The overview's charts in a real browser (headless Chromium through
//! chromedriver, as in `browser.rs`), over real data: webhooks through the
//! server, tasks run to their end by the scripted runtime (one succeeds, one
//! fails), two held in the queue by a paused intake, and token usage of a
//! repository whose name holds markup. Each chart draws marks of non-zero
//! size; the markup shows as text; a webhook that arrives while the page is
//! open reaches its chart live; on a phone's width the charts stack in one
//! column with no sideways scrolling. Saves `charts.png` and
//! `charts-phone.png` in `target/browser-screenshots/`.

use crate::browser::{browser_test, screenshot_dir, sign_in, text_until, wait_narrow_layout};
use crate::stats::Rows;
use crate::support::*;
use crate::testapp::*;
use fantoccini::Client;
use serde_json::{json, Value};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);
/// The markup in a repository's name (Gitea sends what it stores).
const MARKUP_REPO: &str = "<img src=x onerror=alert(1)>";
const CHARTS: [&str; 5] = [
    "chart-webhooks",
    "chart-tasks",
    "chart-queue",
    "chart-turns",
    "chart-tokens",
];

fn wait_terminal(s: &TestApp, task: &str) {
    let mut c = s.db();
    wait_until(&format!("task {task} to end"), WAIT, || {
        task_state(&mut c, task)
            .is_some_and(|st| ["succeeded", "failed", "failed_reply"].contains(&st.as_str()))
    });
}

/// The data: two tasks run to their end, two wait behind a paused intake,
/// and a finished task of a repository named with markup used tokens.
fn charts_app() -> TestApp {
    let s = TestApp::builder()
        .git_sim()
        .scripted()
        .env("CODEX_BRIDGE_SCHEDULER_SWEEP_MS", "100")
        .env("CODEX_BRIDGE_RETRY_BACKOFF_SECS", "0")
        .start();
    s.git().create_repo("acme", "widgets");
    let ok = s.task_comment("ch-1", 1, "@ccbot quick one", "widgets", 1);
    let bad = s.task_comment("ch-2", 2, "@ccbot this one fails [fail]", "widgets", 2);
    wait_terminal(&s, &ok);
    wait_terminal(&s, &bad);
    let r = s.admin_post(
        "/api/gitea-workflow/control/pause",
        &json!({"requestId": "charts-1", "reason": "holding two in the queue"}),
    );
    assert_eq!(r.status, 200, "{:?}", r.json);
    s.task_comment("ch-3", 3, "@ccbot later", "widgets", 3);
    s.task_comment("ch-4", 4, "@ccbot later too", "widgets", 4);

    let mut c = s.db();
    let at = |secs_ago: i64| {
        codex_bridge::store::format_time(chrono::Utc::now() - chrono::Duration::seconds(secs_ago))
    };
    let mut rows = Rows(&mut c);
    let repo = rows.repo("acme", MARKUP_REPO);
    rows.task(
        "t-markup",
        &repo,
        "succeeded",
        &[
            ("queued", &at(300)),
            ("leased", &at(290)),
            ("running", &at(289)),
            ("succeeded", &at(200)),
        ],
    );
    rows.turn("turn-markup", "t-markup", &at(289), Some(&at(201)));
    rows.tokens("turn-markup", (5000, 1000, 800), &at(201));
    // And the real turn of the task that succeeded.
    let turn = codex_bridge::store::tasks::detail(&mut c, &ok.parse().unwrap())
        .unwrap()
        .map(|d| d.turns[0].turn_id.clone())
        .unwrap();
    Rows(&mut c).tokens(&turn, (1200, 300, 150), &at(60));
    s
}

/// Whether chart `id` has drawn at least one mark with a non-zero box.
async fn drawn(c: &Client, id: &str) -> bool {
    let js = "const marks = document.querySelectorAll('#' + arguments[0] + ' svg .mark');\
              return [...marks].some((m) => { const b = m.getBBox(); return b.width > 0 && b.height > 0; });";
    c.execute(js, vec![json!(id)]).await.ok() == Some(json!(true))
}

async fn js(c: &Client, script: &str) -> Value {
    c.execute(script, vec![]).await.unwrap()
}

/// Scrolls the charts to the top of the window, below the sticky header.
async fn show_charts(c: &Client) {
    js(
        c,
        "const top = document.getElementById('charts').getBoundingClientRect().top;\
         window.scrollBy(0, top - document.querySelector('header.top').offsetHeight - 8);",
    )
    .await;
    settle(c).await;
}

async fn settle(c: &Client) {
    let frames = "const done = arguments[arguments.length - 1];\
                  requestAnimationFrame(() => requestAnimationFrame(() => done(true)));";
    c.execute_async(frames, vec![]).await.unwrap();
}

#[test]
fn browser_charts_draw_real_data_live_and_fit_a_phone() {
    let s = &charts_app();
    browser_test("charts", |c| async move {
        sign_in(&c, s, ADMIN_TOKEN).await;
        text_until(&c, "#live", |t| t == "live").await;
        js(&c, "window.alert = () => { window.__injected = true; };").await;
        for id in CHARTS {
            wait_until_async(&format!("{id} to draw its marks"), WAIT, || drawn(&c, id)).await;
        }
        // The repository's name, markup and all, as text in the legend and
        // in a bar's tooltip; nothing of it ran or became an element.
        let legend = text_until(&c, "#chart-tokens .legend", |t| t.contains("acme/")).await;
        assert!(
            legend.contains(&format!("default:acme/{MARKUP_REPO}")),
            "{legend}"
        );
        let tips = js(
            &c,
            "return [...document.querySelectorAll('#chart-tokens .mark')].map((m) => m.dataset.tip).join('\\n')",
        )
        .await;
        assert!(tips.as_str().unwrap().contains(MARKUP_REPO), "{tips}");
        let clean = "return window.__injected === undefined \
                     && document.querySelectorAll('#view img, #view script').length === 0";
        assert_eq!(js(&c, clean).await, json!(true));
        // The queue holds the two tasks behind the pause; a finished task of
        // each kind shows; the turns chart counts the turns that ended.
        let title = text_until(&c, "#chart-queue h3", |t| t.contains("now")).await;
        assert!(title.ends_with("(now 2)"), "{title}");
        let finished = js(
            &c,
            "return [...document.querySelectorAll('#chart-tasks .mark')].map((m) => m.dataset.tip).join('\\n')",
        )
        .await;
        let finished = finished.as_str().unwrap();
        assert!(
            finished.contains("succeeded") && finished.contains("failed"),
            "{finished}"
        );

        // A webhook while the page is open reaches the chart through the
        // event stream (the hub reads the charts at most every 15 s).
        let total = "return Number(document.getElementById('chart-webhooks').dataset.total)";
        let before = js(&c, total).await.as_i64().unwrap();
        s.task_comment("ch-5", 5, "@ccbot one more", "widgets", 5);
        wait_until_async(
            "the new webhook on the chart",
            Duration::from_secs(45),
            || async { js(&c, total).await.as_i64() == Some(before + 1) },
        )
        .await;

        show_charts(&c).await;
        let png = c.screenshot().await.unwrap();
        std::fs::write(screenshot_dir().join("charts.png"), png).unwrap();

        // A phone: one column, every chart within the width, no sideways scroll.
        c.set_window_size(390, 844).await.unwrap();
        wait_narrow_layout(&c).await;
        let fits = "const w = document.documentElement.clientWidth;\
                    const svgs = [...document.querySelectorAll('#charts svg.chart-svg')];\
                    const lefts = new Set([...document.querySelectorAll('#charts .chart')]\
                      .map((f) => Math.round(f.getBoundingClientRect().left)));\
                    return svgs.length === 5 && lefts.size === 1\
                      && document.documentElement.scrollWidth <= w\
                      && svgs.every((s) => s.getBoundingClientRect().right <= w + 0.5\
                        && Math.abs(s.viewBox.baseVal.width - s.getBoundingClientRect().width) < 10);";
        wait_until_async("the charts to fit a phone's width", WAIT, || async {
            c.execute(fits, vec![]).await.ok() == Some(json!(true))
        })
        .await;
        for id in CHARTS {
            assert!(drawn(&c, id).await, "{id} lost its marks on a phone");
        }
        show_charts(&c).await;
        let png = c.screenshot().await.unwrap();
        std::fs::write(screenshot_dir().join("charts-phone.png"), png).unwrap();
    });
}
