//! The task page's transcript in a real browser (headless Chromium through
//! chromedriver, as in `browser.rs`), after a real turn of the real `codex
//! app-server`: the command with its exit code and folded output, the file
//! change with its stat and coloured diff, the prompt with the comment in an
//! untrusted box; markup in the comment, the output and the diff shows as
//! text and never runs. Saves `target/browser-screenshots/transcript.png`.

use crate::browser::{browser_test, click, el, screenshot_dir, sign_in, text_until};
use crate::support::*;
use fantoccini::Locator;
use serde_json::json;

#[test]
fn browser_transcript_shows_the_turn_and_markup_only_as_text() {
    let (l, task) = crate::transcripts::run_a_turn_that_does_everything();
    let app = &l.app;
    browser_test("transcript", |c| async move {
        // Any script the page's data smuggled in would say so here.
        let injected = "return window.__injected === undefined \
                        && document.querySelectorAll('#view script, #view img').length === 0";
        sign_in(&c, app, ADMIN_TOKEN).await;
        el(&c, "#live").await;
        c.goto(&app.url(&format!("/admin#task/{task}")))
            .await
            .unwrap();
        c.execute(
            "window.alert = () => { window.__injected = true; };",
            vec![],
        )
        .await
        .unwrap();

        // The prompt, the comment's text in the last untrusted box (the
        // Issue's own text comes before it), as text.
        let want = "@ccbot please look <script>alert(3)</script> <img src=y onerror=alert(4)>";
        let boxes = "#transcript .item.prompt .untrusted pre";
        let shown = poll_until_async(std::time::Duration::from_secs(20), || async {
            let Ok(all) = c.find_all(Locator::Css(boxes)).await else {
                return false;
            };
            let Some(last) = all.last() else {
                return false;
            };
            last.text().await.is_ok_and(|t| t == want)
        })
        .await;
        assert!(
            shown,
            "the comment never showed as the prompt's last untrusted box"
        );
        let first = text_until(&c, boxes, |t| !t.is_empty()).await;
        assert!(first.starts_with("Title: "), "the Issue's text: {first}");
        // The command, its exit code, the output folded until opened.
        let cmd = text_until(&c, "#transcript .item.commandExecution code.cmd", |t| {
            t.starts_with("$ ") && t.contains("printf 'token=")
        })
        .await;
        assert!(cmd.contains("[redacted]"), "{cmd}");
        assert!(!cmd.contains(GITEA_TOKEN), "{cmd}");
        let exit = text_until(&c, "#transcript .item.commandExecution [data-exit]", |t| {
            !t.is_empty()
        })
        .await;
        assert_eq!(exit, "exit 3");
        let output = "#transcript .item.commandExecution details.output";
        assert_eq!(
            c.find(Locator::Css(output))
                .await
                .unwrap()
                .attr("open")
                .await
                .unwrap(),
            None,
            "the output starts folded"
        );
        click(&c, &format!("{output} summary")).await;
        let shown = text_until(&c, &format!("{output} pre"), |t| t.contains("token=")).await;
        assert!(shown.contains("token=[redacted]"), "{shown}");
        assert!(shown.contains("<img src=x onerror=alert(1)>"), "{shown}");

        // The file change: path, stat, and the diff's lines coloured as added.
        let file = text_until(&c, "#transcript .item.fileChange .files li", |t| {
            t.contains("notes.txt")
        })
        .await;
        assert!(file.contains("+2") && file.contains("−0"), "{file}");
        click(&c, "#transcript .item.fileChange details.diff-box summary").await;
        let added = text_until(&c, "#transcript .item.fileChange pre.diff span.add", |t| {
            !t.is_empty()
        })
        .await;
        assert_eq!(added, "line one <script>alert(2)</script>");

        // The reply's tool call and the turn's tokens.
        let tool = text_until(&c, "#transcript .item.mcpToolCall code.tool", |t| {
            !t.is_empty()
        })
        .await;
        assert_eq!(tool, "gitea.add_comment");
        let tokens = text_until(&c, "#transcript .turn-head .tokens", |t| {
            t.contains("tokens (")
        })
        .await;
        assert!(!tokens.starts_with("0 "), "{tokens}");

        assert_eq!(c.execute(injected, vec![]).await.unwrap(), json!(true));
        c.execute(
            "document.getElementById('transcript').scrollIntoView(); window.scrollBy(0, -60);",
            vec![],
        )
        .await
        .unwrap();
        let drawn = "const done = arguments[arguments.length - 1];\
                     requestAnimationFrame(() => requestAnimationFrame(() => done(true)));";
        c.execute_async(drawn, vec![]).await.unwrap();
        let png = c.screenshot().await.unwrap();
        std::fs::write(screenshot_dir().join("transcript.png"), png).unwrap();

        // The session page lists the Issue's turns across tasks.
        c.execute("window.scrollTo(0, 0);", vec![]).await.unwrap();
        click(&c, "#session-link").await;
        let row = text_until(&c, "#session-turns tbody tr", |t| t.contains(&task)).await;
        assert!(row.contains("completed"), "{row}");
        assert_eq!(c.execute(injected, vec![]).await.unwrap(), json!(true));
    });
}
