//! Counters written on the allocation path and read by `report()`.
//!
//! - [`class`]: which size class a request belongs to;
//! - [`shard`]: one thread's counters and how they are written;
//! - [`pool`]: the static pool of shards, thread start and exit, fork, the overflow shard;
//! - [`thread`]: the calling thread's slot and the shard its fast path writes to;
//! - [`registry`]: the lock-free claim / release / recycle protocol the pool runs on;
//! - [`live`]: process-wide live bytes and peak without a global atomic per allocation;
//! - [`snapshot`]: reading all of it at once, off the hot path.

pub(crate) mod class;
pub(crate) mod live;
pub(crate) mod pool;
pub(crate) mod registry;
pub(crate) mod shard;
pub(crate) mod snapshot;
pub(crate) mod thread;
