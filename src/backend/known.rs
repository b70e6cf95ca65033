//! What the allocation path needs of every known backend, implemented once per backend in its own
//! file: its identity, how it accounts usable sizes, and what a thread can release at a sample.
//! What the report asks of a backend is [`KnownIntrospect`](super::introspect::KnownIntrospect), what tuning
//! and the reclaimer change is [`Knobs`](super::tuning::actions::Knobs): two traits on top of this one.
//!
//! It is implemented on the allocator type itself (`std::alloc::System`, `tikv_jemallocator::Jemalloc`,
//! ...) and reached through `with_backend!` (see `list`), so every call is static: on the allocation
//! path a constant for a fixed backend, one jump for `Select`. [`Introspect`](super::custom::Introspect) is the
//! public face of the same questions for a user's allocator.

use core::alloc::{GlobalAlloc, Layout};

use super::list::Backend;
use super::usable_rule::{Rule, Usable};
use crate::stats::snapshot::ClassUsable;

/// A backend this crate knows by type, as the allocation path sees it. Methods with a default are
/// the ones a backend may lack.
pub(crate) trait KnownAllocator: GlobalAlloc + Sized + 'static {
    /// This backend's entry in the list.
    const BACKEND: Backend;

    /// The allocator value `Select` forwards to (every known backend is a unit struct).
    const VALUE: Self;

    /// The largest request whose marked samples get a twin (0: none): a block of the request's own
    /// layout, allocated and freed with the marked block, in the place the block itself would have
    /// had, so that [`slab_use`](super::introspect::KnownIntrospect::slab_use) can say how full that slab is. Only a backend that
    /// answers `slab_use` sets it; the limit keeps twins under 1% of live bytes at the default mean.
    const TWIN_MAX: usize = 0;

    /// The size of a class whose blocks this allocator starts on a 4 KiB boundary when asked for
    /// them with an ordinary alignment (0: none). A marked sample of a small request
    /// (`sampler::mark`) that fits in it is allocated there, from the allocator's fast path, rather
    /// than with a 4 KiB alignment, which the allocator may serve, and free, by a slower one. The
    /// boundary is checked at every such allocation all the same.
    const PAGE_CLASS: usize = 0;

    /// Whether every block this allocator hands out for `layout` owns its *head*: the bytes from the
    /// 4 KiB boundary at or below its start up to it, its start a multiple of 16. Then a sampled
    /// block of that layout gets the mark (`sampler::mark`) from a plain allocation, handed out at
    /// that boundary, instead of from a 4 KiB-aligned one, which the allocator may serve by a slower
    /// path. Allocation-, lock- and panic-free.
    fn owns_its_head(layout: Layout) -> bool {
        let _ = layout;
        false
    }

    /// The fast path's usable-size rule for `layout`, or `None` when the request takes the cold path
    /// (over-aligned, or larger than `class::TABLE_MAX`). Allocation-, lock- and panic-free.
    fn fast(layout: Layout) -> Option<Rule>;

    /// How to account for the usable size of the live block `ptr`, allocated with `layout`.
    /// Allocation-, lock- and panic-free, and the same at allocation and at free.
    fn usable(ptr: *mut u8, layout: Layout) -> Usable;

    /// How the usable sizes of size class `class` are accounted: the uniform usable size of its plain
    /// blocks where the backend's classes are uniform. Allocation-free.
    fn class_usable(class: usize) -> ClassUsable {
        let _ = class;
        ClassUsable::Requested
    }

    /// What only the calling thread can release, from the allocation path (`backend::assist`):
    /// allocation-, lock- and panic-free, never inside the allocator itself. `false`: nothing done.
    fn assist() -> bool {
        false
    }
}

impl Backend {
    /// The largest request whose marked samples get a twin (`KnownAllocator::TWIN_MAX`).
    #[inline(always)]
    pub(crate) fn twin_max(self) -> usize {
        super::list::with_backend!(self, A => <A as KnownAllocator>::TWIN_MAX)
    }

    /// The class whose blocks start on a 4 KiB boundary (`KnownAllocator::PAGE_CLASS`).
    #[inline(always)]
    pub(crate) fn page_class(self) -> usize {
        super::list::with_backend!(self, A => <A as KnownAllocator>::PAGE_CLASS)
    }

    /// Whether this backend's blocks of `layout` own their head (`KnownAllocator::owns_its_head`).
    #[inline]
    pub(crate) fn owns_its_head(self, layout: Layout) -> bool {
        super::list::with_backend!(self, A => <A as KnownAllocator>::owns_its_head(layout))
    }
}
