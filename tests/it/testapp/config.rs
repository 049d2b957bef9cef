//! The environment a test server starts with.

use super::*;

/// The server's configuration as `CODEX_BRIDGE_*` variables: what the rig
/// always sets, what the peers need, then the test's own.
pub(super) fn configuration(
    b: &TestAppBuilder,
    peers: &Peers,
    codex_home: Option<&Path>,
    dir: &Path,
    db_url: &str,
) -> BTreeMap<String, String> {
    let path = |p: PathBuf| p.to_str().unwrap().to_owned();
    let mut env: BTreeMap<String, String> = [
        ("CODEX_BRIDGE_LISTEN", "127.0.0.1:0".to_owned()),
        ("CODEX_BRIDGE_DATABASE_URL", db_url.to_owned()),
        ("CODEX_BRIDGE_WEBHOOK_SECRET", SECRET.to_owned()),
        ("CODEX_BRIDGE_ADMIN_TOKEN", ADMIN_TOKEN.to_owned()),
        ("CODEX_BRIDGE_GITEA_TOKEN", GITEA_TOKEN.to_owned()),
        ("CODEX_BRIDGE_GITEA_URL", "http://127.0.0.1:9".to_owned()),
        ("CODEX_BRIDGE_BOT_LOGIN", BOT.to_owned()),
        ("CODEX_BRIDGE_STATE_DIR", path(dir.join("state"))),
        ("CODEX_BRIDGE_WORKSPACE_ROOT", path(dir.join("ws"))),
        ("CODEX_BRIDGE_LOG_FILTER", "info".to_owned()),
        // A test of one turn ends with that turn; the workflow tests turn
        // workflows on (`Loop::with_workflows`).
        ("CODEX_BRIDGE_WORKFLOWS", "false".to_owned()),
        // A stop waits this long for the turns under way (the drain tests
        // set their own).
        ("CODEX_BRIDGE_DRAIN_TIMEOUT_SECS", "5".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    fn set(env: &mut BTreeMap<String, String>, k: &str, v: String) {
        env.insert(k.to_owned(), v);
    }
    match b.gitea {
        Gitea::Unreachable => {}
        Gitea::Absent => {
            env.remove("CODEX_BRIDGE_GITEA_URL");
            env.remove("CODEX_BRIDGE_GITEA_TOKEN");
        }
        Gitea::Git => set(
            &mut env,
            "CODEX_BRIDGE_GITEA_URL",
            peers.git.as_ref().unwrap().base_url(),
        ),
        Gitea::Sim => set(
            &mut env,
            "CODEX_BRIDGE_GITEA_URL",
            peers.gitea.as_ref().unwrap().base_url(),
        ),
    }
    match b.runtime {
        Runtime::IntakeOnly => set(&mut env, "CODEX_BRIDGE_AGENT_RUNTIME", "none".into()),
        Runtime::Scripted => set(&mut env, "CODEX_BRIDGE_AGENT_RUNTIME", "scripted".into()),
        Runtime::Codex | Runtime::CodexByDefault => {
            if b.runtime == Runtime::Codex {
                set(&mut env, "CODEX_BRIDGE_AGENT_RUNTIME", "codex".into());
            }
            set(&mut env, "CODEX_BRIDGE_CODEX_BIN", path(codex_bin()));
            set(
                &mut env,
                "CODEX_BRIDGE_CODEX_HOME",
                path(
                    codex_home
                        .expect("a Codex runtime has a Codex home")
                        .to_path_buf(),
                ),
            );
        }
    }
    if b.gitea_mcp {
        set(&mut env, "CODEX_BRIDGE_GITEA_MCP_COMMAND", gitea_mcp_bin());
        set(&mut env, "CODEX_BRIDGE_GITEA_MCP_ARGS", "[]".into());
        set(
            &mut env,
            "CODEX_BRIDGE_GITEA_MCP_URL_ENV",
            "GITEA_URL".into(),
        );
        set(
            &mut env,
            "CODEX_BRIDGE_GITEA_MCP_TOKEN_ENV",
            "GITEA_TOKEN".into(),
        );
    }
    for (k, v) in &b.env {
        env.insert(k.clone(), v.clone());
    }
    env
}
