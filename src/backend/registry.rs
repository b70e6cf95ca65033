//! Which allocator the installed `Tracked` wraps: registered by the first `Tracked<A>` to claim a
//! shard (by `TypeId`, on the claim slow path), read by reports and tuning.

use core::cell::UnsafeCell;
use core::fmt;

use super::AllocatorStats;
use super::interface::{KnownAllocator, StatsError};
use super::list::{Backend, with_backend};
use super::probe::Probe;
use super::usable::UsableSource;
use crate::stats::snapshot::ClassUsable;
use crate::sync::{AtomicU8, Ordering};

/// The allocator a report describes: one of the crate's known backends, or another allocator by the
/// name its [`Probe`](crate::Probe) gives (else its type name).
///
/// Serialises (feature `serde`) and prints as the plain name: `"jemalloc"`, `"system"`, `"rounding"`.
///
/// # Example
///
/// ```no_run
/// #[global_allocator]
/// static A: frag::Tracked<std::alloc::System> = frag::Tracked::new(std::alloc::System);
///
/// match frag::report().backend {
///     Some(frag::WrappedBackend::Known(frag::Backend::System)) => println!("glibc malloc"),
///     Some(other) => println!("wrapping {other}"),
///     None => println!("no Tracked allocator is installed"),
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WrappedBackend {
    /// A backend this crate knows by type.
    Known(Backend),
    /// Any other allocator: its probe's name, or its Rust type name without a probe.
    Other(&'static str),
}

impl WrappedBackend {
    /// The name reports show.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Known(b) => b.name(),
            Self::Other(name) => name,
        }
    }

    /// The known backend, if it is one.
    #[must_use]
    pub const fn known(self) -> Option<Backend> {
        match self {
            Self::Known(b) => Some(b),
            Self::Other(_) => None,
        }
    }
}

impl fmt::Display for WrappedBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl PartialEq<&str> for WrappedBackend {
    fn eq(&self, other: &&str) -> bool {
        self.name() == *other
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for WrappedBackend {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// The wrapped allocator, as far as the report and tuning are concerned.
#[derive(Clone, Copy)]
pub(crate) struct Registration {
    /// The known backend, or `None` for a user's allocator.
    pub(crate) backend: Option<Backend>,
    pub(crate) type_name: &'static str,
    pub(crate) probe: Option<&'static dyn Probe>,
}

impl Registration {
    /// The wrapped allocator, named: a user's allocator by its probe's name, else its type name.
    pub(crate) fn wrapped(&self) -> WrappedBackend {
        match self.backend {
            Some(b) => WrappedBackend::Known(b),
            None => WrappedBackend::Other(self.probe.map_or(self.type_name, |p| p.name())),
        }
    }

    /// How usable sizes are obtained.
    pub(crate) fn usable_source(&self) -> UsableSource {
        match self.backend {
            Some(b) => UsableSource::Backend(b),
            None if self.probe.is_some() => UsableSource::Probe,
            None => UsableSource::Requested,
        }
    }

    /// How usable sizes of size class `class` are accounted on this backend (see `usable`).
    /// Allocation-free.
    pub(crate) fn class_usable(&self, class: usize) -> ClassUsable {
        match self.backend {
            Some(b) => with_backend!(b, A => A::class_usable(class)),
            None => ClassUsable::Requested,
        }
    }

    /// The backend's own statistics. Runs at report time only, and only for the wrapped backend, so a
    /// report never initialises an allocator the program does not use.
    pub(crate) fn stats(&self) -> Result<Option<AllocatorStats>, StatsError> {
        match self.backend {
            Some(b) => with_backend!(b, A => A::stats()),
            None => Ok(self.probe.and_then(|p| p.stats())),
        }
    }
}

impl Registration {
    /// The backend's own size classes and counts (empty for a backend without them and for a user's
    /// allocator). Report time only.
    pub(crate) fn classes(&self) -> Result<Vec<crate::backend::AllocatorClass>, StatsError> {
        match self.backend {
            Some(b) => with_backend!(b, A => A::classes()),
            None => Ok(Vec::new()),
        }
    }

    /// How full the slab of each block at `ptrs` is (`None`: the backend cannot say). Report time
    /// only.
    pub(crate) fn slab_use(&self, ptrs: &[usize]) -> Result<Option<Vec<crate::backend::SlabUse>>, StatsError> {
        match self.backend {
            Some(b) => with_backend!(b, A => A::slab_use(ptrs)),
            None => Ok(None),
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
