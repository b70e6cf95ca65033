//! The allocator's own size classes and its own counts of them (jemalloc's bin and large-extent
//! statistics): exact figures beside the report's estimates, at report time only.

/// One of the allocator's own size classes, with the allocator's own counts, after an `epoch`
/// advance (jemalloc: `stats.arenas.<all>.bins.<j>.*` for small classes, `lextents.<j>.*` for
/// large ones).
///
/// What jemalloc counts, and so what these figures include:
/// - every block of the process in the class: the program's (whether `Tracked` saw them or not),
///   frag's own, and a sampled block's page-aligned copy (in the 4 KiB class or a larger one, not
///   in its request's class);
/// - `requests`: each thread's cache (tcache) counts its requests on its own and adds them to the
///   class when the cache fills or flushes that class, so it lags behind the requests made; a thread
///   that calls `frag::tune::jemalloc::flush_thread_tcache()` (or `frag::reclaim::idle`
///   when the reclaimer asks it to) flushes its cache, and the figure is then exact for that thread;
/// - a large request up to the thread caches' limit (`opt.tcache_max`, 32 KiB by default) is
///   counted from the caches' requests, a larger one from the arena's allocations; a thread that
///   lowered its own limit (`thread.tcache.max`) or turned its cache off has its large requests
///   between the two limits counted as they miss;
/// - `held`: live blocks plus the free regions parked in thread caches (`AllocatorStats::thread_cache`
///   bytes in all), so it is an exact upper bound on live blocks, exact where caches are empty.
///
/// With `tcache:false` (`jemalloc_conf!` or `_RJEM_MALLOC_CONF`) both are exact at every report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct AllocatorClass {
    /// The usable size of the class's blocks, in bytes (jemalloc's region or extent size).
    pub size: u64,
    /// Allocation requests the class has served (jemalloc `nrequests`), as merged from thread caches.
    pub requests: u64,
    /// Blocks of the class the allocator counts as allocated (jemalloc `curregs`, `curlextents`).
    pub held: u64,
    /// For a class served from slabs (jemalloc's small classes): `(slabs, regions per slab)`. Its free
    /// space inside slabs in use is `(slabs × regions − held) × size`.
    pub slabs: Option<(u64, u64)>,
}

impl AllocatorClass {
    /// Free bytes inside the class's slabs in use, `(slabs × regions − held) × size`: the holes its
    /// live blocks keep resident (0 for a class not served from slabs).
    #[must_use]
    pub fn free_in_slabs(&self) -> u64 {
        self.slabs.map_or(0, |(slabs, regions)| {
            slabs.saturating_mul(regions).saturating_sub(self.held).saturating_mul(self.size)
        })
    }
}

/// How full the slab (or extent) holding one block is, from the allocator (jemalloc's
/// `experimental.utilization.batch_query`): report time only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SlabUse {
    /// Free regions in the slab (0 for a block that has an extent of its own).
    pub(crate) free: u64,
    /// Regions in the slab (1 for a block with an extent of its own; 0: the address is not the
    /// allocator's).
    pub(crate) regions: u64,
    /// The slab's (or extent's) size in bytes.
    pub(crate) bytes: u64,
}

impl SlabUse {
    /// The free bytes of the slab that each of its allocated regions keeps resident:
    /// `free × region / (regions − free)`; 0 outside a slab.
    #[must_use]
    pub(crate) fn hole_share(&self) -> f64 {
        let held = self.regions.saturating_sub(self.free);
        if self.regions <= 1 || held == 0 {
            return 0.0;
        }
        (self.free * (self.bytes / self.regions)) as f64 / held as f64
    }
}
