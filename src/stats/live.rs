//! Process-wide live bytes and their peak, kept without a global atomic on every allocation.
//!
//! Each owning thread counts requested bytes in and out in its shard and folds its net into `LIVE` each
//! time either count crosses a multiple of [`FLUSH_BYTES`]: a few times per MiB of traffic, never per
//! allocation. The price is precision: between crossings a thread's unpublished net stays within
//! `FLUSH_BYTES` (plus one block) either way, so `peak_allocated_bytes` can be off by that much per
//! live thread (16 MiB with 16 threads) for a spike that `report()` did not see; every `report()` folds
//! the exact live figure in.

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
