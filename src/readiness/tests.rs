use super::*;
use serde_json::json;

fn config(vars: &[(&str, &str)]) -> Config {
    test_config(vars)
}

const GITEA: [(&str, &str); 2] = [
    ("gitea_url", "http://git.test"),
    ("gitea_token", "gitea-token-never-shown-0123"),
];

fn unavailable(problem: StartProblem) -> RuntimeStatus {
    RuntimeStatus {
        process: ProcessState::Unavailable {
            problem,
            detail: "cannot start /opt/secret-place/codex app-server: No such file".into(),
        },
        account: AccountState::Unknown,
    }
}

fn signed_out() -> RuntimeStatus {
    RuntimeStatus {
        process: ProcessState::Running,
        account: AccountState::SignedOut,
    }
}

#[test]
fn codex_without_gitea_is_blocked_and_the_message_names_the_keys() {
    let c = config(&[("agent_runtime", "codex")]);
    let b = blockers(&c);
    assert_eq!(b.len(), 1, "{b:?}");
    assert_eq!(b[0].code, "gitea_not_configured");
    assert!(b[0]
        .message
        .starts_with("gitea_url and gitea_token are not set"));
    assert!(b[0].action.contains("gitea_token"), "{b:?}");

    let c = config(&[("agent_runtime", "codex"), ("gitea_url", "http://git.test")]);
    let b = blockers(&c);
    assert!(b[0].message.starts_with("gitea_token is not set"), "{b:?}");

    let c = config(&[
        ("agent_runtime", "codex"),
        ("gitea_url", "http://git.test"),
        ("gitea_token", "a-token-value-that-must-not-show"),
    ]);
    assert_eq!(blockers(&c), Vec::new());
}

#[test]
fn intake_only_says_so_and_the_scripted_test_mode_needs_no_gitea() {
    let b = blockers(&config(&[("agent_runtime", "none")]));
    let codes: Vec<&str> = b.iter().map(|b| b.code).collect();
    assert_eq!(codes, ["agent_runtime_none", "gitea_not_configured"]);
    assert_eq!(blockers(&config(&[("agent_runtime", "scripted")])), []);
}

#[test]
fn codex_is_the_default_runtime_and_alone_it_is_blocked_only_by_gitea() {
    let c = config(&[]);
    assert_eq!(c.agent_runtime, AgentRuntimeKind::Codex);
    let codes: Vec<&str> = blockers(&c).iter().map(|b| b.code).collect();
    assert_eq!(codes, ["gitea_not_configured"]);
}

#[test]
fn each_runtime_problem_is_a_blocker_naming_keys_and_what_to_do_never_a_path() {
    for (status, code) in [
        (
            unavailable(StartProblem::NotInstalled),
            "codex_not_installed",
        ),
        (
            unavailable(StartProblem::HomeUnusable),
            "codex_home_unusable",
        ),
        (
            unavailable(StartProblem::FailedToStart),
            "codex_failed_to_start",
        ),
        (signed_out(), "codex_signed_out"),
    ] {
        let b = runtime_blockers(&status);
        assert_eq!(b.len(), 1, "{b:?}");
        assert_eq!(b[0].code, code);
        assert!(b[0].message.contains("tasks stay queued"), "{b:?}");
        assert!(b[0].action.contains("codex"), "{b:?}");
        let text = format!("{b:?}");
        assert!(!text.contains("secret-place"), "{text}");
    }
    assert!(
        runtime_blockers(&unavailable(StartProblem::NotInstalled))[0]
            .message
            .contains("codex_bin")
    );
    // How to sign in, both ways, through the bridge itself.
    let action = &runtime_blockers(&signed_out())[0].action;
    for how in [
        "`codex-bridge codex login` with an OpenAI API key on stdin",
        "`codex-bridge codex login --device-code`",
        "the admin view's Codex panel",
    ] {
        assert!(action.contains(how), "{how}: {action}");
    }
    // Starting is no fault; running without an account that is needed is.
    assert_eq!(runtime_blockers(&RuntimeStatus::starting()), []);
    assert_eq!(runtime_blockers(&RuntimeStatus::ready()), []);
    for account in [
        AccountState::SignedIn,
        AccountState::NotRequired,
        AccountState::Unknown,
    ] {
        let status = RuntimeStatus {
            process: ProcessState::Running,
            account,
        };
        assert_eq!(runtime_blockers(&status), [], "{account:?}");
    }
}

#[test]
fn the_overview_lists_the_configurations_blockers_then_the_runtimes() {
    let c = config(&[("agent_runtime", "codex")]);
    let codes: Vec<&str> = all_blockers(&c, &signed_out())
        .iter()
        .map(|b| b.code)
        .collect();
    assert_eq!(codes, ["gitea_not_configured", "codex_signed_out"]);
    // Intake only runs no Codex: nothing of a runtime to report.
    let c = config(&[("agent_runtime", "none"), GITEA[0], GITEA[1]]);
    let codes: Vec<&str> = all_blockers(&c, &unavailable(StartProblem::NotInstalled))
        .iter()
        .map(|b| b.code)
        .collect();
    assert_eq!(codes, ["agent_runtime_none"]);
}

fn body(r: &Readiness) -> serde_json::Value {
    serde_json::to_value(r).unwrap()
}

#[test]
fn without_gitea_the_bridge_is_degraded_and_says_which_keys_to_set() {
    let c = config(&[("agent_runtime", "scripted")]);
    let r = body(&readiness(&c, true, &RuntimeStatus::ready()));
    assert_eq!(r["status"], "degraded");
    assert_eq!(r["store"], json!({"state": "ok"}));
    assert_eq!(r["gitea"]["state"], "not_configured");
    let reason = r["gitea"]["reason"].as_str().unwrap();
    assert!(reason.contains("gitea_url") && reason.contains("gitea_token"));
    assert!(r["gitea"]["action"].as_str().unwrap().contains("gitea_url"));
    assert_eq!(r["codex"], json!({"state": "ok"}));
    assert_eq!(r["codexAccount"], json!({"state": "not_required"}));
}

#[test]
fn configured_is_ready_and_a_store_that_does_not_answer_is_unavailable() {
    let c = config(&[GITEA[0], GITEA[1], ("agent_runtime", "scripted")]);
    let r = body(&readiness(&c, true, &RuntimeStatus::ready()));
    assert_eq!(r["status"], "ready");
    assert_eq!(r["gitea"], json!({"state": "ok"}));
    assert_eq!(r["circuit"], json!({"state": "closed"}));
    assert!(!r.to_string().contains("never-shown"));

    // An open circuit degrades it, and says until when.
    let open = crate::agent::circuit::CircuitView {
        state: "open",
        until: Some("2026-12-04T16:00:00Z".into()),
    };
    let r = body(&readiness(&c, true, &RuntimeStatus::ready()).with_circuit(open.clone()));
    assert_eq!(r["status"], "degraded");
    assert_eq!(
        r["circuit"],
        json!({"state": "open", "until": "2026-12-04T16:00:00Z"})
    );
    let r = body(&readiness(&c, false, &RuntimeStatus::ready()).with_circuit(open));
    assert_eq!(r["status"], "unavailable");

    let r = body(&readiness(&c, false, &RuntimeStatus::ready()));
    assert_eq!(r["status"], "unavailable");
    assert_eq!(r["store"]["state"], "unavailable");
    assert!(r["store"]["action"]
        .as_str()
        .unwrap()
        .contains("database_url"));
}

#[test]
fn intake_only_runs_no_turns_so_codex_is_unavailable() {
    let c = config(&[GITEA[0], GITEA[1], ("agent_runtime", "none")]);
    let r = body(&readiness(&c, true, &RuntimeStatus::ready()));
    assert_eq!(r["status"], "degraded");
    assert_eq!(r["codex"]["state"], "unavailable");
    assert!(r["codex"]["reason"]
        .as_str()
        .unwrap()
        .contains("agent_runtime"));
    assert_eq!(r["codexAccount"]["state"], "not_required");
}

#[test]
fn codex_that_cannot_run_degrades_with_its_reason_and_what_to_do() {
    let c = config(&[GITEA[0], GITEA[1], ("codex_bin", "/opt/secret-place/codex")]);
    let r = body(&readiness(
        &c,
        true,
        &unavailable(StartProblem::NotInstalled),
    ));
    assert_eq!(r["status"], "degraded");
    assert_eq!(r["codex"]["state"], "unavailable");
    assert!(r["codex"]["reason"].as_str().unwrap().contains("codex_bin"));
    assert!(r["codex"]["action"].as_str().is_some());
    assert_eq!(r["codexAccount"], json!({"state": "unknown"}));
    assert!(!r.to_string().contains("secret-place"), "{r}");

    let r = body(&readiness(&c, true, &signed_out()));
    assert_eq!(r["status"], "degraded");
    assert_eq!(r["codex"], json!({"state": "ok"}));
    assert_eq!(r["codexAccount"]["state"], "signed_out");
    assert!(r["codexAccount"]["action"]
        .as_str()
        .unwrap()
        .contains("codex login"));

    let r = body(&readiness(&c, true, &RuntimeStatus::starting()));
    assert_eq!(r["status"], "degraded", "not ready before it has started");
    assert_eq!(r["codex"]["state"], "starting");

    for account in [AccountState::SignedIn, AccountState::NotRequired] {
        let status = RuntimeStatus {
            process: ProcessState::Running,
            account,
        };
        let r = body(&readiness(&c, true, &status));
        assert_eq!(r["status"], "ready", "{account:?}");
    }
}
