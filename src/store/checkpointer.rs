//! The SQLite WAL's checkpoints, from a thread of their own so the writer's
//! commits do not pay for copying pages into the database file.
//!
//! A WAL only starts over when a write transaction begins while every frame
//! in it has been copied. Under a steady stream this thread never catches
//! the last frame between two commits, so the writer has to take the last
//! step: it checkpoints after one of its own commits, and its next
//! transaction starts the WAL over. What that costs the writer is the frames
//! this thread has not copied yet, on the writer's own thread and before the
//! next batch is answered.
//!
//! So the two take turns. Every 200 ms a PASSIVE pass (it never blocks the
//! writer) copies each page changed since the last one once, however often it
//! changed; pages of the indexes that take random keys change again within
//! 200 ms far more often than within 50 ms, so passes are spaced (ingest
//! bench: 18-19k accepted/s with a pass every 50 ms, 20.8-22.0k/s every
//! 200 ms). Once the WAL is three fifths of the way to the writer's
//! automatic checkpoint, passes follow each other at once until one finds
//! only a few commits to copy (each pass copies what was appended during
//! the one before, so a few suffice), and then the writer is asked
//! ([`Handoff`]) to checkpoint after its next commit: it finds only those
//! few commits left to copy.
//!
//! Waiting for the writer's own automatic checkpoint instead meant following
//! the WAL with a pass every few milliseconds for a third of its length (each
//! pass two syncs, and every frame copied however soon it changed again), or
//! else leaving the writer up to 200 ms of commits to copy in one commit of
//! 20-60 ms. The automatic checkpoint stays, at [`WRITER_CHECKPOINT_FRAMES`],
//! for a WAL this thread cannot bring near its end.

use super::conn::ConnSettings;
use super::{DbConn, StoreError};
use diesel::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// The writer's automatic checkpoint (`PRAGMA wal_autocheckpoint`), in
/// frames: past the hand-off, a WAL that still grows (read transactions
/// holding it, a checkpointer that cannot keep up) makes the writer
/// checkpoint after every commit from here until the WAL restarts. About
/// 200 MiB of WAL.
pub const WRITER_CHECKPOINT_FRAMES: i64 = 50_000;

/// When the checkpointer passes and when it hands the last step over.
#[derive(Debug, Clone, Copy)]
pub(super) struct Cadence {
    /// WAL length past which the checkpointer catches up and hands the last
    /// step to the writer.
    handoff_frames: i64,
    /// Frames left uncopied after a pass below which the writer is asked to
    /// take over.
    near_frames: i64,
    /// Between two passes.
    spaced: Duration,
}

impl Cadence {
    pub(super) const SERVER: Cadence = Cadence {
        // Far enough below the automatic checkpoint that the catching up is
        // done long before it.
        handoff_frames: WRITER_CHECKPOINT_FRAMES * 3 / 5,
        // A few of the writer's commits (a batch of 32 accepts writes ~135).
        near_frames: 512,
        spaced: Duration::from_millis(200),
    };
}

/// Passes of catching up before the writer is asked anyway (what is left
/// is then what readers hold, which the writer cannot copy either, or a
/// writer faster than this thread).
const CATCH_UP_PASSES: usize = 8;

/// The checkpointer's request to the writer: checkpoint after your next
/// commit, so that the WAL starts over at the transaction after it.
#[derive(Debug, Default)]
pub struct Handoff {
    due: AtomicBool,
}

impl Handoff {
    fn offer(&self) {
        self.due.store(true, Ordering::Release);
    }

    /// Whether the writer should checkpoint now (once per offer).
    pub(super) fn take(&self) -> bool {
        self.due.swap(false, Ordering::AcqRel)
    }
}

#[derive(QueryableByName, Debug, Clone, Copy)]
pub(super) struct Pass {
    /// Frames in the WAL when the pass started (those committed by then).
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    log: i64,
    /// Frames of the WAL copied into the database file, by this pass and
    /// the ones before it (SQLite's `nBackfill`).
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    checkpointed: i64,
}

/// Starts the checkpointer thread on a connection of its own. It stops when
/// the writer drops its end of `handoff` (the store was closed).
pub(super) fn start(settings: ConnSettings, cadence: Cadence) -> Result<Arc<Handoff>, StoreError> {
    let mut conn = DbConn::establish(&settings).map_err(|e| {
        StoreError::Unavailable(format!("cannot open the checkpointer connection: {e}"))
    })?;
    let handoff = Arc::new(Handoff::default());
    let theirs: Weak<Handoff> = Arc::downgrade(&handoff);
    std::thread::Builder::new()
        .name("sqlite-checkpointer".into())
        .spawn(move || loop {
            std::thread::sleep(cadence.spaced);
            let Some(handoff) = theirs.upgrade() else {
                return;
            };
            match pass(&mut conn) {
                Ok(p) if p.log >= cadence.handoff_frames => {
                    catch_up(&mut conn, p, cadence.near_frames);
                    handoff.offer();
                }
                Ok(_) => {}
                Err(e) => tracing::debug!(error = %e, "WAL checkpoint skipped"),
            }
        })
        .map_err(|e| {
            StoreError::Unavailable(format!("cannot start the checkpointer thread: {e}"))
        })?;
    Ok(handoff)
}

/// Passes back to back until one had at most `near` frames to copy. A
/// pass copies what was committed before it started; what was appended
/// while the one before it ran is what the next one finds.
fn catch_up(conn: &mut DbConn, first: Pass, near: i64) {
    let mut copied = first.checkpointed;
    for _ in 0..CATCH_UP_PASSES {
        let p = match pass(conn) {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(error = %e, "WAL checkpoint skipped");
                return;
            }
        };
        let found = p.log - copied;
        copied = p.checkpointed;
        // A WAL that started over meanwhile has fewer frames than were copied.
        if found <= near {
            return;
        }
    }
}

/// One PASSIVE checkpoint: never waits on the writer or a reader, copies
/// what it can.
pub(super) fn pass(conn: &mut DbConn) -> Result<Pass, diesel::result::Error> {
    let DbConn::Sqlite(c) = conn else {
        return Ok(Pass {
            log: 0,
            checkpointed: 0,
        });
    };
    diesel::sql_query("PRAGMA wal_checkpoint(PASSIVE)").get_result(&mut **c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DatabaseUrl;
    use diesel::connection::SimpleConnection;
    use std::io::Read;

    /// The WAL file's header salts: they change each time the WAL starts over.
    fn wal_salts(wal: &std::path::Path) -> Option<[u8; 8]> {
        let mut header = [0u8; 32];
        std::fs::File::open(wal)
            .ok()?
            .read_exact(&mut header)
            .ok()?;
        let mut salts = [0u8; 8];
        salts.copy_from_slice(&header[16..24]);
        Some(salts)
    }

    #[test]
    fn the_wal_starts_over_once_the_writer_takes_the_handoff() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("handoff.db");
        let settings = ConnSettings {
            url: DatabaseUrl::Sqlite(path.clone()),
            sqlite_busy_timeout: Duration::from_secs(5),
            read_only: false,
        };
        let mut writer = DbConn::establish(&settings).unwrap();
        let DbConn::Sqlite(w) = &mut writer else {
            panic!("a SQLite connection");
        };
        // No automatic checkpoint: only the hand-off can start the WAL over.
        w.batch_execute("PRAGMA wal_autocheckpoint = 0; CREATE TABLE t(x BLOB);")
            .unwrap();
        let cadence = Cadence {
            handoff_frames: 400,
            near_frames: 32,
            spaced: Duration::from_millis(5),
        };
        let handoff = start(settings, cadence).unwrap();
        let wal = dir.path().join("handoff.db-wal");
        let (mut salts, mut taken, mut largest) = (Vec::new(), 0, 0u64);
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        while salts.len() < 4 && std::time::Instant::now() < deadline {
            let DbConn::Sqlite(w) = &mut writer else {
                unreachable!()
            };
            // About four pages a commit.
            w.batch_execute("INSERT INTO t VALUES (randomblob(14000));")
                .unwrap();
            if handoff.take() {
                pass(&mut writer).unwrap();
                taken += 1;
            }
            if let Some(now) = wal_salts(&wal) {
                if salts.last() != Some(&now) {
                    salts.push(now);
                }
            }
            largest = largest.max(std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0));
        }
        let restarts = salts.len().saturating_sub(1);
        assert!(restarts >= 3, "the WAL started over {restarts} times");
        assert!(
            restarts <= taken,
            "{restarts} restarts, {taken} checkpoints by the writer"
        );
        // A frame is a page and its 24-byte header; the WAL never grew far
        // past the hand-off.
        let frames = (largest.saturating_sub(32)) / (4096 + 24);
        assert!(frames <= 800, "the WAL grew to {frames} frames");
        drop(handoff);
    }

    #[test]
    fn a_handoff_is_taken_once_per_offer() {
        let h = Handoff::default();
        assert!(!h.take());
        h.offer();
        h.offer();
        assert!(h.take());
        assert!(!h.take());
    }
}
