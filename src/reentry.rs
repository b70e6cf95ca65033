//! The reentrancy guard, and the rules every thread-local of the crate follows.
//!
//! Thread-locals (`stats::thread`, `sites::unwind`, the guard below) are:
//! - **const-initialised**: no lazy initialiser runs (which could allocate) on first access;
//! - **without `Drop`**: the standard library then never registers a destructor for them, so access
//!   never fails, not even while the thread is being torn down; every access still uses `try_with`
//!   with a fallback, so that a future change of either property degrades to "counted in the
//!   overflow shard" instead of a panic inside `alloc`.
//!
//! Thread exit is observed through a pthread key destructor instead (see `stats::pool`), which glibc
//! runs after Rust's own thread-local destructors, so their allocations are still attributed to the
//! exiting thread.

use core::cell::Cell;

std::thread_local! {
    static IN_REPORT: Cell<bool> = const { Cell::new(false) };
}

/// Marks the current thread as inside `report()` (or anything else that allocates on our behalf) for
/// as long as it lives. A nested entry gets `None` and must take its allocation-free fallback.
pub(crate) struct Guard(());

impl Guard {
    pub(crate) fn enter() -> Option<Self> {
        match IN_REPORT.try_with(|f| f.replace(true)) {
            Ok(false) => Some(Self(())),
            // Already inside (a probe calling `report()`), or TLS is gone: refuse.
            Ok(true) | Err(_) => None,
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = IN_REPORT.try_with(|f| f.set(false));
    }
}
