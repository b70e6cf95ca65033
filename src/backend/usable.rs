//! Usable size on the allocation path.
//!
//! The usable size of a block is what the backend really hands out: its size class, not the request.
//! Live usable bytes minus live requested bytes is internal fragmentation, so it is counted per size
//! class at allocation and again at deallocation. Two rules keep it exact and cheap:
//!
//! - **Same answer at both ends.** A block's usable size is computed the same way when it is handed out
//!   and when it is freed, so per-class live usable bytes never drift.
//! - **Memoised where the backend is deterministic.** For requests of at most [`MEMO_MAX`] bytes with
//!   default alignment, jemalloc, mimalloc and snmalloc round a size to the same class every time, so
//!   the answer is looked up once per 8-byte step of size and cached in the `Tracked` value itself
//!   (16 KiB of zeroed memory). The hot path then costs one load from a table that stays in cache.
//!   Larger or over-aligned requests ask the backend each time; they are rare and cost far more than
//!   the lookup in the backend itself.

use core::alloc::Layout;

use crate::sync::{AtomicU32, Ordering};

/// Largest request whose usable size is memoised.
pub(crate) const MEMO_MAX: usize = 32 << 10;
const SLOTS: usize = MEMO_MAX / 8 + 1;

/// Alignment every backend gives by default (`max_align_t`).
pub(crate) const MIN_ALIGN: usize = if cfg!(target_pointer_width = "64") { 16 } else { 8 };

/// Whether a request takes the backend's plain size-class path (and may use the memo).
#[inline(always)]
pub(crate) fn is_plain(layout: Layout) -> bool {
    layout.size() <= MEMO_MAX && layout.align() <= MIN_ALIGN && layout.align() <= layout.size()
}

/// Per-`Tracked` cache of usable sizes by 8-byte step of requested size; 0 means "not known yet".
#[derive(Debug)]
pub(crate) struct Memo([AtomicU32; SLOTS]);

impl Memo {
    pub(crate) const fn new() -> Self {
        Self([const { AtomicU32::new(0) }; SLOTS])
    }

    /// The cached usable size for `size`, computing and caching it on first use. Racing threads
    /// compute the same value, so a plain store is enough.
    #[inline(always)]
    pub(crate) fn get(&self, size: usize, compute: impl FnOnce() -> usize) -> usize {
        let Some(slot) = self.0.get(size.div_ceil(8)) else {
            return compute();
        };
        match slot.load(Ordering::Relaxed) {
            0 => {
                let usable = compute();
                if let Ok(v) = u32::try_from(usable) {
                    slot.store(v, Ordering::Relaxed);
                }
                usable
            }
            v => v as usize,
        }
    }
}
