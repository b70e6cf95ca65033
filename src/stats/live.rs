//! Process-wide live bytes and their peak, kept without a global atomic on every allocation.
//!
//! Each owning thread counts requested bytes in and out per size class in its shard anyway; at the
//! events of its sampling clock (`stats::clock`, the cold path) it folds the net of all its classes
//! into `LIVE` once [`FOLD_BYTES`] (16 MiB) were allocated since the last time: never per
//! allocation. The price is precision: a thread's unfolded net stays below that (plus one
//! sampling interval, 512 KiB on average at the default mean) either way, so `peak_allocated_bytes`
//! can be off by that much per live thread for a spike that no `report()` saw; every `report()` folds
//! the exact live figure in. The overflow shard folds on every operation.

use crate::sync::{AtomicI64, AtomicU64, Ordering};

/// A thread folds its classes in once it allocated this many bytes since the last time.
pub(crate) const FOLD_BYTES: u64 = 16 << 20;

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
