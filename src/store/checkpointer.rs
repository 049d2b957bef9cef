//! The SQLite WAL's checkpoints, from a thread of their own so the writer's
//! commits do not pay for copying pages into the database file.
//!
//! Two parties checkpoint. This thread runs PASSIVE checkpoints, which never
//! block the writer. The writer's own automatic checkpoint (past
//! [`WRITER_CHECKPOINT_FRAMES`]) is what lets the WAL start over: under a
//! steady stream this thread never catches the last frame between two
//! commits, and a WAL is only reset by the next write after every frame was
//! copied. Past that limit the writer checkpoints after every commit until the
//! WAL restarts.
//!
//! What the writer's checkpoint costs is the frames this thread has not
//! copied yet, on the writer's own thread and before the next batch is
//! answered. Every 200 ms, a pass copies each page changed since the last one
//! once, however often it changed; pages of the indexes that take random keys
//! (a delivery's id) change again within 200 ms far more often than within
//! 50 ms, so passes are spaced (ingest bench: 18-19k accepted/s with a pass
//! every 50 ms, 20.8-22.0k/s every 200 ms). But then the writer's checkpoint
//! found up to 200 ms of commits left to copy: a commit of 20-60 ms (10-26 ms
//! of it the writer's CPU) each time the WAL filled, about once a second at
//! full load, which made most of the 99th percentile of a webhook's answer.
//! So once the WAL is past [`CLOSE_FRAMES`], passes follow each other closely
//! until it restarts, and the writer's checkpoint finds only the last few
//! commits left.

use super::conn::ConnSettings;
use super::{DbConn, StoreError};
use diesel::prelude::*;
use std::time::Duration;

/// The writer's automatic checkpoint (`PRAGMA wal_autocheckpoint`), in
/// frames: the WAL grows to about this many pages (200 MiB) under sustained
/// load before it starts over. At 20,000 the ingest bench spent much of each
/// run above it: 17.5k accepted/s, p99 12 ms; at 50,000, 21.3-21.8k/s, p99 7 ms.
pub const WRITER_CHECKPOINT_FRAMES: i64 = 50_000;

/// WAL length past which passes follow each other closely: well before the
/// writer's limit, so that the pass in flight when the limit is reached
/// started only a moment before.
const CLOSE_FRAMES: i64 = WRITER_CHECKPOINT_FRAMES * 3 / 5;

/// Between two passes while the WAL is short.
const SPACED: Duration = Duration::from_millis(200);
/// Between two passes while the WAL is close to the writer's limit.
const CLOSE: Duration = Duration::from_millis(2);

#[derive(QueryableByName)]
struct Checkpoint {
    /// Frames in the WAL when the pass ended.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    log: i64,
}

/// Starts the checkpointer thread on a connection of its own.
pub(super) fn start(settings: ConnSettings) -> Result<(), StoreError> {
    let mut conn = DbConn::establish(&settings).map_err(|e| {
        StoreError::Unavailable(format!("cannot open the checkpointer connection: {e}"))
    })?;
    std::thread::Builder::new()
        .name("sqlite-checkpointer".into())
        .spawn(move || {
            let mut pause = SPACED;
            loop {
                std::thread::sleep(pause);
                pause = match pass(&mut conn) {
                    Ok(frames) if frames >= CLOSE_FRAMES => CLOSE,
                    Ok(_) => SPACED,
                    Err(e) => {
                        tracing::debug!(error = %e, "WAL checkpoint skipped");
                        SPACED
                    }
                };
            }
        })
        .map_err(|e| {
            StoreError::Unavailable(format!("cannot start the checkpointer thread: {e}"))
        })?;
    Ok(())
}

/// One PASSIVE checkpoint: the WAL's length in frames after it.
fn pass(conn: &mut DbConn) -> Result<i64, diesel::result::Error> {
    let DbConn::Sqlite(c) = conn else {
        return Ok(0);
    };
    let done: Checkpoint =
        diesel::sql_query("PRAGMA wal_checkpoint(PASSIVE)").get_result(&mut **c)?;
    Ok(done.log)
}
