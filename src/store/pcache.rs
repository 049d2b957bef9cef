//! SQLite's own page cache, without the sweep it made at every commit.
//!
//! At the end of each write transaction SQLite truncates the connection's
//! page cache to the database's size, and its cache (`pcache1`) decides how
//! much to scan by the largest page number it has held since the last
//! truncation. When a B-tree rebalances siblings whose page numbers are out
//! of order, SQLite swaps two of them through a scratch number, the page of
//! the lock byte at 1 GiB (page 262,145 of 4 KiB pages), which no database
//! ever uses. From then on the cache believes it may hold a page that far
//! out, and the commit's truncation walks its whole hash table, touching
//! every cached page: 5% of the group-commit writer's CPU, however small the
//! database, and more the larger the cache (which is why the writer's cache
//! was kept small).
//!
//! This wraps SQLite's default cache and keeps its own bound on the page
//! numbers each cache holds, leaving the scratch number out while no page
//! wears it. A truncation that can remove nothing (every page below the
//! limit, none on the scratch number) is not passed on; every other call
//! goes to SQLite's cache unchanged. The bound only ever covers every page
//! held: pages enter a cache only through a fetch or a rekey, both seen here,
//! and leave it (evicted, discarded, truncated) only in ways that can make
//! the bound larger than needed, never smaller.
#![expect(
    unsafe_code,
    reason = "a page cache is a C interface of raw pointers, called by SQLite"
)]

use libsqlite3_sys as ffi;
use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The byte SQLite locks to take a database's pending lock: its page is
/// never part of any database, which is why SQLite borrows its number.
const PENDING_BYTE: u64 = 0x4000_0000;

/// Truncations passed over because they could remove nothing.
static SKIPPED: AtomicU64 = AtomicU64::new(0);

/// How many of SQLite's cache truncations (one at every commit) this process
/// passed over because they could remove nothing: zero if the wrapper is not
/// installed.
pub fn sweeps_skipped() -> u64 {
    SKIPPED.load(Ordering::Relaxed)
}

/// SQLite's default methods, wrapped.
static INNER: OnceLock<Methods> = OnceLock::new();

struct Methods(ffi::sqlite3_pcache_methods2);

// SAFETY: function pointers, and an argument SQLite itself hands to those
// functions from any thread.
unsafe impl Send for Methods {}
// SAFETY: as above; the struct is never written after `install`.
unsafe impl Sync for Methods {}

/// One cache: SQLite's, and what is known of the page numbers it holds.
struct Cache {
    inner: *mut ffi::sqlite3_pcache,
    bound: Bound,
}

/// What a cache may hold, as far as its calls tell: pages enter only through
/// a fetch or a rekey, and leave (evicted, discarded, truncated) only in ways
/// that leave the bound above what is needed, never below.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Bound {
    /// The scratch number a rebalance swaps pages through.
    scratch: u32,
    /// No page other than those on `scratch` has a number above this.
    high: u32,
    /// Pages now on `scratch` (a swap holds one there for two calls).
    on_scratch: u32,
}

impl Bound {
    /// A new cache of pages of `page_size` bytes.
    fn new(page_size: u64) -> Bound {
        Bound {
            scratch: u32::try_from(PENDING_BYTE / page_size.max(1) + 1).unwrap_or(u32::MAX),
            high: 0,
            on_scratch: 0,
        }
    }

    /// A fetch returned a page for `key`. One found on the scratch number is
    /// the one a swap put there, already counted.
    fn fetched(&mut self, key: u32) {
        if key != self.scratch {
            self.high = self.high.max(key);
        }
    }

    /// A page moved from `old` to `new`.
    fn rekeyed(&mut self, old: u32, new: u32) {
        if old == self.scratch {
            self.on_scratch = self.on_scratch.saturating_sub(1);
        }
        if new == self.scratch {
            self.on_scratch += 1;
        } else {
            self.high = self.high.max(new);
        }
    }

    /// Whether the cache may hold a page numbered `limit` or more.
    fn may_hold_from(&self, limit: u32) -> bool {
        limit <= self.high || (self.on_scratch > 0 && limit <= self.scratch)
    }

    /// Every page numbered `limit` or more was dropped.
    fn truncated(&mut self, limit: u32) {
        self.high = self.high.min(limit.saturating_sub(1));
        if limit <= self.scratch {
            self.on_scratch = 0;
        }
    }
}

/// Installs the wrapper for every page cache SQLite creates from now on.
/// Must run before SQLite initialises (with the other global settings);
/// afterwards SQLite refuses it and keeps its own cache, which is only
/// slower. Whether it was installed.
///
/// # Safety
/// No other thread may call into SQLite while this runs.
pub(super) unsafe fn install() -> bool {
    let mut default = std::mem::MaybeUninit::<ffi::sqlite3_pcache_methods2>::zeroed();
    // SAFETY: GETPCACHE2 fills the struct it is given; the caller keeps
    // SQLite to this thread.
    let rc = unsafe { ffi::sqlite3_config(ffi::SQLITE_CONFIG_GETPCACHE2, default.as_mut_ptr()) };
    if rc != ffi::SQLITE_OK {
        return false;
    }
    // SAFETY: filled by SQLite above.
    let default = unsafe { default.assume_init() };
    if default.xFetch.is_none() || INNER.set(Methods(default)).is_err() {
        return false;
    }
    let wrapped = ffi::sqlite3_pcache_methods2 {
        iVersion: default.iVersion,
        pArg: std::ptr::null_mut(),
        xInit: Some(init),
        xShutdown: Some(shutdown),
        xCreate: Some(create),
        xCachesize: Some(cachesize),
        xPagecount: Some(pagecount),
        xFetch: Some(fetch),
        xUnpin: Some(unpin),
        xRekey: Some(rekey),
        xTruncate: Some(truncate),
        xDestroy: Some(destroy),
        xShrink: Some(shrink),
    };
    // SAFETY: SQLite copies the methods; the caller keeps SQLite to this
    // thread.
    unsafe { ffi::sqlite3_config(ffi::SQLITE_CONFIG_PCACHE2, &wrapped) == ffi::SQLITE_OK }
}

/// SQLite's default methods: stored by `install` before SQLite can call any
/// wrapper, so every wrapper finds them.
fn inner() -> Option<&'static ffi::sqlite3_pcache_methods2> {
    INNER.get().map(|m| &m.0)
}

/// SAFETY (every function below): SQLite calls them with a cache this module
/// created (`create`) and not yet destroyed, and never calls two of them on
/// one cache at once (a connection's calls are serialized).
unsafe fn cache<'a>(p: *mut ffi::sqlite3_pcache) -> &'a mut Cache {
    // SAFETY: see above.
    unsafe { &mut *p.cast::<Cache>() }
}

unsafe extern "C" fn init(_: *mut c_void) -> c_int {
    match inner() {
        // SAFETY: SQLite's own method with its own argument.
        Some(ffi::sqlite3_pcache_methods2 {
            xInit: Some(f),
            pArg,
            ..
        }) => unsafe { f(*pArg) },
        _ => ffi::SQLITE_OK,
    }
}

unsafe extern "C" fn shutdown(_: *mut c_void) {
    if let Some(m) = inner() {
        if let Some(f) = m.xShutdown {
            // SAFETY: as in `init`.
            unsafe { f(m.pArg) }
        }
    }
}

unsafe extern "C" fn create(
    page: c_int,
    extra: c_int,
    purgeable: c_int,
) -> *mut ffi::sqlite3_pcache {
    let Some(f) = inner().and_then(|m| m.xCreate) else {
        return std::ptr::null_mut();
    };
    // SAFETY: SQLite's own method with SQLite's arguments.
    let inner = unsafe { f(page, extra, purgeable) };
    if inner.is_null() {
        return inner;
    }
    Box::into_raw(Box::new(Cache {
        inner,
        bound: Bound::new(u64::try_from(page).unwrap_or(1)),
    }))
    .cast()
}

unsafe extern "C" fn cachesize(p: *mut ffi::sqlite3_pcache, n: c_int) {
    if let Some(f) = inner().and_then(|m| m.xCachesize) {
        // SAFETY: see `cache`.
        unsafe { f(cache(p).inner, n) }
    }
}

unsafe extern "C" fn pagecount(p: *mut ffi::sqlite3_pcache) -> c_int {
    // SAFETY: see `cache`.
    inner()
        .and_then(|m| m.xPagecount)
        .map_or(0, |f| unsafe { f(cache(p).inner) })
}

unsafe extern "C" fn fetch(
    p: *mut ffi::sqlite3_pcache,
    key: c_uint,
    create: c_int,
) -> *mut ffi::sqlite3_pcache_page {
    // SAFETY: see `cache`.
    let c = unsafe { cache(p) };
    let Some(f) = inner().and_then(|m| m.xFetch) else {
        return std::ptr::null_mut();
    };
    // SAFETY: SQLite's own method on SQLite's cache.
    let page = unsafe { f(c.inner, key, create) };
    if !page.is_null() {
        c.bound.fetched(key);
    }
    page
}

unsafe extern "C" fn unpin(
    p: *mut ffi::sqlite3_pcache,
    page: *mut ffi::sqlite3_pcache_page,
    discard: c_int,
) {
    if let Some(f) = inner().and_then(|m| m.xUnpin) {
        // SAFETY: see `cache`.
        unsafe { f(cache(p).inner, page, discard) }
    }
}

unsafe extern "C" fn rekey(
    p: *mut ffi::sqlite3_pcache,
    page: *mut ffi::sqlite3_pcache_page,
    old: c_uint,
    new: c_uint,
) {
    // SAFETY: see `cache`.
    let c = unsafe { cache(p) };
    if let Some(f) = inner().and_then(|m| m.xRekey) {
        // SAFETY: SQLite's own method on SQLite's cache and page.
        unsafe { f(c.inner, page, old, new) }
    }
    c.bound.rekeyed(old, new);
}

unsafe extern "C" fn truncate(p: *mut ffi::sqlite3_pcache, limit: c_uint) {
    // SAFETY: see `cache`.
    let c = unsafe { cache(p) };
    if !c.bound.may_hold_from(limit) {
        // Nothing held is at or above `limit`: nothing to remove.
        SKIPPED.fetch_add(1, Ordering::Relaxed);
        return;
    }
    if let Some(f) = inner().and_then(|m| m.xTruncate) {
        // SAFETY: SQLite's own method on SQLite's cache.
        unsafe { f(c.inner, limit) }
    }
    c.bound.truncated(limit);
}

unsafe extern "C" fn destroy(p: *mut ffi::sqlite3_pcache) {
    // SAFETY: `p` came from `create`'s Box; SQLite destroys a cache once and
    // calls nothing on it after.
    let c = unsafe { Box::from_raw(p.cast::<Cache>()) };
    if let Some(f) = inner().and_then(|m| m.xDestroy) {
        // SAFETY: SQLite's own method on SQLite's cache.
        unsafe { f(c.inner) }
    }
}

unsafe extern "C" fn shrink(p: *mut ffi::sqlite3_pcache) {
    if let Some(f) = inner().and_then(|m| m.xShrink) {
        // SAFETY: see `cache`.
        unsafe { f(cache(p).inner) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// What SQLite's cache does to the pages it holds, by slot (a page
    /// object), so that a rekey moves one page and an eviction drops one.
    #[derive(Debug, Clone)]
    enum Op {
        /// Fetch `key`, creating the page if missing.
        Fetch(u32),
        /// SQLite's swap of two held pages through the scratch number.
        Swap(usize, usize),
        /// Move a held page to `key` (a page moved somewhere free, the
        /// scratch number among them: a swap caught halfway).
        Rekey(usize, u32),
        /// The cache evicts or discards a held page on its own.
        Drop(usize),
        /// Truncate at `limit`, through the wrapper's test.
        Truncate(u32),
    }

    const SCRATCH: u32 = (PENDING_BYTE / 4096 + 1) as u32;

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (1u32..400).prop_map(Op::Fetch),
            2 => (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Op::Swap(a, b)),
            1 => (any::<usize>(), 1u32..400).prop_map(|(i, k)| Op::Rekey(i, k)),
            1 => any::<usize>().prop_map(|i| Op::Rekey(i, SCRATCH)),
            1 => any::<usize>().prop_map(Op::Drop),
            2 => (1u32..420).prop_map(Op::Truncate),
            1 => Just(Op::Truncate(SCRATCH)),
        ]
    }

    proptest! {
        /// Whatever SQLite's cache holds, a truncation the bound passes over
        /// could not have removed a page.
        #[test]
        fn a_skipped_truncation_never_leaves_a_page_at_or_above_its_limit(
            ops in prop::collection::vec(op(), 0..200)
        ) {
            let mut bound = Bound::new(4096);
            prop_assert_eq!(bound.scratch, SCRATCH);
            // page slot -> key
            let mut held: BTreeMap<usize, u32> = BTreeMap::new();
            let mut next_slot = 0usize;
            for op in ops {
                let slots: Vec<usize> = held.keys().copied().collect();
                let pick = |i: usize| slots.get(i % slots.len().max(1)).copied();
                match op {
                    Op::Fetch(key) => {
                        if !held.values().any(|k| *k == key) {
                            held.insert(next_slot, key);
                            next_slot += 1;
                        }
                        bound.fetched(key);
                    }
                    Op::Swap(a, b) => {
                        let (Some(a), Some(b)) = (pick(a), pick(b)) else { continue };
                        if a == b { continue }
                        let (ka, kb) = (held[&a], held[&b]);
                        held.insert(a, SCRATCH);
                        bound.rekeyed(ka, SCRATCH);
                        held.insert(b, ka);
                        bound.rekeyed(kb, ka);
                        held.insert(a, kb);
                        bound.rekeyed(SCRATCH, kb);
                    }
                    Op::Rekey(i, key) => {
                        let Some(i) = pick(i) else { continue };
                        if held.values().any(|k| *k == key) { continue }
                        let old = held[&i];
                        held.insert(i, key);
                        bound.rekeyed(old, key);
                    }
                    Op::Drop(i) => {
                        if let Some(i) = pick(i) {
                            held.remove(&i);
                        }
                    }
                    Op::Truncate(limit) => {
                        if bound.may_hold_from(limit) {
                            held.retain(|_, k| *k < limit);
                            bound.truncated(limit);
                        } else {
                            prop_assert!(
                                held.values().all(|k| *k < limit),
                                "passed over truncation at {} while holding {:?}", limit, held
                            );
                        }
                    }
                }
            }
        }
    }

    /// The case the wrapper exists for: a swap leaves nothing on the scratch
    /// number, so the commit's truncation below it is passed over, where
    /// SQLite's own bound (its largest number since the last truncation)
    /// would walk its whole table.
    #[test]
    fn a_commit_after_a_swap_is_passed_over() {
        let mut bound = Bound::new(4096);
        for key in 1..=50 {
            bound.fetched(key);
        }
        bound.rekeyed(7, SCRATCH);
        bound.rekeyed(9, 7);
        bound.rekeyed(SCRATCH, 9);
        assert!(!bound.may_hold_from(51));
        // Mid-swap, a truncation must go through.
        bound.rekeyed(3, SCRATCH);
        assert!(bound.may_hold_from(51));
    }
}
