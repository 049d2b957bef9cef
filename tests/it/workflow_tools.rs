//! The bridge's tools answered inside the turn that called them, in process
//! on a real SQLite store with the scripted runtime: `complete_workflow`
//! ends the task's workflow with its summary; a call with bad arguments or
//! of a tool that does not exist gets an error the model can read, changes
//! nothing, and the turn goes on to its end.

use super::actors::{run, settings, Harness};
use codex_bridge::agent::scripted::{Script, ScriptedAgent, Step};
use codex_bridge::domain::workflow::WorkflowState;
use codex_bridge::lifecycle::TaskState;
use codex_bridge::store::{tasks, workflows};
use serde_json::json;

fn runtime() -> ScriptedAgent {
    let rt = ScriptedAgent::new();
    rt.on(
        "finish",
        Script::steps(vec![
            Step::CallTool(
                "complete_workflow",
                json!({"summary": "Parser fixed, tests pass."}),
            ),
            Step::Complete("done".into()),
        ]),
    );
    rt.on(
        "fumble",
        Script::steps(vec![
            Step::CallTool("complete_workflow", json!({"summary": "   "})),
            Step::CallTool("codex_bridge.launch_rockets", json!({})),
            Step::Complete("done anyway".into()),
        ]),
    );
    rt
}

#[test]
fn complete_workflow_ends_the_tasks_workflow_with_its_summary() {
    run(async {
        let h = Harness::start(runtime(), settings());
        let task = h.comment("widgets", 1, 1, "@ccbot finish the parser").await;
        h.wait_state(&task, TaskState::Succeeded).await;

        let answers = h.runtime.tool_answers();
        assert_eq!(answers.len(), 1, "{answers:?}");
        assert!(answers[0].1.success, "{answers:?}");
        assert!(answers[0].1.text.contains("complete"), "{answers:?}");
        let id = task.clone();
        let (t, w) = h
            .store
            .read(move |c| {
                let t = tasks::find(c, &id)?.expect("the task");
                let w = workflows::find(c, t.workflow_id.as_ref().expect("joined"))?;
                Ok((t, w))
            })
            .await
            .unwrap();
        let w = w.expect("its workflow");
        assert_eq!(w.state, WorkflowState::Completed);
        assert_eq!(w.summary.as_deref(), Some("Parser fixed, tests pass."));
        assert_eq!(w.owner, t.author);
        assert!(h
            .actions(&task)
            .await
            .contains(&"workflow.tool_call".to_owned()));
    });
}

#[test]
fn a_bad_tool_call_is_answered_with_an_error_and_the_turn_goes_on() {
    run(async {
        let h = Harness::start(runtime(), settings());
        let task = h.comment("widgets", 1, 1, "@ccbot fumble it").await;
        h.wait_state(&task, TaskState::Succeeded).await;

        let answers = h.runtime.tool_answers();
        assert_eq!(answers.len(), 2, "{answers:?}");
        assert!(answers.iter().all(|(_, a)| !a.success), "{answers:?}");
        assert!(
            answers[0].1.text.contains("must not be empty"),
            "{answers:?}"
        );
        assert!(answers[1].1.text.contains("no tool named"), "{answers:?}");
        let id = task.clone();
        let t = h
            .store
            .read(move |c| tasks::find(c, &id))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(t.workflow_id, None, "a refused call joins no workflow");
    });
}
