//! What each allocator lets you change, typed: jemalloc's decay, thread cache and purging, mimalloc
//! options, glibc's `mallopt`, plus the configuration traps the report warns about.
//!
//! Fragmentation is usually fixed by tuning, and the right knob depends on the workload: a smaller
//! jemalloc thread cache can cut a 32 KiB single-sender channel's time by more than half and make
//! single-threaded allocation of the same sizes twice as slow. Measure with [`report()`](crate::report)
//! before and after.
//!
//! Each backend has its own module; [`release_free_memory`] and [`set_purge_delay`] work on whichever
//! allocator is wrapped. Every call checks the wrapped allocator first, so a jemalloc knob under
//! `Tracked<System>` is an error ([`TuneError::WrongBackend`]) and never initialises jemalloc as a
//! second allocator. snmalloc has no run-time knobs: every call for it returns
//! [`TuneError::Unsupported`].
//!
//! Start-up configuration (read before `main`) is separate: `jemalloc::JemallocConfig` and the
//! `jemalloc_conf!` macro for jemalloc (feature `jemalloc`), environment variables for the others.
//! [`check`] finds environment variables the wrapped allocator ignores.

mod decay;
mod error;
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub mod glibc;
#[cfg(feature = "jemalloc")]
#[cfg_attr(docsrs, doc(cfg(feature = "jemalloc")))]
pub mod jemalloc;
#[cfg(feature = "mimalloc")]
#[cfg_attr(docsrs, doc(cfg(feature = "mimalloc")))]
pub mod mimalloc;
mod traps;

pub use decay::Decay;
pub use error::TuneError;
pub(crate) use traps::checked;
pub use traps::{Trap, check};

use crate::backend::{self, Backend, Kind};

/// Fails with [`TuneError::WrongBackend`] unless the registered allocator is `kind`
/// ([`TuneError::NotInstalled`] without one).
pub(crate) fn require(kind: Kind, wanted: &'static str) -> Result<(), TuneError> {
    match backend::registered() {
        Some(r) if r.kind == kind => Ok(()),
        Some(r) => Err(TuneError::WrongBackend { wanted, installed: r.name() }),
        None => Err(TuneError::NotInstalled { knob: wanted }),
    }
}

/// The process's resident set around a call that returns memory to the OS (from `/proc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Released {
    /// Resident bytes before, if `/proc` could be read.
    pub rss_before: Option<u64>,
    /// Resident bytes after.
    pub rss_after: Option<u64>,
}

impl Released {
    /// Runs `f` between two RSS readings (after one reading whose own first-use costs stay outside
    /// the window).
    pub(crate) fn around(f: impl FnOnce()) -> Self {
        let _ = crate::process::rss();
        let rss_before = crate::process::rss();
        f();
        Self { rss_before, rss_after: crate::process::rss() }
    }

    /// Resident bytes returned (zero if RSS grew meanwhile or is unknown; see [`Self::change`]).
    #[must_use]
    pub fn released(&self) -> u64 {
        self.change().map_or(0, |c| u64::try_from(-c).unwrap_or(0))
    }

    /// The change of RSS across the call, signed: negative when memory was returned, positive when
    /// other threads' allocations (or the call's own) outweighed it. `None` without `/proc`.
    #[must_use]
    pub fn change(&self) -> Option<i64> {
        let (b, a) = (self.rss_before?, self.rss_after?);
        Some(a as i64 - b as i64)
    }
}

fn unsupported(knob: &'static str, hint: &'static str) -> TuneError {
    match backend::registered() {
        Some(r) => TuneError::Unsupported { backend: r.name(), knob, hint },
        None => TuneError::NotInstalled { knob },
    }
}

/// Returns the wrapped allocator's free memory to the OS now: jemalloc purges every arena (after
/// flushing the calling thread's cache), mimalloc runs `mi_collect(true)`, glibc `malloc_trim(0)`.
///
/// # Errors
///
/// [`TuneError::Unsupported`] for snmalloc and unknown allocators; the backend's own failure.
///
/// # Example
///
/// ```no_run
/// # #[global_allocator]
/// # static A: frag::Tracked<std::alloc::System> = frag::Tracked::new(std::alloc::System);
/// let released = frag::tune::release_free_memory()?;
/// println!("returned {} KiB to the OS", released.released() >> 10);
/// # Ok::<(), frag::tune::TuneError>(())
/// ```
pub fn release_free_memory() -> Result<Released, TuneError> {
    match backend::registered().map(|r| r.kind) {
        #[cfg(feature = "jemalloc")]
        Some(Kind::Known(Backend::Jemalloc)) => {
            let mut result = Ok(());
            // jemalloc allocates its statistics on their first refresh (the purge reads them): that
            // happens before the window, so it does not count against what the purge releases.
            let _ = tikv_jemalloc_ctl::epoch::advance();
            let released = Released::around(|| {
                // A disabled thread cache cannot be flushed; purging still works.
                let _ = jemalloc::flush_thread_tcache();
                result = jemalloc::purge_all().map(drop);
            });
            result.map(|()| released)
        }
        #[cfg(feature = "mimalloc")]
        Some(Kind::Known(Backend::Mimalloc)) => mimalloc::collect(true),
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        Some(Kind::Known(Backend::System)) => glibc::trim(),
        _ => Err(unsupported("release_free_memory", "it returns memory to the OS on its own schedule")),
    }
}

/// Sets how long freed pages stay resident before the wrapped allocator returns them: jemalloc's
/// dirty decay (every arena and future ones), mimalloc's `purge_delay`.
///
/// # Errors
///
/// [`TuneError::InvalidValue`] for a zero or fractional-millisecond `After`;
/// [`TuneError::Unsupported`] for glibc (it trims by size, see `glibc::Mallopt::TrimThreshold`),
/// snmalloc and unknown allocators; the backend's refusal otherwise (mimalloc refuses
/// [`Decay::Immediate`] at run time, see `mimalloc::MimallocOption::PurgeDelay`).
pub fn set_purge_delay(decay: Decay) -> Result<(), TuneError> {
    if decay.as_millis().is_none() {
        return Err(TuneError::InvalidValue {
            knob: "purge delay",
            value: format!("{decay:?}"),
            expected: decay::DECAY_EXPECTED,
        });
    }
    match backend::registered().map(|r| r.kind) {
        #[cfg(feature = "jemalloc")]
        Some(Kind::Known(Backend::Jemalloc)) => jemalloc::set_decay(jemalloc::DecayKind::Dirty, decay).map(drop),
        #[cfg(feature = "mimalloc")]
        Some(Kind::Known(Backend::Mimalloc)) => mimalloc::set(mimalloc::MimallocOption::PurgeDelay(decay)).map(drop),
        Some(Kind::Known(Backend::System)) => Err(unsupported(
            "purge delay",
            "glibc returns memory by trimming the top of its heap: see tune::glibc::Mallopt::TrimThreshold",
        )),
        _ => Err(unsupported("purge delay", "")),
    }
}

/// The wrapped allocator's effective configuration in one line, for logs.
pub(crate) fn effective_config() -> String {
    match backend::registered().map(|r| r.kind) {
        #[cfg(feature = "jemalloc")]
        Some(Kind::Known(Backend::Jemalloc)) => {
            jemalloc::effective().map_or_else(|e| e.to_string(), |e| e.opt.to_string())
        }
        #[cfg(feature = "mimalloc")]
        Some(Kind::Known(Backend::Mimalloc)) => {
            mimalloc::current().map_or_else(|e| e.to_string(), |o| format!("{o:?}"))
        }
        Some(Kind::Known(Backend::System)) => {
            "glibc defaults unless changed with mallopt or MALLOC_*_ variables".to_owned()
        }
        Some(_) => "no tunable configuration".to_owned(),
        None => "no Tracked allocator".to_owned(),
    }
}
