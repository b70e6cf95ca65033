//! How a backend returned memory in one reclaimer action: what `Knobs::reclaim` did.

use core::fmt;

/// What one reclaimer action called on the wrapped allocator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub enum Method {
    /// glibc: `malloc_trim(pad)`. One call: it holds each arena's lock in turn while it returns that
    /// arena's free pages, so its duration bounds the pause any one thread sees.
    Trim {
        /// Bytes left untrimmed at the top of the main heap.
        pad: u64,
    },
    /// jemalloc: optionally `arena.<all>.decay` (the pages past their decay time), then
    /// `arena.<i>.purge` arena by arena, largest unused first, until at most the kept bytes remain
    /// unused or the reclaimer's budget stops it.
    Jemalloc {
        /// Whether the decay step ran (only when bytes are to be kept: with nothing kept, purging
        /// every arena releases the same pages and the decay would be extra work).
        decayed: bool,
        /// Arenas purged.
        purged: u32,
        /// Arenas that held unused pages.
        arenas: u32,
        /// Stopped by the budget before the arenas' unused pages were down to the kept bytes.
        stopped: bool,
    },
    /// mimalloc: `mi_collect(true)`. It frees the calling thread's heap and the segments other
    /// threads abandoned and purges pages whose purge was delayed; pages free inside other live
    /// threads' segments are purged by those threads, on their next allocations.
    Collect,
}

impl Method {
    /// A short name for labels: `trim`, `decay`, `purge`, `decay+purge` or `collect`.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match *self {
            Self::Trim { .. } => "trim",
            Self::Jemalloc { decayed: true, purged: 0, .. } => "decay",
            Self::Jemalloc { decayed: true, .. } => "decay+purge",
            Self::Jemalloc { decayed: false, .. } => "purge",
            Self::Collect => "collect",
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Trim { pad } => write!(f, "malloc_trim({pad})"),
            Self::Jemalloc { decayed, purged, arenas, stopped } => {
                if decayed {
                    f.write_str("decay all arenas, then ")?;
                }
                write!(f, "purged {purged} of {arenas} arenas with unused pages")?;
                if stopped { f.write_str(" (stopped by the budget)") } else { Ok(()) }
            }
            Self::Collect => f.write_str("mi_collect(true)"),
        }
    }
}

/// What an idle thread did for the reclaimer in `frag::reclaim::idle`: the release only the thread
/// itself can make.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub enum ThreadMethod {
    /// jemalloc: `thread.idle`, which flushes the thread's cache into its arena (the blocks become
    /// free space the next purge can return) and may purge that arena.
    Idle,
    /// mimalloc: `mi_collect(true)` on the thread: its own heap, including the blocks other threads
    /// freed into its pages, collected and purged.
    Collect,
}

impl ThreadMethod {
    /// A short name for labels: `idle` or `collect`.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Collect => "collect",
        }
    }
}

impl fmt::Display for ThreadMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Idle => "thread.idle",
            Self::Collect => "mi_collect(true) on the thread",
        })
    }
}
