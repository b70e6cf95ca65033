//! What tuning and the reclaimer change in a known backend: returning free memory (now, in the
//! reclaimer's steps, or on the calling thread) and the purge delay.

use super::{Decay, Method, Released, ThreadMethod, TuneError, unsupported};
use crate::backend::known::KnownAllocator;

/// A known backend's actions. Each defaults to "unsupported", with what to do instead.
pub(crate) trait Knobs: KnownAllocator {
    /// Whether [`reclaim`](Self::reclaim) returns memory (else it says the backend cannot).
    const RECLAIMS: bool = false;

    /// Returns free memory to the OS now.
    fn release_free_memory() -> Result<Released, TuneError> {
        Err(unsupported(Self::BACKEND, "release_free_memory", "it returns memory to the OS on its own schedule"))
    }

    /// The reclaimer's action: returns free memory to the OS, leaving about `keep` bytes of it
    /// resident for reuse. A backend that works in steps calls `more` before each step after the
    /// first and stops when it returns `false` (the reclaimer's budget is spent). Never called on
    /// the allocation path.
    fn reclaim(keep: u64, more: &mut dyn FnMut() -> bool) -> Result<Method, TuneError> {
        let _ = (keep, more);
        Err(unsupported(Self::BACKEND, "reclaim", "it returns memory to the OS on its own schedule"))
    }

    /// What only the calling thread can return: its cache, or the pages other threads freed into
    /// its heap. Called by `frag::reclaim::idle` on an idle thread, never on the allocation path.
    fn release_thread() -> Result<ThreadMethod, TuneError> {
        Err(unsupported(
            Self::BACKEND,
            "release_thread",
            "it keeps no per-thread memory that a call on the thread returns",
        ))
    }

    /// Sets how long freed pages stay resident before the backend returns them.
    fn set_purge_delay(decay: Decay) -> Result<(), TuneError> {
        let _ = decay;
        Err(unsupported(Self::BACKEND, "purge delay", ""))
    }

    /// The purge delay in force, as [`set_purge_delay`](Self::set_purge_delay) would set it back.
    fn purge_delay() -> Result<Decay, TuneError> {
        Err(unsupported(Self::BACKEND, "purge delay", ""))
    }

    /// The purge delay the soft memory limit's controller sets while RSS is over its target, where
    /// the one in force is longer (`None`: the backend has no purge delay).
    const PRESSURE_DECAY: Option<Decay> = None;
}
