//! Process-wide live bytes and their peak, kept without a global atomic on every allocation.
//!
//! Each owning thread counts requested bytes in and out per size class in its shard anyway; it folds a
//! class's net into `LIVE` each time one of those counts crosses a multiple of [`FLUSH_BYTES`]: once per
//! MiB of traffic, never per allocation. The price is precision: between crossings a class's
//! unpublished net stays within `FLUSH_BYTES` (plus one block) either way, so `peak_allocated_bytes`
//! can be off by up to 1 MiB per size class each live thread uses, for a spike that no `report()` saw;
//! every `report()` folds the exact live figure in.

use crate::sync::{AtomicI64, AtomicU64, Ordering};

/// Granularity of publication: a shard publishes when its byte counters cross a multiple of this.
pub(crate) const FLUSH_BYTES: u64 = 1 << 20;

static LIVE: AtomicI64 = AtomicI64::new(0);
static PEAK: AtomicU64 = AtomicU64::new(0);

#[inline]
pub(crate) fn flush(delta: i64) {
    let live = LIVE.fetch_add(delta, Ordering::Relaxed).wrapping_add(delta);
    if delta > 0 && live > 0 {
        PEAK.fetch_max(live as u64, Ordering::Relaxed);
    }
}

/// Records an exact live figure (computed from all shards) and returns the peak including it.
pub(crate) fn observe_exact(live: u64) -> u64 {
    PEAK.fetch_max(live, Ordering::Relaxed).max(live)
}
