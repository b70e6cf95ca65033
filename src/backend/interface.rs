//! The one interface every known backend implements, once, in its own file: what the allocation
//! path, the report, the diagnosis and tuning need to know about an allocator.
//!
//! It is implemented on the allocator type itself (`std::alloc::System`, `tikv_jemallocator::Jemalloc`,
//! ...) and reached through `with_backend!` (see `list`), so every call is static: on the allocation
//! path a constant for a fixed backend, one jump for `Select`. [`Probe`](super::Probe) is the public
//! face of the same questions for a user's allocator.

use core::alloc::{GlobalAlloc, Layout};
use core::fmt;

use super::AllocatorStats;
use super::knob::{Decay, Method, Released, ThreadMethod, Trap, TuneError, unsupported};
use super::list::Backend;
use super::split::HeapSplit;
use super::usable::{Rule, Usable};
use crate::stats::snapshot::ClassUsable;

/// A backend this crate knows by type. Methods with a default are the ones a backend may lack.
pub(crate) trait KnownAllocator: GlobalAlloc + Sized + 'static {
    /// This backend's entry in the list.
    const BACKEND: Backend;

    /// The allocator value `Select` forwards to (every known backend is a unit struct).
    const VALUE: Self;

    /// Whether [`reclaim`](Self::reclaim) returns memory (else it says the backend cannot).
    const RECLAIMS: bool = false;

    /// The largest request whose marked samples get a twin (0: none): a block of the request's own
    /// layout, allocated and freed with the marked block, in the place the block itself would have
    /// had, so that [`slab_use`](Self::slab_use) can say how full that slab is. Only a backend that
    /// answers `slab_use` sets it; the limit keeps twins under 1% of live bytes at the default mean.
    const TWIN_MAX: usize = 0;

    /// How usable sizes are obtained, in words, for the report's `usable_source`.
    const USABLE_SOURCE: &'static str;

    /// The fast path's usable-size rule for `layout`, or `None` when the request takes the cold path
    /// (over-aligned, or larger than `class::TABLE_MAX`). Allocation-, lock- and panic-free.
    fn fast(layout: Layout) -> Option<Rule>;

    /// How to account for the usable size of the live block `ptr`, allocated with `layout`.
    /// Allocation-, lock- and panic-free, and the same at allocation and at free.
    fn usable(ptr: *mut u8, layout: Layout) -> Usable;

    /// How the usable sizes of size class `class` are accounted: the uniform usable size of its plain
    /// blocks where the backend's classes are uniform. Allocation-free.
    fn class_usable(class: usize) -> ClassUsable {
        let _ = class;
        ClassUsable::Requested
    }

    /// The backend's own statistics (`None`: it has none). Runs at report time only, and only for the
    /// wrapped backend, so a report never initialises an allocator the program does not use.
    fn stats() -> Result<Option<AllocatorStats>, StatsError>;

    /// The backend's own size classes with its own counts of them (empty: it has none), as of the
    /// call (a backend that snapshots its statistics refreshes them). Runs at report time only.
    fn classes() -> Result<Vec<super::AllocatorClass>, StatsError> {
        Ok(Vec::new())
    }

    /// How full the slab of each block at `ptrs` is, in order (`None`: the backend cannot say). The
    /// blocks need not stay live meanwhile: a backend that answers must answer any address safely.
    /// Report time only.
    fn slab_use(ptrs: &[usize]) -> Result<Option<Vec<super::SlabUse>>, StatsError> {
        let _ = ptrs;
        Ok(None)
    }

    /// The diagnosis's split of the heap's resident bytes from the backend's own figures `stats`,
    /// given the tracked usable bytes and the process's anonymous resident bytes. `None`: the
    /// backend's figures say nothing about resident memory.
    fn split_heap(stats: &AllocatorStats, usable: u64, anon: Option<u64>) -> Option<HeapSplit> {
        let _ = (stats, usable, anon);
        None
    }

    /// What this backend adds to a finding's remedy, if anything.
    fn remedy(topic: Remedy) -> Option<&'static str> {
        let _ = topic;
        None
    }

    /// Returns free memory to the OS now.
    fn release_free_memory() -> Result<Released, TuneError> {
        Err(unsupported(Self::BACKEND, "release_free_memory", "it returns memory to the OS on its own schedule"))
    }

    /// The reclaimer's action: returns free memory to the OS, leaving about `keep` bytes of it
    /// resident for reuse. A backend that works in steps calls `more` before each step after the
    /// first and stops when it returns `false` (the reclaimer's budget is spent). Never called on
    /// the allocation path.
    fn reclaim(keep: u64, more: &mut dyn FnMut() -> bool) -> Result<Method, TuneError> {
        let _ = (keep, more);
        Err(unsupported(Self::BACKEND, "reclaim", "it returns memory to the OS on its own schedule"))
    }

    /// What only the calling thread can return: its cache, or the pages other threads freed into
    /// its heap. Called by `frag::reclaim::idle` on an idle thread, never on the allocation path.
    fn release_thread() -> Result<ThreadMethod, TuneError> {
        Err(unsupported(
            Self::BACKEND,
            "release_thread",
            "it keeps no per-thread memory that a call on the thread returns",
        ))
    }

    /// What only the calling thread can release, from the allocation path (`backend::assist`):
    /// allocation-, lock- and panic-free, never inside the allocator itself. `false`: nothing done.
    fn assist() -> bool {
        false
    }

    /// Sets how long freed pages stay resident before the backend returns them.
    fn set_purge_delay(decay: Decay) -> Result<(), TuneError> {
        let _ = decay;
        Err(unsupported(Self::BACKEND, "purge delay", ""))
    }

    /// The purge delay in force, as [`set_purge_delay`](Self::set_purge_delay) would set it back.
    fn purge_delay() -> Result<Decay, TuneError> {
        Err(unsupported(Self::BACKEND, "purge delay", ""))
    }

    /// The purge delay the soft memory limit's controller sets while RSS is over its target, where
    /// the one in force is longer (`None`: the backend has no purge delay).
    const PRESSURE_DECAY: Option<Decay> = None;

    /// The effective configuration in one line, for logs.
    fn effective_config() -> String {
        "no tunable configuration".to_owned()
    }

    /// This backend's reading of the environment variable `name`, set to `value`: `None` when it does
    /// not read it, else the traps it finds in it (none: the variable does what it says). Variables
    /// of other allocators are `frag::tune::check`'s business, not the backend's.
    fn env_traps(name: &str, value: &str) -> Option<Vec<Trap>> {
        let _ = (name, value);
        None
    }
}

/// Why a backend's statistics could not be read.
#[derive(Debug)]
pub(crate) enum StatsError {
    /// jemalloc refused a `mallctl` read.
    #[cfg(feature = "jemalloc")]
    Mallctl {
        /// The name read.
        name: &'static str,
        /// jemalloc's error.
        error: tikv_jemalloc_ctl::Error,
    },
    /// jemalloc refused a `mallctl` call made without `tikv_jemalloc_ctl` (one that reads and writes
    /// buffers of different sizes).
    #[cfg(feature = "jemalloc")]
    MallctlCode {
        /// The name called.
        name: &'static str,
        /// jemalloc's error number.
        code: i32,
    },
    /// Another allocator interposes `malloc` (`LD_PRELOAD`, valgrind), so glibc's figures describe an
    /// allocator nobody uses.
    #[cfg_attr(not(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64")), allow(dead_code))]
    MallocInterposed,
}

impl fmt::Display for StatsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            #[cfg(feature = "jemalloc")]
            Self::Mallctl { name, error } => write!(f, "jemalloc {name}: {error}"),
            #[cfg(feature = "jemalloc")]
            Self::MallctlCode { name, code } => {
                let why = match *code {
                    libc_codes::ENOENT => "this jemalloc does not have it",
                    libc_codes::EINVAL => "it refused the arguments",
                    libc_codes::EPERM => "it is not allowed now",
                    libc_codes::EAGAIN => "it ran out of memory",
                    libc_codes::EFAULT => "it failed inside",
                    _ => "it failed",
                };
                write!(f, "jemalloc {name}: {why} (error {code})")
            }
            Self::MallocInterposed => f.write_str(
                "malloc is not glibc's (another allocator interposes it: LD_PRELOAD, valgrind), so glibc's \
                 statistics do not describe the heap",
            ),
        }
    }
}

/// The findings whose remedy depends on the backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Remedy {
    /// Free space in partly used pages.
    Holes,
    /// Free pages the backend holds.
    Reclaimable,
    /// Blocks freed on another thread than the allocating one.
    CrossThread,
    /// The backend's bookkeeping.
    Metadata,
}

/// The error numbers `mallctl` returns (Linux's values, as in `errno.h`).
#[cfg(feature = "jemalloc")]
mod libc_codes {
    pub(super) const EPERM: i32 = 1;
    pub(super) const ENOENT: i32 = 2;
    pub(super) const EAGAIN: i32 = 11;
    pub(super) const EFAULT: i32 = 14;
    pub(super) const EINVAL: i32 = 22;
}
