//! The page-bucket counters behind the mark (`mark`): live sampled blocks by the low bits of their
//! page number, in two levels. A free whose pointer matches its request's mark reads them before it
//! looks in the side table.
//!
//! - The filter, 1 KiB (16 cache lines): one byte per 1,024 buckets. A counter that reaches
//!   [`STUCK`] stays there (its increments and decrements stop), so a byte never overflows; it only
//!   makes its bucket look occupied for good.
//! - The pages, 16 KiB: one exact `u16` per 8,192 buckets, read only when the filter's byte is not 0.
//!   At most the side table's 16,384 entries are counted, so a `u16` never overflows.
//!
//! A block's counters are raised before it is handed out and lowered after its entry leaves the
//! table, so whoever frees a sampled block sees both non-zero: every later value of a counter, in its
//! modification order, still counts that block until its own free lowers it.
//!
//! This file depends on nothing but `sync`: the loom models in `tests/loom/src/` include it.

use crate::sync::{AtomicU8, AtomicU16, Ordering, atomic_array, atomics_ctor};

/// Buckets of the first level.
pub(crate) const FILTER_BUCKETS: usize = 1024;
/// Buckets of the second level.
pub(crate) const PAGE_BUCKETS: usize = 8192;
/// A first-level counter at this value no longer moves.
pub(crate) const STUCK: u8 = u8::MAX;

/// The two levels: `F` first-level buckets, `P` second-level ones (a multiple of `F`; the crate uses
/// [`FILTER_BUCKETS`] and [`PAGE_BUCKETS`], the loom models fewer).
pub(crate) struct Buckets<const F: usize, const P: usize> {
    filter: [AtomicU8; F],
    pages: [AtomicU16; P],
}

impl<const F: usize, const P: usize> Buckets<F, P> {
    atomics_ctor! {
        pub(crate) fn new() -> Self {
            Self { filter: atomic_array![AtomicU8::new(0); F], pages: atomic_array![AtomicU16::new(0); P] }
        }
    }

    /// Whether a sampled block may live in page `page`'s bucket. `false` is definite. Two loads, the
    /// second rarely.
    #[inline(always)]
    pub(crate) fn occupied(&self, page: usize) -> bool {
        self.filter.get(page % F).is_some_and(|c| c.load(Ordering::Relaxed) != 0)
            && self.pages.get(page % P).is_some_and(|c| c.load(Ordering::Relaxed) != 0)
    }

    /// A sampled block in page `page` went into the side table: before it is handed out.
    pub(crate) fn noted(&self, page: usize) {
        if let Some(c) = self.pages.get(page % P) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(c) = self.filter.get(page % F) {
            let _ = c.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n != STUCK).then(|| n + 1));
        }
    }

    /// The sampled block in page `page` left the side table (its owner freed or reallocated it).
    pub(crate) fn forgotten(&self, page: usize) {
        if let Some(c) = self.filter.get(page % F) {
            let _ = c.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n != STUCK && n != 0).then(|| n - 1));
        }
        if let Some(c) = self.pages.get(page % P) {
            c.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The first-level counter of page `page`'s bucket.
    #[cfg(test)]
    pub(crate) fn filter_count(&self, page: usize) -> u8 {
        self.filter.get(page % F).map_or(0, |c| c.load(Ordering::Relaxed))
    }
}
