//! snmalloc: `sn_rust_usable_size` for usable sizes, `memory_stats` for reserved address space.

use super::AllocatorStats;

pub(crate) const USABLE_SOURCE: &str =
    "exact: snmalloc usable_size, memoised per size up to 32 KiB (size classes are deterministic)";

#[inline]
pub(crate) fn usable_at(ptr: *mut u8) -> usize {
    snmalloc_rs::SnMalloc.usable_size(ptr).unwrap_or(0)
}

pub(crate) fn stats() -> AllocatorStats {
    let s = snmalloc_rs::SnMalloc::memory_stats();
    AllocatorStats {
        mapped: Some(s.current_memory_usage as u64),
        peak_mapped: Some(s.peak_memory_usage as u64),
        ..AllocatorStats::default()
    }
}
