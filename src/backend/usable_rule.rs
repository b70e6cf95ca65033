//! The allocation path's usable-size rules and their types (see `usable` for how each backend's
//! usable sizes are accounted, and for asking a backend).

use core::alloc::Layout;

use super::custom::Introspect;

/// The largest request the fast path takes (`class::TABLE_MAX`, 32 KiB).
pub(crate) use crate::stats::class::TABLE_MAX as SMALL_MAX;

/// Alignment every backend gives by default (`max_align_t`).
pub(crate) const MIN_ALIGN: usize = if cfg!(target_pointer_width = "64") { 16 } else { 8 };

pub(crate) use crate::stats::shard::Usable;

/// Whether a request takes the backend's plain size-class path: default alignment and at most
/// `max` bytes.
#[inline(always)]
pub(crate) fn is_plain(layout: Layout, max: usize) -> bool {
    layout.size() <= max && layout.align() <= MIN_ALIGN && layout.align() <= layout.size()
}

/// How the allocation path accounts the usable size of a request on its fast path (see
/// `usable::fast`).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Rule {
    /// Nothing recorded per block: the class's uniform usable size, or (for an allocator that says
    /// nothing) the requested size, stands in at report time.
    Uniform,
    /// A usable size that follows from the request alone, on a backend where every block records
    /// its usable size (see [`Usable::Recorded`]).
    Recorded(usize),
    /// A usable size only a known backend's block can tell: `usable::of` with the block, while it is
    /// live. Holds the request's alignment, so that the layout can be rebuilt from the size alone.
    #[cfg_attr(not(any(feature = "mimalloc", feature = "snmalloc")), allow(dead_code))]
    PerBlock(usize),
    /// A usable size a user's [`Introspect`] tells (the `Introspect` goes along with the rule where it is
    /// needed), with the request's alignment.
    Introspect(usize),
}

impl Rule {
    /// `introspect` where this rule needs it, else `None`: for the other rules, a constant that keeps
    /// nothing alive across the inner call.
    #[inline(always)]
    pub(crate) fn introspect(self, introspect: Option<&'static dyn Introspect>) -> Option<&'static dyn Introspect> {
        if matches!(self, Self::Introspect(_)) { introspect } else { None }
    }
}
