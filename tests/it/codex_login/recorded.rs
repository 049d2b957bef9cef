//! A `codex app-server` that replays the ChatGPT device-code sign-in from a
//! recording, for the bridge's side of that flow.
//!
//! Why recorded: the real flow needs OpenAI's servers (the app-server asks
//! `auth.openai.com` for the device code, and the operator confirms it in a
//! browser), which tests cannot reach. So the messages of codex 0.171.0 that
//! the bridge sees are played back here: the refusal the real app-server
//! sends when it cannot reach OpenAI was recorded from it offline; the
//! successful answers, which only OpenAI's side can produce, are written in
//! the shapes of codex's own schema, and `codex_protocol.rs` validates every
//! one of them against the pinned binary's schema, so the recording cannot
//! drift from what codex sends. The handshake and the account reads follow
//! the real app-server's answers.
//!
//! How: the server's `codex_bin` is a small bash script whose stdio is a TCP
//! connection to this peer (bash's `/dev/tcp`), so the peer's logic is Rust
//! in the test and the test decides when the sign-in completes.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// `initialize`'s answer (the real one, its home rewritten).
pub const INITIALIZE: &str = r#"{"userAgent": "codex-bridge/0.171.0 (Debian 12.0.0; x86_64) unknown (codex-bridge; 0.1.0)", "codexHome": "/opt/codex-lab/home", "platformFamily": "unix", "platformOs": "linux"}"#;

/// `collaborationMode/list`'s answer (the bridge only probes for it).
pub const COLLABORATION_MODES: &str = r#"{"data": []}"#;

/// `account/read` while signed out, on a provider that needs an account (real).
pub const ACCOUNT_SIGNED_OUT: &str =
    r#"{"account": null, "userId": null, "requiresOpenaiAuth": true, "workspaceRouting": null}"#;

/// `account/read` once the device code was entered.
pub const ACCOUNT_CHATGPT: &str = r#"{"account": {"type": "chatgpt", "email": "ops@example.com", "planType": "plus", "workspaceName": null}, "userId": "user-recorded-1", "requiresOpenaiAuth": true, "workspaceRouting": null}"#;

/// `account/rateLimits/read` for that account: the real snapshot's shape
/// (from an `account/rateLimits/updated` of 0.171.0), with both windows.
pub const RATE_LIMITS: &str = r#"{"rateLimits": {"limitId": "codex", "limitName": null, "normalModelSlug": null, "primary": {"usedPercent": 42, "windowDurationMins": 300, "resetsAt": 1796250000}, "secondary": {"usedPercent": 7, "windowDurationMins": 10080, "resetsAt": 1796800000}, "credits": null, "individualLimit": null, "spendControlReached": null, "planType": "plus", "rateLimitReachedType": null}, "rateLimitsByLimitId": null}"#;

/// `account/rateLimits/read` refused while signed out (real).
pub const RATE_LIMITS_SIGNED_OUT: &str =
    r#"{"code": -32600, "message": "codex account authentication required to read rate limits"}"#;

/// The address and code of every device-code answer.
pub const VERIFICATION_URL: &str = "https://auth.openai.com/codex/device";
pub const USER_CODE: &str = "K7QX-M2PD";

/// `account/login/start {type: chatgptDeviceCode}`'s answer for `login_id`.
pub fn device_code(login_id: &str) -> Value {
    json!({"type": "chatgptDeviceCode", "loginId": login_id,
        "verificationUrl": VERIFICATION_URL, "userCode": USER_CODE})
}

/// The same request refused by an app-server that cannot reach OpenAI
/// (recorded from 0.171.0 offline).
pub const DEVICE_CODE_REFUSED: &str = r#"{"code": -32603, "message": "failed to request device code: error sending request for url (https://auth.openai.com/api/accounts/deviceauth/usercode)"}"#;

/// What ends a sign-in: `account/login/completed`.
pub fn login_completed(login_id: &str, error: Option<&str>) -> Value {
    json!({"loginId": login_id, "success": error.is_none(), "error": error,
        "onboardingEntrypoint": null})
}

/// The error a device code that was never entered ends with.
pub const EXPIRED: &str = "device code expired before it was entered";

/// `account/updated` after a ChatGPT sign-in, and after a sign-out (the
/// latter real).
pub const UPDATED_CHATGPT: &str = r#"{"authMode": "chatgpt", "planType": "plus", "reason": null}"#;
pub const UPDATED_SIGNED_OUT: &str = r#"{"authMode": null, "planType": null, "reason": null}"#;

fn parsed(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

#[derive(Default)]
struct State {
    signed_in: bool,
    refuse_device_codes: bool,
    logins: u32,
    /// The device-code sign-in waiting for [`RecordedAppServer::complete`].
    pending: Option<String>,
    /// Where the bridge's live connection is written to.
    writer: Option<TcpStream>,
    /// Every method the bridge called, in order.
    methods: Vec<String>,
}

/// The replaying app-server; see the module doc.
pub struct RecordedAppServer {
    dir: tempfile::TempDir,
    state: Arc<Mutex<State>>,
}

impl RecordedAppServer {
    pub fn start() -> RecordedAppServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("codex");
        std::fs::write(
            &bin,
            format!(
                "#!/bin/bash\n\
                 # codex app-server, replayed: stdio is a connection to the test's peer.\n\
                 exec 3<>/dev/tcp/127.0.0.1/{port} || exit 1\n\
                 cat <&3 &\n\
                 exec cat >&3\n"
            ),
        )
        .unwrap();
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let state = shared.clone();
                std::thread::spawn(move || serve(stream, state));
            }
        });
        RecordedAppServer { dir, state }
    }

    /// The `codex_bin` to give the server.
    pub fn bin(&self) -> PathBuf {
        self.dir.path().join("codex")
    }

    /// From now on, device codes are refused as by an app-server offline.
    pub fn refuse_device_codes(&self) {
        self.state.lock().unwrap().refuse_device_codes = true;
    }

    /// The pending device-code sign-in ends: signed in, or failed with `error`.
    pub fn complete(&self, error: Option<&str>) {
        let mut s = self.state.lock().unwrap();
        let login = s.pending.take().expect("no device-code sign-in is pending");
        send(
            &mut s,
            json!({"method": "account/login/completed", "params": login_completed(&login, error)}),
        );
        if error.is_none() {
            s.signed_in = true;
            send(
                &mut s,
                json!({"method": "account/updated", "params": parsed(UPDATED_CHATGPT)}),
            );
        }
    }

    /// The methods the bridge called so far, in order.
    pub fn methods(&self) -> Vec<String> {
        self.state.lock().unwrap().methods.clone()
    }
}

fn send(state: &mut State, message: Value) {
    let writer = state.writer.as_mut().expect("the bridge is not connected");
    writer.write_all(format!("{message}\n").as_bytes()).unwrap();
}

/// Answers one connection's requests, as the recording does.
fn serve(stream: TcpStream, state: Arc<Mutex<State>>) {
    state.lock().unwrap().writer = Some(stream.try_clone().unwrap());
    for line in BufReader::new(stream).lines() {
        let Ok(line) = line else { return };
        let msg: Value = serde_json::from_str(&line).unwrap();
        let Some(method) = msg["method"].as_str() else {
            continue;
        };
        let mut s = state.lock().unwrap();
        s.methods.push(method.to_owned());
        let Some(id) = msg.get("id").cloned() else {
            continue; // `initialized`
        };
        let answer = match method {
            "initialize" => Ok(parsed(INITIALIZE)),
            "collaborationMode/list" => Ok(parsed(COLLABORATION_MODES)),
            "account/read" if s.signed_in => Ok(parsed(ACCOUNT_CHATGPT)),
            "account/read" => Ok(parsed(ACCOUNT_SIGNED_OUT)),
            "account/rateLimits/read" if s.signed_in => Ok(parsed(RATE_LIMITS)),
            "account/rateLimits/read" => Err(parsed(RATE_LIMITS_SIGNED_OUT)),
            "account/login/start" if msg["params"]["type"] != "chatgptDeviceCode" => {
                Err(json!({"code": -32600, "message": "not in this recording"}))
            }
            "account/login/start" if s.refuse_device_codes => Err(parsed(DEVICE_CODE_REFUSED)),
            "account/login/start" => {
                s.logins += 1;
                let login = format!("0199c6e1-5f3a-7d22-9b41-00000000000{}", s.logins);
                s.pending = Some(login.clone());
                Ok(device_code(&login))
            }
            "account/logout" => {
                s.signed_in = false;
                let answer = json!({"id": id, "result": {}});
                send(&mut s, answer);
                send(
                    &mut s,
                    json!({"method": "account/updated", "params": parsed(UPDATED_SIGNED_OUT)}),
                );
                continue;
            }
            _ => Err(
                json!({"code": -32601, "message": format!("{method} is not in this recording")}),
            ),
        };
        let reply = match answer {
            Ok(result) => json!({"id": id, "result": result}),
            Err(error) => json!({"id": id, "error": error}),
        };
        send(&mut s, reply);
    }
}
