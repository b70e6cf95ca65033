//! The mark: how a free tells from the pointer alone that its block was not sampled.
//!
//! A sampled block is placed where the allocator puts almost nothing else, jemalloc's profiler's
//! trick refined:
//! - a small request (under 4 KiB) aligned to at most [`SMALL_OFFSET`] (8) bytes, most requests a
//!   Rust program makes, is allocated [`SMALL_OFFSET`] bytes larger and 4 KiB-aligned, and handed
//!   out [`SMALL_OFFSET`] bytes into the block: its address is 8 past a 4 KiB boundary. Allocators
//!   put their blocks of 16 bytes and more on 16-byte boundaries (glibc every block), so an
//!   unsampled pointer lands there only in a class of an odd multiple of 8 bytes (jemalloc's 8,
//!   mimalloc's 24, 40, 56), once in 512 blocks at most. Where the allocator has a class whose
//!   blocks all start on a 4 KiB boundary (`KnownAllocator::PAGE_CLASS`: jemalloc's 4 KiB class),
//!   a request that fits there is allocated as a block of that class instead, with no alignment
//!   asked, from the allocator's fast path;
//! - any other request is allocated 4 KiB-aligned, its address on the boundary, where an unsampled
//!   pointer also lands: the first block of many slabs, every page-sized block. A large request
//!   keeps its size class (allocators round those to whole pages anyway); it only loses the random
//!   cache-line offset jemalloc gives large blocks;
//! - except where the allocator's blocks of the request own their *head*, the bytes from the 4 KiB
//!   boundary below them (`KnownAllocator::owns_its_head`: jemalloc's large classes): there the
//!   block is allocated as asked and handed out at that boundary, `SampledBlock::lead` bytes before
//!   it, because jemalloc serves no aligned large request from its thread cache.
//!
//! Every free and reallocation tests whether `ptr & 4095` is 0 or 8, inlined into the caller: in the
//! sampled tier an `and` with a constant ([`may_carry_a_mark`]), in the exact tier (where marking can
//! be turned off) an `and` with one cached word ([`may_be_marked`], [`FREE_MASK`]). Anything else
//! means "not sampled" with no other memory read. A match is tested against its request's own mark,
//! still with no memory read (a page-aligned block of a small request, the common false match, is
//! decided there): inline in a free of the sampled tier ([`at_its_own_mark`]), and within
//! [`maybe_sampled`] and [`maybe_sampled_marked`] elsewhere. A block at its mark has its page
//! bucket's counters read (`sampler::buckets`: two levels, 1 KiB then 16 KiB), out of line in the
//! sampled tier. Zero at either level decides it; anything else goes to the cold path, which looks
//! the block up in the side table (`sampler::side_table`) and frees a sampled block with the layout and
//! address it was allocated with.
//!
//! The mark costs memory: up to 4 KiB per live sampled small block (the alignment; the 8 bytes go
//! only to blocks under 4 KiB, which land in a 4 KiB block either way), so about `4 KiB / mean` of
//! live bytes (0.8% at the default mean of 512 KiB). That is why small means and "every block" do not mark: there
//! **every free looks at the counters** instead ([`FREE_MASK`] becomes 0), and no block's layout
//! changes. That mode is one-way for the life of the process: a block sampled without the mark must
//! still be found when it is freed, whatever the setting is by then. It exists in the exact tier
//! only: the sampled tier's frees test the mark alone, so there marking is on for good
//! ([`marks_only`]) and such means are refused.

use core::alloc::Layout;

use super::buckets::{Buckets, FILTER_BUCKETS, PAGE_BUCKETS};
use crate::sync::{AtomicUsize, Ordering};

/// The alignment of a marked block.
pub(crate) const MARK_ALIGN: usize = 4096;

/// Where a marked block of a request aligned to at most this many bytes starts, past its 4 KiB
/// boundary (and how many bytes larger it is allocated).
pub(crate) const SMALL_OFFSET: usize = 8;

/// Means below this do not mark (the mark would cost more than `MARK_ALIGN / mean` = 6% of live
/// bytes): every free looks at the counters instead.
pub(crate) const MIN_MARKING_MEAN: u64 = 64 << 10;

/// The low bits of a pointer that are 0 in either mark, 0 or 8 past a page boundary: [`MARKING`]
/// while sampled blocks are marked (with [`MARKS_ONLY`] once the sampled tier registered), 0 once
/// every free looks at the counters.
static FREE_MASK: AtomicUsize = AtomicUsize::new(MARKING);
/// `MARK_ALIGN - 1` without `SMALL_OFFSET`: the bits that are 0 in either mark.
const MARKING: usize = (MARK_ALIGN - 1) & !SMALL_OFFSET;
/// A bit no user-space pointer has, set in [`FREE_MASK`] when the sampled tier registered: marking
/// stays on for good, because that tier's frees test [`MARKING`] as a constant
/// ([`may_carry_a_mark`]).
const MARKS_ONLY: usize = 1 << (usize::BITS - 1);

/// Live sampled blocks by page bucket.
static BUCKETS: Buckets<FILTER_BUCKETS, PAGE_BUCKETS> = Buckets::new();

// The figures `buckets` states: a 1 KiB filter and 16 KiB of page counters, and no more sampled blocks
// live at once (the side table's capacity, 16,384) than a page counter's `u16` holds.
const _: () = assert!(size_of::<Buckets<FILTER_BUCKETS, PAGE_BUCKETS>>() == (1 + 16) << 10);
const _: () = assert!(super::side_table::CAPACITY == 16_384 && super::side_table::CAPACITY <= u16::MAX as usize);

#[inline(always)]
fn page(ptr: *mut u8) -> usize {
    (ptr as usize) / MARK_ALIGN
}

/// Whether the block at `ptr` may carry either mark: the test every free and reallocation makes
/// inline. `false` is definite: the block was not sampled.
#[inline(always)]
pub(crate) fn may_be_marked(ptr: *mut u8) -> bool {
    (ptr as usize) & FREE_MASK.load(Ordering::Relaxed) == 0
}

/// [`may_be_marked`] for the sampled tier, where marking is always on ([`marks_only`]): the mask is a
/// constant, so the test is an `and` with an immediate and no memory read.
#[inline(always)]
pub(crate) fn may_carry_a_mark(ptr: *mut u8) -> bool {
    (ptr as usize) & MARKING == 0
}

/// How far past a 4 KiB boundary the mark puts a block of the caller's `layout`.
#[inline(always)]
fn offset_of(layout: Layout) -> usize {
    if layout.size() < MARK_ALIGN && layout.align() <= SMALL_OFFSET { SMALL_OFFSET } else { 0 }
}

/// Whether the block at `ptr`, requested with `layout`, sits where its request's mark would put it
/// (always, once every free looks at the counters), so that its frees would look for it. No memory
/// read beyond [`FREE_MASK`].
#[inline(always)]
fn at_its_mark(ptr: *mut u8, layout: Layout) -> bool {
    !marking() || (ptr as usize) % MARK_ALIGN == offset_of(layout)
}

/// Whether the block at `ptr`, requested with `layout`, may be a sampled one: every test. `false` is
/// definite.
#[inline(always)]
pub(crate) fn maybe_sampled(ptr: *mut u8, layout: Layout) -> bool {
    may_be_marked(ptr) && at_its_mark(ptr, layout) && BUCKETS.occupied(page(ptr))
}

/// [`maybe_sampled`] in the sampled tier, where marking is on for good ([`marks_only`]): the pointer
/// tested against the marks ([`may_carry_a_mark`]) and its request's own ([`at_its_own_mark`]) with
/// constants, then the page bucket's counters. No read of [`FREE_MASK`].
#[inline(always)]
pub(crate) fn maybe_sampled_marked(ptr: *mut u8, layout: Layout) -> bool {
    may_carry_a_mark(ptr) && at_its_own_mark(ptr, layout) && in_an_occupied_bucket(ptr)
}

/// In the sampled tier, whether the block at `ptr`, requested with `layout`, sits at its request's
/// own mark, given that it sits at one of the two ([`may_carry_a_mark`] matched: 0 or 8 past a
/// boundary). With constants, no memory read and no branch: bit 3 of the pointer against whether
/// the request is small, which is the top bits of `size - 4 KiB` (a size fits an `isize`). A free
/// makes this test inline: the page-aligned blocks of small requests (the first block of many
/// slabs) are decided there, without a call.
#[inline(always)]
pub(crate) fn at_its_own_mark(ptr: *mut u8, layout: Layout) -> bool {
    const _: () = assert!(SMALL_OFFSET == 8 && MARK_ALIGN.is_power_of_two());
    // All ones below bit 4 for a small request, 0 for any other: `offset_of` as a mask.
    let small =
        if layout.align() <= SMALL_OFFSET { layout.size().wrapping_sub(MARK_ALIGN) >> (usize::BITS - 4) } else { 0 };
    ((ptr as usize) ^ small) & SMALL_OFFSET == 0
}

/// Whether a sampled block may live in the page bucket of `ptr` (its counters are not zero): the
/// last test before the side table.
#[inline(always)]
pub(crate) fn in_an_occupied_bucket(ptr: *mut u8) -> bool {
    BUCKETS.occupied(page(ptr))
}

/// A sampled block at `ptr` went into the side table: frees of blocks in its page bucket look there.
/// Before the block is handed out, so that whoever frees it sees the counts.
pub(crate) fn noted(ptr: *mut u8) {
    BUCKETS.noted(page(ptr));
}

/// The sampled block at `ptr` left the side table (its owner freed or reallocated it).
pub(crate) fn forgotten(ptr: *mut u8) {
    BUCKETS.forgotten(page(ptr));
}

/// Whether sampled blocks are marked now (else they keep their layout).
#[inline]
pub(crate) fn marking() -> bool {
    FREE_MASK.load(Ordering::Relaxed) != 0
}

/// From now on every free looks at the counters, and sampled blocks keep their layout. Called
/// before a mean below [`MIN_MARKING_MEAN`] takes effect, so that a block sampled without the mark
/// is allocated after the switch: whoever frees it got the pointer through some synchronisation with
/// the allocating thread, and so sees the switch too.
/// `false`, and nothing changes, under the sampled tier ([`marks_only`]).
pub(crate) fn look_up_every_free() -> bool {
    match FREE_MASK.compare_exchange(MARKING, 0, Ordering::SeqCst, Ordering::SeqCst) {
        Ok(_) | Err(0) => true,
        Err(_) => false,
    }
}

/// Marking stays on for the life of the process: the sampled tier registered, whose frees test the
/// mark as a constant. Called at registration, before any block is sampled. `false` if every free
/// was looking at the counters until now (a mean set before registration): marking is back on, and
/// the caller must not keep that mean.
pub(crate) fn marks_only() -> bool {
    FREE_MASK.swap(MARKING | MARKS_ONLY, Ordering::SeqCst) != 0
}

/// How a marked block of a request is allocated: the layout, and how far into the block the
/// caller's pointer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Marked {
    pub(crate) layout: Layout,
    pub(crate) offset: usize,
}

/// How a sampled block of the caller's `layout` is allocated to carry the mark: [`SMALL_OFFSET`]
/// bytes larger and handed out that far in for a small request aligned to at most
/// [`SMALL_OFFSET`], else as it is; aligned to [`MARK_ALIGN`]. A small request that fits, with its
/// offset, in the backend's `page_class` (`KnownAllocator::PAGE_CLASS`, 0 for none: a class whose
/// blocks all start on the boundary) is allocated as a block of that class with its own alignment
/// instead, and the allocator's block is then checked for the boundary. `None` if that is not a
/// valid layout (a size near `isize::MAX`).
#[inline]
pub(crate) fn marked(layout: Layout, page_class: usize) -> Option<Marked> {
    let offset = offset_of(layout);
    let size = layout.size().checked_add(offset)?;
    let layout = if offset != 0 && size <= page_class {
        Layout::from_size_align(page_class, layout.align()).ok()?
    } else {
        Layout::from_size_align(size, layout.align().max(MARK_ALIGN)).ok()?
    };
    Some(Marked { layout, offset })
}

#[cfg(test)]
mod tests {
    use super::super::buckets::STUCK;
    use super::*;

    const L8: Layout = Layout::new::<u64>();
    const L16: Layout = Layout::new::<u128>();

    #[test]
    fn marked_layouts() {
        let l = |size: usize, align: usize| Layout::from_size_align(size, align).unwrap();
        let m = marked(l(64, 8), 0).unwrap();
        assert_eq!((m.layout.size(), m.layout.align(), m.offset), (72, MARK_ALIGN, 8));
        let m = marked(l(64, 16), 0).unwrap();
        assert_eq!((m.layout.size(), m.layout.align(), m.offset), (64, MARK_ALIGN, 0));
        let m = marked(l(5000, 1), 0).unwrap();
        assert_eq!((m.layout.size(), m.layout.align(), m.offset), (5000, MARK_ALIGN, 0));
        let big = l(1 << 20, 1 << 16);
        assert_eq!(marked(big, 0), Some(Marked { layout: big, offset: 0 }));
        assert_eq!(marked(l(isize::MAX as usize - 2, 1), 0), None);
        // A page class takes the small requests that fit in it with their offset, in their alignment.
        assert_eq!(marked(l(64, 8), 4096), Some(Marked { layout: l(4096, 8), offset: 8 }));
        assert_eq!(marked(l(4088, 1), 4096), Some(Marked { layout: l(4096, 1), offset: 8 }));
        assert_eq!(marked(l(4089, 1), 4096), Some(Marked { layout: l(4097, MARK_ALIGN), offset: 8 }));
        assert_eq!(marked(l(64, 16), 4096), Some(Marked { layout: l(64, MARK_ALIGN), offset: 0 }));
        assert_eq!(marked(l(5000, 1), 4096), Some(Marked { layout: l(5000, MARK_ALIGN), offset: 0 }));
    }

    /// A small request's mark is 8 past a page boundary; a larger alignment's is the boundary.
    #[test]
    fn the_mark_depends_on_the_alignment() {
        let page = core::ptr::null_mut::<u8>().wrapping_add(MARK_ALIGN * 9);
        assert!(may_be_marked(page) && may_be_marked(page.wrapping_add(8)));
        assert!(!may_be_marked(page.wrapping_add(16)) && !may_be_marked(page.wrapping_add(24)));
        let l = |size: usize, align: usize| Layout::from_size_align(size, align).unwrap();
        assert!(at_its_mark(page.wrapping_add(8), l(64, 1)) && at_its_mark(page.wrapping_add(8), l(64, 8)));
        assert!(!at_its_mark(page, l(64, 8)) && !at_its_mark(page.wrapping_add(16), l(64, 8)));
        assert!(at_its_mark(page, l(64, 16)) && at_its_mark(page, l(64, 4096)));
        assert!(!at_its_mark(page.wrapping_add(8), l(64, 16)) && !at_its_mark(page.wrapping_add(16), l(64, 16)));
        // Large requests: the page boundary, whatever their alignment.
        assert!(at_its_mark(page, l(4096, 1)) && !at_its_mark(page.wrapping_add(8), l(4096, 1)));
    }

    /// The sampled tier's branch-free test agrees with the rule (`ptr % 4 KiB` is the layout's
    /// offset) on both pointers `may_carry_a_mark` lets through, for sizes around every edge and
    /// every alignment from 1 to 8 KiB.
    #[test]
    fn the_sampled_tiers_test_is_the_rule() {
        let page = core::ptr::null_mut::<u8>().wrapping_add(MARK_ALIGN * 77);
        let sizes = [1, 8, 9, 16, 1024, 4087, 4088, 4089, 4095, 4096, 4097, 8192, 1 << 20];
        for size in sizes.into_iter().chain([isize::MAX as usize - (1 << 14)]) {
            for align in (0..14).map(|k| 1usize << k) {
                let Ok(layout) = Layout::from_size_align(size, align) else { continue };
                for ptr in [page, page.wrapping_add(SMALL_OFFSET)] {
                    let rule = ptr as usize % MARK_ALIGN == offset_of(layout);
                    assert_eq!(at_its_own_mark(ptr, layout), rule, "{size} B aligned to {align}, {ptr:p}");
                }
            }
        }
    }

    /// An unsampled pointer on a page boundary is decided by its bucket's counter; a noted one is not,
    /// and neither is any other page in its bucket until it is forgotten.
    #[test]
    fn page_buckets_count_sampled_blocks() {
        let page = |n: usize| core::ptr::null_mut::<u8>().wrapping_add(MARK_ALIGN * n);
        let (a, b) = (page(3 + 7 * PAGE_BUCKETS), page(3 + 11 * PAGE_BUCKETS));
        assert!(!maybe_sampled(a, L16) && !maybe_sampled(b, L16));
        assert!(!maybe_sampled(a.wrapping_add(16), L16));
        noted(a);
        assert!(maybe_sampled(a, L16) && maybe_sampled(b, L16), "one bucket");
        assert!(maybe_sampled(a.wrapping_add(8), L8), "the small mark, same page");
        assert!(!maybe_sampled(page(4), L16) && !maybe_sampled(a.wrapping_add(16), L16));
        // Same first-level bucket, another second-level one: the second level decides it.
        assert!(!maybe_sampled(page(3 + FILTER_BUCKETS), L16));
        forgotten(a);
        assert!(!maybe_sampled(a, L16));
    }

    /// A first-level counter that fills up stays full: its bucket always goes on to the second level,
    /// which stays exact.
    #[test]
    fn a_full_filter_byte_sticks() {
        let page = |n: usize| core::ptr::null_mut::<u8>().wrapping_add(MARK_ALIGN * n);
        let blocks: Vec<*mut u8> = (0..300).map(|i| page(5 + i * PAGE_BUCKETS)).collect();
        blocks.iter().for_each(|&p| noted(p));
        assert_eq!(BUCKETS.filter_count(5), STUCK);
        blocks.iter().for_each(|&p| forgotten(p));
        assert_eq!(BUCKETS.filter_count(5), STUCK);
        assert!(!maybe_sampled(blocks[0], L16), "the exact level says no");
        noted(blocks[1]);
        assert!(maybe_sampled(blocks[0], L16));
        forgotten(blocks[1]);
    }
}
