//! The README's "First answered mention", run as written: its blocks marked
//! `# walkthrough` are read from README.md and run in order, so the README
//! and this test cannot drift. A command there that this test does not know
//! how to run fails it, and so does a configuration key it does not know.
//!
//! What stands in for what the operator has: the Gitea simulator for Gitea
//! (its bot is `ccbot`, so `bot_login` and the mention say that); the pinned
//! codex for `npm install` (the test checks the README names the pinned
//! version and puts that binary on `PATH`); the fake model behind a provider
//! that needs an OpenAI account, so `codex login` with an API key on stdin
//! really signs the app-server in (its `CODEX_HOME` is added to the
//! configuration); and the pinned PyPI gitea-mcp for the official one (its
//! command, and the variables it reads, `GITEA_URL` and `GITEA_TOKEN`,
//! replace the README's). Ports and paths are this test's: `listen` and
//! `public_url` name a free port on 127.0.0.1, and the commands run in a
//! temp dir, where `./data` lands.
//!
//! Each command is printed as it runs (`$ ...`, see `--nocapture`). The
//! mention itself is a comment in the simulator, delivered through the hook
//! `gitea hook` made (the simulator's own test hook is removed first); the
//! test waits for the "received" receipt and the reply in the thread.

use crate::codexhome::{codex_bin, CodexHome, CODEX_VERSION};
use crate::fakemodel::{FakeModel, Item, Step};
use crate::giteasim::{GiteaSim, Perm};
use crate::support::*;
use crate::testapp::gitea_mcp_bin;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

const README: &str = include_str!("../../README.md");
const SECTION: &str = "## First answered mention";
const MARK: &str = "# walkthrough";
/// What `printenv OPENAI_API_KEY` gives the walkthrough's `codex login`.
const API_KEY: &str = "sk-test-walkthrough-5c1d7e9a3b";
const REPLY: &str = "The parser test flakes because it reads the clock twice.";

/// One marked block of the walkthrough.
#[derive(Debug)]
enum Block {
    /// A ```toml block: the configuration file, named after the mark.
    Config { file: String, text: String },
    /// A ```sh block: its command lines (comments and blank lines left out).
    Commands(Vec<String>),
}

/// The marked blocks of the README's walkthrough section, in order.
fn walkthrough() -> Vec<Block> {
    let start = README
        .find(SECTION)
        .unwrap_or_else(|| panic!("README.md has no section {SECTION:?}"));
    let section = &README[start + SECTION.len()..];
    let section = section.find("\n## ").map_or(section, |end| &section[..end]);
    let mut blocks = Vec::new();
    let mut lines = section.lines();
    while let Some(line) = lines.next() {
        let Some(lang) = line.strip_prefix("```") else {
            continue;
        };
        let body: Vec<&str> = lines.by_ref().take_while(|l| *l != "```").collect();
        let Some(first) = body.first().filter(|l| l.starts_with(MARK)) else {
            continue;
        };
        match lang {
            "sh" => blocks.push(Block::Commands(
                body[1..]
                    .iter()
                    .map(|l| l.trim())
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .map(str::to_owned)
                    .collect(),
            )),
            "toml" => blocks.push(Block::Config {
                file: first
                    .strip_prefix(MARK)
                    .and_then(|f| f.strip_prefix(':'))
                    .map(str::trim)
                    .filter(|f| !f.is_empty())
                    .unwrap_or_else(|| panic!("a marked toml block names its file: {first:?}"))
                    .to_owned(),
                text: body[1..].join("\n"),
            }),
            other => panic!("a marked block in {other:?}, which this test cannot run"),
        }
    }
    assert!(
        !blocks.is_empty(),
        "no block marked {MARK:?} in {SECTION:?}"
    );
    blocks
}

/// The README's configuration with this test's values: every key there
/// must be one this test knows; it adds what stands in for the operator's
/// Codex and gitea-mcp.
fn configuration(text: &str, w: &Walk) -> String {
    let readme: toml::Table = text
        .parse()
        .unwrap_or_else(|e| panic!("the walkthrough's configuration is not TOML: {e}"));
    let base = format!("http://127.0.0.1:{}", w.port);
    let mut ours = toml::Table::new();
    for (key, value) in &readme {
        let value: toml::Value = match key.as_str() {
            "listen" => format!("127.0.0.1:{}", w.port).into(),
            "public_url" => base.clone().into(),
            "gitea_url" => w.sim.base_url().into(),
            "gitea_token" => GITEA_TOKEN.into(),
            "bot_login" => BOT.into(),
            "webhook_secret" => SECRET.into(),
            "admin_token" => ADMIN_TOKEN.into(),
            "gitea_mcp_command" => gitea_mcp_bin().into(),
            "gitea_mcp_args" => toml::Value::Array(Vec::new()),
            other => panic!(
                "the walkthrough's configuration sets `{other}` = {value}, which this test \
                 does not know how to stand in for: teach tests/it/walkthrough.rs"
            ),
        };
        ours.insert(key.clone(), value);
    }
    for (key, value) in [
        ("codex_home", path(&w.home.path())),
        ("gitea_mcp_url_env", "GITEA_URL".to_owned()),
        ("gitea_mcp_token_env", "GITEA_TOKEN".to_owned()),
    ] {
        ours.insert(key.to_owned(), value.into());
    }
    toml::to_string(&ours).unwrap()
}

fn path(p: &Path) -> String {
    p.to_str().unwrap().to_owned()
}

/// What the walkthrough runs against, and what its commands have set.
struct Walk {
    sim: GiteaSim,
    _model: FakeModel,
    home: CodexHome,
    dir: tempfile::TempDir,
    port: u16,
    /// The variables `export` set, and `PATH`.
    env: BTreeMap<String, String>,
    /// `codex-bridge serve &`.
    server: Option<Child>,
}

impl Drop for Walk {
    fn drop(&mut self) {
        if let Some(mut server) = self.server.take() {
            let _ = server.kill();
            let _ = server.wait();
        }
    }
}

impl Walk {
    fn bridge(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_codex-bridge"));
        for (k, _) in std::env::vars() {
            if k.starts_with("CODEX_BRIDGE_") || k == "RUST_LOG" {
                cmd.env_remove(k);
            }
        }
        cmd.current_dir(self.dir.path()).envs(&self.env).args(args);
        cmd
    }

    /// Runs one line of the walkthrough.
    fn run(&mut self, line: &str) {
        println!("$ {line}");
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["npm", "install", "-g", package] => {
                let version = package.strip_prefix("@openai/codex@").unwrap_or_else(|| {
                    panic!("the walkthrough installs {package}, not @openai/codex")
                });
                assert_eq!(
                    version, CODEX_VERSION,
                    "the walkthrough installs another codex than the pinned one"
                );
                let bin = codex_bin();
                let dir = bin.parent().unwrap();
                assert_eq!(bin.file_name().unwrap(), "codex");
                let path = std::env::var("PATH").unwrap_or_default();
                self.env
                    .insert("PATH".into(), format!("{}:{path}", dir.display()));
            }
            ["export", assignment] => {
                let (name, value) = assignment
                    .split_once('=')
                    .unwrap_or_else(|| panic!("export without a value: {line}"));
                let value = value.replace("$PWD", &path(self.dir.path()));
                self.env.insert(name.to_owned(), value);
            }
            ["codex-bridge", args @ .., "&"] => self.serve(args),
            ["printenv", var, "|", "codex-bridge", args @ ..] => {
                let input = match *var {
                    "OPENAI_API_KEY" => API_KEY,
                    other => panic!("the walkthrough pipes {other}, which this test lacks"),
                };
                let o = self.output(args, Some(input));
                assert!(o.status.success(), "{line}: {}", text(&o));
                assert!(!text(&o).contains(API_KEY), "the key is never shown");
            }
            ["codex-bridge", args @ ..] => {
                let o = self.output(args, None);
                assert!(o.status.success(), "{line}: {}", text(&o));
            }
            _ => panic!(
                "the README's walkthrough has a command this test does not know how to run: \
                 {line:?} (teach tests/it/walkthrough.rs)"
            ),
        }
    }

    fn output(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut child = self
            .bridge(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        {
            let mut input = child.stdin.take().unwrap();
            if let Some(text) = stdin {
                writeln!(input, "{text}").unwrap();
            }
        }
        let o = child.wait_with_output().unwrap();
        print!("{}", text(&o));
        for secret in [GITEA_TOKEN, SECRET, ADMIN_TOKEN, API_KEY] {
            assert!(
                !text(&o).contains(secret),
                "a secret was printed: {}",
                text(&o)
            );
        }
        o
    }

    /// The server in the background, up once `/healthz` answers.
    fn serve(&mut self, args: &[&str]) {
        assert!(
            self.server.is_none(),
            "the walkthrough starts the server twice"
        );
        let log = std::fs::File::create(self.dir.path().join("serve.log")).unwrap();
        let child = self
            .bridge(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.server = Some(child);
        let health = format!("http://127.0.0.1:{}/healthz", self.port);
        let up = poll_until(Duration::from_secs(30), || {
            ureq::get(&health).call().is_ok()
        });
        assert!(up, "the server did not answer /healthz: {}", self.log());
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("serve.log")).unwrap_or_default()
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A port nothing listens on now (the server binds it a moment later).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[test]
fn the_readme_walkthrough_gets_a_mention_answered() {
    let sim = GiteaSim::start();
    sim.create_repo("acme", "widgets");
    sim.set_permission("acme", "widgets", BOT, Perm::Admin);
    sim.add_user("bob");
    sim.set_permission("acme", "widgets", "bob", Perm::Write);
    let issue = sim.create_issue("acme", "widgets", "Flaky parser test", "It flakes.", "bob");
    // Only the hook the walkthrough makes may carry the mention.
    sim.clear_webhook();
    let model = FakeModel::start();
    let home = CodexHome::new(&model);
    let config = std::fs::read_to_string(home.config_path()).unwrap();
    std::fs::write(home.config_path(), config + "requires_openai_auth = true\n").unwrap();
    let mut w = Walk {
        sim,
        _model: model,
        home,
        dir: tempfile::tempdir().unwrap(),
        port: free_port(),
        env: BTreeMap::new(),
        server: None,
    };

    for block in walkthrough() {
        match block {
            Block::Config { file, text } => {
                println!("(writing {file})");
                let ours = configuration(&text, &w);
                std::fs::write(w.dir.path().join(file), ours).unwrap();
            }
            Block::Commands(lines) => {
                for line in lines {
                    w.run(&line);
                }
            }
        }
    }
    assert!(
        w.server.is_some(),
        "the walkthrough never started the server"
    );

    // The mention, as bob writes it in Gitea; the model answers through the
    // Gitea MCP server's comment tool, marker included, then ends its turn.
    w._model.push(Step::Reply(vec![Item::mcp(
        "gitea",
        "add_comment",
        json!({
            "owner": "acme",
            "repo": "widgets",
            "issue_number": issue,
            "body": format!("{REPLY}\n\n{{{{marker}}}}"),
        }),
    )]));
    w._model
        .push(Step::message(&format!("{REPLY}\n\n{{{{marker}}}}")));
    let mention = w.sim.post_comment_as(
        "bob",
        "acme",
        "widgets",
        issue,
        "@ccbot why does the parser test flake?",
    );
    let bot_comments = |w: &Walk| -> Vec<Value> {
        w.sim
            .comments("acme", "widgets", issue)
            .into_iter()
            .filter(|c| c["user"]["login"] == BOT)
            .collect()
    };
    let answered = poll_until(Duration::from_secs(90), || {
        bot_comments(&w)
            .iter()
            .any(|c| c["body"].as_str().unwrap_or("").contains(REPLY))
    });
    assert!(
        answered,
        "no reply to comment {} in the thread; the bot's comments: {:?}\nserver log:\n{}",
        mention["id"],
        bot_comments(&w),
        w.log()
    );
    let receipts = bot_comments(&w)
        .into_iter()
        .filter(|c| !c["body"].as_str().unwrap_or("").contains(REPLY))
        .count();
    assert_eq!(
        receipts,
        1,
        "one \"received\" receipt: {:?}",
        bot_comments(&w)
    );
    let hook_delivered = w
        .sim
        .deliveries()
        .into_iter()
        .any(|d| d.json()["comment"]["id"] == mention["id"] && d.status == Some(202));
    assert!(
        hook_delivered,
        "the mention came through the hook gitea hook made"
    );
}

#[test]
fn the_walkthrough_is_found_and_its_commands_are_known() {
    let blocks = walkthrough();
    let commands: Vec<&String> = blocks
        .iter()
        .filter_map(|b| match b {
            Block::Commands(lines) => Some(lines),
            Block::Config { .. } => None,
        })
        .flatten()
        .collect();
    for needed in ["serve", "codex login", "gitea hook", "doctor"] {
        assert!(
            commands.iter().any(|c| c.contains(needed)),
            "the walkthrough runs no `{needed}`: {commands:?}"
        );
    }
    let configs = blocks
        .iter()
        .filter(|b| matches!(b, Block::Config { .. }))
        .count();
    assert_eq!(configs, 1, "{blocks:?}");
}
