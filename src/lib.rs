//! # frag: see why a Rust service's memory climbs
//!
//! Long-lived services often watch their resident memory climb in steps with no leak anywhere: the
//! heap is fragmented. Blocks freed on another thread than the one that allocated them, mixed size
//! classes, an allocator's purge timing and glibc's top-only `brk` heap all leave resident pages that
//! hold little live data. `frag` measures that in production, on the allocator you already use, says
//! what to change, and can keep resident memory under a limit.
//!
//! ## Start here
//!
//! 1. Wrap the global allocator in [`Tracked`] (any `GlobalAlloc`; glibc's `System`, jemalloc,
//!    mimalloc and snmalloc are known by type, a custom allocator answers through a [`Introspect`]):
//!
//!    ```no_run
//!    # #[cfg(feature = "jemalloc")]
//!    #[global_allocator]
//!    static A: frag::Tracked<tikv_jemallocator::Jemalloc> = frag::Tracked::new(tikv_jemallocator::Jemalloc);
//!    ```
//! 2. Ask for a [`report()`]: a [`Report`] of where the resident bytes are (live, rounding, holes,
//!    reclaimable pages, the allocator's own, outside the heap), which code holds them, and what to
//!    change. Print it, or serialise it (`serde`).
//!
//!    ```no_run
//!    println!("{}", frag::report());
//!    ```
//! 3. Keep it on: a [`Publisher`] sends the figures through the `metrics` facade to any exporter and
//!    warns (`tracing`) when resident memory steps up without live data to explain it.
//!
//!    ```no_run
//!    let _publisher = frag::Publisher::new().spawn()?;
//!    # Ok::<(), std::io::Error>(())
//!    ```
//!
//! Then, as the service needs it:
//! - memory by tenant, request kind or task: a [`Scope`], entered or polled in ([`ScopeExt`]);
//! - Go's `/debug/pprof/heap`, `/allocs` and `/symbol` for `go tool pprof`: `profile::http` (feature `http`);
//! - resident memory under a limit, and free pages given back: [`reclaim::Reclaimer`];
//! - what the heap looked like at a step an hour ago, and what moved: [`history()`], every
//!   [`Publisher`] round kept in a bounded history, each step explained part by part
//!   ([`History::compare`](history::History::compare)); `/debug/frag/history` and its picture,
//!   `history.svg`, on `profile::http`;
//! - the allocator's knobs, typed and read back, and settings that look applied but are not:
//!   [`tune`];
//! - one binary on several allocators, picked at start-up (`FRAG_ALLOCATOR`): [`Select`].
//!
//! ## Tiers
//!
//! | tier | what the allocation path does | for |
//! |------|-------------------------------|-----|
//! | [`Sampled`] (the default) | a countdown over allocated bytes picks about one block per 512 KiB ([`Sampling`], [`set_sampling`]) | production |
//! | [`Exact`] (`Tracked<A, frag::Exact>`) | counts every call | tests, allocation budgets, staging |
//! | `sample_in_jemalloc` (feature `jemalloc-prof`) | nothing: jemalloc's own profiler samples | the lowest cost on jemalloc |
//!
//! Every estimate weighs a sample by the inverse of its probability and says it is an estimate,
//! with an interval.
//!
//! ## Modules
//!
//! | module | holds |
//! |--------|-------|
//! | [`report`](mod@report) | the parts of a [`Report`], its [`diagnosis`](report::diagnosis), and the allocation-free readers ([`totals`](report::totals), [`size_classes`](report::size_classes)) |
//! | [`backend`] | the allocators frag knows ([`Backend`](backend::Backend)), [`Select`], [`Introspect`], the allocator's own figures |
//! | [`process`] | the process as the kernel sees it: RSS, PSS, the memory cgroup |
//! | [`sites`] | how stacks are captured: the unwinder, its tables, stacks on or off, the symbolizer's cache |
//! | [`scope`] | what [`Scope`] and [`ScopeExt`] return |
//! | [`publish`] | [`Publisher`]'s handle, and one report published at once |
//! | [`watch`] | the stair-step and growth alerts a [`Publisher`] raises |
//! | [`history`](mod@history) | the heap's flight recorder: the bounded [`History`](history::History) of a [`Publisher`]'s rounds |
//! | [`profile`] | pprof heap profiles, and Go's debug endpoints on the `http` crate's types |
//! | [`reclaim`] | the reclaimer and the memory limit |
//! | [`tune`] | each allocator's knobs, and the environment's traps |
//! | [`countdown`] | where a thread's sampling countdown lives ([`declare_countdown!`]) |
//!
//! ## The allocation-path contract
//!
//! `Tracked` forwards every call with the caller's layout (a sampled block only gets a larger
//! alignment, its mark), and what it adds never allocates, never takes a lock and never panics;
//! everything that allocates ([`report()`], formatting) runs outside the allocator, under a
//! reentrancy guard, and what frag allocates for itself is counted as its own, never as the
//! program's. The contract is stated in full, with the fast path's instructions, where it is
//! enforced: `src/tracked/mod.rs`; `docs/RELIABILITY.md` lists each guarantee with the test that
//! proves it.
//!
//! A library should not install a global allocator; only the final binary does. A library can still
//! call [`report()`]: with no `Tracked` installed the report says so in its warnings.
//!
//! ## Features
//!
//! | feature    | default | enables |
//! |------------|---------|---------|
//! | `jemalloc` | yes     | jemalloc usable sizes and `stats.*` (tikv-jemallocator, tikv-jemalloc-ctl) |
//! | `serde`    | yes     | `Serialize` for [`Report`] and `Report::to_json` |
//! | `http`     | yes     | `profile::http::handle`: Go's `/debug/pprof/*` endpoints on the `http` crate's types |
//! | `tokio`    | yes     | `profile::http::serve`: the same as a future, whose delta profiles wait without a thread |
//! | `usdt`     | yes     | the OpenTelemetry memory probes (`otel_memory:alloc`, `free`) at every sample |
//! | `mimalloc` | no      | mimalloc usable sizes and commit figures |
//! | `snmalloc` | no      | snmalloc usable sizes and reserved address space |
//! | `jemalloc-prof` | no | jemalloc built with its profiler: `sample_in_jemalloc`, `prof(true)` in `jemalloc_conf!` |
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

// The README's Rust blocks, compiled by `cargo test --doc` (what a reader copies must build).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

pub mod backend;
mod estimate;
mod fork;
mod format;
pub mod history;
#[cfg(feature = "jemalloc")]
mod hooked;
mod loader;
mod origin;
mod own;
pub mod process;
pub mod profile;
pub mod publish;
pub mod reclaim;
mod reentry;
pub mod report;
mod sample_life;
mod sampler;
pub mod scope;
pub mod sites;
mod stats;
mod sync;
mod tally;
mod tracked;
pub mod tune;
mod usdt;
pub mod watch;

/// Where a thread's sampling countdown lives: the third type parameter of [`Tracked`].
///
/// [`FragCountdown`](countdown::FragCountdown), frag's own, is the default;
/// [`declare_countdown!`] declares one in the program's own crate, which saves an instruction on
/// every allocation.
pub mod countdown {
    pub use crate::stats::countdown::{Countdown, FragCountdown};
}

pub use backend::{Introspect, Select};
pub use history::history;
#[cfg(feature = "jemalloc")]
pub use hooked::{InJemallocError, sample_in_jemalloc, sampling_in_jemalloc};
pub use publish::Publisher;
pub use report::Report;
pub use report::collect::report;
#[cfg(not(feature = "serde"))]
#[doc(hidden)]
pub use report::needs_serde;
pub use sampler::{Sampling, SamplingError, sampling, set_sampling};
pub use scope::{Scope, ScopeExt};
pub use tracked::{Exact, Sampled, Tier, Tracked};
