//! Each trap's text is logged once per process, however many reports find it.

use std::sync::atomic::{AtomicU64, Ordering};

/// Traps already emitted as `tracing` warnings, by a hash of their text. Lock-free on purpose: a
/// process that forks while another thread is in here would leave a held lock to its child, whose
/// next report would wait for it forever.
static WARNED: [AtomicU64; WARNED_CAPACITY] = [const { AtomicU64::new(0) }; WARNED_CAPACITY];
const WARNED_CAPACITY: usize = 64;

/// Whether `text` is seen here for the first time (always `true` once `WARNED` is full: repeated
/// warnings are better than silence).
pub(super) fn first_time(text: &str) -> bool {
    // FNV-1a, with the low bit set so that no text hashes to the empty marker 0.
    let hash =
        text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)) | 1;
    for slot in &WARNED {
        match slot.compare_exchange(0, hash, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return true,
            Err(seen) if seen == hash => return false,
            Err(_) => {}
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_text_is_new_once() {
        assert!(first_time("a trap seen by this test only"));
        assert!(!first_time("a trap seen by this test only"));
        assert!(first_time("another trap seen by this test only"));
    }
}
