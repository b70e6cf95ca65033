//! The dynamic loader's list of modules (`dl_iterate_phdr`), walked so that a child of `fork` never
//! waits for the loader's lock held by one of frag's walks in its parent.
//!
//! glibc holds its `dl_load_write_lock` for the whole of a `dl_iterate_phdr` and does not reset it in
//! the child of a `fork` (glibc 2.36 here; the Julia project met the same, JuliaLang/julia#57017).
//! A fork that lands while another thread is inside the walk leaves the child's first
//! `dl_iterate_phdr` waiting forever: here, a child's `report()`, which refreshes the unwind tables
//! and lists the mappings of a profile. So every walk of frag's goes through [`iterate`], which counts
//! the walks under way ([`WALKING`], raised before the loader's lock is taken, lowered after it is
//! released), and a `pthread_atfork` child handler looks at the count: a child forked while one was
//! under way never walks the list ([`iterate`] returns `None`; the unwind tables it inherited stay in
//! use, a profile lists no mappings). The count may also catch a walk just before or just after its
//! lock: the child then skips walks it could have made, never the other way round. Nothing waits,
//! so `fork` never does either. Walks by other code (libgcc's unwinder, a backtrace) are not covered.
//! Never called on the allocation path: the loader's walk takes a lock and the callbacks allocate.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};

/// frag's walks of the loader's list under way in this process.
static WALKING: AtomicUsize = AtomicUsize::new(0);
/// Set in a child forked while a walk was under way: the loader's lock may be held for good.
static STUCK: AtomicBool = AtomicBool::new(false);
/// Whether the handler is registered (a flag, not a `Once`: a child forked while another thread
/// registered would find a `Once` running for good).
static REGISTERED: AtomicBool = AtomicBool::new(false);

extern "C" fn child() {
    if WALKING.swap(0, SeqCst) > 0 {
        STUCK.store(true, SeqCst);
    }
}

fn register() {
    if !REGISTERED.swap(true, SeqCst) {
        // SAFETY: `child` has the C ABI, touches only atomics and stays valid for the life of the
        // process. A failure (ENOMEM) leaves forks unguarded, as they were before.
        unsafe { libc::pthread_atfork(None, None, Some(child)) };
    }
}

/// `dl_iterate_phdr(callback, data)`, or `None` in a child forked while one of frag's walks was
/// under way in its parent (see the module docs).
///
/// # Safety
///
/// As `dl_iterate_phdr`: `callback` reads each module's description only during its call and uses
/// `data` as whatever the caller passed.
pub(crate) unsafe fn iterate(
    callback: unsafe extern "C" fn(*mut libc::dl_phdr_info, libc::size_t, *mut libc::c_void) -> libc::c_int,
    data: *mut libc::c_void,
) -> Option<libc::c_int> {
    register();
    if stuck() {
        return None;
    }
    // A locked increment: in memory before the loader's lock is taken, so a fork that copies the
    // lock held also copies the count raised.
    WALKING.fetch_add(1, SeqCst);
    // SAFETY: the caller's contract.
    let rc = unsafe { libc::dl_iterate_phdr(Some(callback), data) };
    WALKING.fetch_sub(1, SeqCst);
    Some(rc)
}

/// Whether this process is a child forked while one of frag's walks was under way: it makes none.
/// (Not logged: a child must not take a lock, such as a log writer's, that a thread of its parent
/// may have held at the fork.)
pub(crate) fn stuck() -> bool {
    STUCK.load(SeqCst)
}
