//! The calling thread's current scope, set by [`Entered`] guards.

use core::cell::Cell;
use core::marker::PhantomData;

use super::scope_table::NONE;

std::thread_local! {
    /// The current scope's slot. Follows the thread-local rules of `reentry` (const-initialised, no
    /// `Drop`, read with `try_with`).
    static CURRENT: Cell<u16> = const { Cell::new(NONE) };
}

/// The calling thread's current scope's slot; [`NONE`] outside every scope and while the thread
/// is being torn down. Read on the sampled path: no allocation, no lock.
#[inline]
pub(crate) fn slot() -> u16 {
    CURRENT.try_with(Cell::get).unwrap_or(NONE)
}

/// Makes slot `id` current; returns the one it replaces.
pub(crate) fn replace(id: u16) -> u16 {
    CURRENT.try_with(|c| c.replace(id)).unwrap_or(NONE)
}

/// While it lives, the calling thread's allocations are sampled into a scope; dropping it restores
/// the scope that was current before ([`Scope::enter`](super::Scope::enter)).
///
/// Guards nest: drop them in the reverse order of entering (as any scope guard). A guard stays on the
/// thread that made it (it is not `Send`): to follow a task across threads, wrap the future
/// ([`ScopeExt::in_scope`](super::ScopeExt::in_scope)).
#[must_use = "the scope ends when the guard is dropped"]
#[derive(Debug)]
pub struct Entered {
    previous: u16,
    /// Not `Send`: the scope belongs to this thread.
    _thread: PhantomData<*const ()>,
}

impl Entered {
    pub(crate) fn enter(id: u16) -> Self {
        Self { previous: replace(id), _thread: PhantomData }
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        let _ = replace(self.previous);
    }
}
