//! What the report, the diagnosis and tuning's checks ask of a known backend: its own statistics,
//! size classes and slabs, its split of the heap, its remedies, its configuration and the traps in
//! the environment variables it reads. Report time only, and only for the wrapped backend.

use core::fmt;

use super::classes::{AllocatorClass, SlabUse};
use super::heap_split::HeapSplit;
use super::known::KnownAllocator;
use super::list::{Backend, with_backend};
use super::registry::Registration;
use super::stats::AllocatorStats;
use super::tuning::Trap;
use crate::stats::snapshot::ClassUsable;

/// What a known backend says about itself. Methods with a default are the ones a backend may lack.
pub(crate) trait KnownIntrospect: KnownAllocator {
    /// How usable sizes are obtained, in words, for the report's `usable_source`.
    const USABLE_SOURCE: &'static str;

    /// The backend's own statistics (`None`: it has none). Runs at report time only, and only for the
    /// wrapped backend, so a report never initialises an allocator the program does not use.
    fn stats() -> Result<Option<AllocatorStats>, StatsError>;

    /// The backend's own size classes with its own counts of them (empty: it has none), as of the
    /// call (a backend that snapshots its statistics refreshes them). Runs at report time only.
    fn classes() -> Result<Vec<AllocatorClass>, StatsError> {
        Ok(Vec::new())
    }

    /// How full the slab of each block at `ptrs` is, written to `out` in order (as long as `ptrs`);
    /// `false`: the backend cannot say. The blocks stay live during the call (the caller holds their
    /// frees back, `sampler::gate`), and the call neither allocates nor frees. Report time only.
    fn slab_use(ptrs: &[usize], out: &mut [SlabUse]) -> Result<bool, StatsError> {
        let _ = (ptrs, out);
        Ok(false)
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

/// How a report's usable bytes were obtained ([`Report::usable_source`](crate::Report::usable_source)).
///
/// Prints, and serialises (feature `serde`), as a sentence saying how: `"exact: jemalloc nallocx, once
/// per size class up to 32 KiB ..."`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum UsableSource {
    /// From a known backend, as its [`description`](Self::description) says (exact on every backend
    /// but a system allocator other than glibc, where usable bytes equal requested bytes).
    Backend(Backend),
    /// From the wrapped allocator's [`Introspect::usable_size`](crate::Introspect::usable_size), the requested size where it returns `None`.
    Introspect,
    /// Not known: usable bytes equal requested bytes (an allocator without an `Introspect`).
    Requested,
}

impl UsableSource {
    /// How usable sizes are obtained, in words.
    #[must_use]
    pub fn description(self) -> &'static str {
        match self {
            Self::Backend(b) => with_backend!(b, A => A::USABLE_SOURCE),
            Self::Introspect => "the allocator's Introspect::usable_size (requested size where it returns None)",
            Self::Requested => "unknown allocator: usable bytes equal requested bytes",
        }
    }
}

impl core::fmt::Display for UsableSource {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.description())
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for UsableSource {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.description())
    }
}

/// What the registered allocator says, through its backend's [`KnownIntrospect`] (or [`KnownAllocator`]) or
/// its introspect.
impl Registration {
    /// How usable sizes are obtained.
    pub(crate) fn usable_source(&self) -> UsableSource {
        match self.backend {
            Some(b) => UsableSource::Backend(b),
            None if self.introspect.is_some() => UsableSource::Introspect,
            None => UsableSource::Requested,
        }
    }

    /// How usable sizes of size class `class` are accounted on this backend (see `usable`).
    /// Allocation-free.
    pub(crate) fn class_usable(&self, class: usize) -> ClassUsable {
        match self.backend {
            Some(b) => with_backend!(b, A => A::class_usable(class)),
            None => ClassUsable::Requested,
        }
    }

    /// The backend's own statistics. Runs at report time only, and only for the wrapped backend, so a
    /// report never initialises an allocator the program does not use.
    pub(crate) fn stats(&self) -> Result<Option<AllocatorStats>, StatsError> {
        match self.backend {
            Some(b) => with_backend!(b, A => A::stats()),
            None => Ok(self.introspect.and_then(|p| p.stats())),
        }
    }

    /// The backend's own size classes and counts (empty for a backend without them and for a user's
    /// allocator). Report time only.
    pub(crate) fn classes(&self) -> Result<Vec<AllocatorClass>, StatsError> {
        match self.backend {
            Some(b) => with_backend!(b, A => A::classes()),
            None => Ok(Vec::new()),
        }
    }

    /// How full the slab of each block at `ptrs` is, written to `out` (`false`: the backend cannot
    /// say); the blocks stay live meanwhile, and nothing is allocated or freed. Report time only.
    pub(crate) fn slab_use(&self, ptrs: &[usize], out: &mut [SlabUse]) -> Result<bool, StatsError> {
        match self.backend {
            Some(b) => with_backend!(b, A => A::slab_use(ptrs, out)),
            None => Ok(false),
        }
    }
}
