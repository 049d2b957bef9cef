//! The house's floors: a module imports only from its own floor or below.
//! Read from the source, so a new `use` that climbs fails the suite with the
//! file, the line and the two floors named.
//!
//! ```text
//! main → cli → app → web/, webhook/ → jobs/ → actors/
//!      → codex/, gitea/, workspace/ → store/
//!      → domain, lifecycle, config, agent, forge, metrics, readiness
//! ```
//!
//! Two rules refine the floors: the clients (`codex/`, `gitea/`) import
//! nothing above the bottom floor, not even `store/` beneath them; and
//! `store/` imports nothing above the bottom floor. And `web/` reads through
//! the query functions of `store/`: it runs no diesel of its own.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Each top-level module of `src/` and its floor (higher imports lower).
const FLOORS: &[(&str, u8)] = &[
    ("main", 9),
    ("cli", 8),
    ("app", 7),
    // `codex-bridge worker`: a program of its own beside the server.
    ("worker", 7),
    ("web", 6),
    ("webhook", 6),
    ("telemetry", 1),
    ("jobs", 5),
    ("actors", 4),
    ("codex", 3),
    ("gitea", 3),
    ("workspace", 3),
    ("store", 2),
    // `store`'s query macro, exported at the crate's root.
    ("with_conn", 2),
    ("domain", 1),
    ("lifecycle", 1),
    ("config", 1),
    ("agent", 1),
    ("forge", 1),
    ("metrics", 1),
    ("readiness", 1),
    // The worker protocol: serde messages only, shared by the server's
    // worker API, the remote runtime and the worker.
    ("worker_api", 1),
];

/// Modules that speak a protocol and report: they may import only the bottom floor.
const CLIENTS: &[&str] = &["codex", "gitea", "store"];

fn floor(module: &str) -> Option<u8> {
    FLOORS.iter().find(|(m, _)| *m == module).map(|(_, f)| *f)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file of `src/` belongs to.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_owned()
}

/// Every `crate::<module>` a line names (in `use` items and in paths alike).
fn crate_refs(line: &str) -> Vec<String> {
    let mut refs = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        let after = &rest[at + "crate::".len()..];
        let name: String = after
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        // `codex_bridge::crate::` never occurs; `$crate::` is a macro's own path.
        let is_macro_path = rest[..at].ends_with('$');
        if !name.is_empty() && !is_macro_path {
            refs.push(name);
        }
        rest = after;
    }
    refs
}

fn climbs(src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut found = Vec::new();
    for file in files {
        let module = module_of(src, &file);
        if module == "lib" {
            continue;
        }
        let Some(own) = floor(&module) else {
            found.push(format!(
                "{}: module `{module}` has no floor in FLOORS",
                file.display()
            ));
            continue;
        };
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            for target in crate_refs(code) {
                if target == module || (module == "store" && target == "with_conn") {
                    continue;
                }
                let Some(theirs) = floor(&target) else {
                    found.push(format!(
                        "{}:{}: `crate::{target}` has no floor",
                        file.display(),
                        n + 1
                    ));
                    continue;
                };
                let too_high = if CLIENTS.contains(&module.as_str()) {
                    theirs > 1
                } else {
                    theirs > own
                };
                if too_high {
                    found.push(format!(
                        "{}:{}: `{module}` (floor {own}) imports `{target}` (floor {theirs})",
                        file.display(),
                        n + 1
                    ));
                }
            }
        }
    }
    found
}

/// What `web/` may not name: diesel, the store's query macro and its tables.
/// A read the web needs is a query function of `store/`.
const WEB_RUNS_NO_QUERIES: &[&str] = &["diesel::", "with_conn!", "store::schema"];

/// Every line of `web/` (code, not comments) that runs a query itself.
fn web_queries(src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    let web = src.join("web");
    if web.is_dir() {
        rust_files(&web, &mut files);
    }
    if src.join("web.rs").is_file() {
        files.push(src.join("web.rs"));
    }
    files.sort();
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            for banned in WEB_RUNS_NO_QUERIES {
                if code.contains(banned) {
                    found.push(format!(
                        "{}:{}: `web` uses `{banned}`; read through a query function of `store/`",
                        file.display(),
                        n + 1
                    ));
                }
            }
        }
    }
    found
}

#[test]
fn imports_only_run_down_the_floors() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = climbs(&src);
    assert!(
        found.is_empty(),
        "imports that climb a floor:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_sees_a_climbing_import() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir_all(src.join("store")).unwrap();
    std::fs::write(
        src.join("store/mod.rs"),
        "use crate::actors::Registry;\nuse crate::domain::RepoKey;\n",
    )
    .unwrap();
    std::fs::write(
        src.join("web.rs"),
        "use crate::store::Store; // reads through the store\n",
    )
    .unwrap();
    let found = climbs(src);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("`store` (floor 2) imports `actors` (floor 4)"),
        "{found:?}"
    );
    let counted: BTreeMap<&str, u8> = FLOORS.iter().copied().collect();
    assert_eq!(counted.len(), FLOORS.len(), "a module is listed twice");
}

#[test]
fn web_reads_only_through_store_queries() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = web_queries(&src);
    assert!(
        found.is_empty(),
        "web/ runs queries itself:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_sees_a_query_in_web() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir_all(src.join("web/admin")).unwrap();
    std::fs::write(
        src.join("web/admin/overview.rs"),
        "use diesel::prelude::*;\n\
         // diesel:: in a comment is fine\n\
         let n = crate::with_conn!(c, |conn| repositories::table.count().get_result(conn))?;\n",
    )
    .unwrap();
    std::fs::write(
        src.join("web/live.rs"),
        "use crate::store::schema::audit_events;\n\
         let ids = state.store.read(views::last_log_ids).await?;\n",
    )
    .unwrap();
    let found = web_queries(src);
    assert_eq!(found.len(), 3, "{found:?}");
    assert!(
        found[0].contains("overview.rs:1: `web` uses `diesel::`"),
        "{found:?}"
    );
    assert!(
        found[1].contains("overview.rs:3: `web` uses `with_conn!`"),
        "{found:?}"
    );
    assert!(
        found[2].contains("live.rs:1: `web` uses `store::schema`"),
        "{found:?}"
    );
}
