//! Which allocator the installed `Tracked` wraps: registered by the first `Tracked<A>` to claim a
//! shard (by `TypeId`, on the claim slow path), read by reports and tuning.

use core::cell::UnsafeCell;

use super::custom::Introspect;
use super::list::Backend;
use super::wrapped::WrappedBackend;
use crate::sync::{AtomicU8, Ordering};

/// The wrapped allocator, as far as the report and tuning are concerned.
#[derive(Clone, Copy)]
pub(crate) struct Registration {
    /// The known backend, or `None` for a user's allocator.
    pub(crate) backend: Option<Backend>,
    pub(crate) type_name: &'static str,
    pub(crate) introspect: Option<&'static dyn Introspect>,
}

impl Registration {
    /// The wrapped allocator, named: a user's allocator by its `Introspect`'s name, else its type name.
    pub(crate) fn wrapped(&self) -> WrappedBackend {
        match self.backend {
            Some(b) => WrappedBackend::Known(b),
            None => WrappedBackend::Other(self.introspect.map_or(self.type_name, |p| p.name())),
        }
    }
}

const EMPTY: u8 = 0;
const WRITING: u8 = 1;
const READY: u8 = 2;

/// Written once, by the first claim; read by reports.
struct Slot {
    state: AtomicU8,
    value: UnsafeCell<Option<Registration>>,
}

// SAFETY: `value` is written exactly once, by the thread that moved `state` from EMPTY to WRITING, and
// read only after `state` is READY (Release/Acquire), so no access races.
unsafe impl Sync for Slot {}

static REGISTERED: Slot = Slot { state: AtomicU8::new(EMPTY), value: UnsafeCell::new(None) };

/// Records the wrapped allocator if none is recorded yet. Allocation-free; the first caller wins and
/// gets `true`.
pub(crate) fn register(reg: Registration) -> bool {
    if REGISTERED.state.compare_exchange(EMPTY, WRITING, Ordering::Acquire, Ordering::Relaxed).is_ok() {
        // SAFETY: we won the EMPTY -> WRITING transition, so nobody else writes, and readers wait for
        // READY.
        unsafe { *REGISTERED.value.get() = Some(reg) };
        REGISTERED.state.store(READY, Ordering::Release);
        return true;
    }
    false
}

/// The registered allocator, if any `Tracked` has allocated yet.
pub(crate) fn registered() -> Option<Registration> {
    if REGISTERED.state.load(Ordering::Acquire) == READY {
        // SAFETY: READY is stored after the single write, with Release; nothing writes afterwards.
        unsafe { *REGISTERED.value.get() }
    } else {
        None
    }
}
