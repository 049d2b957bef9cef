//! The web view's workflows in a real browser (see `browser.rs` for the
//! rig): the list, newest first and paged; a workflow's page with its gates
//! and turns; answering its gate for the owner and cancelling it through the
//! action dialog; a refusal shown in the dialog; and the task page's link to
//! its workflow. The server takes comments but runs no turn (intake only),
//! and the workflows are written through the store as a session would, so
//! nothing but the test and the operator moves them.

use crate::browser::{browser_test, click, confirm_action, el, sign_in, text_until};
use crate::support::*;
use crate::testapp::*;
use codex_bridge::domain::states::CapacityDenial;
use codex_bridge::domain::workflow::GateKind;
use codex_bridge::domain::{GateId, TaskId};
use codex_bridge::store::models::Task;
use codex_bridge::store::workflows::{self, Workflow};
use codex_bridge::store::{tasks, DbConn};
use fantoccini::{Client, Locator};
use serde_json::{json, Value};

/// The question of the first gate: markup in it must show as text.
const QUESTION: &str = "Publish <b>1.0</b> to the registry?";

/// A comment on Issue `number` of `acme/widgets` whose task joins its
/// session's workflow (titled `title`) and then ends as its turn would have.
fn joined(s: &TestApp, c: &mut DbConn, id: i64, number: i64, title: &str) -> (Task, Workflow) {
    let r = s.comment(
        &format!("wf-{id}"),
        id,
        &format!("@ccbot {title}"),
        "widgets",
        number,
    );
    assert_eq!(r.status, 202, "{:?}", r.json);
    let id = TaskId::parse(r.json["taskId"].as_str().unwrap()).unwrap();
    let task = tasks::find(c, &id).unwrap().unwrap();
    let w = c
        .write_transaction(|c| workflows::join(c, &task, title))
        .unwrap();
    // An ended task never changes again, so it ends after joining.
    exec(
        c,
        &format!("UPDATE tasks SET state = 'succeeded' WHERE task_id = '{id}'"),
    )
    .unwrap();
    (tasks::find(c, &id).unwrap().unwrap(), w)
}

fn reread(c: &mut DbConn, w: &Workflow) -> Workflow {
    workflows::find(c, &w.workflow_id).unwrap().unwrap()
}

/// Opens a gate of `kind` on `w` as the agent's tool would, asked by `task`.
fn open_gate(c: &mut DbConn, w: &Workflow, kind: GateKind, question: &str, task: &Task) -> GateId {
    let w = reread(c, w);
    c.write_transaction(|c| workflows::gate(c, &w, w.version, kind, question, &task.task_id))
        .unwrap()
}

fn detail(s: &TestApp, w: &Workflow) -> Value {
    let r = s.admin_get(&format!("/api/gitea-workflow/workflows/{}", w.workflow_id));
    assert_eq!(r.status, 200, "{:?}", r.json);
    r.json
}

/// The gate `gate` of the workflow's page, as the API shows it.
fn gate_of(d: &Value, gate: &GateId) -> Value {
    d["gates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["gateId"] == gate.to_string())
        .unwrap_or_else(|| panic!("no gate {gate} in {d}"))
        .clone()
}

/// Saves what the page shows now as `target/browser-screenshots/<name>.png`.
async fn screenshot(c: &Client, name: &str) {
    let png = c.screenshot().await.unwrap();
    std::fs::write(
        crate::browser::screenshot_dir().join(format!("{name}.png")),
        png,
    )
    .unwrap();
}

async fn absent(c: &Client, css: &str) -> bool {
    c.find(Locator::Css(css)).await.is_err()
}

#[test]
fn browser_workflows_answer_a_gate_for_the_owner_and_cancel() {
    let s = &TestApp::start(Db::Sqlite);
    let mut db = connect(&s.db_url);
    // An older workflow on Issue 2, then the one under test on Issue 1,
    // waiting for its owner at a gate its first task asked.
    let (older_task, older) = joined(s, &mut db, 1, 2, "tidy the docs");
    // The older one waits out a capacity refusal of its provider.
    db.write_transaction(|c| {
        workflows::wait(
            c,
            &older,
            &workflows::ContinueWith {
                version: older.version,
                seq: 1,
                idle_finals: 0,
                // Not due while the test runs.
                due_at: "2099-01-01T00:00:00Z".into(),
                after: &older_task,
                instance_id: "default",
                text: "Continue.",
                why: "the workflow continues after the provider's capacity refusal",
            },
            CapacityDenial::UsageLimit,
            1,
        )
    })
    .unwrap();
    let (first, w) = joined(s, &mut db, 2, 1, "fix the parser");
    let gate = open_gate(&mut db, &w, GateKind::Publish, QUESTION, &first);
    let wf = w.workflow_id.to_string();
    let row = format!(r#"#workflow-table tr[data-workflow="{wf}"]"#);

    browser_test("workflows", |c| async move {
        sign_in(&c, s, ADMIN_TOKEN).await;
        el(&c, "#intake-status").await;

        // The list, from the nav: newest first, waiting for its owner.
        click(&c, r#"nav a[data-view="workflows"]"#).await;
        el(&c, &format!(r#"{row} .badge[data-state="waiting_owner"]"#)).await;
        let first_row = c
            .execute(
                "return document.querySelector('#workflow-table tbody tr').dataset.workflow",
                vec![],
            )
            .await
            .unwrap();
        assert_eq!(first_row, json!(wf), "newest first");
        let shown = text_until(&c, &row, |t| t.contains("fix the parser")).await;
        assert!(shown.contains("bob"), "the owner: {shown}");
        text_until(&c, &format!("{row} .wf-continuations"), |t| t == "0").await;
        el(
            &c,
            &format!(
                r#"#workflow-table tr[data-workflow="{}"] .badge[data-state="open"]"#,
                older.workflow_id
            ),
        )
        .await;
        text_until(
            &c,
            &format!(
                r#"#workflow-table tr[data-workflow="{}"] .wf-wait"#,
                older.workflow_id
            ),
            |t| t.contains("usage limit"),
        )
        .await;
        assert!(
            absent(&c, &format!("{row} .wf-wait")).await,
            "only a workflow that waits says so"
        );

        // One page holds both: no further page is offered.
        text_until(&c, "#workflows-more", |t| t.is_empty()).await;
        screenshot(&c, "workflows").await;

        // Its page: the gate's question as text, the turn linking to its task.
        click(&c, &format!("{row} .wf-title a")).await;
        text_until(&c, "#workflow-title", |t| t == "fix the parser").await;
        el(&c, r#"#workflow-state .badge[data-state="waiting_owner"]"#).await;
        let gate_row = format!(r#"#workflow-gates tr[data-gate="{gate}"]"#);
        text_until(&c, &format!("{gate_row} .gate-question"), |t| t == QUESTION).await;
        assert!(
            absent(&c, ".gate-question b").await,
            "the question is never markup"
        );
        text_until(&c, &gate_row, |t| t.contains("publish")).await;
        el(
            &c,
            &format!(r##"#workflow-turns a[href="#task/{}"]"##, first.task_id),
        )
        .await;
        el(&c, "#workflow-cancel").await;

        screenshot(&c, "workflow").await;

        // Answered for the owner through the dialog, as operator alice.
        click(&c, &format!("{gate_row} .answer-gate")).await;
        text_until(&c, "#action-gate-question", |t| t == QUESTION).await;
        screenshot(&c, "workflow-answer").await;
        let rid = el(&c, "#action-request-id").await.text().await.unwrap();
        assert!(rid.starts_with("web-"), "{rid}");
        el(&c, "#action-operator")
            .await
            .send_keys("alice")
            .await
            .unwrap();
        assert_eq!(
            confirm_action(&c, "yes, publish it").await,
            "workflow.gate_resume"
        );
        el(&c, &format!(r#"{gate_row}[data-status="resumed"]"#)).await;
        text_until(&c, &format!("{gate_row} .gate-resumed-by"), |t| {
            t.contains("admin:alice")
        })
        .await;
        assert!(absent(&c, ".answer-gate").await);
        el(&c, r#"#workflow-state .badge[data-state="open"]"#).await;
        text_until(&c, "#workflow-turns", |t| t.contains("continuation #1")).await;
        let d = detail(s, &w);
        let g = gate_of(&d, &gate);
        assert_eq!(g["status"], "resumed", "{g}");
        assert_eq!(g["resumedBy"], "admin:alice", "{g}");
        assert_eq!(d["workflow"]["state"], "open");
        assert_eq!(d["workflow"]["continuations"], 1);
        let cont1 = d["turns"][1]["taskId"].as_str().unwrap().to_owned();
        assert_eq!(d["turns"][1]["continuation"], 1, "{d}");

        // A second gate, answered by someone else while the dialog is open:
        // the dialog shows the refusal and the page then shows who answered.
        let second = open_gate(
            &mut connect(&s.db_url),
            &w,
            GateKind::ProductSemantics,
            "Which API?",
            &first,
        );
        c.refresh().await.unwrap();
        let second_row = format!(r#"#workflow-gates tr[data-gate="{second}"]"#);
        click(&c, &format!("{second_row} .answer-gate")).await;
        text_until(&c, "#action-gate-question", |t| t == "Which API?").await;
        let by_api = s.admin_post(
            &format!("/api/gitea-workflow/workflows/{wf}/gates/{second}/resume"),
            &json!({"requestId": "script-1", "reason": "the small one"}),
        );
        assert_eq!(by_api.status, 200, "{:?}", by_api.json);
        el(&c, "#action-reason")
            .await
            .send_keys("the big one")
            .await
            .unwrap();
        click(&c, "#action-submit").await;
        let refused = text_until(&c, "#action-result", |t| !t.is_empty()).await;
        assert!(refused.contains("gate_not_open"), "{refused}");
        click(&c, "#action-cancel").await;
        text_until(&c, &format!("{second_row} .gate-resumed-by"), |t| {
            t.contains("admin:admin")
        })
        .await;

        // Cancelled through the dialog: its waiting continuation with it.
        click(&c, "#workflow-cancel").await;
        assert_eq!(
            confirm_action(&c, "no longer needed").await,
            "workflow.cancel"
        );
        el(&c, r#"#workflow-state .badge[data-state="cancelled"]"#).await;
        assert!(absent(&c, "#workflow-cancel").await);
        let d = detail(s, &w);
        assert_eq!(d["workflow"]["state"], "cancelled", "{d}");
        let turns = d["turns"].as_array().unwrap();
        assert_eq!(turns.len(), 3, "the comment and two continuations: {d}");
        let cont2 = turns[2]["taskId"].as_str().unwrap();
        for t in [cont1.as_str(), cont2] {
            let task = s.admin_get(&format!("/api/gitea-workflow/tasks/{t}")).json;
            assert_eq!(task["task"]["state"], "cancelled", "{task}");
        }

        // The task page links to its workflow.
        c.goto(&s.url(&format!("/admin#task/{}", first.task_id)))
            .await
            .unwrap();
        el(&c, &format!(r##"a#workflow-link[href="#workflow/{wf}"]"##)).await;
        click(&c, "a#workflow-link").await;
        text_until(&c, "#workflow-title", |t| t == "fix the parser").await;

        // The list shows the end, and pages with its cursor.
        c.goto(&s.url("/admin#workflows?limit=1")).await.unwrap();
        el(&c, &format!(r#"{row} .badge[data-state="cancelled"]"#)).await;
        text_until(&c, &format!("{row} .wf-continuations"), |t| t == "2").await;
        let older_row = format!(
            r#"#workflow-table tr[data-workflow="{}"]"#,
            older.workflow_id
        );
        assert!(absent(&c, &older_row).await, "one per page");
        click(&c, "#workflows-more-button").await;
        el(&c, &older_row).await;
    });
}

/// The workflow tree: a parent's page lists its children (thread,
/// worktree, branch, turns) and its results with their deliveries; an
/// operator cancels a child through the dialog, and the parent gets the
/// child's incomplete result saying so.
#[test]
fn browser_workflows_show_the_children_and_results_and_cancel_a_child() {
    use codex_bridge::domain::policy::{ApprovalPolicy, Sandbox};
    use codex_bridge::domain::workflow::children::ChildMode;
    use codex_bridge::domain::workflow::ResultReport;
    use codex_bridge::store::workflows::children::{self, Assignment, Launched};
    use codex_bridge::store::workflows::results::{self, NewResult};
    let s = &TestApp::start(Db::Sqlite);
    let mut db = connect(&s.db_url);
    let (first, w) = joined(s, &mut db, 1, 1, "fix the parser");
    let mut launch = |what: &str| {
        let w = reread(&mut db, &w);
        let out = db
            .write_transaction(|c| {
                children::launch(
                    c,
                    &Assignment {
                        parent: &w,
                        by: &first,
                        mode: ChildMode::Assign,
                        title: what,
                        instructions: what,
                        sandbox: Sandbox::WorkspaceWrite,
                        approval: ApprovalPolicy::Never,
                        fork_from: None,
                        max_children: 2,
                        instance_id: "default",
                    },
                )
            })
            .unwrap();
        match out {
            Launched::New { child } => child,
            other => panic!("{other:?}"),
        }
    };
    let done = launch("implement it");
    let working = launch("review it");
    let report = ResultReport {
        summary: "Implemented <i>it</i>.".into(),
        files_changed: vec!["src/parser.rs".into()],
        checks_run: vec!["cargo test".into()],
        risks: Vec::new(),
        blockers: Vec::new(),
    };
    let done_w = workflows::find(&mut db, &done.workflow_id)
        .unwrap()
        .unwrap();
    let result = db
        .write_transaction(|c| {
            results::record(
                c,
                &done_w,
                &NewResult {
                    report: &report,
                    incomplete: false,
                    cancelled: false,
                    branch: Some("codex/issue-1-child-1"),
                    by_task: None,
                },
                codex_bridge::domain::workflow::decide::WorkflowLimits {
                    max_idle_finals: 65,
                    max_turns: 200,
                },
                "default",
            )
        })
        .unwrap();
    let wf = w.workflow_id.to_string();

    browser_test("workflow-children", |c| async move {
        sign_in(&c, s, ADMIN_TOKEN).await;
        c.goto(&s.url(&format!("/admin#workflow/{wf}")))
            .await
            .unwrap();
        let done_row = format!(
            r#"#workflow-children tr[data-workflow="{}"]"#,
            done.workflow_id
        );
        let working_row = format!(
            r#"#workflow-children tr[data-workflow="{}"]"#,
            working.workflow_id
        );
        el(&c, &format!(r#"{done_row}[data-state="completed"]"#)).await;
        text_until(&c, &format!("{done_row} .child-worktree"), |t| {
            t.contains("issue-1-child-1") && t.contains("codex/issue-1-child-1")
        })
        .await;
        text_until(&c, &format!("{working_row} .child-worktree"), |t| {
            t.contains("issue-1-child-2")
        })
        .await;
        let result_row = format!(r#"#workflow-results tr[data-result="{result}"]"#);
        el(&c, &format!(r#"{result_row}[data-delivery="pending"]"#)).await;
        text_until(&c, &format!("{result_row} .result-summary"), |t| {
            t.contains("Implemented <i>it</i>.")
        })
        .await;
        assert!(
            absent(&c, ".result-summary i").await,
            "a summary is never markup"
        );
        assert!(
            absent(&c, &format!("{done_row} .cancel-child")).await,
            "an ended child has nothing to cancel"
        );
        screenshot(&c, "workflow-children").await;

        click(&c, &format!("{working_row} .cancel-child")).await;
        assert_eq!(
            confirm_action(&c, "the review is not needed").await,
            "workflow.cancel"
        );
        el(&c, &format!(r#"{working_row}[data-state="cancelled"]"#)).await;
        text_until(&c, "#workflow-results", |t| {
            t.contains("incomplete") && t.contains("the review is not needed")
        })
        .await;
        // The parent goes on: it is still open, with the two results.
        el(&c, r#"#workflow-state .badge[data-state="open"]"#).await;
    });
    let d = detail(s, &w);
    assert_eq!(d["results"].as_array().unwrap().len(), 2, "{d}");
    assert_eq!(d["children"][1]["state"], "cancelled", "{d}");
    assert_eq!(d["children"][1]["worktree"], "issue-1-child-2", "{d}");
}
