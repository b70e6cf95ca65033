//! The mark: how a free tells from the pointer alone that its block was not sampled.
//!
//! A sampled block is allocated with its alignment raised to [`MARK_ALIGN`] (4 KiB), jemalloc's own
//! trick for its profiler's samples. Every free and reallocation then tests `ptr & (MARK_ALIGN - 1)`
//! ([`maybe_sampled`]): a non-zero result means "not sampled" with no memory read besides
//! [`FREE_MASK`] (one word, read by every free, never written in the common case, so always cached).
//! A zero result (the sampled blocks, and unsampled blocks the allocator placed on a 4 KiB boundary:
//! the first block of many of its slabs, every page-sized block) reads one counter of [`PAGES`],
//! indexed by the page number's low bits: the number of live sampled blocks in pages with those bits.
//! Zero (almost always, for an unsampled block) settles it on the fast path; anything else goes to
//! the cold path, which looks the block up in the side table (`sampler::table`) and frees a sampled
//! block with the layout it was allocated with.
//!
//! Raising the alignment costs memory: about [`MARK_ALIGN`] per live sampled block, so about
//! `MARK_ALIGN / mean` of live bytes (0.8% at the default mean of 512 KiB). That is why small means
//! and "every block" do not mark: there **every free looks in the side table** instead ([`FREE_MASK`]
//! becomes 0), and no block's layout changes. That mode is one-way for the life of the process: a
//! block sampled without the mark must still be found when it is freed, whatever the setting is by
//! then.

use core::alloc::Layout;

use crate::sync::{AtomicU16, AtomicUsize, Ordering};

/// The alignment that marks a sampled block.
pub(crate) const MARK_ALIGN: usize = 4096;

/// Means below this do not mark (the mark would cost more than `MARK_ALIGN / mean` = 6% of live
/// bytes): every free looks in the side table instead.
pub(crate) const MIN_MARKING_MEAN: u64 = 64 << 10;

/// What a free's pointer is tested against: `MARK_ALIGN - 1` while sampled blocks are marked, 0 once
/// every free looks in the side table.
static FREE_MASK: AtomicUsize = AtomicUsize::new(MARK_ALIGN - 1);

/// Counters of live sampled blocks by the low bits of their page number (16 KiB). At most the side
/// table's 16,384 entries are counted, so a `u16` never overflows.
static PAGES: [AtomicU16; PAGE_BUCKETS] = [const { AtomicU16::new(0) }; PAGE_BUCKETS];
const PAGE_BUCKETS: usize = 8192;

#[inline(always)]
fn bucket(ptr: *mut u8) -> usize {
    ((ptr as usize) / MARK_ALIGN) & (PAGE_BUCKETS - 1)
}

/// Whether the block at `ptr` may be a sampled one: the test of every free and reallocation. An
/// `and` with one cached word; for a pointer on a 4 KiB boundary (or every pointer, once every free
/// looks in the side table) a shift, an `and` and one counter load as well. `false` is definite.
#[inline(always)]
pub(crate) fn maybe_sampled(ptr: *mut u8) -> bool {
    (ptr as usize) & FREE_MASK.load(Ordering::Relaxed) == 0
        && PAGES.get(bucket(ptr)).is_some_and(|c| c.load(Ordering::Relaxed) != 0)
}

/// A sampled block at `ptr` went into the side table: frees of blocks in its page bucket look there.
/// Before the block is handed out, so that whoever frees it sees the count.
pub(crate) fn noted(ptr: *mut u8) {
    if let Some(c) = PAGES.get(bucket(ptr)) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// The sampled block at `ptr` left the side table (its owner freed or reallocated it).
pub(crate) fn forgotten(ptr: *mut u8) {
    if let Some(c) = PAGES.get(bucket(ptr)) {
        c.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Whether sampled blocks are marked now (else they keep their layout).
#[inline]
pub(crate) fn marking() -> bool {
    FREE_MASK.load(Ordering::Relaxed) != 0
}

/// From now on every free looks in the side table, and sampled blocks keep their layout. Called
/// before a mean below [`MIN_MARKING_MEAN`] takes effect, so that a block sampled without the mark
/// is allocated after the switch: whoever frees it got the pointer through some synchronisation with
/// the allocating thread, and so sees the switch too.
pub(crate) fn look_up_every_free() {
    FREE_MASK.store(0, Ordering::SeqCst);
}

/// The layout a sampled block is allocated with: the caller's, with the alignment raised to
/// [`MARK_ALIGN`]. `None` if that is not a valid layout (a size near `isize::MAX`).
#[inline]
pub(crate) fn marked(layout: Layout) -> Option<Layout> {
    layout.align_to(MARK_ALIGN).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marked_layouts_keep_their_size() {
        let l = Layout::from_size_align(64, 8).unwrap();
        let m = marked(l).unwrap();
        assert_eq!((m.size(), m.align()), (64, MARK_ALIGN));
        let big = Layout::from_size_align(1 << 20, 1 << 16).unwrap();
        assert_eq!(marked(big), Some(big));
    }

    /// An unsampled pointer on a page boundary is settled by its bucket's counter; a noted one is not,
    /// and neither is any other page in its bucket until it is forgotten.
    #[test]
    fn page_buckets_count_sampled_blocks() {
        let page = |n: usize| core::ptr::null_mut::<u8>().wrapping_add(MARK_ALIGN * n);
        let (a, b) = (page(3 + 7 * PAGE_BUCKETS), page(3 + 11 * PAGE_BUCKETS));
        assert!(!maybe_sampled(a) && !maybe_sampled(b));
        assert!(!maybe_sampled(a.wrapping_add(16)));
        noted(a);
        assert!(maybe_sampled(a) && maybe_sampled(b), "one bucket");
        assert!(!maybe_sampled(page(4)) && !maybe_sampled(a.wrapping_add(16)));
        forgotten(a);
        assert!(!maybe_sampled(a));
    }
}
