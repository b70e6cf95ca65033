//! The soft memory limit the reclaimer keeps, as the diagnosis sees it: set by the reclaimer at each
//! round, read by `report()` to say when live data alone exceeds it.

use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The limit and its target in bytes (0: none).
static LIMIT: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

/// Records the limit in force and its target (`None`: none), for the next reports.
pub(crate) fn set_in_force(limit: Option<(u64, u64)>) {
    let (bytes, target) = limit.unwrap_or((0, 0));
    LIMIT[1].store(target, Relaxed);
    LIMIT[0].store(bytes, Relaxed);
}

/// The limit in force and its target, if a reclaimer keeps one.
pub(crate) fn in_force() -> Option<(u64, u64)> {
    let bytes = LIMIT[0].load(Relaxed);
    (bytes > 0).then(|| (bytes, LIMIT[1].load(Relaxed)))
}
