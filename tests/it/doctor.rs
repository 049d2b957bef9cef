//! `codex-bridge doctor`, run as the real binary against the Gitea
//! simulator, a real `codex app-server` on the fake model and the real
//! gitea-mcp: everything set up gives no `fail` and exit 0; then each broken
//! thing alone (wrong token, bot not admin, no hook, missing codex binary,
//! unreachable Gitea, unwritable workspace) fails exactly its own line and
//! the exit. No run prints a secret.

use crate::codexhome::{codex_bin, CodexHome};
use crate::fakemodel::FakeModel;
use crate::giteasim::{GiteaSim, Perm};
use crate::support::*;
use crate::testapp::gitea_mcp_bin;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const URL: &str = "http://bridge.example/api/gitea/webhook";
const EVENTS: [&str; 3] = [
    "issue_comment",
    "pull_request_comment",
    "pull_request_review",
];

/// A broken thing: what, the config changes, the `--url`, the line that fails.
type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, &'a str, &'a str);

struct Rig {
    sim: GiteaSim,
    _model: FakeModel,
    home: CodexHome,
    dir: tempfile::TempDir,
}

impl Rig {
    fn start() -> Rig {
        let sim = GiteaSim::start();
        sim.create_repo("acme", "widgets");
        sim.set_permission("acme", "widgets", BOT, Perm::Admin);
        sim.add_webhook("acme", "widgets", URL, SECRET, &EVENTS, true);
        let model = FakeModel::start();
        let home = CodexHome::new(&model);
        let dir = tempfile::tempdir().unwrap();
        // The repository is known through the config, as before any webhook.
        std::fs::write(
            dir.path().join("bridge.toml"),
            "[repositories.\"acme/widgets\"]\nsandbox = \"read-only\"\n",
        )
        .unwrap();
        let rig = Rig {
            sim,
            _model: model,
            home,
            dir,
        };
        let migrated = rig.run(&[], &["migrate"]);
        assert!(migrated.status.success(), "{}", everything(&migrated));
        rig
    }

    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    /// `codex-bridge ARGS` with the rig's configuration, `changes` on top.
    fn run(&self, changes: &[(&str, &str)], args: &[&str]) -> Output {
        let s = |p: &Path| p.to_str().unwrap().to_owned();
        let mut env: Vec<(String, String)> = [
            (
                "DATABASE_URL",
                format!("sqlite://{}", s(&self.path("bridge.db"))),
            ),
            ("GITEA_URL", self.sim.base_url()),
            ("GITEA_TOKEN", GITEA_TOKEN.to_owned()),
            ("WEBHOOK_SECRET", SECRET.to_owned()),
            ("ADMIN_TOKEN", ADMIN_TOKEN.to_owned()),
            ("BOT_LOGIN", BOT.to_owned()),
            ("STATE_DIR", s(&self.path("state"))),
            ("WORKSPACE_ROOT", s(&self.path("ws"))),
            ("AGENT_RUNTIME", "codex".to_owned()),
            ("CODEX_BIN", s(&codex_bin())),
            ("CODEX_HOME", s(&self.home.path())),
            ("GITEA_MCP_COMMAND", gitea_mcp_bin()),
            ("GITEA_MCP_ARGS", "[]".to_owned()),
            ("GITEA_MCP_URL_ENV", "GITEA_URL".to_owned()),
            ("GITEA_MCP_TOKEN_ENV", "GITEA_TOKEN".to_owned()),
            ("LOG_FILTER", "warn".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (format!("CODEX_BRIDGE_{k}"), v))
        .collect();
        for (k, v) in changes {
            let k = format!("CODEX_BRIDGE_{k}");
            env.retain(|(e, _)| *e != k);
            env.push((k, (*v).to_owned()));
        }
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_codex-bridge"));
        for (k, _) in std::env::vars() {
            if k.starts_with("CODEX_BRIDGE_") {
                cmd.env_remove(k);
            }
        }
        cmd.envs(env)
            .arg("--config")
            .arg(self.path("bridge.toml"))
            .args(args)
            .output()
            .unwrap()
    }

    /// `doctor --json --url URL`: the checks, the exit, and all it printed.
    fn doctor(&self, changes: &[(&str, &str)], url: &str) -> (Vec<Value>, bool, String) {
        let o = self.run(changes, &["doctor", "--json", "--url", url]);
        let text = everything(&o);
        for secret in [GITEA_TOKEN, SECRET, ADMIN_TOKEN] {
            assert!(!text.contains(secret), "a secret was printed: {text}");
        }
        let checks: Vec<Value> =
            serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
        (checks, o.status.success(), text)
    }
}

fn everything(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `area name` of every check with this outcome.
fn with(checks: &[Value], outcome: &str) -> Vec<String> {
    checks
        .iter()
        .filter(|c| c["outcome"] == outcome)
        .map(|c| {
            format!(
                "{} {}",
                c["area"].as_str().unwrap(),
                c["name"].as_str().unwrap()
            )
        })
        .collect()
}

#[test]
fn doctor_passes_a_working_setup_and_fails_each_broken_thing_on_its_own_line() {
    let rig = Rig::start();
    let (checks, passed, text) = rig.doctor(&[], URL);
    assert!(passed, "{text}");
    assert_eq!(with(&checks, "fail"), Vec::<String>::new(), "{text}");
    let names: Vec<String> = with(&checks, "ok");
    for expected in [
        "config keys",
        "store migrations",
        "store writable",
        "store wal",
        "gitea reachable",
        "gitea token",
        "gitea bot_login",
        "gitea permission acme/widgets",
        "gitea hook acme/widgets",
        "codex binary",
        "codex app-server",
        "codex account",
        "gitea-mcp tools",
        "workspace writable",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} not ok: {text}"
        );
    }

    let file = rig.path("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    let unwritable = format!("{}/ws", file.to_str().unwrap());
    let cases: [Case; 5] = [
        (
            "wrong token",
            vec![("GITEA_TOKEN", "not-the-bots-token-0000")],
            URL,
            "gitea token",
        ),
        (
            "no hook",
            vec![],
            "http://elsewhere.example/api/gitea/webhook",
            "gitea hook acme/widgets",
        ),
        (
            "missing codex",
            vec![("CODEX_BIN", "/nonexistent/codex")],
            URL,
            "codex binary",
        ),
        (
            "unreachable Gitea",
            vec![("GITEA_URL", "http://127.0.0.1:9")],
            URL,
            "gitea reachable",
        ),
        (
            "unwritable workspace",
            vec![("WORKSPACE_ROOT", unwritable.as_str())],
            URL,
            "workspace writable",
        ),
    ];
    for (what, changes, url, line) in cases {
        let (checks, passed, text) = rig.doctor(&changes, url);
        assert!(!passed, "{what}: exit 0: {text}");
        assert_eq!(with(&checks, "fail"), [line], "{what}: {text}");
    }

    rig.sim.set_permission("acme", "widgets", BOT, Perm::Write);
    let (checks, passed, text) = rig.doctor(&[], URL);
    assert!(!passed, "bot not admin: exit 0: {text}");
    assert_eq!(
        with(&checks, "fail"),
        ["gitea permission acme/widgets"],
        "{text}"
    );

    // The plain output: one aligned line per check, the action after `->`.
    let o = rig.run(&[], &["doctor", "--url", URL]);
    let plain = everything(&o);
    assert!(!o.status.success());
    assert!(
        plain.lines().any(|l| l.starts_with("fail  gitea")
            && l.contains("permission acme/widgets")
            && l.contains("-> make ccbot an admin collaborator")),
        "{plain}"
    );
}
