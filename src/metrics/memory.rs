//! What the process holds, read at scrape time: its resident memory and open
//! descriptors (from `/proc/self`), the allocator's own account, and SQLite's
//! heap. Resident memory alone cannot tell a leak from an allocator keeping
//! freed pages or a page cache filling to its size; side by side they can:
//! a leak grows `heap_allocated`, a cache grows `sqlite_heap`, and the
//! allocator's slack is `heap_resident - heap_allocated`.

use prometheus::Registry;

/// One reading. A part that could not be read is `None` and its gauge is
/// left out of the exposition rather than reported as zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Memory {
    /// Resident set size of the whole process (`/proc/self/statm`).
    pub resident_bytes: Option<u64>,
    /// Open file descriptors (`/proc/self/fd`).
    pub open_fds: Option<u64>,
    /// Bytes the allocator has handed out and not had back.
    pub heap_allocated_bytes: Option<u64>,
    /// Bytes of the allocator's pages that are resident, in use or kept.
    pub heap_resident_bytes: Option<u64>,
    /// SQLite's own heap across every connection of the process: page
    /// caches, prepared statements, schemas. Read by the caller, from the
    /// store.
    pub sqlite_heap_bytes: Option<u64>,
}

impl Memory {
    /// Reads the process's parts now (all but SQLite's heap).
    pub fn read() -> Memory {
        let (heap_allocated_bytes, heap_resident_bytes) = heap();
        Memory {
            resident_bytes: resident(),
            open_fds: open_fds(),
            heap_allocated_bytes,
            heap_resident_bytes,
            sqlite_heap_bytes: None,
        }
    }
}

/// Lets jemalloc give freed pages back to the system from a thread of its
/// own. Without it, an arena purges only when a thread allocates from it
/// again, so the pages a burst freed stay resident for as long as its
/// threads are quiet (a server's usual state). The long-running `serve`
/// turns it on; a one-shot command has no need. A failure is reported, not
/// fatal: memory is then returned later, not lost.
pub fn purge_in_background() -> Result<(), String> {
    tikv_jemalloc_ctl::background_thread::write(true)
        .map_err(|e| format!("jemalloc's background purging could not be turned on: {e}"))
}

/// The memory gauges that were read; the process's under the names every
/// Prometheus client library uses for them.
pub(super) fn gauges(r: &Registry, m: &Memory) -> prometheus::Result<()> {
    let gauges: [(&str, &str, Option<u64>); 5] = [
        (
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            m.resident_bytes,
        ),
        (
            "process_open_fds",
            "Number of open file descriptors.",
            m.open_fds,
        ),
        (
            "codex_bridge_heap_allocated_bytes",
            "Bytes the allocator has handed out and not had back: grows with a leak.",
            m.heap_allocated_bytes,
        ),
        (
            "codex_bridge_heap_resident_bytes",
            "Resident bytes of the allocator's pages, in use or kept for reuse.",
            m.heap_resident_bytes,
        ),
        (
            "codex_bridge_sqlite_heap_bytes",
            "SQLite's heap across every connection (page caches, statements, schemas); a soft limit of 32 MiB keeps it near or under that.",
            m.sqlite_heap_bytes,
        ),
    ];
    for (name, help, value) in gauges {
        if let Some(v) = value {
            super::int_gauge(r, name, help)?.set(i64::try_from(v).unwrap_or(i64::MAX));
        }
    }
    Ok(())
}

fn resident() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    let page = rustix::param::page_size() as u64;
    Some(pages * page)
}

fn open_fds() -> Option<u64> {
    // The directory's own descriptor, open while it is read, is not counted.
    let n = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
    Some(n.saturating_sub(1))
}

/// jemalloc's counters are a snapshot refreshed by advancing its epoch.
fn heap() -> (Option<u64>, Option<u64>) {
    if tikv_jemalloc_ctl::epoch::advance().is_err() {
        return (None, None);
    }
    let allocated = tikv_jemalloc_ctl::stats::allocated::read().ok();
    let resident = tikv_jemalloc_ctl::stats::resident::read().ok();
    (allocated.map(|b| b as u64), resident.map(|b| b as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reading_sees_the_process_and_its_allocator() {
        let m = Memory::read();
        assert!(m.resident_bytes.is_some_and(|b| b > 0), "{m:?}");
        assert!(m.open_fds.is_some_and(|n| n >= 3), "{m:?}");
        let heap = m.heap_resident_bytes.zip(m.heap_allocated_bytes);
        assert!(heap.is_some_and(|(r, a)| r > 0 && a > 0), "{m:?}");
    }
}
