//! Thread-local state and the rules that keep it safe inside an allocator.
//!
//! Four thread-locals exist, and all follow the same rules:
//! - **const-initialised**: no lazy initialiser runs (which could allocate) on first access;
//! - **no `Drop`**: the standard library then never registers a destructor for them, so access never
//!   fails, not even while the thread is being torn down; we still use `try_with` with a fallback so
//!   that a future change of either property degrades to "counted in the overflow shard" instead of a
//!   panic inside `alloc`.
//!
//! Thread exit is observed through a pthread key destructor instead (see `stats::pool`), which glibc
//! runs after Rust's own thread-local destructors, so their allocations are still attributed to the
//! exiting thread.

use core::cell::Cell;

use crate::stats::pool::PARKED;
use crate::stats::shard::Shard;

/// `SLOT` values below this are states; anything else is the address of the thread's own shard.
pub(crate) const UNCLAIMED: usize = 0;
/// The thread is claiming a shard right now; anything it allocates meanwhile goes to the overflow shard.
pub(crate) const CLAIMING: usize = 1;
/// The thread's shard was released at thread exit; later allocations go to the overflow shard.
pub(crate) const EXITED: usize = 2;
/// The pool was full when the thread asked; it writes to the overflow shard for the rest of its life.
pub(crate) const NO_SLOT: usize = 3;
/// Smallest value that is a shard address (shards are far larger than this and aligned).
pub(crate) const FIRST_ADDRESS: usize = 4;

std::thread_local! {
    static SLOT: Cell<usize> = const { Cell::new(UNCLAIMED) };
    /// What the fast path reads: the thread's own shard once claimed, else the parked shard (whose
    /// gate sends every operation to the cold path, which reads `SLOT`).
    static HOT: Cell<*const Shard> = const { Cell::new(&PARKED) };
    static IN_REPORT: Cell<bool> = const { Cell::new(false) };
    /// The top of this thread's stack for site capture (`sites::unwind`): 0 until looked up, 1 when
    /// it cannot be known.
    static STACK_TOP: Cell<usize> = const { Cell::new(0) };
}

/// The top of the calling thread's stack (see `sites::unwind`), or 0 when unknown; looked up once
/// per thread, without allocating.
pub(crate) fn stack_top() -> usize {
    match STACK_TOP.try_with(Cell::get) {
        Ok(0) => {
            let top = crate::sites::unwind::find_stack_top();
            let _ = STACK_TOP.try_with(|t| t.set(top.max(1)));
            top
        }
        Ok(1) => 0,
        Ok(top) => top,
        Err(_) => crate::sites::unwind::find_stack_top(),
    }
}

/// The calling thread's slot word; `EXITED` if thread-local storage is unavailable.
#[inline(always)]
pub(crate) fn slot() -> usize {
    SLOT.try_with(Cell::get).unwrap_or(EXITED)
}

/// Sets the slot word, and the fast path's shard with it: `v` when it is a shard's address, else
/// the parked shard.
#[inline]
pub(crate) fn set_slot(v: usize) {
    let _ = SLOT.try_with(|s| s.set(v));
    let hot = if v >= FIRST_ADDRESS { v as *const Shard } else { &PARKED as *const Shard };
    let _ = HOT.try_with(|h| h.set(hot));
}

/// The fast path's shard: the calling thread's own, or the parked one (see `stats::pool::PARKED`).
#[inline(always)]
pub(crate) fn hot() -> &'static Shard {
    let p = HOT.try_with(Cell::get).unwrap_or(&PARKED);
    // SAFETY: `HOT` only ever holds the address of `PARKED` or of an element of the `'static` shard
    // pool (`set_slot`), both valid for the life of the process.
    unsafe { &*p }
}

/// Marks the current thread as inside `report()` (or anything else that allocates on our behalf) for
/// as long as it lives. A nested entry gets `None` and must take its allocation-free fallback.
pub(crate) struct ReportGuard(());

impl ReportGuard {
    pub(crate) fn enter() -> Option<Self> {
        match IN_REPORT.try_with(|f| f.replace(true)) {
            Ok(false) => Some(Self(())),
            // Already inside (a probe calling `report()`), or TLS is gone: refuse.
            Ok(true) | Err(_) => None,
        }
    }
}

impl Drop for ReportGuard {
    fn drop(&mut self) {
        let _ = IN_REPORT.try_with(|f| f.set(false));
    }
}
