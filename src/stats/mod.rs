//! Counters written on the allocation path and read by `report()`.
//!
//! - [`class`]: which size class a request belongs to;
//! - [`shard`]: one thread's counters and how they are written;
//! - [`clock`]: a thread's sampling clock (the sampler's countdown, and its exact allocated bytes);
//! - [`pool`]: the static pool of shards, thread start and exit, fork, the overflow shard;
//! - [`thread`]: the calling thread's slot, the shard its fast path writes to, and its countdown;
//! - [`registry`]: the lock-free claim / vacate / recycle protocol the pool runs on;
//! - [`live`]: process-wide live bytes and peak without a global atomic per allocation;
//! - [`snapshot`]: reading all of it at once, off the hot path.

use crate::sync::{AtomicBool, Ordering};

/// Whether the installed `Tracked` counts only samples (the sampled tier): its counters then hold
/// weighted estimates, and a thread's allocated bytes come from its sampling clock. Set once, at the
/// first shard claim (before any counter is written).
static SAMPLED: AtomicBool = AtomicBool::new(false);

pub(crate) fn set_sampled(sampled: bool) {
    SAMPLED.store(sampled, Ordering::Relaxed);
}

/// Whether the counters hold estimates (the sampled tier).
pub(crate) fn sampled() -> bool {
    SAMPLED.load(Ordering::Relaxed)
}

pub(crate) mod class;
pub(crate) mod clock;
pub(crate) mod countdown;
pub(crate) mod live;
pub(crate) mod pool;
pub(crate) mod registry;
pub(crate) mod shard;
pub(crate) mod snapshot;
pub(crate) mod thread;
