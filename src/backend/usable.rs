//! Usable sizes: what the backend really hands out for a request (its size class, not the request).
//!
//! Live usable bytes minus live requested bytes is internal fragmentation, counted per size class.
//! Asking the backend on every allocation and every free would cost more than the whole rest of the
//! bookkeeping, so the crate uses what the backends have in common:
//!
//! - **Uniform classes.** jemalloc (up to 32 KiB) and snmalloc round requests to classes spaced four
//!   per power of two, exactly like ours (`stats::class`). With default alignment every request in one
//!   of our classes gets the same usable size, so the allocation path records nothing extra and the
//!   report computes `blocks × class usable size`, asking the backend once per class. The tests check
//!   this against the backend's per-pointer answer for every size up to 64 KiB at alignments 1, 8, 16.
//!   mimalloc's bins have the same spacing, but the `mimalloc` crate allocates through
//!   `mi_malloc_aligned`, which over-allocates whenever a page's free list is empty, so its blocks are
//!   accounted explicitly.
//! - **Explicit** usable sizes for everything else: over-aligned requests, requests beyond the range
//!   where a backend's classes are uniform, and backends whose classes are not (glibc: 16-byte chunk
//!   steps; mimalloc, above; a user's allocator through its [`Probe`](super::Probe)). The size is computed the same way
//!   when the block is allocated and when it is freed, so per-class live usable bytes never drift.
//! - **Requested**: an allocator that says nothing about usable sizes; usable equals requested.

use core::alloc::Layout;

use super::{Backend, Kind, Probe};

/// Alignment every backend gives by default (`max_align_t`).
pub(crate) const MIN_ALIGN: usize = if cfg!(target_pointer_width = "64") { 16 } else { 8 };

/// How a block's usable size is accounted for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(any(feature = "jemalloc", feature = "snmalloc")), allow(dead_code))]
pub(crate) enum Usable {
    /// The class's uniform usable size (computed at report time).
    Uniform,
    /// This many bytes, recorded with the block.
    Explicit(usize),
    /// Unknown: the requested size stands in.
    Requested,
}

/// Whether a request takes the backend's plain size-class path: default alignment and at most
/// `max` bytes.
#[inline(always)]
pub(crate) fn is_plain(layout: Layout, max: usize) -> bool {
    layout.size() <= max && layout.align() <= MIN_ALIGN && layout.align() <= layout.size()
}

/// How to account for the usable size of the live block `ptr`, allocated with `layout` by a `kind`
/// allocator. Called on the allocation path: allocation-free, lock-free, panic-free for every backend.
///
/// `kind` is `kind_of::<A>()`, read once per call into `Tracked`: a constant that folds every match
/// here, or for `Select` one load shared by all of them.
#[inline(always)]
pub(crate) fn of(kind: Kind, probe: Option<&'static dyn Probe>, ptr: *mut u8, layout: Layout) -> Usable {
    match kind {
        Kind::Known(Backend::System) => super::system::usable(ptr, layout),
        #[cfg(feature = "jemalloc")]
        Kind::Known(Backend::Jemalloc) if is_plain(layout, super::jemalloc::UNIFORM_MAX) => Usable::Uniform,
        #[cfg(feature = "jemalloc")]
        Kind::Known(Backend::Jemalloc) => Usable::Explicit(super::jemalloc::usable(layout)),
        #[cfg(feature = "mimalloc")]
        Kind::Known(Backend::Mimalloc) => Usable::Explicit(super::mimalloc::usable_at(ptr)),
        #[cfg(feature = "snmalloc")]
        Kind::Known(Backend::Snmalloc) if is_plain(layout, super::snmalloc::UNIFORM_MAX) => {
            super::snmalloc::learn_class(ptr, layout.size());
            Usable::Uniform
        }
        #[cfg(feature = "snmalloc")]
        Kind::Known(Backend::Snmalloc) => Usable::Explicit(super::snmalloc::usable_at(ptr)),
        Kind::Other => match probe {
            Some(p) => Usable::Explicit(p.usable_size(ptr, layout).unwrap_or(layout.size())),
            None => Usable::Requested,
        },
    }
}

/// Whether [`of`] needs the block itself (its pointer, while it is live) for this layout. When it
/// does not, `dealloc` computes the usable size after the inner call, so nothing has to be kept in
/// registers across it.
#[inline(always)]
pub(crate) fn needs_block(kind: Kind, probe: Option<&'static dyn Probe>, layout: Layout) -> bool {
    match kind {
        Kind::Known(Backend::System) => super::system::needs_block(layout),
        #[cfg(feature = "jemalloc")]
        Kind::Known(Backend::Jemalloc) => false,
        #[cfg(feature = "mimalloc")]
        Kind::Known(Backend::Mimalloc) => true,
        #[cfg(feature = "snmalloc")]
        Kind::Known(Backend::Snmalloc) => !is_plain(layout, super::snmalloc::UNIFORM_MAX),
        Kind::Other => probe.is_some(),
    }
}

/// [`of`] for a layout where [`needs_block`] is false (the block may be gone already).
#[inline(always)]
pub(crate) fn of_layout(kind: Kind, layout: Layout) -> Usable {
    match kind {
        // Without a block, `system::usable` only applies the chunk rule (see `needs_block`).
        Kind::Known(Backend::System) => super::system::usable(core::ptr::null_mut(), layout),
        #[cfg(feature = "jemalloc")]
        Kind::Known(Backend::Jemalloc) if is_plain(layout, super::jemalloc::UNIFORM_MAX) => Usable::Uniform,
        #[cfg(feature = "jemalloc")]
        Kind::Known(Backend::Jemalloc) => Usable::Explicit(super::jemalloc::usable(layout)),
        #[cfg(feature = "snmalloc")]
        Kind::Known(Backend::Snmalloc) => Usable::Uniform,
        _ => Usable::Requested,
    }
}
