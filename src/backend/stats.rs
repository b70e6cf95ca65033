//! The allocator's own view of itself.

/// Figures an allocator reports about itself, in bytes; `None` where the backend has no such figure.
///
/// Which fields exist depends on the backend:
///
/// | backend  | fields |
/// |----------|--------|
/// | jemalloc | `allocated`, `active`, `metadata`, `resident`, `mapped`, `retained`, `dirty`, `thread_cache` (after an `epoch` advance) |
/// | glibc    | `allocated` (in use, `uordblks + hblkhd`), `free` (`fordblks`), `arena`, `mmap` (`hblkhd`), `top_releasable` (`keepcost`) from `mallinfo2`; `free_whole_pages`, `thread_arena_tops` from `malloc_info` |
/// | mimalloc | `committed`, `peak_committed` from `mi_process_info` (its `current_rss` is an estimate on Linux and is not used) |
/// | snmalloc | `mapped`, `peak_mapped`: address space reserved from the OS, in chunks (not RSS) |
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(default))]
#[non_exhaustive]
pub struct AllocatorStats {
    /// Bytes in blocks handed to the application, as the allocator counts them (usable sizes).
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub allocated: Option<u64>,
    /// Bytes in pages that hold application blocks (jemalloc `stats.active`).
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub active: Option<u64>,
    /// Bytes of the allocator's own bookkeeping.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub metadata: Option<u64>,
    /// Bytes in physically resident pages the allocator maps.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub resident: Option<u64>,
    /// Bytes in active extents / address space obtained from the OS.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub mapped: Option<u64>,
    /// Bytes kept mapped but returned to the OS (jemalloc `stats.retained`).
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub retained: Option<u64>,
    /// Bytes in unused pages the allocator holds and has not returned to the OS yet: jemalloc's dirty
    /// and muzzy pages of all arenas (`stats.arenas.<all>.pdirty + pmuzzy`, times the page size),
    /// which a purge releases.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub dirty: Option<u64>,
    /// Bytes in free blocks parked in the threads' caches, which the allocator counts as allocated
    /// (jemalloc `stats.arenas.<all>.tcache_bytes`): a thread's cache empties when the thread
    /// flushes it (`frag::tune::jemalloc::flush_thread_tcache()`).
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub thread_cache: Option<u64>,
    /// Bytes of free space at the top of glibc's main heap that `malloc_trim` could give back
    /// (`keepcost`).
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub top_releasable: Option<u64>,
    /// Bytes in whole pages inside glibc's free chunks, all arenas, estimated from `malloc_info`'s
    /// free-chunk histograms: what `malloc_trim(0)` releases besides the main heap's top (pages an
    /// earlier trim returned are counted too).
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub free_whole_pages: Option<u64>,
    /// Bytes of free space at the top of glibc's thread arenas (from `malloc_info`), which
    /// `malloc_trim` does not release.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub thread_arena_tops: Option<u64>,
    /// Bytes in free chunks the allocator holds (glibc `fordblks`).
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub free: Option<u64>,
    /// Bytes of heap obtained with `brk`/arena growth (glibc `arena`).
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub arena: Option<u64>,
    /// Bytes in blocks served directly by `mmap` (glibc `hblkhd`).
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub mmap: Option<u64>,
    /// Bytes committed (mimalloc).
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub committed: Option<u64>,
    /// Highest `committed` so far (mimalloc).
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub peak_committed: Option<u64>,
    /// Highest `mapped` so far (snmalloc).
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub peak_mapped: Option<u64>,
}
