//! Process-wide live bytes and their peak, kept without a global atomic on every allocation.
//!
//! Each owning thread accumulates its net requested bytes in its shard and folds them into `LIVE` only
//! when they move by [`FLUSH_BYTES`] in either direction. A malloc/free pair nets to zero and never
//! touches the shared line; steady growth pays one atomic add per 64 KiB. The price is precision of the
//! peak: at any moment `LIVE` lags the truth by less than `FLUSH_BYTES` per live thread, so
//! `peak_allocated_bytes` can under-read a short spike by at most that much (1 MiB with 16 threads).
//! `report()` folds the exact live figure in every time it runs.

use crate::sync::{AtomicI64, AtomicU64, Ordering};

/// How far a thread's unpublished net allocation may drift before it is folded into `LIVE`.
pub(crate) const FLUSH_BYTES: u64 = 64 << 10;

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
