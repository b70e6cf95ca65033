//! Usable sizes: what the backend really hands out for a request (its size class, not the request),
//! asked of the backend on the allocation path (the rules and their types: `usable_rule`).
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
//!   above; a user's allocator through its [`Introspect`]), each recorded with a count of
//!   such blocks. The size is computed the same way when the block is allocated and when it is freed,
//!   so per-class live usable bytes never drift.
//! - **Requested**: an allocator that says nothing about usable sizes; usable equals requested.

use core::alloc::Layout;

use super::custom::Introspect;
use super::known::KnownAllocator;
use super::list::{Backend, with_backend};
pub(crate) use super::usable_rule::{MIN_ALIGN, Rule, SMALL_MAX, Usable, is_plain};
use crate::stats::snapshot::ClassUsable;
/// How to account for the usable size of the live block `ptr`, allocated with `layout` by `backend`
/// (`None`: a user's allocator, with `introspect` if it gave one). Called on the allocation path:
/// allocation-free, lock-free, panic-free for every backend.
///
/// `backend` is `backend_of::<A>()`, read once per call into `Tracked`: a constant that folds every
/// match here, or for `Select` one load shared by all of them.
#[inline(always)]
pub(crate) fn of(
    backend: Option<Backend>,
    introspect: Option<&'static dyn Introspect>,
    ptr: *mut u8,
    layout: Layout,
) -> Usable {
    match backend {
        Some(b) => with_backend!(b, A => A::usable(ptr, layout)),
        None => match introspect {
            Some(p) => Usable::Explicit(p.usable_size(ptr, layout).unwrap_or(layout.size())),
            None => Usable::Requested,
        },
    }
}

/// How to account for the usable size of the live block `ptr`, allocated with `real` by `backend`
/// but counted in the size class of another request (a marked sample in the exact tier): what
/// [`of`] says, except that a uniform class's rule would give the counted class's usable size, so
/// the block's own class's is recorded instead. Allocation-, lock- and panic-free.
#[inline]
pub(crate) fn apart(
    backend: Option<Backend>,
    introspect: Option<&'static dyn Introspect>,
    ptr: *mut u8,
    real: Layout,
) -> Usable {
    match (of(backend, introspect, ptr, real), backend) {
        (Usable::Uniform, Some(b)) => {
            let class = crate::stats::class::class_of(real.size());
            match with_backend!(b, A => A::class_usable(class)) {
                ClassUsable::Uniform(u) => Usable::Explicit(u as usize),
                ClassUsable::Recorded | ClassUsable::Requested => Usable::Explicit(real.size()),
            }
        }
        (u, _) => u,
    }
}

/// The usable size a block of `layout` would have without the sampler's mark, for a sample that
/// stands for many such blocks (the sampled tier weighs it): what the fast path's rule gives, from
/// the request alone where the backend allows; the requested size stands in where only a live,
/// unmarked block could tell (mimalloc, an `Introspect`). Requests off the fast path (large, over-aligned)
/// take the marked block's own usable size (`ptr`, allocated with `real`): the mark changes little
/// there.
#[inline]
pub(crate) fn standing_in(
    backend: Option<Backend>,
    introspect: Option<&'static dyn Introspect>,
    ptr: *mut u8,
    layout: Layout,
    real: Layout,
) -> Usable {
    match fast(backend, introspect, layout) {
        Some(Rule::Uniform) => Usable::Uniform,
        Some(Rule::Recorded(u)) => Usable::Recorded(u),
        Some(Rule::PerBlock(_) | Rule::Introspect(_)) => Usable::Requested,
        None => of(backend, introspect, ptr, real),
    }
}

/// The fast-path rule for `layout` on `backend` (see [`KnownAllocator::fast`]), or `None` when the
/// request takes the cold path (over-aligned, or larger than `class::TABLE_MAX`, 32 KiB).
///
/// The alignment test is the one every backend makes to choose its plain entry point (`malloc`
/// rather than an aligned one), so after inlining the compiler merges the two.
#[inline(always)]
pub(crate) fn fast(
    backend: Option<Backend>,
    introspect: Option<&'static dyn Introspect>,
    layout: Layout,
) -> Option<Rule> {
    match backend {
        Some(b) => with_backend!(b, A => A::fast(layout)),
        None => is_plain(layout, SMALL_MAX).then_some(match introspect {
            Some(_) => Rule::Introspect(layout.align()),
            // Nothing to record: the report takes requested bytes as usable.
            None => Rule::Uniform,
        }),
    }
}

impl Rule {
    /// The usable size of the live block `ptr`, allocated with a request of `size` bytes that took
    /// this rule.
    ///
    /// Needs nothing but the rule, the block, `backend` (a constant, or for `Select` its decided
    /// backend) and, for [`Rule::Introspect`], the `Introspect`; so the cold path after an allocation needs no
    /// `Tracked` to call it.
    #[inline(always)]
    pub(crate) fn resolve(
        self,
        backend: Option<Backend>,
        introspect: Option<&'static dyn Introspect>,
        ptr: *mut u8,
        size: usize,
    ) -> Usable {
        match self {
            Self::Uniform => Usable::Uniform,
            Self::Recorded(u) => Usable::Recorded(u),
            // `of` consults `introspect` for a user's allocator only, which is what `Introspect` rules are.
            Self::PerBlock(align) | Self::Introspect(align) => {
                // SAFETY: the request's own size and alignment, which formed a valid `Layout`.
                let layout = unsafe { Layout::from_size_align_unchecked(size, align) };
                of(backend, introspect, ptr, layout)
            }
        }
    }
}
