//! What the knobs share: the name and the check that jemalloc is the wrapped allocator, the two
//! purge delays and their keys, the thread-cache keys and accepted range, and the environment
//! variable this jemalloc reads.

use super::mallctl::{ArenaKey, Key};
use crate::backend::Backend;
use crate::backend::tuning::{Decay, TuneError};

pub(crate) const NAME: &str = "jemalloc";

pub(super) fn require() -> Result<(), TuneError> {
    crate::backend::tuning::require(Backend::Jemalloc, NAME)
}

/// Which of jemalloc's two page-purging delays a call is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DecayKind {
    /// `dirty_decay_ms`: freed pages still resident, reused without a fault.
    Dirty,
    /// `muzzy_decay_ms`: pages already given back lazily (`MADV_FREE`), not yet released for good.
    Muzzy,
}

impl DecayKind {
    pub(super) fn leaf(self) -> &'static str {
        match self {
            Self::Dirty => "dirty_decay_ms",
            Self::Muzzy => "muzzy_decay_ms",
        }
    }

    pub(super) fn defaults_key(self) -> Key<isize> {
        Key::new(match self {
            Self::Dirty => b"arenas.dirty_decay_ms\0",
            Self::Muzzy => b"arenas.muzzy_decay_ms\0",
        })
    }

    pub(super) fn arena_key(self) -> Result<ArenaKey<isize>, TuneError> {
        ArenaKey::new(match self {
            Self::Dirty => b"arena.0.dirty_decay_ms\0",
            Self::Muzzy => b"arena.0.muzzy_decay_ms\0",
        })
    }
}

pub(super) fn decay_from(knob: &str, ms: isize) -> Result<Decay, TuneError> {
    Decay::from_millis(ms as i64).ok_or_else(|| TuneError::ReadBack {
        knob: knob.to_owned(),
        wrote: "a decay".to_owned(),
        read: ms.to_string(),
    })
}

pub(super) const THREAD_TCACHE_MAX: Key<usize> = Key::new(b"thread.tcache.max\0");
pub(super) const THREAD_TCACHE_ENABLED: Key<bool> = Key::new(b"thread.tcache.enabled\0");
pub(super) const PAGE: Key<usize> = Key::new(b"arenas.page\0");

/// The accepted range of a thread-cache limit, as a literal (`JemallocConfig::render` prefixes it with
/// `concat!`).
macro_rules! tcache_max_range {
    () => {
        "0 to 8 pages (32768 bytes with 4 KiB pages): jemalloc would clip a larger value to that"
    };
}
pub(super) use tcache_max_range;

/// The environment variable this build of jemalloc reads its options from: `_RJEM_MALLOC_CONF` for
/// tikv-jemallocator's default prefixed build, `MALLOC_CONF` when it replaces the system `malloc`.
#[must_use]
pub fn conf_env_var() -> &'static str {
    // With the prefix, jemalloc's `malloc` is `_rjem_malloc`, a different function from the C
    // library's `malloc`; unprefixed, both names resolve to the same (jemalloc's) definition.
    let jemalloc = tikv_jemalloc_sys::malloc as *const () as usize;
    let libc = libc::malloc as *const () as usize;
    if jemalloc == libc { "MALLOC_CONF" } else { "_RJEM_MALLOC_CONF" }
}
