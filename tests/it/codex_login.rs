//! Signing Codex in and out: `GET /api/gitea-workflow/codex`, `POST
//! .../codex/login` and `/logout`, and `codex-bridge codex login|status|
//! logout`, which go through the running server's app-server.
//!
//! The API-key sign-in runs against the real `codex app-server` (pinned,
//! with the fake model on a provider that needs an OpenAI account); the key
//! must appear in no log line, no answer and no byte of the database. The
//! ChatGPT device-code sign-in needs OpenAI's servers, so the bridge's side
//! of it (start, the code shown, the completion notification, failure) runs
//! against a recorded app-server: [`recorded`] says why and how.

pub mod recorded;

use crate::support::*;
use crate::testapp::*;
use recorded::RecordedAppServer;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const CODEX: &str = "/api/gitea-workflow/codex";
const KEY_API: &str = "sk-test-through-the-admin-api-7f3a9c1e5b";
const KEY_CLI: &str = "sk-test-through-the-command-line-2d8e4b";

/// Waits until `/readyz` says the Codex account is `state`; the keeper's
/// own re-reads come every 5 s while signed out and every 60 s otherwise,
/// so a change seen within 10 s of a sign-out is the one it was woken for.
fn wait_account_state(app: &TestApp, state: &str) {
    let mut last = Value::Null;
    let seen = poll_until(Duration::from_secs(10), || {
        last = app.get("/readyz", None).json;
        last["codexAccount"]["state"] == state
    });
    assert!(seen, "/readyz never said codexAccount {state}: {last}");
}

/// `codex-bridge codex ARGS` with only the admin token and `extra` set.
fn cli(args: &[&str], stdin: Option<&str>, extra: &[(&str, &str)]) -> Output {
    let mut cmd = command(args, extra);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    {
        let mut input = child.stdin.take().unwrap();
        if let Some(text) = stdin {
            input.write_all(text.as_bytes()).unwrap();
        }
    }
    child.wait_with_output().unwrap()
}

fn command(args: &[&str], extra: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_codex-bridge"));
    for (k, _) in std::env::vars() {
        if k.starts_with("CODEX_BRIDGE_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("CODEX_BRIDGE_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("USER", "carol")
        .arg("codex")
        .args(args);
    for (k, v) in extra {
        cmd.env(k, v);
    }
    cmd
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Every byte of the server's SQLite database (the file and its WAL).
fn database_bytes(app: &TestApp) -> Vec<u8> {
    let mut bytes = Vec::new();
    for name in ["bridge.db", "bridge.db-wal"] {
        if let Ok(b) = std::fs::read(app.dir().join(name)) {
            bytes.extend(b);
        }
    }
    assert!(
        !bytes.is_empty(),
        "no database file in {}",
        app.dir().display()
    );
    bytes
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

fn audit_actions(app: &TestApp, action: &str) -> i64 {
    count_where(
        &mut app.db(),
        "audit_events",
        &format!("action = '{action}'"),
    )
}

#[test]
fn codex_an_api_key_signs_in_through_the_admin_api_and_the_cli_and_is_nowhere_else() {
    // Every log line there is: the app-server's own output is logged at debug.
    let app = TestApp::builder()
        .codex()
        .codex_config("requires_openai_auth = true\n")
        .env("CODEX_BRIDGE_LOG_FILTER", "debug")
        .start();
    wait_account_state(&app, "signed_out");
    let r = app.admin_get(CODEX);
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert_eq!(
        r.json,
        json!({"account": null, "requiresOpenaiAuth": true, "rateLimits": "notApplicable"})
    );
    assert_eq!(app.admin_get(&format!("{CODEX}/account")).json, r.json);
    assert_eq!(app.get(CODEX, None).status, 401);
    let anonymous = ureq::post(&app.url(&format!("{CODEX}/login")))
        .send_json(json!({"type": "apiKey", "apiKey": KEY_API}));
    assert!(matches!(anonymous, Err(ureq::Error::Status(401, _))));

    // Through the admin API.
    let r = app.admin_post(
        &format!("{CODEX}/login"),
        &json!({"type": "apiKey", "apiKey": KEY_API, "operator": "alice", "reason": "first key"}),
    );
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert_eq!(r.json["status"], "completed");
    assert_eq!(r.json["event"]["action"], "codex.login");
    assert_eq!(r.json["event"]["actor"], "admin:alice");
    assert_eq!(r.json["event"]["metadata"]["method"], "apiKey");
    let r = app.admin_get(CODEX);
    assert_eq!(
        r.json,
        json!({"account": {"type": "apiKey"}, "requiresOpenaiAuth": true, "rateLimits": "notApplicable"})
    );
    wait_account_state(&app, "signed_in");
    assert!(
        app.codex_home().join("auth.json").is_file(),
        "the credentials are a file under codex_home"
    );

    let r = app.admin_post(
        &format!("{CODEX}/logout"),
        &json!({"operator": "alice", "reason": "rotating"}),
    );
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert_eq!(r.json["status"], "signedOut");
    assert_eq!(r.json["event"]["action"], "codex.logout");
    assert_eq!(app.admin_get(CODEX).json["account"], Value::Null);
    // At once, not at the keeper's next re-read a minute later.
    wait_account_state(&app, "signed_out");

    // Through the command line: the key on stdin.
    let at_server = |args: &[&str]| -> Vec<String> {
        args.iter()
            .map(|a| a.to_string())
            .chain(["--server".to_owned(), app.base.clone()])
            .collect()
    };
    let cli_at = |args: &[&str], stdin: Option<&str>, extra: &[(&str, &str)]| {
        let args = at_server(args);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        cli(&args, stdin, extra)
    };
    let o = cli_at(&["login"], Some(&format!("{KEY_CLI}\n")), &[]);
    assert!(o.status.success(), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("signed in with an API key"), "{out}");
    assert!(out.contains("account:      API key"), "{out}");
    assert!(!out.contains(KEY_CLI), "{out}");
    wait_account_state(&app, "signed_in");
    // `listen` names the server when --server does not.
    let listen = app.base.trim_start_matches("http://");
    let o = cli(&["status"], None, &[("CODEX_BRIDGE_LISTEN", listen)]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("account:      API key"), "{}", text(&o));
    assert!(
        text(&o).contains("not applicable (only ChatGPT accounts have them)"),
        "{}",
        text(&o)
    );
    let o = cli_at(&["status", "--json"], None, &[]);
    let status: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(status["account"], json!({"type": "apiKey"}));
    let o = cli_at(&["logout"], None, &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("Codex is signed out."), "{}", text(&o));
    assert!(text(&o).contains("none: signed out"), "{}", text(&o));
    wait_account_state(&app, "signed_out");
    assert_eq!(audit_actions(&app, "codex.login"), 2);
    assert_eq!(audit_actions(&app, "codex.logout"), 2);

    // What the operator is told when it cannot work.
    let o = cli_at(&["login"], Some("  \n"), &[]);
    assert!(!o.status.success());
    assert!(text(&o).contains("no API key on stdin"), "{}", text(&o));
    let o = cli(&["status", "--server", "http://127.0.0.1:9"], None, &[]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("cannot reach the codex-bridge server at http://127.0.0.1:9")
            && text(&o).contains("codex-bridge serve"),
        "{}",
        text(&o)
    );
    let o = cli_at(
        &["status"],
        None,
        &[("CODEX_BRIDGE_ADMIN_TOKEN", "not-the-admin-token-0000")],
    );
    assert!(!o.status.success());
    assert!(text(&o).contains("refused the admin token"), "{}", text(&o));

    // Neither key is in the log or the database; the log did record the sign-ins.
    let logs = app.logs();
    assert!(logs.contains("codex signed in with an API key"), "{logs}");
    assert!(
        logs.contains("codex_app_server"),
        "the app-server's output is in the log"
    );
    for key in [KEY_API, KEY_CLI] {
        assert!(!logs.contains(key), "the key is in the server's log");
        assert!(
            !contains(&database_bytes(&app), key),
            "the key is in the database"
        );
    }
}

/// The app-server keeps its credentials as files under `codex_home`, even
/// where its `config.toml` asks for the system keyring (which a headless
/// server does not have, and which the next process might not reach).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_credentials_are_files_under_codex_home_whatever_its_config_says() {
    use codex_bridge::agent::account::Account;
    use codex_bridge::codex::{notice_channel, CodexAgent, CodexSettings};
    let model = crate::fakemodel::FakeModel::start();
    let home = crate::codexhome::CodexHome::new(&model);
    let config = std::fs::read_to_string(home.config_path()).unwrap();
    std::fs::write(
        home.config_path(),
        format!("cli_auth_credentials_store = \"keyring\"\n{config}requires_openai_auth = true\n"),
    )
    .unwrap();
    let codex = CodexAgent::new(
        CodexSettings {
            codex_bin: crate::codexhome::codex_bin(),
            codex_home: home.path(),
            developer_instructions: String::new(),
            thread_config: serde_json::Map::new(),
            env: Vec::new(),
            request_timeout: Duration::from_secs(30),
            nice: 0,
            workflow_tools: false,
        },
        notice_channel().0,
    );
    codex
        .login_api_key(KEY_API.to_owned().into())
        .await
        .unwrap();
    assert_eq!(
        codex.account_status().await.unwrap().account,
        Some(Account::ApiKey)
    );
    let stored = std::fs::read_to_string(home.path().join("auth.json")).unwrap();
    assert!(
        stored.contains(KEY_API),
        "the key is in codex_home/auth.json"
    );
    codex.logout().await.unwrap();
    assert_eq!(codex.account_status().await.unwrap().account, None);
    codex.kill_process().await;
}

#[test]
fn codex_device_code_sign_in_shows_the_code_and_follows_its_end() {
    let peer = RecordedAppServer::start();
    let app = TestApp::builder()
        .codex()
        .env("CODEX_BRIDGE_CODEX_BIN", peer.bin().to_str().unwrap())
        .start();
    wait_account_state(&app, "signed_out");

    // Started through the admin API: the code and the address to enter it at.
    let r = app.admin_post(
        &format!("{CODEX}/login"),
        &json!({"type": "deviceCode", "operator": "alice"}),
    );
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert_eq!(r.json["type"], "deviceCode");
    assert_eq!(r.json["status"], "pending");
    assert_eq!(r.json["verificationUrl"], recorded::VERIFICATION_URL);
    assert_eq!(r.json["userCode"], recorded::USER_CODE);
    assert_eq!(r.json["event"]["metadata"]["loginId"], r.json["loginId"]);
    let login = r.json["loginId"].as_str().unwrap().to_owned();
    let status = |login: &str| app.admin_get(&format!("{CODEX}/login/{login}"));
    assert_eq!(
        status(&login).json,
        json!({"loginId": login, "status": "pending"})
    );

    // The operator entered the code: the notification ends it.
    peer.complete(None);
    app.wait_for("the sign-in completed", || {
        status(&login).json["status"] == "completed"
    });
    wait_account_state(&app, "signed_in");
    let r = app.admin_get(CODEX);
    assert_eq!(
        r.json,
        json!({
            "account": {"type": "chatgpt", "email": "ops@example.com", "planType": "plus", "workspaceName": null},
            "requiresOpenaiAuth": true,
            "rateLimits": {
                "planType": "plus",
                "primary": {"usedPercent": 42, "windowMinutes": 300, "resetsAt": "2026-12-02T22:20:00Z"},
                "secondary": {"usedPercent": 7, "windowMinutes": 10080, "resetsAt": "2026-12-09T07:06:40Z"},
            },
        })
    );
    app.wait_for("the completion is audited", || {
        audit_actions(&app, "codex.login_completed") == 1
    });

    // A code that is never entered: the sign-in fails, with the reason.
    let r = app.admin_post(&format!("{CODEX}/logout"), &json!({}));
    assert_eq!(r.status, 200, "{:?}", r.json);
    wait_account_state(&app, "signed_out");
    let r = app.admin_post(&format!("{CODEX}/login"), &json!({"type": "deviceCode"}));
    let second = r.json["loginId"].as_str().unwrap().to_owned();
    assert_ne!(second, login);
    peer.complete(Some(recorded::EXPIRED));
    app.wait_for("the sign-in failed", || {
        status(&second).json
            == json!({"loginId": second, "status": "failed", "error": recorded::EXPIRED})
    });
    assert_eq!(app.admin_get(CODEX).json["account"], Value::Null);
    let r = status("no-such-login");
    assert_eq!(
        (r.status, r.json["code"].as_str()),
        (404, Some("not_found"))
    );

    // The command line prints the code, waits, and says when it is done.
    let mut child = command(&["login", "--device-code", "--server", &app.base], &[])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line.unwrap()).is_err() {
                return;
            }
        }
    });
    let mut printed = Vec::new();
    while !printed
        .iter()
        .any(|l: &String| l.contains(recorded::USER_CODE))
    {
        let line = lines
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("the code was never printed: {printed:?}"));
        printed.push(line);
    }
    assert!(
        printed
            .iter()
            .any(|l| l.contains(recorded::VERIFICATION_URL)),
        "{printed:?}"
    );
    peer.complete(None);
    let out = child.wait_with_output().unwrap();
    printed.extend(lines.try_iter());
    let printed = printed.join("\n");
    assert!(
        out.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(printed.contains("Codex is signed in."), "{printed}");
    assert!(
        printed.contains("ChatGPT (ops@example.com, plan plus)"),
        "{printed}"
    );
    assert!(
        printed.contains("primary 42% used of a 5 h window"),
        "{printed}"
    );

    // An app-server that cannot reach OpenAI refuses the code: 502, with its words.
    peer.refuse_device_codes();
    let r = app.admin_post(&format!("{CODEX}/login"), &json!({"type": "deviceCode"}));
    assert_eq!(r.status, 502, "{:?}", r.json);
    assert_eq!(r.json["code"], "codex_refused");
    assert!(
        r.json["message"]
            .as_str()
            .unwrap()
            .contains("failed to request device code"),
        "{:?}",
        r.json
    );
    let o = cli(
        &["login", "--device-code", "--server", &app.base],
        None,
        &[],
    );
    assert!(!o.status.success());
    assert!(
        text(&o).contains("failed to request device code"),
        "{}",
        text(&o)
    );
    let methods = peer.methods();
    assert!(
        methods.contains(&"account/rateLimits/read".to_owned()),
        "{methods:?}"
    );
}

#[test]
fn codex_sign_in_follows_the_admin_rules_and_needs_a_codex_runtime() {
    // The cookie of the web view: a sign-out from another site is refused.
    let peer = RecordedAppServer::start();
    let app = TestApp::builder()
        .codex()
        .env("CODEX_BRIDGE_CODEX_BIN", peer.bin().to_str().unwrap())
        .start();
    let agent = ureq::AgentBuilder::new().redirects(0).build();
    let signed_in = agent
        .post(&app.url("/admin/login"))
        .set("Origin", &app.base)
        .send_form(&[("token", ADMIN_TOKEN)])
        .unwrap();
    let cookie = signed_in
        .header("set-cookie")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let logout = |origin: &str| match ureq::post(&app.url(&format!("{CODEX}/logout")))
        .set("Cookie", &cookie)
        .set("Origin", origin)
        .call()
    {
        Ok(r) => r.status(),
        Err(ureq::Error::Status(code, _)) => code,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(logout("http://evil.example"), 403);
    assert!(!peer.methods().contains(&"account/logout".to_owned()));
    assert_eq!(logout(&app.base), 200);
    assert!(peer.methods().contains(&"account/logout".to_owned()));
    // A body that is no sign-in is refused without being quoted back.
    let r = app.admin_post(
        &format!("{CODEX}/login"),
        &json!({"type": "sk-test-pasted-into-the-wrong-field"}),
    );
    assert_eq!(r.status, 400);
    assert_eq!(r.json["code"], "invalid_login");
    assert!(!r.json.to_string().contains("pasted"), "{:?}", r.json);

    // No Codex runtime, nothing to sign in.
    let intake = TestApp::builder().start();
    let r = intake.admin_get(CODEX);
    assert_eq!(r.status, 409, "{:?}", r.json);
    assert_eq!(r.json["code"], "codex_not_configured");
}
