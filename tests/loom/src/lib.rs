//! loom models of frag-alloc's lock-free parts: the sampler's side table, its gate and page-bucket counters, and the shard registry's
//! claim / vacate / recycle protocol. The modules under test are the crate's own source files,
//! included with `#[path]`; the `sync` module below hands them loom's atomics in place of `core`'s.
//!
//! A crate of its own because `cfg(loom)` switches tokio (one of frag-alloc's dev-dependencies)
//! into its own loom mode. Run here with:
//!
//! ```sh
//! RUSTFLAGS="--cfg loom" cargo test --release
//! ```
#![cfg(loom)]

mod sync {
    //! loom's atomics, and non-`const` versions of `frag`'s two constructor macros (see `src/sync.rs`).

    pub(crate) use loom::hint::spin_loop;
    pub(crate) use loom::sync::atomic::{AtomicU8, AtomicU16, AtomicU64, AtomicUsize, Ordering, fence};
    pub(crate) use loom::thread::yield_now;

    macro_rules! atomics_ctor {
        ($(#[$m:meta])* $v:vis fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty $body:block) => {
            $(#[$m])* $v fn $name($($arg: $ty),*) -> $ret $body
        };
    }

    macro_rules! atomic_array {
        ($init:expr; $n:expr) => {
            core::array::from_fn(|_| $init)
        };
    }

    pub(crate) use {atomic_array, atomics_ctor};
}

#[allow(dead_code)]
#[path = "../../../src/sampler/side_table.rs"]
mod side_table;

#[allow(dead_code)]
#[path = "../../../src/sampler/gate.rs"]
mod gate;

#[allow(dead_code)]
#[path = "../../../src/sampler/buckets.rs"]
mod buckets;

#[allow(dead_code)]
#[path = "../../../src/stats/registry.rs"]
mod registry;

#[cfg(test)]
mod buckets_model;
#[cfg(test)]
mod gate_model;
#[cfg(test)]
mod pool_model;
#[cfg(test)]
mod table_model;

/// Explores every interleaving with at most three preemptions (loom's advice for models of this size).
#[cfg(test)]
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(f);
}
