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
//! - **Recorded** on glibc, whose 16-byte chunk steps do not line up with our classes: every block
//!   adds its usable size (from a table on the fast path, `malloc_usable_size` above 32 KiB or when
//!   over-aligned) and the report sums what was recorded.
//! - **Explicit** usable sizes for the exceptions elsewhere: over-aligned requests, requests beyond
//!   the range where a backend's classes are uniform, and backends whose classes are not (mimalloc,
//!   above; a user's allocator through its [`Probe`](super::Probe)), each recorded with a count of
//!   such blocks. The size is computed the same way when the block is allocated and when it is freed,
//!   so per-class live usable bytes never drift.
//! - **Requested**: an allocator that says nothing about usable sizes; usable equals requested.

use core::alloc::Layout;

use super::interface::KnownAllocator;
use super::list::{Backend, with_backend};
use super::probe::Probe;
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

/// How to account for the usable size of the live block `ptr`, allocated with `layout` by `backend`
/// (`None`: a user's allocator, with `probe` if it gave one). Called on the allocation path:
/// allocation-free, lock-free, panic-free for every backend.
///
/// `backend` is `backend_of::<A>()`, read once per call into `Tracked`: a constant that folds every
/// match here, or for `Select` one load shared by all of them.
#[inline(always)]
pub(crate) fn of(backend: Option<Backend>, probe: Option<&'static dyn Probe>, ptr: *mut u8, layout: Layout) -> Usable {
    match backend {
        Some(b) => with_backend!(b, A => A::usable(ptr, layout)),
        None => match probe {
            Some(p) => Usable::Explicit(p.usable_size(ptr, layout).unwrap_or(layout.size())),
            None => Usable::Requested,
        },
    }
}

/// The usable size a block of `layout` would have without the sampler's mark, for a sample that
/// stands for many such blocks (the sampled tier weighs it): what the fast path's rule gives, from
/// the request alone where the backend allows; the requested size stands in where only a live,
/// unmarked block could tell (mimalloc, a probe). Requests off the fast path (large, over-aligned)
/// take the marked block's own usable size (`ptr`, allocated with `real`): the mark changes little
/// there.
pub(crate) fn standing_in(
    backend: Option<Backend>,
    probe: Option<&'static dyn Probe>,
    ptr: *mut u8,
    layout: Layout,
    real: Layout,
) -> Usable {
    match fast(backend, probe, layout) {
        Some(Rule::Uniform) => Usable::Uniform,
        Some(Rule::Recorded(u)) => Usable::Recorded(u),
        Some(Rule::PerBlock(_) | Rule::Probe(_)) => Usable::Requested,
        None => of(backend, probe, ptr, real),
    }
}

/// How the allocation path accounts the usable size of a request on its fast path (see
/// [`fast`]).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Rule {
    /// Nothing recorded per block: the class's uniform usable size, or (for an allocator that says
    /// nothing) the requested size, stands in at report time.
    Uniform,
    /// A usable size that follows from the request alone, on a backend where every block records
    /// its usable size (see [`Usable::Recorded`]).
    Recorded(usize),
    /// A usable size only a known backend's block can tell: [`of`] with the block, while it is
    /// live. Holds the request's alignment, so that the layout can be rebuilt from the size alone.
    #[cfg_attr(not(any(feature = "mimalloc", feature = "snmalloc")), allow(dead_code))]
    PerBlock(usize),
    /// A usable size a user's [`Probe`] tells (the probe goes along with the rule where it is
    /// needed), with the request's alignment.
    Probe(usize),
}

/// The fast-path rule for `layout` on `backend` (see [`KnownAllocator::fast`]), or `None` when the
/// request takes the cold path (over-aligned, or larger than `class::TABLE_MAX`, 32 KiB).
///
/// The alignment test is the one every backend makes to choose its plain entry point (`malloc`
/// rather than an aligned one), so after inlining the compiler merges the two.
#[inline(always)]
pub(crate) fn fast(backend: Option<Backend>, probe: Option<&'static dyn Probe>, layout: Layout) -> Option<Rule> {
    match backend {
        Some(b) => with_backend!(b, A => A::fast(layout)),
        None => is_plain(layout, SMALL_MAX).then_some(match probe {
            Some(_) => Rule::Probe(layout.align()),
            // Nothing to record: the report takes requested bytes as usable.
            None => Rule::Uniform,
        }),
    }
}

impl Rule {
    /// `probe` where this rule needs it, else `None`: for the other rules, a constant that keeps
    /// nothing alive across the inner call.
    #[inline(always)]
    pub(crate) fn probe(self, probe: Option<&'static dyn Probe>) -> Option<&'static dyn Probe> {
        if matches!(self, Self::Probe(_)) { probe } else { None }
    }

    /// The usable size of the live block `ptr`, allocated with a request of `size` bytes that took
    /// this rule.
    ///
    /// Needs nothing but the rule, the block, `backend` (a constant, or for `Select` its decided
    /// backend) and, for [`Rule::Probe`], the probe; so the cold path after an allocation needs no
    /// `Tracked` to call it.
    #[inline(always)]
    pub(crate) fn resolve(
        self,
        backend: Option<Backend>,
        probe: Option<&'static dyn Probe>,
        ptr: *mut u8,
        size: usize,
    ) -> Usable {
        // SAFETY (the layout below): the request's own size and alignment, which formed a valid `Layout`.
        match self {
            Self::Uniform => Usable::Uniform,
            Self::Recorded(u) => Usable::Recorded(u),
            // `of` consults `probe` for a user's allocator only, which is what `Probe` rules are.
            Self::PerBlock(align) | Self::Probe(align) => {
                of(backend, probe, ptr, unsafe { Layout::from_size_align_unchecked(size, align) })
            }
        }
    }
}

/// How a report's usable bytes were obtained ([`Report::usable_source`](crate::Report::usable_source)).
///
/// Prints, and serialises (feature `serde`), as a sentence saying how: `"exact: jemalloc nallocx, once
/// per size class up to 32 KiB ..."`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum UsableSource {
    /// From a known backend, as its [`description`](Self::description) says (exact on every backend
    /// but a system allocator other than glibc, where usable bytes equal requested bytes).
    Backend(Backend),
    /// From the wrapped allocator's [`Probe::usable_size`], the requested size where it returns `None`.
    Probe,
    /// Not known: usable bytes equal requested bytes (an allocator without a probe).
    Requested,
}

impl UsableSource {
    /// How usable sizes are obtained, in words.
    #[must_use]
    pub fn description(self) -> &'static str {
        match self {
            Self::Backend(b) => with_backend!(b, A => A::USABLE_SOURCE),
            Self::Probe => "the allocator's Probe::usable_size (requested size where it returns None)",
            Self::Requested => "unknown allocator: usable bytes equal requested bytes",
        }
    }
}

impl core::fmt::Display for UsableSource {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.description())
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for UsableSource {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.description())
    }
}
