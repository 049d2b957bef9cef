//! Loading and validation as an operator meets them: through
//! `Config::from_sources`, with a file and an environment.

use super::*;
use crate::domain::policy::{ApprovalPolicy, Sandbox};
use secrecy::ExposeSecret;
use std::time::Duration;

fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn error(pairs: &[(&str, &str)]) -> String {
    Config::from_sources(None, &env(pairs))
        .unwrap_err()
        .to_string()
}

fn file(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

fn file_error(text: &str) -> String {
    let (_dir, path) = file(text);
    Config::from_sources(Some(&path), &env(&[]))
        .unwrap_err()
        .to_string()
}

#[test]
fn defaults_are_the_documented_ones() {
    let c = Config::from_sources(None, &env(&[])).unwrap();
    assert_eq!(c.listen, "127.0.0.1:8080");
    assert_eq!(
        c.database_url,
        DatabaseUrl::Sqlite(PathBuf::from("./data/codex-bridge.db"))
    );
    assert_eq!(c.instance_id, "default");
    assert_eq!(c.agent_runtime, AgentRuntimeKind::Codex);
    assert_eq!(c.codex_bin, PathBuf::from("codex"));
    assert_eq!(c.max_body_bytes, 1024 * 1024);
    assert_eq!(c.writer_threads, 1);
    assert_eq!(c.receipt_mode, ReceiptMode::Comment);
    assert_eq!(c.trigger_permission, TriggerPermission::Write);
    assert_eq!(c.default_policy.approval_policy, ApprovalPolicy::Never);
    assert_eq!(c.default_policy.sandbox, Sandbox::DangerFullAccess);
    assert_eq!(c.default_policy.turn_timeout, Duration::from_secs(1800));
    assert_eq!(c.catchup_interval_secs, 60);
    assert_eq!(c.delivery_retention_days, 30);
    assert_eq!(c.turn_event_retention_days, 30);
    let pg = Config::from_sources(
        None,
        &env(&[("CODEX_BRIDGE_DATABASE_URL", "postgres://u@localhost/db")]),
    )
    .unwrap();
    let cores = std::thread::available_parallelism().map_or(4, |n| n.get());
    assert_eq!(pg.writer_threads, cores.clamp(1, 4));
}

#[test]
fn environment_overrides_the_file() {
    let (_dir, path) =
        file("listen = \"127.0.0.1:9000\"\nmax_body_bytes = 2048\nbot_login = \"ccbot\"\n");
    let c = Config::from_sources(
        Some(&path),
        &env(&[("CODEX_BRIDGE_LISTEN", "127.0.0.1:9001")]),
    )
    .unwrap();
    assert_eq!(c.listen, "127.0.0.1:9001");
    assert_eq!(c.max_body_bytes, 2048);
    assert_eq!(c.bot_login, "ccbot");
}

#[test]
fn errors_name_the_key_and_never_echo_secrets() {
    let err = error(&[("CODEX_BRIDGE_WEBHOOK_SECRET", "short-sekrit")]);
    assert!(err.contains("webhook_secret"), "{err}");
    assert!(err.contains("CODEX_BRIDGE_WEBHOOK_SECRET"), "{err}");
    assert!(!err.contains("short-sekrit"), "{err}");

    let err = error(&[("CODEX_BRIDGE_MAX_BODY_BYTES", "lots")]);
    assert!(
        err.contains("max_body_bytes") && err.contains("not a whole number"),
        "{err}"
    );
    assert!(error(&[("CODEX_BRIDGE_LISTEN", "nowhere")]).contains("listen"));
    assert!(error(&[("CODEX_BRIDGE_DATABASE_URL", "mysql://x")]).contains("database_url"));
    assert!(error(&[("CODEX_BRIDGE_INSTANCE_ID", "a:b")]).contains("instance_id"));
    let err = error(&[("CODEX_BRIDGE_LOG_FORMAT", "xml")]);
    assert!(
        err.contains("log_format") && err.contains("plain or json"),
        "{err}"
    );
    let err = error(&[("CODEX_BRIDGE_RECEIPT_MODE", "email")]);
    assert!(
        err.contains("receipt_mode") && err.contains("comment or reaction"),
        "{err}"
    );
    let err = error(&[("CODEX_BRIDGE_TRIGGER_PERMISSION", "owner")]);
    assert!(err.contains("read, write or admin"), "{err}");

    // A secret of the wrong type in the file: named, not quoted.
    let err = file_error("admin_token = 12345678901234567890\n");
    assert!(
        err.contains("admin_token") && err.contains("quoted string"),
        "{err}"
    );
    assert!(!err.contains("1234567890"), "{err}");
}

#[test]
fn every_documented_key_is_read_from_the_environment() {
    let set = env(&[
        ("CODEX_BRIDGE_AGENT_RUNTIME", "scripted"),
        ("CODEX_BRIDGE_LEASE_TTL_SECS", "9"),
        ("CODEX_BRIDGE_LEASE_HEARTBEAT_SECS", "3"),
        ("CODEX_BRIDGE_SESSION_IDLE_SECS", "7"),
        ("CODEX_BRIDGE_RETRY_BACKOFF_SECS", "4"),
        ("CODEX_BRIDGE_MAX_ATTEMPTS", "3"),
        ("CODEX_BRIDGE_SCHEDULER_SWEEP_MS", "150"),
        ("CODEX_BRIDGE_CATCHUP_INTERVAL_SECS", "0"),
    ]);
    for key in set.keys() {
        let name = key.trim_start_matches("CODEX_BRIDGE_").to_ascii_lowercase();
        assert!(
            KEYS.iter().any(|(k, _)| *k == name),
            "{name} is not documented in KEYS"
        );
    }
    let c = Config::from_sources(None, &set).unwrap();
    assert_eq!(c.agent_runtime, AgentRuntimeKind::Scripted);
    assert_eq!((c.lease_ttl_secs, c.lease_heartbeat_secs), (9, 3));
    assert_eq!(
        (c.session_idle_secs, c.retry_backoff_secs, c.max_attempts),
        (7, 4, 3)
    );
    assert_eq!(c.scheduler_sweep_ms, 150);
    assert_eq!(c.catchup_interval_secs, 0, "0 turns the catch-up off");
    let err = error(&[("CODEX_BRIDGE_CATCHUP_INTERVAL_SECS", "86401")]);
    assert!(
        err.contains("catchup_interval_secs") && err.contains("0..=86400"),
        "{err}"
    );
    let err = error(&[
        ("CODEX_BRIDGE_LEASE_TTL_SECS", "5"),
        ("CODEX_BRIDGE_LEASE_HEARTBEAT_SECS", "5"),
    ]);
    assert!(err.contains("lease_heartbeat_secs"), "{err}");
}

#[test]
fn the_remote_workers_call_timeout_and_lease_ttl_are_keys_with_sane_bounds() {
    let c = Config::from_sources(None, &env(&[])).unwrap();
    assert_eq!(
        (c.worker_call_timeout_secs, c.worker_lease_ttl_secs),
        (120, 30)
    );
    let c = Config::from_sources(
        None,
        &env(&[
            ("CODEX_BRIDGE_WORKER_CALL_TIMEOUT_SECS", "15"),
            ("CODEX_BRIDGE_WORKER_LEASE_TTL_SECS", "6"),
        ]),
    )
    .unwrap();
    assert_eq!(
        (c.worker_call_timeout_secs, c.worker_lease_ttl_secs),
        (15, 6)
    );
    for (key, value, range) in [
        ("WORKER_CALL_TIMEOUT_SECS", "0", "1..=3600"),
        ("WORKER_CALL_TIMEOUT_SECS", "86400", "1..=3600"),
        ("WORKER_LEASE_TTL_SECS", "0", "3..=3600"),
        ("WORKER_LEASE_TTL_SECS", "2", "3..=3600"),
        ("WORKER_LEASE_TTL_SECS", "3601", "3..=3600"),
    ] {
        let name = format!("CODEX_BRIDGE_{key}");
        let err = error(&[(name.as_str(), value)]);
        assert!(
            err.contains(&key.to_ascii_lowercase()) && err.contains(range),
            "{key}={value}: {err}"
        );
    }
}

/// The serde struct and `KEYS` list the same keys: a key in `KEYS` that the
/// struct lacked would be refused as unknown, and a field missing from `KEYS`
/// would be undocumented.
#[test]
fn the_serde_struct_reads_exactly_the_documented_keys() {
    use figment::error::Kind;
    use figment::value::{Dict, Value};
    let probe: Dict = [("not a key".to_owned(), Value::from(""))].into();
    let err = figment::Figment::from(figment::providers::Serialized::defaults(probe))
        .extract::<raw::Raw>()
        .err()
        .unwrap();
    let Kind::UnknownField(_, fields) = &err.kind else {
        panic!("{:?}", err.kind);
    };
    let mut fields = fields.to_vec();
    let mut keys: Vec<&str> = KEYS.iter().map(|(k, _)| *k).collect();
    fields.sort_unstable();
    keys.sort_unstable();
    assert_eq!(fields, keys);
}

#[test]
fn the_example_config_in_deploy_is_valid_and_sets_every_key() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/codex-bridge.example.toml");
    let c = Config::from_sources(Some(&path), &env(&[])).unwrap();
    assert_eq!(c.agent_runtime, AgentRuntimeKind::Codex);
    assert_eq!(c.gitea_mcp_args, vec!["-t".to_owned(), "stdio".to_owned()]);
    let text = std::fs::read_to_string(&path).unwrap();
    for (key, _) in KEYS {
        assert!(
            text.contains(&format!("{key} =")),
            "deploy example lacks `{key}`"
        );
    }
}

#[test]
fn trusted_proxies_and_metrics_listen_name_their_key() {
    let c = Config::from_sources(
        None,
        &env(&[("CODEX_BRIDGE_TRUSTED_PROXIES", r#"["10.0.0.0/8", "::1"]"#)]),
    )
    .unwrap();
    assert!(c.trusted_proxies.contains("10.1.2.3".parse().unwrap()));
    let (_dir, path) = file("trusted_proxies = [\"127.0.0.1\", \"fd00::/8\"]\n");
    let c = Config::from_sources(Some(&path), &env(&[])).unwrap();
    assert!(c.trusted_proxies.contains("fd00::9".parse().unwrap()));
    let err = error(&[("CODEX_BRIDGE_TRUSTED_PROXIES", "10.0.0.0/99")]);
    assert!(err.contains("trusted_proxies"), "{err}");
    let err = file_error("trusted_proxies = [1]\n");
    assert!(
        err.contains("trusted_proxies") && err.contains("addresses or networks"),
        "{err}"
    );
    let err = error(&[("CODEX_BRIDGE_METRICS_LISTEN", "nope")]);
    assert!(err.contains("metrics_listen"), "{err}");
    let c = Config::from_sources(None, &env(&[])).unwrap();
    assert!(c.trusted_proxies.is_empty() && c.metrics_listen.is_none());
}

#[test]
fn repositories_override_the_thread_policy_per_repository() {
    let (_dir, path) = file(
        "sandbox = \"workspace-write\"\nturn_timeout_secs = 100\n\
         [repositories.\"Acme/Payments\"]\napproval_policy = \"untrusted\"\n\
         turn_timeout_secs = 7\n",
    );
    let c = Config::from_sources(Some(&path), &env(&[])).unwrap();
    let strict = c.repositories["acme/payments"];
    assert_eq!(strict.approval_policy, ApprovalPolicy::Untrusted);
    // Left out of the entry: from the global keys.
    assert_eq!(strict.sandbox, Sandbox::WorkspaceWrite);
    assert_eq!(strict.turn_timeout, Duration::from_secs(7));
    assert_eq!(c.default_policy.approval_policy, ApprovalPolicy::Never);
    assert_eq!(c.default_policy.sandbox, Sandbox::WorkspaceWrite);
    assert_eq!(c.default_policy.turn_timeout, Duration::from_secs(100));

    // The environment takes JSON and replaces the file's table whole.
    let c = Config::from_sources(
        Some(&path),
        &env(&[(
            "CODEX_BRIDGE_REPOSITORIES",
            r#"{"acme/web": {"sandbox": "read-only"}}"#,
        )]),
    )
    .unwrap();
    assert_eq!(c.repositories["acme/web"].sandbox, Sandbox::ReadOnly);
    assert!(!c.repositories.contains_key("acme/payments"));

    for (bad, names) in [
        (r#"{"acme/web": {"sandbox": "yolo"}}"#, "sandbox mode"),
        (
            r#"{"acme/web": {"approval": "never"}}"#,
            "unknown or mistyped key `approval`",
        ),
        (r#"{"../etc": {}}"#, "is not owner/name"),
        (
            r#"{"acme/web": {"turn_timeout_secs": 0}}"#,
            "turn_timeout_secs",
        ),
        (r#"{"acme/web": 5}"#, "`acme/web`: expected a table"),
        ("[1, 2]", "table keyed by owner/name"),
    ] {
        let err = error(&[("CODEX_BRIDGE_REPOSITORIES", bad)]);
        assert!(
            err.contains("repositories") && err.contains(names),
            "{bad}: {err}"
        );
    }
    let err = error(&[("CODEX_BRIDGE_APPROVAL_POLICY", "always")]);
    assert!(err.contains("approval_policy"), "{err}");
}

#[test]
fn unknown_file_keys_are_refused() {
    let err = file_error("lisen = \"127.0.0.1:9000\"\n");
    assert!(err.contains("unknown key `lisen`"), "{err}");
}

#[test]
fn an_unknown_config_variable_is_refused_by_name() {
    // A misspelt secret would otherwise leave a generated one in its place.
    let err = error(&[("CODEX_BRIDGE_WEBHOOK_SECRTE", "0123456789abcdef-webhook")]);
    assert!(err.contains("CODEX_BRIDGE_WEBHOOK_SECRTE"), "{err}");
    assert!(
        err.contains("(did you mean CODEX_BRIDGE_WEBHOOK_SECRET?)"),
        "{err}"
    );
    assert!(!err.contains("0123456789abcdef-webhook"), "{err}");
    // Keys are read in upper case only; another spelling is refused, not ignored.
    let err = error(&[("CODEX_BRIDGE_listen", "127.0.0.1:1")]);
    assert!(err.contains("CODEX_BRIDGE_listen"), "{err}");
    let err = error(&[("CODEX_BRIDGE_NOTHING_LIKE_A_KEY", "1")]);
    assert!(
        err.contains("CODEX_BRIDGE_NOTHING_LIKE_A_KEY") && !err.contains("did you mean"),
        "{err}"
    );
}

#[test]
fn variables_of_the_command_line_scripts_and_tests_are_not_keys() {
    let c = Config::from_sources(
        None,
        &env(&[
            ("CODEX_BRIDGE_CONFIG", "/etc/codex-bridge/codex-bridge.toml"),
            ("CODEX_BRIDGE_TEST_PG_PORT", "5433"),
            ("CODEX_BRIDGE_TEST_CODEX_BIN", "/opt/codex"),
            ("CODEX_BRIDGE_BENCH_HMAC_SECRET", "x"),
            ("CODEX_BRIDGE_PG_DURABLE", "1"),
            ("HOME", "/root"),
        ]),
    );
    assert!(c.is_ok(), "{:?}", c.err());
}

#[test]
fn a_blank_secret_is_refused_not_replaced_by_a_generated_one() {
    for key in ["WEBHOOK_SECRET", "ADMIN_TOKEN", "GITEA_TOKEN"] {
        for blank in ["", "   ", "\t"] {
            let name = format!("CODEX_BRIDGE_{key}");
            let err = error(&[(&name, blank)]);
            assert!(
                err.contains(&key.to_ascii_lowercase()) && err.contains("is empty"),
                "{key}={blank:?}: {err}"
            );
        }
    }
    let err = file_error("admin_token = \"  \"\n");
    assert!(
        err.contains("admin_token") && err.contains("is empty"),
        "{err}"
    );
}

#[test]
fn a_token_split_over_lines_is_refused() {
    let err = error(&[("CODEX_BRIDGE_ADMIN_TOKEN", "0123456789abcdef\nsecond-line")]);
    assert!(
        err.contains("admin_token") && err.contains("line break"),
        "{err}"
    );
    assert!(!err.contains("second-line"), "{err}");
    let err = error(&[("CODEX_BRIDGE_GITEA_TOKEN", "abc\r\ndef")]);
    assert!(
        err.contains("gitea_token") && err.contains("line break"),
        "{err}"
    );
    // A trailing newline, as `$(cat file)` or a here-doc leaves it, is trimmed.
    let c = Config::from_sources(
        None,
        &env(&[("CODEX_BRIDGE_ADMIN_TOKEN", "0123456789abcdef-admin\n")]),
    )
    .unwrap();
    assert!(c.admin_token.is_some());
}

#[test]
fn a_delivery_retention_shorter_than_gitea_s_replays_is_refused() {
    let err = error(&[("CODEX_BRIDGE_DELIVERY_RETENTION_DAYS", "7")]);
    assert!(
        err.contains("delivery_retention_days") && err.contains("below 8") && err.contains("use 0"),
        "{err}"
    );
    for ok in ["0", "8", "365"] {
        let c = Config::from_sources(None, &env(&[("CODEX_BRIDGE_DELIVERY_RETENTION_DAYS", ok)]))
            .unwrap();
        assert_eq!(c.delivery_retention_days.to_string(), ok);
    }
}

#[test]
fn a_number_too_large_names_its_key() {
    let err = error(&[("CODEX_BRIDGE_MAX_BODY_BYTES", "99999999999999999999")]);
    assert!(
        err.contains("max_body_bytes") && err.contains("out of range 1024..=67108864"),
        "{err}"
    );
    let err = error(&[("CODEX_BRIDGE_CODEX_NICE", &"9".repeat(45))]);
    assert!(
        err.contains("codex_nice") && err.contains("too large"),
        "{err}"
    );
    // TOML's own integers stop at i64; a longer literal is still the key's.
    let err = file_error("max_body_bytes = 99999999999999999999\n");
    assert!(err.contains("config key `max_body_bytes`"), "{err}");
    assert!(err.contains("out of range"), "{err}");
    let err = file_error("read_pool_size = 999999999999999999999999999999999999999999\n");
    assert!(
        err.contains("config key `read_pool_size`") && err.contains("too large"),
        "{err}"
    );
    let err = file_error("[repositories.\"a/b\"]\nturn_timeout_secs = 99999999999999999999\n");
    assert!(
        err.contains("config key `repositories`") && err.contains("`a/b`: turn_timeout_secs"),
        "{err}"
    );
    let err = file_error("writer_threads = -3\n");
    assert!(
        err.contains("writer_threads") && err.contains("not a whole number"),
        "{err}"
    );
}

#[test]
fn file_errors_give_the_line_but_not_its_text() {
    let err = file_error("listen = \"127.0.0.1:1\"\nwebhook_secret = \"unterminated-sekrit\n");
    assert!(
        err.contains("not valid TOML") && err.contains("line 2"),
        "{err}"
    );
    assert!(!err.contains("unterminated-sekrit"), "{err}");
}

#[test]
fn debug_output_hides_secrets() {
    let c = Config::from_sources(
        None,
        &env(&[
            ("CODEX_BRIDGE_WEBHOOK_SECRET", "0123456789abcdef-webhook"),
            ("CODEX_BRIDGE_DATABASE_URL", "postgres://u:pw-secret@h/db"),
        ]),
    )
    .unwrap();
    let dbg = format!("{c:?}");
    assert!(!dbg.contains("0123456789abcdef-webhook"));
    assert!(!dbg.contains("pw-secret"));
}

#[test]
fn config_words_are_their_serde_names() {
    for w in LogFormat::ALL {
        assert_eq!(serde_json::to_value(w).unwrap(), w.as_str());
    }
    for w in AgentRuntimeKind::ALL {
        assert_eq!(serde_json::to_value(w).unwrap(), w.as_str());
    }
    for w in ReceiptMode::ALL {
        assert_eq!(serde_json::to_value(w).unwrap(), w.as_str());
    }
    for w in TriggerPermission::ALL {
        assert_eq!(serde_json::to_value(w).unwrap(), w.as_str());
        assert_eq!(w.as_str().parse::<TriggerPermission>(), Ok(*w));
    }
}

#[test]
fn public_url_is_an_http_base_url_kept_without_its_trailing_slash() {
    let c = Config::from_sources(None, &env(&[])).unwrap();
    assert_eq!(c.public_url, None);
    for (given, kept) in [
        ("https://bridge.example.com/", "https://bridge.example.com"),
        ("http://10.0.0.5:8080", "http://10.0.0.5:8080"),
        ("https://example.com/bridge/", "https://example.com/bridge"),
    ] {
        let c = Config::from_sources(None, &env(&[("CODEX_BRIDGE_PUBLIC_URL", given)])).unwrap();
        assert_eq!(c.public_url.as_deref(), Some(kept), "{given}");
    }
    for bad in [
        "bridge.example.com",
        "ftp://bridge.example.com",
        "https://",
        "https:///admin",
        "https://user:pw@bridge.example.com",
        "https://bridge.example.com/?x=1",
        "https://bridge.example.com/#frag",
        "https://bridge example.com",
    ] {
        let err = error(&[("CODEX_BRIDGE_PUBLIC_URL", bad)]);
        assert!(
            err.contains("public_url") && err.contains("https://bridge.example.com"),
            "{bad}: {err}"
        );
        assert!(!err.contains("pw@"), "{err}");
    }
    let (_dir, path) = file("public_url = \"https://bridge.example.com\"\n");
    let c = Config::from_sources(Some(&path), &env(&[])).unwrap();
    assert_eq!(c.public_url.as_deref(), Some("https://bridge.example.com"));
}

#[test]
fn trust_fork_prs_is_off_unless_said_and_the_agent_token_falls_back_to_the_bots() {
    let c = Config::from_sources(
        None,
        &env(&[("CODEX_BRIDGE_GITEA_TOKEN", "bot-admin-token")]),
    )
    .unwrap();
    assert!(!c.trust_fork_prs);
    assert_eq!(
        c.agent_gitea_token().map(|t| t.expose_secret().to_owned()),
        Some("bot-admin-token".to_owned())
    );
    let c = Config::from_sources(
        None,
        &env(&[
            ("CODEX_BRIDGE_GITEA_TOKEN", "bot-admin-token"),
            ("CODEX_BRIDGE_GITEA_MCP_TOKEN", "agent-comment-token"),
            ("CODEX_BRIDGE_TRUST_FORK_PRS", "true"),
        ]),
    )
    .unwrap();
    assert!(c.trust_fork_prs);
    assert_eq!(
        c.agent_gitea_token().map(|t| t.expose_secret().to_owned()),
        Some("agent-comment-token".to_owned())
    );
    assert!(!format!("{c:?}").contains("agent-comment-token"));
    let err = error(&[("CODEX_BRIDGE_TRUST_FORK_PRS", "yes")]);
    assert!(err.contains("trust_fork_prs"), "{err}");
    let err = error(&[("CODEX_BRIDGE_GITEA_MCP_TOKEN", "  ")]);
    assert!(err.contains("gitea_mcp_token"), "{err}");
}

#[test]
fn the_webhook_url_is_public_url_and_the_webhook_path() {
    let c = Config::from_sources(None, &env(&[])).unwrap();
    assert_eq!(
        c.webhook_url(),
        None,
        "without public_url only --url can say"
    );
    let c = Config::from_sources(
        None,
        &env(&[("CODEX_BRIDGE_PUBLIC_URL", "https://example.com/bridge/")]),
    )
    .unwrap();
    assert_eq!(
        c.webhook_url().as_deref(),
        Some("https://example.com/bridge/api/gitea/webhook")
    );
}
