//! What each allocator lets you change, typed: jemalloc's decay, thread cache and purging, mimalloc
//! options, glibc's `mallopt`, plus the configuration traps the report warns about.
//!
//! Fragmentation is usually fixed by tuning, and the right knob depends on the workload: a smaller
//! jemalloc thread cache can cut a 32 KiB single-sender channel's time by more than half and make
//! single-threaded allocation of the same sizes twice as slow. Measure with `frag::report()`
//! before and after.
//!
//! Each backend has its own module; [`release_free_memory`] and [`set_purge_delay`] work on whichever
//! allocator is wrapped. Every call checks the wrapped allocator first, so a jemalloc knob under
//! `Tracked<System>` is an error ([`TuneError::WrongBackend`]) and never initialises jemalloc as a
//! second allocator. snmalloc has no run-time knobs: every call for it returns
//! [`TuneError::Unsupported`].
//!
//! **Validation.** One rule for every knob, at compile time (`jemalloc_conf!`) and at run time
//! alike: a value the allocator would not take as it is (out of its range, or one it would clip
//! without saying so, as jemalloc clips a thread-cache limit above 8 pages) is refused with
//! [`TuneError::InvalidValue`], whose message names the accepted range, and nothing changes; a value
//! in range that the allocator rounds (a thread-cache limit between two size classes) is taken, and
//! the call returns what is in force. The sampling mean follows the same rule
//! ([`SamplingError`](crate::SamplingError)).
//!
//! Start-up configuration (read before `main`) is separate: `jemalloc::JemallocConfig` and the
//! `jemalloc_conf!` macro for jemalloc (feature `jemalloc`), environment variables for the others.
//! [`check`] finds environment variables the wrapped allocator ignores.

#[cfg(feature = "jemalloc")]
mod jemalloc_conf;
mod traps;

#[cfg(feature = "jemalloc")]
#[cfg_attr(docsrs, doc(cfg(feature = "jemalloc")))]
#[doc(inline)]
pub use crate::backend::jemalloc::knobs as jemalloc;
#[cfg(feature = "mimalloc")]
#[cfg_attr(docsrs, doc(cfg(feature = "mimalloc")))]
#[doc(inline)]
pub use crate::backend::mimalloc::knobs as mimalloc;
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[doc(inline)]
pub use crate::backend::system::knobs as glibc;
pub use crate::backend::tuning::{Decay, Released, TuneError};
pub(crate) use traps::checked;
pub use traps::{EnvReader, Trap, check};

use crate::backend::introspect::KnownIntrospect;
use crate::backend::list::with_backend;
use crate::backend::registry::{Registration, registered};
use crate::backend::tuning::DECAY_EXPECTED;
use crate::backend::tuning::actions::Knobs;

/// Calls `known` with the wrapped backend, `other` for a user's allocator (with its name), or fails
/// with [`TuneError::NotInstalled`].
fn on_wrapped<T>(
    knob: &'static str,
    known: impl FnOnce(crate::backend::Backend) -> Result<T, TuneError>,
    other: impl FnOnce(Registration) -> Result<T, TuneError>,
) -> Result<T, TuneError> {
    match registered() {
        Some(r) => match r.backend {
            Some(b) => known(b),
            None => other(r),
        },
        None => Err(TuneError::NotInstalled { knob }),
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
    const KNOB: &str = "release_free_memory";
    on_wrapped(
        KNOB,
        |b| with_backend!(b, A => A::release_free_memory()),
        |r| {
            Err(TuneError::Unsupported {
                backend: r.wrapped(),
                knob: KNOB,
                hint: "it returns memory to the OS on its own schedule",
            })
        },
    )
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
    const KNOB: &str = "purge delay";
    if decay.as_millis().is_none() {
        return Err(TuneError::InvalidValue { knob: KNOB, value: format!("{decay:?}"), expected: DECAY_EXPECTED });
    }
    on_wrapped(
        KNOB,
        |b| with_backend!(b, A => A::set_purge_delay(decay)),
        |r| Err(TuneError::Unsupported { backend: r.wrapped(), knob: KNOB, hint: "" }),
    )
}

/// The wrapped allocator's effective configuration in one line, for logs.
pub(crate) fn effective_config() -> String {
    match registered().map(|r| r.backend) {
        Some(Some(b)) => with_backend!(b, A => A::effective_config()),
        Some(None) => "no tunable configuration".to_owned(),
        None => "no Tracked allocator".to_owned(),
    }
}
