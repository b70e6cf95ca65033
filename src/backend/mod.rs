//! What each wrapped allocator can tell us: the usable size of a block (on the allocation path) and its
//! own statistics (at report time).
//!
//! `report()` is a free function, so the crate has to know which allocator is wrapped. The first
//! `Tracked<A>` to claim a shard registers `A` here (by `TypeId`, on the claim slow path); known
//! backends are matched, anything else is reported by its type name and can bring its own [`Probe`].
//! Backends know nothing of reports; the report module asks them.

use core::alloc::Layout;
use core::any::TypeId;
use core::cell::UnsafeCell;

use crate::stats::snapshot::ClassUsable;
use crate::sync::{AtomicU8, Ordering};

#[cfg(feature = "jemalloc")]
pub(crate) mod jemalloc;
mod known;
#[cfg(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64"))]
mod malloc_info;
#[cfg(feature = "mimalloc")]
pub(crate) mod mimalloc;
pub(crate) mod select;
#[cfg(feature = "snmalloc")]
pub(crate) mod snmalloc;
mod stats;
pub(crate) mod system;
pub(crate) mod usable;

pub use known::Backend;
pub use stats::AllocatorStats;

/// The wrapped allocator as the crate sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// One it knows by type.
    Known(Backend),
    /// Anything else: a user's allocator, possibly with a [`Probe`].
    Other,
}

/// Matches `A` against the known backends. Every comparison is between two compile-time constants,
/// so after monomorphisation this folds to a single value and costs nothing on the allocation path.
/// For [`Select`](select::Select) it is the backend the process chose: one relaxed load.
#[inline(always)]
pub(crate) fn kind_of<A: 'static>() -> Kind {
    let id = TypeId::of::<A>();
    if id == TypeId::of::<select::Select>() {
        return select::chosen_kind();
    }
    if id == TypeId::of::<std::alloc::System>() {
        return Kind::Known(Backend::System);
    }
    #[cfg(feature = "jemalloc")]
    if id == TypeId::of::<tikv_jemallocator::Jemalloc>() {
        return Kind::Known(Backend::Jemalloc);
    }
    #[cfg(feature = "mimalloc")]
    if id == TypeId::of::<::mimalloc::MiMalloc>() {
        return Kind::Known(Backend::Mimalloc);
    }
    #[cfg(feature = "snmalloc")]
    if id == TypeId::of::<snmalloc_rs::SnMalloc>() {
        return Kind::Known(Backend::Snmalloc);
    }
    Kind::Other
}

/// [`kind_of`] for the allocator value `a`: for [`Select`](select::Select) the backend it chooses,
/// deciding it now if this is the process's first allocation (the allocation path needs the kind
/// before the inner call). A constant for every other type.
#[inline(always)]
pub(crate) fn kind_of_value<A: 'static>(a: &A) -> Kind {
    match (a as &dyn core::any::Any).downcast_ref::<select::Select>() {
        Some(s) => Kind::Known(s.backend()),
        None => kind_of::<A>(),
    }
}

/// Plugs a custom allocator's knowledge into the report.
///
/// Pass one to [`Tracked::with_probe`](crate::Tracked::with_probe). Every method has a default, so an
/// allocator that knows nothing about itself still gets every counter plus the process view.
///
/// # Example
///
/// ```no_run
/// use std::alloc::{GlobalAlloc, Layout, System};
///
/// /// An allocator that rounds every request up to 64 bytes.
/// struct Rounding;
///
/// unsafe impl GlobalAlloc for Rounding {
///     unsafe fn alloc(&self, l: Layout) -> *mut u8 {
///         // SAFETY: rounding a valid layout's size up to 64 keeps it valid.
///         unsafe { System.alloc(Layout::from_size_align_unchecked(l.size().next_multiple_of(64), l.align())) }
///     }
///     unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
///         // SAFETY: `p` was allocated by `alloc` above with the same rounded layout.
///         unsafe { System.dealloc(p, Layout::from_size_align_unchecked(l.size().next_multiple_of(64), l.align())) }
///     }
/// }
///
/// struct RoundingProbe;
///
/// impl frag::Probe for RoundingProbe {
///     fn name(&self) -> &'static str {
///         "rounding"
///     }
///     fn usable_size(&self, _ptr: *mut u8, layout: Layout) -> Option<usize> {
///         Some(layout.size().next_multiple_of(64))
///     }
/// }
///
/// #[global_allocator]
/// static A: frag::Tracked<Rounding> = frag::Tracked::with_probe(Rounding, &RoundingProbe);
///
/// fn main() {
///     let v = vec![0u8; 100];
///     assert_eq!(frag::report().backend, Some(frag::WrappedBackend::Other("rounding")));
///     drop(v);
/// }
/// ```
pub trait Probe: Sync {
    /// The name shown as the report's `backend`.
    fn name(&self) -> &'static str;

    /// The usable size of the live block at `ptr`, allocated with `layout`, or `None` if unknown (the
    /// requested size is used then and the report says so).
    ///
    /// Called on the allocation path, once when the block is handed out and once when it is freed:
    /// it must not allocate, lock, or panic, and must return the same value both times.
    fn usable_size(&self, ptr: *mut u8, layout: Layout) -> Option<usize> {
        let _ = (ptr, layout);
        None
    }

    /// The allocator's own figures, for the report's `allocator` section. Called from `report()`,
    /// outside the allocation path: it may allocate.
    ///
    /// The diagnosis's breakdown uses four of them when the probe gives them: `active` (bytes in
    /// pages that hold blocks: minus the tracked usable bytes, the holes), `dirty` (free pages it
    /// could return: reclaimable), `metadata`, and `resident` (all it holds resident: the rest of
    /// RSS is outside the heap). A bucket without its figure is left in `unexplained`.
    fn stats(&self) -> Option<AllocatorStats> {
        None
    }
}

/// The wrapped allocator, as far as the report is concerned.
#[derive(Clone, Copy)]
pub(crate) struct Registration {
    pub(crate) kind: Kind,
    pub(crate) type_name: &'static str,
    pub(crate) probe: Option<&'static dyn Probe>,
}

impl Registration {
    /// The report's `backend` string.
    pub(crate) fn name(&self) -> &'static str {
        match self.kind {
            Kind::Known(b) => b.name(),
            Kind::Other => self.probe.map_or(self.type_name, |p| p.name()),
        }
    }

    /// How usable sizes are obtained, in words for the report.
    pub(crate) fn usable_source(&self) -> &'static str {
        match self.kind {
            Kind::Known(Backend::System) => system::USABLE_SOURCE,
            #[cfg(feature = "jemalloc")]
            Kind::Known(Backend::Jemalloc) => jemalloc::USABLE_SOURCE,
            #[cfg(feature = "mimalloc")]
            Kind::Known(Backend::Mimalloc) => mimalloc::USABLE_SOURCE,
            #[cfg(feature = "snmalloc")]
            Kind::Known(Backend::Snmalloc) => snmalloc::USABLE_SOURCE,
            Kind::Other if self.probe.is_some() => {
                "the allocator's Probe::usable_size (requested size where it returns None)"
            }
            Kind::Other => "unknown allocator: usable bytes equal requested bytes",
        }
    }

    /// How usable sizes of size class `class` are accounted on this backend (see `usable`): the
    /// uniform usable size of its plain blocks where the backend's classes are uniform.
    /// Allocation-free.
    pub(crate) fn class_usable(&self, class: usize) -> ClassUsable {
        let _ = class; // used only by the backends with uniform classes
        let uniform = match self.kind {
            Kind::Known(Backend::System) if cfg!(all(target_os = "linux", target_env = "gnu")) => {
                return ClassUsable::Recorded;
            }
            #[cfg(feature = "jemalloc")]
            Kind::Known(Backend::Jemalloc) => {
                let largest = crate::stats::class::upper_bound(class);
                largest.filter(|&l| l <= jemalloc::UNIFORM_MAX).map(|l| jemalloc::class_usable(l) as u64)
            }
            #[cfg(feature = "snmalloc")]
            Kind::Known(Backend::Snmalloc) => snmalloc::class_usable(class),
            _ => None,
        };
        uniform.map_or(ClassUsable::Requested, ClassUsable::Uniform)
    }

    /// The backend's own statistics. Runs at report time only, and only for the wrapped backend, so a
    /// report never initialises an allocator the program does not use.
    pub(crate) fn stats(&self) -> Result<Option<AllocatorStats>, String> {
        match self.kind {
            Kind::Known(Backend::System) => system::stats(),
            #[cfg(feature = "jemalloc")]
            Kind::Known(Backend::Jemalloc) => jemalloc::stats().map(Some),
            #[cfg(feature = "mimalloc")]
            Kind::Known(Backend::Mimalloc) => Ok(Some(mimalloc::stats())),
            #[cfg(feature = "snmalloc")]
            Kind::Known(Backend::Snmalloc) => Ok(Some(snmalloc::stats())),
            Kind::Other => Ok(self.probe.and_then(|p| p.stats())),
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
