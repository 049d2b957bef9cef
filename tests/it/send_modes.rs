//! The seed's coupling of an entry's send controls, as the store keeps it:
//! `enqueue` goes with `queue`, `replace-latest` with `interrupt-running`,
//! `steer-running` with an expected run, and no other mode carries one.
//! The store holds one `mode` (the controls are read from it) and a CHECK
//! ties the expected run to the steer mode: generated rows are written to a
//! real SQLite database, and the ones it keeps are read back through the
//! API's view of the entry.

use crate::support::*;
use codex_bridge::domain::states::SendMode;
use codex_bridge::store::ingest::{self, IngestOutcome};
use codex_bridge::store::{run_migrations, sessions, DbConn};
use proptest::prelude::*;

const MODES: [SendMode; 4] = [
    SendMode::Enqueue,
    SendMode::Steer,
    SendMode::Interrupt,
    SendMode::Replace,
];

/// A database with one accepted comment; its task.
fn one_entry() -> (tempfile::TempDir, DbConn, codex_bridge::domain::TaskId) {
    let dir = tempfile::tempdir().unwrap();
    let mut c = connect(&format!("sqlite://{}", dir.path().join("m.db").display()));
    run_migrations(&mut c).unwrap();
    let req = crate::actors::request("widgets", 1, 1, "@ccbot fix it");
    let out = c.write_transaction(|c| ingest::ingest(c, &req)).unwrap();
    let IngestOutcome::Accepted { task_id, .. } = out else {
        panic!("not accepted: {out:?}")
    };
    (dir, c, task_id)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn the_store_keeps_only_coupled_send_controls(
        mode in 0usize..4,
        expected in proptest::option::of("turn-[a-z0-9]{1,8}"),
    ) {
        let (_dir, mut c, task) = one_entry();
        let mode = MODES[mode];
        let set = format!(
            "UPDATE outbox_entries SET mode = '{}', expected_turn_id = {} WHERE task_id = '{task}'",
            mode.as_str(),
            expected.as_ref().map_or("NULL".to_owned(), |t| format!("'{t}'")),
        );
        let kept = exec(&mut c, &set).is_ok();
        prop_assert_eq!(kept, (mode == SendMode::Steer) == expected.is_some());
        if kept {
            let entry = sessions::outbox_entry(&mut c, &task).unwrap().unwrap();
            let view = serde_json::to_value(&entry).unwrap();
            let (intent, send_mode) = (&view["intent"], &view["sendMode"]);
            if intent == "enqueue" {
                prop_assert_eq!(send_mode, "queue");
            }
            if intent == "replace-latest" {
                prop_assert_eq!(send_mode, "interrupt-running");
            }
            prop_assert_eq!(
                send_mode == "steer-running",
                !view["expectedActiveRunId"].is_null(),
                "{}", view
            );
            if mode == SendMode::Replace {
                prop_assert_eq!(intent, "replace-latest");
            }
        }
    }
}
