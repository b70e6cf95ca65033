//! What every backend's knobs share: the error type, the purge delay, the resident set around a
//! release, configuration traps, and the check that a knob belongs to the wrapped allocator. The
//! knobs themselves live with their backend (`system/knobs.rs`, `jemalloc/knobs/`,
//! `mimalloc/knobs.rs`); `frag::tune` is their public face.

pub(crate) mod actions;
mod decay;
mod error;
mod method;
mod trap;

pub(crate) use decay::DECAY_EXPECTED;
pub use decay::Decay;
#[cfg_attr(not(feature = "jemalloc"), allow(unused_imports))]
pub(crate) use decay::decay_range;
pub use error::TuneError;
pub use method::{Method, ThreadMethod};
pub(crate) use trap::GLIBC_VARS;
pub use trap::{EnvReader, Trap};

use super::list::Backend;
use super::registry::registered;
use super::wrapped::WrappedBackend;

/// Fails with [`TuneError::WrongBackend`] unless the registered allocator is `backend`
/// ([`TuneError::NotInstalled`] without one). `knob` names the knob for the latter.
pub(crate) fn require(backend: Backend, knob: &'static str) -> Result<(), TuneError> {
    match registered().map(|r| r.wrapped()) {
        Some(WrappedBackend::Known(b)) if b == backend => Ok(()),
        Some(installed) => Err(TuneError::WrongBackend { wanted: backend, installed }),
        None => Err(TuneError::NotInstalled { knob }),
    }
}

/// [`TuneError::Unsupported`] for `backend`'s `knob`, with what to do instead (`hint`, or empty).
pub(crate) fn unsupported(backend: Backend, knob: &'static str, hint: &'static str) -> TuneError {
    TuneError::Unsupported { backend: WrappedBackend::Known(backend), knob, hint }
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
