//! # frag: see why a Rust service's memory climbs
//!
//! Long-lived services often watch their resident memory climb in steps with no leak anywhere: the
//! heap is fragmented. Blocks freed on another thread than the one that allocated them, mixed size
//! classes, an allocator's purge timing and glibc's top-only `brk` heap all leave resident pages that
//! hold little live data. `frag` measures that in production, on the allocator you already use.
//!
//! ## Quick start
//!
//! Wrap your global allocator in [`Tracked`] and ask for a [`report()`]:
//!
//! ```no_run
//! # #[cfg(feature = "jemalloc")]
//! #[global_allocator]
//! static A: frag::Tracked<tikv_jemallocator::Jemalloc> = frag::Tracked::new(tikv_jemallocator::Jemalloc);
//!
//! fn main() {
//!     // ... the service runs ...
//!     let report = frag::report();
//!     println!("{report}"); // per-thread counters, size classes, allocator and process view
//! }
//! ```
//!
//! That is the production tier ([`Sampled`]): the allocation path holds only the sampler. For tests,
//! allocation budgets and staging, `Tracked<A, frag::Exact>` ([`Exact`]) counts every call.
//!
//! `Tracked<A>` works with any `GlobalAlloc`. It knows `System` (glibc), jemalloc, mimalloc and
//! snmalloc by type; a custom allocator can supply usable sizes and statistics through a [`Probe`].
//! [`Select`] picks one of the compiled-in backends at start-up from the `FRAG_ALLOCATOR` environment
//! variable, so one binary can compare allocators without a rebuild.
//!
//! ## What is measured
//!
//! - **Counters**: allocations, deallocations, reallocations, requested bytes, per thread (with the
//!   OS thread id and name) and per size class (8-byte steps to 32 B, then four classes per power of
//!   two, like jemalloc's). Exact in the [`Exact`] tier; in the [`Sampled`] tier a thread's allocated
//!   bytes are exact and the rest are estimates from the samples, flagged `estimated`.
//! - **Usable bytes**, what the backend really hands out per block, so internal fragmentation
//!   (usable − requested) is visible per class.
//! - **The allocator's own figures** (jemalloc `stats.*`, glibc `mallinfo2`, mimalloc commit, snmalloc
//!   reserved address space) and **the process view** (`/proc`: RSS, PSS, anonymous bytes).
//! - **The fragmentation ratio** `(resident − allocated) / allocated`, stating which figures it used.
//! - **One sampler** ([`Sampling`]): on each thread a Poisson countdown over allocated bytes picks
//!   about one allocation per 512 KiB, before the allocator is called and whatever address it returns;
//!   a picked block is followed to its free. Every estimate below weighs a sample by the inverse of
//!   its probability and says it is an estimate.
//! - **Allocation origin**, from the samples: how many frees (and bytes) happen on another thread
//!   than the allocating one, per thread, per size class, per thread pair and per lifetime, with a
//!   95% interval.
//! - **Allocation sites**, from the same samples: the stacks that hold the bytes in use, with each
//!   site's cross-thread share and median lifetime, in [`Report::sites`] and as a pprof heap profile
//!   ([`profile::heap_pprof`]). Stacks come from the unwind tables every x86-64 Linux build carries
//!   (built before `main`, walked without locks; see [`unwinder`]), or from the frame-pointer chain
//!   in a build with `-C force-frame-pointers=yes`.
//!
//! ## Publishing
//!
//! [`publish`] sends a report through the `metrics` facade to whatever exporter the program
//! installed; [`Publisher`] does it periodically on its own thread and raises `tracing` warnings
//! when resident memory steps up without live data to explain it ([`watch`]).
//!
//! ## Tuning
//!
//! [`tune`] changes what the allocator lets you change, typed and read back: jemalloc's decay, thread
//! cache, purging and background threads (and its start-up options with `jemalloc_conf!`), mimalloc's
//! options, glibc's `mallopt` and `malloc_trim`. Knobs of another allocator than the wrapped one are
//! refused. [`tune::check`] finds settings that look applied but are not (`MALLOC_CONF` under
//! tikv-jemallocator, which reads `_RJEM_MALLOC_CONF`); the report lists them in its warnings.
//!
//! ## Giving memory back
//!
//! [`reclaim::Reclaimer`] returns free memory to the OS on its own once the heap has gone quiet:
//! paced to 1% of a core, acting only when the diagnosis predicts enough to release, and measuring
//! each release against the prediction (`malloc_trim` on glibc, a purge on jemalloc, `mi_collect` on
//! mimalloc).
//!
//! ## The allocation-path contract
//!
//! `Tracked` forwards every call with the caller's layout (a sampled block only gets a larger
//! alignment, its mark), and what it adds never allocates, never takes a lock and never panics;
//! everything that allocates ([`report()`], formatting) runs outside the allocator, under a
//! reentrancy guard. The contract is stated in full, with the fast path's instructions, where it is
//! enforced: `src/tracked/mod.rs`. `docs/RELIABILITY.md` in the repository lists each guarantee with
//! the test that proves it. [`totals()`] and [`size_classes()`] read the counters without allocating.
//!
//! ## In libraries
//!
//! A library should not install a global allocator; only the final binary does. Libraries can still
//! call [`report()`] or [`totals()`]: with no `Tracked` installed the report says so in its warnings.
//!
//! ## Features
//!
//! | feature    | default | enables |
//! |------------|---------|---------|
//! | `jemalloc` | yes     | jemalloc usable sizes and `stats.*` (tikv-jemallocator, tikv-jemalloc-ctl) |
//! | `serde`    | yes     | `Serialize` for [`Report`] and [`Report::to_json`] |
//! | `mimalloc` | no      | mimalloc usable sizes and commit figures |
//! | `snmalloc` | no      | snmalloc usable sizes and reserved address space |
//! | `http`     | yes     | `profile::http::handle`: Go's `/debug/pprof/*` endpoints on the `http` crate's types |
//! | `jemalloc-prof` | no | jemalloc built with its profiler: `sample_in_jemalloc`'s samples, `prof(true)` in `jemalloc_conf!` |
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

// The README's Rust blocks, compiled by `cargo test --doc` (what a reader copies must build).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

mod backend;
mod estimate;
mod fork;
mod format;
#[cfg(feature = "jemalloc")]
mod hooked;
mod loader;
mod origin;
mod own;
mod process;
pub mod profile;
mod publish;
pub mod reclaim;
mod reentry;
mod report;
mod sample;
mod sampler;
mod scope;
mod sites;
mod stats;
mod sync;
mod tally;
mod tracked;
pub mod tune;
mod usdt;
pub mod watch;

pub use backend::select::Select;
pub use backend::{AllocatorClass, AllocatorStats, Backend, Probe, UsableSource, WrappedBackend};
#[cfg(feature = "jemalloc")]
pub use hooked::{InJemallocError, sample_in_jemalloc, sampling_in_jemalloc};
pub use process::{CgroupMemory, CgroupVersion, ProcessStats, set_pss};
pub use publish::{Publisher, PublisherHandle, publish};
pub use report::diagnosis;
#[cfg(not(feature = "serde"))]
#[doc(hidden)]
pub use report::needs_serde;
pub use report::{
    FragItself, Fragmentation, LifetimeRow, Origin, OriginPair, PinMethod, PinnedHoles, RatioInputs, Report, RowKind,
    ScopeRow, ScopeSite, Scopes, ShardPool, SiteRow, Sites, SizeClassRow, ThreadRow, TrackedStats, Warning,
    WarningKind, allocator_classes, own_totals, report, size_classes, totals,
};
pub use sampler::{Sampling, SamplingError, sampling, set_sampling};
pub use scope::{Entered, LiveBytes, Scope, ScopeError, ScopeExt, Scoped};
#[doc(hidden)]
pub use sites::capture_for_bench;
#[allow(deprecated)]
pub use sites::frame_pointers;
pub use sites::symbols::keep_symbol_cache;
pub use sites::{UnwindTables, Unwinder, refresh_unwind_tables, set_stacks, stacks, unwind_tables, unwinder};
pub use stats::class::NUM_CLASSES;
pub use stats::countdown::{Countdown, FragCountdown};
pub use tracked::{Exact, Sampled, Tier, Tracked};
