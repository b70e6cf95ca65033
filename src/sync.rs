//! Atomics and cache padding: for the counters' shards, the sampler's side table, gate and page
//! buckets, and the origin and site tallies; and how a waiting thread spins and yields.
//!
//! Everything the allocation path touches goes through this module. The concurrency-heavy parts (the
//! slot registry and the sampler's side table) take their atomics, and the two macros below, from
//! `crate::sync` only: the loom models in `tests/loom/src/` include those files with a `sync` module of
//! their own that supplies loom's types, whose constructors cannot be `const`.

pub(crate) use core::hint::spin_loop;
pub(crate) use core::sync::atomic::{
    AtomicBool, AtomicI64, AtomicPtr, AtomicU8, AtomicU16, AtomicU64, AtomicUsize, Ordering, fence,
};
pub(crate) use std::thread::yield_now;

/// Adds `v` to a counter that only the calling thread ever writes.
///
/// A relaxed load followed by a relaxed store compiles to a plain `add` on every target we build for:
/// no `lock` prefix, no cache-line ping-pong. Readers on other threads see a value that is at worst one
/// update old, never a torn one. Only valid while the caller owns the counter (see `stats::pool`).
#[inline(always)]
pub(crate) fn owned_add(counter: &AtomicU64, v: u64) {
    counter.store(counter.load(Ordering::Relaxed).wrapping_add(v), Ordering::Relaxed);
}

/// Adds `v` to a counter that several threads may write at once (the overflow shard, aggregates).
#[inline]
pub(crate) fn shared_add(counter: &AtomicU64, v: u64) {
    counter.fetch_add(v, Ordering::Relaxed);
}

/// Aligns its content to 128 bytes: two cache lines on x86-64, where the adjacent-line prefetcher pairs
/// lines, and one line on the other 64-bit targets we care about.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct CachePadded<T>(pub(crate) T);

impl<T> core::ops::Deref for CachePadded<T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Declares a constructor of a type made of atomics: `const` here, so that it can initialise a
/// `static`; the loom models' `sync` declares it non-`const`.
macro_rules! atomics_ctor {
    ($(#[$m:meta])* $v:vis fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty $body:block) => {
        $(#[$m])* $v const fn $name($($arg: $ty),*) -> $ret $body
    };
}

/// `[init; n]` for a non-`Copy` `init` (atomics): a `const` repeat here; the loom models' `sync`
/// calls `init` once per element.
macro_rules! atomic_array {
    ($init:expr; $n:expr) => {
        [const { $init }; $n]
    };
}

pub(crate) use {atomic_array, atomics_ctor};
