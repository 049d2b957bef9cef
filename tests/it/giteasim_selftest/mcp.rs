//! The real PyPI gitea-mcp posting comments through the simulator.

use super::*;

// ---------------------------------------------------------------------------
// The PyPI gitea-mcp against the simulator
// ---------------------------------------------------------------------------

/// A stdio MCP client: newline-delimited JSON-RPC.
struct Mcp {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: mpsc::Receiver<String>,
    stderr: Arc<Mutex<String>>,
}

impl Mcp {
    fn send(&mut self, msg: Value) {
        writeln!(self.stdin, "{msg}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn request(&mut self, id: i64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| {
                    panic!(
                        "gitea-mcp did not answer {method} within 60 s; its stderr:\n{}",
                        self.stderr.lock().unwrap()
                    )
                });
            let Ok(msg) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if msg["id"] == json!(id) {
                assert!(msg.get("error").is_none(), "{method}: {msg}");
                return msg["result"].clone();
            }
        }
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_gitea_mcp(sim: &GiteaSim, home: &std::path::Path) -> Mcp {
    let bin = crate::testapp::gitea_mcp_bin();
    let mut child = Command::new(&bin)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("GITEA_URL", sim.base_url())
        .env("GITEA_TOKEN", GITEA_TOKEN)
        .env("GITEA_MAX_RETRIES", "0")
        .env("GITEA_TIMEOUT", "20")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot run {bin}: {e} (reinstall with scripts/ensure-gitea-mcp)")
        });
    let stdin = child.stdin.take().unwrap();
    let (tx, lines) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let stderr = Arc::new(Mutex::new(String::new()));
    let sink = stderr.clone();
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            sink.lock().unwrap().push_str(&format!("{line}\n"));
        }
    });
    Mcp {
        child,
        stdin,
        lines,
        stderr,
    }
}

#[test]
fn giteasim_pypi_gitea_mcp_posts_comments_as_the_bot() {
    let sim = GiteaSim::start();
    let rx = Receiver::start();
    sim.set_webhook(&rx.url(), SECRET);
    sim.create_repo("acme", "widgets");
    let issue = sim.create_issue("acme", "widgets", "Flaky", "b", "alice");
    sim.commit("acme", "widgets", "feature/x", "x.txt", "x\n", "x");
    let pull = sim.create_pull("acme", "widgets", "Fix", "", "alice", "feature/x", "main");
    let home = tempfile::tempdir().unwrap();
    let mut mcp = spawn_gitea_mcp(&sim, home.path());

    let init = mcp.request(
        1,
        "initialize",
        json!({
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "codex-bridge-tests", "version": "0"}
        }),
    );
    assert!(init["capabilities"]["tools"].is_object(), "{init}");
    mcp.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let tools = mcp.request(2, "tools/list", json!({}));
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"add_comment") && names.contains(&"add_comment_on_pr"),
        "{names:?}"
    );

    let body =
        "Found it: the backoff uses the wall clock.\n\n<!-- codex-bridge task=t1 turn=u1 -->";
    let result = mcp.request(
        3,
        "tools/call",
        json!({"name": "add_comment", "arguments": {
            "owner": "acme", "repo": "widgets", "issue_number": issue, "body": body}}),
    );
    assert_ne!(result["isError"], true, "{result}");
    let stored = sim.comments("acme", "widgets", issue);
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0]["user"]["login"], BOT);
    assert_eq!(
        stored[0]["body"], body,
        "the body arrives byte for byte (LF kept)"
    );
    let text = result["content"][0]["text"].as_str().unwrap_or_default();
    assert!(
        text.contains(&stored[0]["id"].to_string()),
        "the tool returns the comment: {result}"
    );

    let pr_body = "PR note <!-- codex-bridge task=t2 turn=u1 -->";
    let result = mcp.request(
        4,
        "tools/call",
        json!({"name": "add_comment_on_pr", "arguments": {
            "owner": "acme", "repo": "widgets", "pull_number": pull, "body": pr_body}}),
    );
    assert_ne!(result["isError"], true, "{result}");
    let stored = sim.comments("acme", "widgets", pull);
    assert_eq!(
        (stored.len(), stored[0]["body"].as_str()),
        (1, Some(pr_body))
    );
    assert_eq!(stored[0]["user"]["login"], BOT);

    // The requests carried the bot's token as Gitea's `token` scheme.
    let posts: Vec<_> = sim
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST")
        .collect();
    assert_eq!(posts.len(), 2);
    for r in &posts {
        assert_eq!(r.authorization.as_deref(), Some(bot().as_str()));
    }
    assert_eq!(
        posts[1].path,
        format!("/api/v1/repos/acme/widgets/issues/{pull}/comments")
    );

    // Gitea fires webhooks for the bot's own API comments.
    sim.wait_idle();
    let senders: Vec<Value> = sim
        .deliveries()
        .iter()
        .map(|d| d.json()["sender"]["login"].clone())
        .collect();
    assert_eq!(senders, vec![json!(BOT), json!(BOT)]);

    // A 404 becomes a tool error result, not a protocol error.
    let missing = mcp.request(
        5,
        "tools/call",
        json!({"name": "add_comment", "arguments": {
            "owner": "acme", "repo": "widgets", "issue_number": 99, "body": "x"}}),
    );
    assert_eq!(missing["isError"], true, "{missing}");
    assert!(
        missing["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("404"),
        "{missing}"
    );
    // So does a 500 from a faulty server.
    sim.fail_next_matching(1, Some("POST"), "/api/v1/repos/");
    let failed = mcp.request(
        6,
        "tools/call",
        json!({"name": "add_comment", "arguments": {
            "owner": "acme", "repo": "widgets", "issue_number": issue, "body": "x"}}),
    );
    assert_eq!(failed["isError"], true, "{failed}");
    assert_eq!(sim.comments("acme", "widgets", issue).len(), 1);
}
