//! The fuzz targets' checks (`fuzz/checks.rs`) on every test run, without
//! libFuzzer: each target's seeds, the Gitea fixtures as webhook deliveries,
//! and every input a target once failed on (`fuzz/regressions/<target>/`).
//! `scripts/fuzz` runs the coverage-guided search itself.

#[allow(dead_code)] // the targets' own entry points use them all
#[path = "../../fuzz/checks.rs"]
mod checks;

use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

/// The files under `fuzz/<kind>/<target>/`, if that folder exists.
fn inputs(kind: &str, target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = fuzz_dir().join(kind).join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect()
}

/// Seeds and regressions of `target`, each through `check`; panics name
/// the file.
fn replay(target: &str, check: impl Fn(&[u8])) -> usize {
    let mut n = 0;
    for kind in ["seeds", "regressions"] {
        for (path, bytes) in inputs(kind, target) {
            let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&bytes)));
            assert!(run.is_ok(), "{} fails its fuzz check", path.display());
            n += 1;
        }
    }
    n
}

/// libFuzzer hands a `&str` target only valid UTF-8; so does the replay.
fn as_text(check: fn(&str)) -> impl Fn(&[u8]) {
    move |bytes| {
        if let Ok(text) = std::str::from_utf8(bytes) {
            check(text);
        }
    }
}

/// A Gitea fixture as the webhook target reads a delivery: header lines,
/// an empty line, the body.
pub fn fixture_delivery(name: &str) -> Vec<u8> {
    let (body, headers) = crate::support::fixture(name);
    let mut data: Vec<u8> = headers
        .iter()
        .flat_map(|(k, v)| format!("{k}: {v}\n").into_bytes())
        .collect();
    data.push(b'\n');
    data.extend_from_slice(&body);
    data
}

#[test]
fn fuzz_seeds_and_regressions_pass_their_checks() {
    assert!(replay("mention", as_text(checks::mention)) >= 7);
    assert!(replay("command", as_text(checks::command)) >= 7);
    assert!(replay("jsonrpc", as_text(checks::jsonrpc)) >= 7);
    replay("webhook", |data| {
        checks::webhook(data);
    });
    // Every Gitea fixture is read to the end, as the server reads it.
    let manifest = crate::support::fixtures_dir().join("manifest.json");
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(manifest).unwrap()).unwrap();
    let mut n = 0;
    for entry in manifest["fixtures"].as_array().unwrap() {
        let name = entry["file"].as_str().unwrap().trim_end_matches(".json");
        assert!(checks::webhook(&fixture_delivery(name)), "{name}");
        n += 1;
    }
    assert!(n >= 7, "{n} fixtures");
}

/// The webhook check is not vacuous: a delivery without its id, or a form
/// body without `payload`, is not read to the end.
#[test]
fn fuzz_webhook_check_stops_where_the_server_refuses() {
    let whole = fixture_delivery("issue_comment.created.issue.mention");
    assert!(checks::webhook(&whole));
    let text = String::from_utf8(whole).unwrap();
    let without_id: String = text
        .lines()
        .filter(|l| !l.contains("-Delivery:"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(!checks::webhook(
        without_id.trim_end_matches('\n').as_bytes()
    ));
    let form = text.replace(
        "Content-Type: application/json",
        "Content-Type: application/x-www-form-urlencoded",
    );
    assert!(!checks::webhook(form.as_bytes()));
}
