//! mimalloc: `mi_usable_size` for usable sizes, `mi_process_info` for commit figures.
//!
//! `mi_process_info`'s `current_rss` is not read: on Linux mimalloc estimates it from its own commit
//! figure, which is not the process's resident set. The report's process view reads `/proc` instead.

use super::AllocatorStats;

pub(crate) const USABLE_SOURCE: &str = "exact: mi_usable_size per block (mimalloc's aligned entry point \
    over-allocates when a page's free list is empty, so usable size is not a function of the request)";

#[inline]
pub(crate) fn usable_at(ptr: *mut u8) -> usize {
    // SAFETY: called with a live block mimalloc handed out (the caller guarantees it).
    unsafe { libmimalloc_sys::mi_usable_size(ptr.cast()) }
}

pub(crate) fn stats() -> AllocatorStats {
    let (mut commit, mut peak_commit) = (0usize, 0usize);
    let null = core::ptr::null_mut();
    // SAFETY: every out-parameter is either null (not wanted) or a valid `usize` to write.
    unsafe { libmimalloc_sys::mi_process_info(null, null, null, null, null, &mut commit, &mut peak_commit, null) };
    AllocatorStats {
        committed: Some(commit as u64),
        peak_committed: Some(peak_commit as u64),
        ..AllocatorStats::default()
    }
}
