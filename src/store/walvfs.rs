//! SQLite's default VFS with the WAL's writes gathered: a few 64 KiB writes per
//! commit instead of two per page.
//!
//! SQLite appends a transaction to the WAL one frame at a time, each frame as
//! two writes (its 24-byte header, then the page), and the kernel's cost of a
//! buffered write barely depends on its size: at group-commit rates that was a
//! third of the writer thread's time. This VFS keeps a WAL file's contiguous
//! writes in memory and hands them to the file in writes of 64 KiB when SQLite
//! next does anything else with it: sync, read, truncate, size, file control,
//! close, or a write somewhere else.
//!
//! Why that is safe: with `synchronous = FULL`, which the store always sets,
//! SQLite syncs the WAL at every commit *before* it publishes the new frames
//! in the WAL index (the only way another connection learns of them), and the
//! sync writes what is pending first. Frames of a transaction still in progress
//! are never read by anyone else, and reads on this handle write what is
//! pending before they read. A failed write is reported by the call that
//! flushes it, and SQLite then rolls the transaction back as it would have.
//!
//! On the writer thread of a SQLite store, a commit's sync is also deferred:
//! the sync that follows new appends (a commit's; a checkpoint's sync follows
//! none, and always runs here) is handed to the store's syncer
//! (`super::durable`), which syncs the file on a thread of its own while the
//! writer goes on. That module says why this keeps every promise of a
//! `synchronous = FULL` commit. The first sync of every WAL file also runs
//! here: it is the one that makes the new file's directory entry durable.
//!
//! Every other file (database, shared memory, journals) is the parent VFS's own
//! file object, untouched.
//!
//! One of the few modules of the crate with `unsafe` code (beside `pcache`,
//! `rawsql` and `sqlite_heap`): a VFS is a C interface of raw pointers, called by SQLite. Each
//! function relies on the same two facts:
//! SQLite allocated `szOsFile` bytes for every file it opens through this VFS
//! (our header, then the parent's file object at `REAL_OFFSET`), and it never
//! calls a file's methods from two threads at once.
#![expect(
    unsafe_code,
    reason = "a VFS is a C interface of raw pointers (see above)"
)]

use super::durable::Syncer;
use libsqlite3_sys as ffi;
use std::cell::RefCell;
use std::ffi::{c_int, c_void, CStr};
use std::fs::File;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// The name this VFS is registered under (as the process's default).
pub const NAME: &CStr = c"codex-bridge-wal";

/// Pending bytes past which a write goes out at once (a big transaction).
const FLUSH_AT: usize = 4 << 20;
/// Largest write handed to the parent: the unix VFS writes at most 128 KiB - 1
/// bytes per system call and reports a remainder of exactly 128 KiB as a full
/// disk, since SQLite itself never writes more than a page.
const WRITE_MAX: usize = 64 << 10;

/// The parent VFS (the platform default, `unix` here).
static PARENT: AtomicPtr<ffi::sqlite3_vfs> = AtomicPtr::new(std::ptr::null_mut());
/// Writes SQLite asked of WAL files, and writes that reached them.
static WRITES_ASKED: AtomicU64 = AtomicU64::new(0);
static WRITES_MADE: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The syncer that takes this thread's commit syncs (the writer thread's).
    static DEFER_TO: RefCell<Option<Arc<Syncer>>> = const { RefCell::new(None) };
}

/// Hands the commit syncs of WAL files written on this thread to `syncer`
/// from now on (`None`: sync in place again).
pub fn defer_commit_syncs(syncer: Option<Arc<Syncer>>) {
    DEFER_TO.with(|d| *d.borrow_mut() = syncer);
}

fn deferring() -> Option<Arc<Syncer>> {
    DEFER_TO.with(|d| d.borrow().clone())
}

/// A WAL file: our header, then the parent's file object.
#[repr(C)]
struct WalFile {
    base: ffi::sqlite3_file,
    pending: Vec<u8>,
    /// File offset of `pending[0]`.
    pending_at: i64,
    /// The same file opened again, for a syncer thread to sync (`None` if it
    /// could not be opened: then every sync runs in place).
    sync_file: Option<Arc<File>>,
    /// Bytes were appended since the last sync.
    appended: bool,
    /// The file has been synced once (its directory entry with it).
    synced: bool,
}

/// Where the parent's file object starts inside ours (8-byte aligned).
const REAL_OFFSET: usize = (std::mem::size_of::<WalFile>() + 7) & !7;

/// Installs the VFS as the default for every SQLite connection opened after
/// this call (once per process). Fails only if SQLite has no default VFS.
pub fn install() -> Result<(), String> {
    static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();
    INSTALLED.get_or_init(register).clone()
}

fn register() -> Result<(), String> {
    // SAFETY: sqlite3_config is not thread-safe, but it runs once (the
    // OnceLock above) and before the process's first connection: every
    // connection is opened through `DbConn::establish`, which installs this
    // VFS first. sqlite3_vfs_find and sqlite3_vfs_register are thread-safe;
    // the registered struct is leaked, so it outlives every connection; the
    // parent is SQLite's own static VFS.
    unsafe {
        // Multi-thread mode: no mutex around each connection's every call.
        // The store never uses one connection from two threads at once (a
        // pool hands each to one thread at a time); the locks were 6% of
        // the group-commit writer's CPU. It can only be set before SQLite
        // initialises (the call below does): later it is refused and
        // SQLite stays serialized, which is only slower.
        let _ = ffi::sqlite3_config(ffi::SQLITE_CONFIG_MULTITHREAD);
        // The page cache without its per-commit sweep (see `pcache`); like
        // the mode above, only possible before SQLite initialises.
        let _ = super::pcache::install();
        let parent = ffi::sqlite3_vfs_find(std::ptr::null());
        if parent.is_null() {
            return Err("SQLite has no default VFS to build on".into());
        }
        let size = c_int::try_from(REAL_OFFSET)
            .ok()
            .and_then(|header| header.checked_add((*parent).szOsFile))
            .ok_or("SQLite's file object size is out of range")?;
        PARENT.store(parent, Ordering::Release);
        let mut vfs: ffi::sqlite3_vfs = std::ptr::read(parent);
        vfs.pNext = std::ptr::null_mut();
        vfs.zName = NAME.as_ptr();
        vfs.szOsFile = size;
        vfs.xOpen = Some(open);
        let vfs = Box::leak(Box::new(vfs));
        match ffi::sqlite3_vfs_register(vfs, 1) {
            ffi::SQLITE_OK => Ok(()),
            rc => Err(format!(
                "SQLite refused to register its WAL VFS (code {rc})"
            )),
        }
    }
}

/// (writes SQLite asked of WAL files, writes that reached the files) since start.
pub fn write_counts() -> (u64, u64) {
    (
        WRITES_ASKED.load(Ordering::Relaxed),
        WRITES_MADE.load(Ordering::Relaxed),
    )
}

static WAL_METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 1,
    xClose: Some(close),
    xRead: Some(read),
    xWrite: Some(write),
    xTruncate: Some(truncate),
    xSync: Some(sync),
    xFileSize: Some(file_size),
    xLock: Some(lock),
    xUnlock: Some(unlock),
    xCheckReservedLock: Some(check_reserved_lock),
    xFileControl: Some(file_control),
    xSectorSize: Some(sector_size),
    xDeviceCharacteristics: Some(device_characteristics),
    xShmMap: None,
    xShmLock: None,
    xShmBarrier: None,
    xShmUnmap: None,
    xFetch: None,
    xUnfetch: None,
};

/// The parent's file object inside ours.
///
/// # Safety
/// `f` is a file this VFS opened (SQLite allocated `szOsFile` bytes for it).
unsafe fn real(f: *mut ffi::sqlite3_file) -> *mut ffi::sqlite3_file {
    f.cast::<u8>().add(REAL_OFFSET).cast()
}

/// The parent's methods of `real`.
///
/// # Safety
/// `real` is an open file of the parent VFS.
unsafe fn methods<'a>(real: *mut ffi::sqlite3_file) -> &'a ffi::sqlite3_io_methods {
    &*(*real).pMethods
}

unsafe extern "C" fn open(
    _vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let parent = PARENT.load(Ordering::Acquire);
    let Some(parent_open) = parent.as_ref().and_then(|p| p.xOpen) else {
        return ffi::SQLITE_CANTOPEN;
    };
    if flags & ffi::SQLITE_OPEN_WAL == 0 {
        // Not a WAL: the parent's own file object, in the parent's layout.
        return parent_open(parent, name, file, flags, out_flags);
    }
    (*file).pMethods = std::ptr::null();
    let rc = parent_open(parent, name, real(file), flags, out_flags);
    if rc != ffi::SQLITE_OK {
        return rc;
    }
    let wal = file.cast::<WalFile>();
    std::ptr::addr_of_mut!((*wal).pending).write(Vec::new());
    std::ptr::addr_of_mut!((*wal).pending_at).write(0);
    std::ptr::addr_of_mut!((*wal).sync_file).write(reopen(name));
    std::ptr::addr_of_mut!((*wal).appended).write(false);
    std::ptr::addr_of_mut!((*wal).synced).write(false);
    (*file).pMethods = &WAL_METHODS;
    ffi::SQLITE_OK
}

/// The WAL file SQLite just opened as `name`, opened again (read-only: a
/// sync needs no more).
///
/// # Safety
/// `name` is null or the NUL-terminated path SQLite passed to `xOpen`.
unsafe fn reopen(name: ffi::sqlite3_filename) -> Option<Arc<File>> {
    use std::os::unix::ffi::OsStrExt;
    if name.is_null() {
        return None;
    }
    let path = std::ffi::OsStr::from_bytes(CStr::from_ptr(name).to_bytes());
    File::open(path).ok().map(Arc::new)
}

/// Writes what is pending to the file, in writes of up to `WRITE_MAX` bytes.
///
/// # Safety
/// `f` is an open WAL file of this VFS.
unsafe fn flush(f: *mut ffi::sqlite3_file) -> c_int {
    let wal = &mut *f.cast::<WalFile>();
    if wal.pending.is_empty() {
        return ffi::SQLITE_OK;
    }
    let r = real(f);
    let Some(xwrite) = methods(r).xWrite else {
        wal.pending.clear();
        return ffi::SQLITE_IOERR_WRITE;
    };
    let mut rc = ffi::SQLITE_OK;
    let mut at = wal.pending_at;
    for chunk in wal.pending.chunks(WRITE_MAX) {
        WRITES_MADE.fetch_add(1, Ordering::Relaxed);
        // (A chunk is at most WRITE_MAX bytes, far below c_int::MAX.)
        rc = xwrite(r, chunk.as_ptr().cast(), chunk.len() as c_int, at);
        if rc != ffi::SQLITE_OK {
            break;
        }
        at += chunk.len() as i64;
    }
    // Written or failed, the bytes are SQLite's to write again: it rolls the
    // transaction back on an error.
    wal.pending.clear();
    rc
}

unsafe extern "C" fn write(
    f: *mut ffi::sqlite3_file,
    buf: *const c_void,
    amt: c_int,
    offset: ffi::sqlite3_int64,
) -> c_int {
    WRITES_ASKED.fetch_add(1, Ordering::Relaxed);
    let Ok(len) = usize::try_from(amt) else {
        return ffi::SQLITE_IOERR_WRITE;
    };
    crate::metrics::writer::wal_bytes(len);
    let wal = &mut *f.cast::<WalFile>();
    wal.appended = true;
    let end = wal.pending_at + wal.pending.len() as i64;
    if !wal.pending.is_empty() && offset != end {
        let rc = flush(f);
        if rc != ffi::SQLITE_OK {
            return rc;
        }
    }
    let wal = &mut *f.cast::<WalFile>();
    if wal.pending.is_empty() {
        wal.pending_at = offset;
    }
    wal.pending
        .extend_from_slice(std::slice::from_raw_parts(buf.cast::<u8>(), len));
    if wal.pending.len() >= FLUSH_AT {
        return flush(f);
    }
    ffi::SQLITE_OK
}

unsafe extern "C" fn close(f: *mut ffi::sqlite3_file) -> c_int {
    let flushed = flush(f);
    let r = real(f);
    let rc = match methods(r).xClose {
        Some(xclose) => xclose(r),
        None => ffi::SQLITE_OK,
    };
    std::ptr::drop_in_place(std::ptr::addr_of_mut!((*f.cast::<WalFile>()).pending));
    std::ptr::drop_in_place(std::ptr::addr_of_mut!((*f.cast::<WalFile>()).sync_file));
    (*f).pMethods = std::ptr::null();
    if flushed != ffi::SQLITE_OK {
        flushed
    } else {
        rc
    }
}

/// Writes what is pending, then lets the parent's file do `call`.
///
/// # Safety
/// `f` is an open WAL file of this VFS.
unsafe fn after_flush(
    f: *mut ffi::sqlite3_file,
    call: impl FnOnce(*mut ffi::sqlite3_file, &ffi::sqlite3_io_methods) -> Option<c_int>,
    missing: c_int,
) -> c_int {
    let rc = flush(f);
    if rc != ffi::SQLITE_OK {
        return rc;
    }
    let r = real(f);
    call(r, methods(r)).unwrap_or(missing)
}

unsafe extern "C" fn read(
    f: *mut ffi::sqlite3_file,
    buf: *mut c_void,
    amt: c_int,
    offset: ffi::sqlite3_int64,
) -> c_int {
    after_flush(
        f,
        |r, m| m.xRead.map(|x| x(r, buf, amt, offset)),
        ffi::SQLITE_IOERR_READ,
    )
}

unsafe extern "C" fn truncate(f: *mut ffi::sqlite3_file, size: ffi::sqlite3_int64) -> c_int {
    after_flush(
        f,
        |r, m| m.xTruncate.map(|x| x(r, size)),
        ffi::SQLITE_IOERR_TRUNCATE,
    )
}

unsafe extern "C" fn sync(f: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    let rc = flush(f);
    if rc != ffi::SQLITE_OK {
        return rc;
    }
    let syncer = deferring();
    let wal = &mut *f.cast::<WalFile>();
    let appended = std::mem::replace(&mut wal.appended, false);
    if let (Some(syncer), Some(file), true, true) = (&syncer, &wal.sync_file, appended, wal.synced)
    {
        syncer.request(file);
        return ffi::SQLITE_OK;
    }
    // In place: every request made before this sync starts is covered by it.
    let covered = syncer.as_ref().map(|s| s.latest());
    let r = real(f);
    let Some(xsync) = methods(r).xSync else {
        return ffi::SQLITE_IOERR_FSYNC;
    };
    let started = std::time::Instant::now();
    let rc = xsync(r, flags);
    crate::metrics::writer::wal_sync(started.elapsed());
    if rc == ffi::SQLITE_OK {
        (*f.cast::<WalFile>()).synced = true;
        if let (Some(syncer), Some(covered)) = (syncer, covered) {
            syncer.synced_in_place(covered);
        }
    }
    rc
}

unsafe extern "C" fn file_size(f: *mut ffi::sqlite3_file, size: *mut ffi::sqlite3_int64) -> c_int {
    after_flush(
        f,
        |r, m| m.xFileSize.map(|x| x(r, size)),
        ffi::SQLITE_IOERR_FSTAT,
    )
}

unsafe extern "C" fn lock(f: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    let r = real(f);
    match methods(r).xLock {
        Some(xlock) => xlock(r, level),
        None => ffi::SQLITE_OK,
    }
}

unsafe extern "C" fn unlock(f: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    let r = real(f);
    match methods(r).xUnlock {
        Some(xunlock) => xunlock(r, level),
        None => ffi::SQLITE_OK,
    }
}

unsafe extern "C" fn check_reserved_lock(f: *mut ffi::sqlite3_file, out: *mut c_int) -> c_int {
    let r = real(f);
    match methods(r).xCheckReservedLock {
        Some(xcheck) => xcheck(r, out),
        None => {
            *out = 0;
            ffi::SQLITE_OK
        }
    }
}

unsafe extern "C" fn file_control(f: *mut ffi::sqlite3_file, op: c_int, arg: *mut c_void) -> c_int {
    // A file control may size, sync or inspect the file: it sees it whole.
    after_flush(
        f,
        |r, m| m.xFileControl.map(|x| x(r, op, arg)),
        ffi::SQLITE_NOTFOUND,
    )
}

unsafe extern "C" fn sector_size(f: *mut ffi::sqlite3_file) -> c_int {
    let r = real(f);
    match methods(r).xSectorSize {
        Some(xsector) => xsector(r),
        None => 4096,
    }
}

unsafe extern "C" fn device_characteristics(f: *mut ffi::sqlite3_file) -> c_int {
    let r = real(f);
    match methods(r).xDeviceCharacteristics {
        Some(xdevice) => xdevice(r),
        None => 0,
    }
}
