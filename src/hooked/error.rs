//! Why sampling inside jemalloc could not start.

use core::fmt;

use crate::sampler::SamplingError;

/// Why [`sample_in_jemalloc`](crate::sample_in_jemalloc) could not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum InJemallocError {
    /// jemalloc was built without its profiler: enable `frag-alloc`'s `jemalloc-prof` feature (it
    /// turns on `tikv-jemallocator/profiling`).
    NotBuiltWithProfiling,
    /// jemalloc's profiler is off: it can only be turned on at start-up, with `prof:true` in
    /// jemalloc's configuration (the environment variable `_RJEM_MALLOC_CONF=prof:true,prof_active:false`,
    /// or the `malloc_conf` symbol; `prof_active:false` leaves sampling to this function).
    ProfilingOff,
    /// The process's global allocator is not jemalloc: a block allocated through it did not count in
    /// jemalloc's bytes of the calling thread (`thread.allocated`).
    NotTheGlobalAllocator,
    /// The process's global allocator is a `frag::Tracked`, which samples already: sampling in
    /// jemalloc too would count every sample twice. Make the global allocator the bare
    /// `tikv_jemallocator::Jemalloc`.
    AlreadyTracked,
    /// The sampling asked for cannot be used.
    Sampling(SamplingError),
    /// A `mallctl` call failed.
    Mallctl {
        /// The `mallctl` name.
        name: &'static str,
        /// jemalloc's error.
        error: tikv_jemalloc_ctl::Error,
    },
}

impl fmt::Display for InJemallocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotBuiltWithProfiling => f.write_str(
                "jemalloc was built without its profiler: enable frag-alloc's `jemalloc-prof` feature \
                 (tikv-jemallocator/profiling)",
            ),
            Self::ProfilingOff => f.write_str(
                "jemalloc's profiler is off, and it can only be turned on at start-up: set \
                 _RJEM_MALLOC_CONF=prof:true,prof_active:false (or export `malloc_conf` with the same)",
            ),
            Self::NotTheGlobalAllocator => f.write_str(
                "the global allocator is not jemalloc (a block allocated through it did not count in \
                 jemalloc's thread.allocated): declare #[global_allocator] static A: \
                 tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;",
            ),
            Self::AlreadyTracked => f.write_str(
                "the global allocator is a frag::Tracked, which samples already: make it the bare \
                 tikv_jemallocator::Jemalloc to sample inside jemalloc",
            ),
            Self::Sampling(e) => write!(f, "{e}"),
            Self::Mallctl { name, error } => write!(f, "jemalloc {name}: {error}"),
        }
    }
}

impl std::error::Error for InJemallocError {}
