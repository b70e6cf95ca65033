//! The report's figures from the counters: the totals, frag's own memory, the thread and size-class
//! rows, and the shard pool's occupancy.

/// frag's own memory: what it allocated for its own work (reports, symbolizing, profiles, the
/// publisher's ticks, the reclaimer's rounds). None of it is in the program's figures
/// ([`Report::tracked`](crate::Report::tracked), `threads`, `size_classes`, `sites`); the breakdown has it as its own bucket
/// ([`Part::Frag`](crate::report::diagnosis::Part::Frag)). What frag hands to the program (a `Report`, a
/// profile's bytes, named frames) is a copy allocated as the program's.
///
/// The symbolizer's cache (the debug information `symbolize` and the profiles read) is released
/// once no symbolizer is at work, unless [`keep_symbol_cache`](crate::sites::keep_symbol_cache) says to
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
    /// Whether the symbolizer's cache is kept between uses ([`keep_symbol_cache`](crate::sites::keep_symbol_cache)).
    pub symbol_cache_kept: bool,
}

/// Process-wide counters: exact at the moment they were read in the [`Exact`](crate::Exact) tier,
/// estimates from the samples in the [`Sampled`](crate::Sampled) tier (`estimated`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct HeapCounts {
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
    /// [`Origin::frees_interval`](crate::report::Origin::frees_interval) for how they are built. JSON: `est_*_interval`.
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
    /// let classes = frag::report::size_classes();
    /// let row = classes.iter().find(|c| c.contains(4096)).expect("every size has a class");
    /// println!("4 KiB requests: {} live blocks", row.live_blocks);
    /// ```
    #[must_use]
    pub fn contains(&self, size: u64) -> bool {
        self.min_size <= size && self.max_size.is_none_or(|max| size <= max)
    }
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
