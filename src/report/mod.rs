//! `Report`: a snapshot of the counters, the allocator's own figures and the process view.
//!
//! Field names are part of the API: tooling reads the JSON form (`serde` feature).

mod collect;
mod counters;
pub mod diagnosis;
mod display;
mod origin;
mod pins;
mod ratio;
pub(crate) mod sites;
mod warn;

pub(crate) use collect::breakdown;
pub(crate) use collect::pinned_by_site;
pub use collect::{allocator_classes, report};
pub(crate) use counters::allocated_bytes_total;
pub use counters::{own_totals, size_classes, totals};
pub use pins::PinMethod;
pub use ratio::RatioInputs;
pub use sites::{PinnedHoles, SiteRow, Sites};
pub use warn::{Warning, WarningKind};

use crate::backend::{AllocatorStats, UsableSource, WrappedBackend};
use crate::process::ProcessStats;
use diagnosis::Diagnosis;

/// Everything `frag` knows about the heap at one moment. Build one with [`report()`].
#[derive(Clone, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Report {
    /// The wrapped allocator; `None` when no `Tracked` allocator is installed (or none has allocated
    /// yet). Serialises as its name: `"jemalloc"`, `"system"`, a probe's name, or a type name.
    pub backend: Option<WrappedBackend>,
    /// How `usable_bytes` figures were obtained for this backend; `None` without a `Tracked`
    /// allocator.
    pub usable_source: Option<UsableSource>,
    /// Totals over every thread.
    pub tracked: TrackedStats,
    /// The allocator's own figures, where it has any.
    pub allocator: Option<AllocatorStats>,
    /// The allocator's own size classes that hold or have served a block, with its own counts
    /// (jemalloc; empty on other backends): see [`AllocatorClass`](crate::AllocatorClass) for what
    /// they include.
    pub allocator_classes: Vec<crate::backend::AllocatorClass>,
    /// The kernel's view of the process.
    pub process: ProcessStats,
    /// How much resident memory is not live data.
    pub fragmentation: Fragmentation,
    /// One row per thread with its own shard, then the `retired` and `overflow` aggregates.
    pub threads: Vec<ThreadRow>,
    /// One row per size class that has seen a block.
    pub size_classes: Vec<SizeClassRow>,
    /// Cross-thread frees, estimated from sampled blocks; `None` while sampling is off and nothing
    /// was sampled.
    pub origin: Option<Origin>,
    /// Allocation sites holding the most bytes in use, estimated from sampled stacks; `None` while
    /// site sampling is off and nothing was sampled.
    pub sites: Option<Sites>,
    /// Occupancy of the per-thread shard pool.
    pub shards: ShardPool,
    /// Where resident memory goes and what it means: `None` without a process RSS (no `/proc`).
    pub diagnosis: Option<Diagnosis>,
    /// Things the reader should know to interpret the figures.
    pub warnings: Vec<Warning>,
    /// frag's own memory, kept out of every figure above.
    pub frag_itself: FragItself,
}

/// frag's own memory: what it allocated for its own work (reports, symbolizing, profiles, the
/// publisher's ticks, the reclaimer's rounds). None of it is in the program's figures
/// ([`Report::tracked`], `threads`, `size_classes`, `sites`); the breakdown has it as its own bucket
/// ([`Part::Frag`](crate::diagnosis::Part::Frag)). What frag hands to the program (a `Report`, a
/// profile's bytes, named frames) is a copy allocated as the program's.
///
/// The symbolizer's cache (the debug information `symbolize` and the profiles read) is released
/// once no symbolizer is at work, unless [`keep_symbol_cache`](crate::keep_symbol_cache) says to
/// keep it; while kept, it is here.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct FragItself {
    /// Whether `live_bytes` and `usable_bytes` are estimates from frag's own samples (the sampled
    /// tier), as the program's are.
    pub estimated: bool,
    /// Requested bytes of frag's live blocks.
    pub live_bytes: u64,
    /// Their usable bytes: the breakdown's `frag` bucket.
    pub usable_bytes: u64,
    /// Bytes frag allocated since the process started (exact).
    pub allocated_total_bytes: u64,
    /// Whether the symbolizer's cache is kept between uses ([`keep_symbol_cache`](crate::keep_symbol_cache)).
    pub symbol_cache_kept: bool,
}

/// Process-wide counters: exact at the moment they were read in the [`Exact`](crate::Exact) tier,
/// estimates from the samples in the [`Sampled`](crate::Sampled) tier (`estimated`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct TrackedStats {
    /// Whether the figures below are estimates from the samples (the sampled tier), each sampled
    /// block standing for the inverse of its sampling probability; else they are exact counts.
    pub estimated: bool,
    /// Whether the samples are jemalloc's own, handed over by its profiler's hooks
    /// (`frag::sample_in_jemalloc`) rather than taken by a `Tracked`.
    pub sampled_in_jemalloc: bool,
    /// Successful `alloc` and `alloc_zeroed` calls.
    pub allocations: u64,
    /// `dealloc` calls.
    pub deallocations: u64,
    /// Successful `realloc` calls.
    pub reallocations: u64,
    /// Blocks allocated and not yet freed.
    pub live_blocks: u64,
    /// Requested bytes in live blocks.
    pub allocated_bytes: u64,
    /// Usable bytes in live blocks, as the backend rounds them (see `usable_source`).
    pub usable_bytes: u64,
    /// 95% intervals of `allocations`, `deallocations` (with the old blocks of reallocations) and
    /// `live_blocks` in the sampled tier (`None` in the exact tier). Built size class by size class:
    /// where a class has few samples they are Poisson limits, and a class with none still adds the
    /// most its unseen blocks could be, so the upper end is a bound rather than the estimate's spread
    /// (docs/SAMPLING.md, "Counts on tiny blocks"). JSON: `est_*_interval`.
    #[cfg_attr(feature = "serde", serde(rename = "est_allocations_interval"))]
    pub allocations_interval: Option<(u64, u64)>,
    /// See `allocations_interval`.
    #[cfg_attr(feature = "serde", serde(rename = "est_deallocations_interval"))]
    pub deallocations_interval: Option<(u64, u64)>,
    /// See `allocations_interval`.
    #[cfg_attr(feature = "serde", serde(rename = "est_live_blocks_interval"))]
    pub live_blocks_interval: Option<(u64, u64)>,
    /// Highest `allocated_bytes` seen. Exact at every `report()`; between reports each thread folds
    /// its net into the peak after 16 MiB of sampled charge (`origin::sampler::FLUSH_CHARGE`), so a
    /// spike no report saw can be off by up to that (plus one sampling interval) per live thread.
    pub peak_allocated_bytes: u64,
}

/// Fragmentation figures and the inputs they were computed from.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Fragmentation {
    /// `(resident - allocated) / allocated`, from the allocator's own resident and allocated bytes
    /// where it has both, else from process RSS and tracked usable bytes. `None` with less than
    /// 8 MiB of live data, where it would measure the allocator's fixed overhead (the report's
    /// warnings say so).
    pub ratio: Option<f64>,
    /// Which figures `ratio` was computed from.
    pub ratio_inputs: RatioInputs,
    /// `(process RSS - tracked usable bytes) / tracked usable bytes`: the whole process's overhead.
    /// `None` below the same 8 MiB of live data.
    pub process_ratio: Option<f64>,
    /// Internal fragmentation: usable minus requested bytes over live blocks.
    pub internal_bytes: u64,
}

/// What a thread row stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum RowKind {
    /// One thread with its own shard (alive, or exited with its slot not reused yet).
    Thread,
    /// All exited threads whose slot was taken over by a newer thread.
    Retired,
    /// Threads beyond the pool, and allocations made during a thread's claim or after its teardown.
    Overflow,
}

/// Counters of one thread (or one aggregate of threads).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct ThreadRow {
    /// Whether `allocations`, `deallocations`, `reallocations` and `freed_bytes` are estimates from
    /// the samples (the sampled tier); `allocated_bytes` is exact in both tiers.
    pub estimated: bool,
    /// What the row stands for.
    pub kind: RowKind,
    /// The OS thread id (Linux `gettid`), for `Thread` rows.
    pub tid: Option<u64>,
    /// The OS thread name (at most 15 bytes on Linux, e.g. `tokio-runtime-w`), for `Thread` rows.
    pub name: Option<String>,
    /// Whether the thread still runs.
    pub alive: bool,
    /// Successful `alloc` and `alloc_zeroed` calls made by the thread.
    pub allocations: u64,
    /// `dealloc` calls made by the thread (of blocks allocated anywhere).
    pub deallocations: u64,
    /// Successful `realloc` calls made by the thread.
    pub reallocations: u64,
    /// Requested bytes the thread allocated (new sizes of reallocations included).
    pub allocated_bytes: u64,
    /// Requested bytes the thread freed (old sizes of reallocations included).
    pub freed_bytes: u64,
    /// Estimated frees the thread made of blocks it allocated itself (origin tracking; 0 when off).
    #[cfg_attr(feature = "serde", serde(rename = "est_local_frees"))]
    pub local_frees: u64,
    /// Estimated frees other threads made of blocks this thread allocated.
    #[cfg_attr(feature = "serde", serde(rename = "est_freed_elsewhere"))]
    pub freed_elsewhere: u64,
    /// Estimated requested bytes of those blocks.
    #[cfg_attr(feature = "serde", serde(rename = "est_freed_elsewhere_bytes"))]
    pub freed_elsewhere_bytes: u64,
    /// Estimated frees this thread made of blocks other threads allocated.
    #[cfg_attr(feature = "serde", serde(rename = "est_remote_frees"))]
    pub remote_frees: u64,
    /// Estimated requested bytes of those blocks.
    #[cfg_attr(feature = "serde", serde(rename = "est_remote_freed_bytes"))]
    pub remote_freed_bytes: u64,
    /// The effective number of sampled frees (Kish) behind `local_frees` and `remote_frees`: under
    /// 30 they are too few to tell, and the text report shows "few" instead of the figure.
    pub free_samples: u64,
}

/// One size class: requests from `min_size` to `max_size` bytes.
///
/// A reallocation counts as a deallocation in the old class and an allocation in the new one.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct SizeClassRow {
    /// Whether the counts and bytes below are estimates from the samples (the sampled tier).
    pub estimated: bool,
    /// Smallest request in the class.
    pub min_size: u64,
    /// Largest request in the class; `None` for the last class (above 64 MiB).
    pub max_size: Option<u64>,
    /// Blocks that entered the class.
    pub allocations: u64,
    /// Blocks that left the class.
    pub deallocations: u64,
    /// Blocks currently in the class.
    pub live_blocks: u64,
    /// Requested bytes of live blocks.
    pub live_bytes: u64,
    /// Usable bytes of live blocks.
    pub usable_bytes: u64,
    /// `usable_bytes - live_bytes`: internal fragmentation in this class.
    pub internal_bytes: u64,
    /// Estimated share of this class's frees made on another thread than the allocating one; `None`
    /// on fewer than 30 sampled frees in the class (too few to tell). JSON: `est_cross_thread_ratio`.
    #[cfg_attr(feature = "serde", serde(rename = "est_cross_thread_ratio"))]
    pub cross_thread_ratio: Option<f64>,
    /// 95% interval of `cross_thread_ratio` (Wilson score with the class's effective samples).
    /// JSON: `est_cross_thread_ratio_interval`.
    #[cfg_attr(feature = "serde", serde(rename = "est_cross_thread_ratio_interval"))]
    pub cross_thread_ratio_interval: Option<(f64, f64)>,
    /// Sampled frees in the class: what `cross_thread_ratio` rests on.
    pub cross_thread_samples: u64,
    /// 95% intervals of `allocations`, `live_blocks` and `live_bytes` where they are estimates
    /// (`estimated`, the sampled tier; `None` in the exact tier). Each rests on the class's sampled
    /// blocks: all of them for `allocations`, those still live for the others; see
    /// [`Origin::frees_interval`] for how they are built. JSON: `est_*_interval`.
    #[cfg_attr(feature = "serde", serde(rename = "est_allocations_interval"))]
    pub allocations_interval: Option<(u64, u64)>,
    /// See `allocations_interval`.
    #[cfg_attr(feature = "serde", serde(rename = "est_live_blocks_interval"))]
    pub live_blocks_interval: Option<(u64, u64)>,
    /// See `allocations_interval`.
    #[cfg_attr(feature = "serde", serde(rename = "est_live_bytes_interval"))]
    pub live_bytes_interval: Option<(u64, u64)>,
}

impl SizeClassRow {
    /// Whether a request of `size` bytes falls in this class.
    ///
    /// ```no_run
    /// # #[global_allocator]
    /// # static A: frag::Tracked<std::alloc::System> = frag::Tracked::new(std::alloc::System);
    /// let classes = frag::size_classes();
    /// let row = classes.iter().find(|c| c.contains(4096)).expect("every size has a class");
    /// println!("4 KiB requests: {} live blocks", row.live_blocks);
    /// ```
    #[must_use]
    pub fn contains(&self, size: u64) -> bool {
        self.min_size <= size && self.max_size.is_none_or(|max| size <= max)
    }
}

/// Where blocks are freed relative to where they were allocated, estimated from sampled blocks.
///
/// Counts and bytes are estimates: each sampled block stands for the inverse of its sampling
/// probability. With [`Sampling::EveryBlock`](crate::Sampling::EveryBlock) they are exact (for blocks
/// allocated and freed while it was on).
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Origin {
    /// The sampling in effect (figures from earlier samples stay when it is off now); serialises as
    /// `{"mean_bytes": n}`, `"every_block"` or `"off"`.
    pub sampling: crate::sampler::Sampling,
    /// Blocks sampled at allocation and recorded in the side table.
    pub sampled_blocks: u64,
    /// Sampled blocks freed since (the figures below come from these).
    pub sampled_frees: u64,
    /// Samples lost because the side table was full around their address.
    pub dropped_samples: u64,
    /// Frees of blocks, local and cross-thread: deallocations and the old blocks of reallocations.
    /// Exact in the [`Exact`](crate::Exact) tier (`frees_exact`), estimated from the samples in the
    /// sampled tier. JSON: `est_frees`.
    #[cfg_attr(feature = "serde", serde(rename = "est_frees"))]
    pub frees: u64,
    /// Whether `frees` is the exact count (the exact tier counts every free): `cross_thread_frees`
    /// is then the estimated share of it.
    pub frees_exact: bool,
    /// Fewer than 30 sampled frees: the estimates are too few to tell (the text report says so
    /// instead of printing them).
    pub too_few_samples: bool,
    /// Estimated frees made on another thread than the allocating one. JSON: `est_cross_thread_frees`.
    #[cfg_attr(feature = "serde", serde(rename = "est_cross_thread_frees"))]
    pub cross_thread_frees: u64,
    /// `cross_thread_frees / frees`.
    pub cross_thread_free_ratio: Option<f64>,
    /// Estimated requested bytes freed on another thread than the allocating one. JSON: `est_cross_thread_bytes`.
    #[cfg_attr(feature = "serde", serde(rename = "est_cross_thread_bytes"))]
    pub cross_thread_bytes: u64,
    /// `cross_thread_bytes` over estimated freed bytes.
    pub cross_thread_byte_ratio: Option<f64>,
    /// 95% interval of `cross_thread_free_ratio` (Wilson score with the samples' effective size).
    pub ratio_interval: Option<(f64, f64)>,
    /// 95% interval of `frees` (`None` with too few samples; a single point when `frees_exact`).
    /// Each block is sampled on its own (disjoint stretches of a Poisson process over allocated
    /// bytes). The interval is built size class by size class: a class with enough sampled frees
    /// adds the normal spread (variance `Σ w(w − 1)` over its samples, `w` each one's weight), a class
    /// with few adds Poisson limits on its count, and a class with none the most its unseen frees
    /// could be, so on tiny blocks the upper end is a bound (docs/SAMPLING.md). JSON:
    /// `est_frees_interval`.
    #[cfg_attr(feature = "serde", serde(rename = "est_frees_interval"))]
    pub frees_interval: Option<(u64, u64)>,
    /// 95% interval of `cross_thread_frees`: the ends of `frees_interval` times the ends of
    /// `ratio_interval`. JSON: `est_cross_thread_frees_interval`.
    #[cfg_attr(feature = "serde", serde(rename = "est_cross_thread_frees_interval"))]
    pub cross_thread_frees_interval: Option<(u64, u64)>,
    /// 95% interval of `cross_thread_bytes`: each sampled free of `s` bytes and weight `w` adds
    /// `w(w − 1)s²` to the estimate's variance. JSON: `est_cross_thread_bytes_interval`.
    #[cfg_attr(feature = "serde", serde(rename = "est_cross_thread_bytes_interval"))]
    pub cross_thread_bytes_interval: Option<(u64, u64)>,
    /// Largest cells of the (allocating thread → freeing thread) matrix, by frees.
    pub pairs: Vec<OriginPair>,
    /// Matrix cells that did not fit (more distinct thread pairs than the matrix holds).
    pub dropped_pairs: u64,
    /// Frees by block lifetime (allocation to free), local and cross-thread.
    pub lifetimes: Vec<LifetimeRow>,
}

/// One cell of the origin matrix.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct OriginPair {
    /// OS thread id of the allocating thread.
    pub alloc_tid: u64,
    /// Its name, if it is still known.
    pub alloc_thread: Option<String>,
    /// OS thread id of the freeing thread.
    pub free_tid: u64,
    /// Its name, if it is still known.
    pub free_thread: Option<String>,
    /// Estimated frees.
    #[cfg_attr(feature = "serde", serde(rename = "est_frees"))]
    pub frees: u64,
    /// Estimated requested bytes freed. JSON: `est_bytes`.
    #[cfg_attr(feature = "serde", serde(rename = "est_bytes"))]
    pub bytes: u64,
    /// 95% intervals of `frees` and `bytes` (as [`Origin::frees_interval`] and
    /// [`Origin::cross_thread_bytes_interval`]); `None` when the pair's samples weigh less than 30
    /// equal ones. JSON: `est_frees_interval`, `est_bytes_interval`.
    #[cfg_attr(feature = "serde", serde(rename = "est_frees_interval"))]
    pub frees_interval: Option<(u64, u64)>,
    /// See `frees_interval`.
    #[cfg_attr(feature = "serde", serde(rename = "est_bytes_interval"))]
    pub bytes_interval: Option<(u64, u64)>,
}

/// Frees of blocks whose lifetime fell in one decade.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct LifetimeRow {
    /// Lifetimes below this many nanoseconds (and at least the previous row's bound); `None` for the
    /// last row.
    pub below_ns: Option<u64>,
    /// Estimated frees on the allocating thread.
    #[cfg_attr(feature = "serde", serde(rename = "est_local_frees"))]
    pub local_frees: u64,
    /// Estimated frees on another thread.
    pub cross_thread_frees: u64,
}

/// Occupancy of the shard pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct ShardPool {
    /// Number of per-thread shards: threads beyond it are counted together (see
    /// [`RowKind::Overflow`]).
    pub capacity: usize,
    /// Shards ever claimed (their memory is resident).
    pub used: usize,
    /// Shards owned by a running thread.
    pub live: usize,
    /// Threads that found the pool full and write to the overflow shard.
    pub unslotted_threads: u64,
}

impl Report {
    /// The report as pretty-printed JSON (the `Serialize` form).
    #[cfg(feature = "serde")]
    #[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
    #[must_use]
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// Needs the `serde` feature (`frag-alloc = { version = "…", features = ["serde"] }`): without
    /// it, a call does not compile, and rustc's error names the feature.
    #[cfg(not(feature = "serde"))]
    #[must_use]
    pub fn to_json(&self) -> String
    where
        for<'a> &'a Report: needs_serde::SerdeFeature,
    {
        "{\"error\":\"frag-alloc was built without its serde feature\"}".to_owned()
    }
}

/// The bound that makes `Report::to_json` name the missing feature when it is off.
#[cfg(not(feature = "serde"))]
#[doc(hidden)]
pub mod needs_serde {
    /// Implemented by nothing: the `serde` feature provides the real `to_json` instead.
    #[diagnostic::on_unimplemented(
        message = "`Report::to_json` needs the `serde` feature of frag-alloc",
        label = "enable it: frag-alloc = {{ features = [\"serde\"] }}"
    )]
    pub trait SerdeFeature {}
}
