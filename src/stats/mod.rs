//! Counters written on the allocation path and read by `report()`.
//!
//! - [`class`]: which size class a request belongs to;
//! - [`shard`]: one thread's counters and how they are written;
//! - [`pool`]: the static pool of shards, claim / release / reuse, the overflow shard;
//! - [`live`]: process-wide live bytes and peak without a global atomic per allocation;
//! - [`snapshot`]: reading all of it at once, off the hot path.

pub(crate) mod class;
pub(crate) mod live;
pub(crate) mod pool;
pub(crate) mod shard;
pub(crate) mod snapshot;
