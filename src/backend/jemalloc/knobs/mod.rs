//! jemalloc (tikv-jemallocator): decay, thread caches, purging and background threads at run time;
//! the start-up configuration as a typed [`JemallocConfig`].
//!
//! Every call first checks that the installed `Tracked` wraps `tikv_jemallocator::Jemalloc` and
//! returns [`TuneError::WrongBackend`] otherwise: a `mallctl` call on a process whose heap is
//! another allocator would initialise jemalloc as a second, unused allocator.
//!
//! Typed keys of tikv-jemalloc-ctl are used where it has them (`background_thread`,
//! `max_background_threads`, `arenas.narenas`, `opt.*`, `stats.*`), its raw layer elsewhere.
//!
//! # Example: a smaller thread cache on every tokio worker
//!
//! `thread.tcache.max` is per thread, so it has to be set on each worker as it starts:
//!
//! ```no_run
//! #[global_allocator]
//! static A: frag::Tracked<tikv_jemallocator::Jemalloc> = frag::Tracked::new(tikv_jemallocator::Jemalloc);
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let on_start = frag::tune::jemalloc::tcache_max_on_thread_start(16 << 10)?;
//!     let runtime = tokio::runtime::Builder::new_multi_thread().on_thread_start(on_start).build()?;
//!     runtime.block_on(async { /* ... */ });
//!     Ok(())
//! }
//! ```

mod conf;
mod controls;
mod effective;
pub(super) mod mallctl;
mod parse;
mod reclaim;

use std::sync::atomic::{AtomicBool, Ordering};

pub use conf::{CONF_CAPACITY, ConfBytes, JemallocConfig, MetadataThp, PercpuArena, Thp};
pub use effective::{ArenaDecay, Effective, effective};
pub use controls::{DecayKind, conf_env_var};
pub use parse::ConfError;
pub(crate) use reclaim::reclaim;

use controls::{PAGE, THREAD_TCACHE_ENABLED, THREAD_TCACHE_MAX, decay_from, require, tcache_max_range};
use mallctl::all_arenas;
use crate::backend::tuning::{DECAY_EXPECTED, Decay, Released, TuneError};

/// What [`set_decay`] changed, as read back from jemalloc.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DecayChange {
    /// The value now in force.
    pub decay: Decay,
    /// Existing arenas updated (every initialised arena).
    pub arenas_updated: usize,
    /// Arena slots not yet initialised; they will take `decay` from the default when created.
    pub arenas_uninitialised: usize,
}

/// The purge delay of arenas created from now on (`arenas.dirty_decay_ms` or `muzzy_decay_ms`):
/// what [`set_decay`] last set, or the start-up configuration's.
///
/// # Errors
///
/// [`TuneError::WrongBackend`] unless jemalloc is wrapped; jemalloc's refusal.
pub fn decay(kind: DecayKind) -> Result<Decay, TuneError> {
    require()?;
    decay_from(kind.leaf(), kind.defaults_key().read()?)
}

/// Sets a purge delay for every existing arena and as the default for arenas created later.
///
/// `arenas.dirty_decay_ms` alone only changes the default for future arenas; the arenas already
/// serving the program need `arena.<i>.dirty_decay_ms` each. This writes both and reads every value
/// back.
///
/// # Errors
///
/// [`TuneError::WrongBackend`] unless jemalloc is wrapped; [`TuneError::InvalidValue`] for a
/// fractional-millisecond or zero `After`; [`TuneError::ReadBack`] if an arena does not hold the value
/// afterwards.
///
/// # Example
///
/// ```no_run
/// # #[global_allocator]
/// # static A: frag::Tracked<tikv_jemallocator::Jemalloc> = frag::Tracked::new(tikv_jemallocator::Jemalloc);
/// use std::time::Duration;
/// use frag::tune::{Decay, jemalloc::{self, DecayKind}};
///
/// let change = jemalloc::set_decay(DecayKind::Dirty, Decay::After(Duration::from_secs(1)))?;
/// println!("{} arenas now purge after {}", change.arenas_updated, change.decay);
/// # Ok::<(), frag::tune::TuneError>(())
/// ```
pub fn set_decay(kind: DecayKind, decay: Decay) -> Result<DecayChange, TuneError> {
    require()?;
    let ms = decay.as_millis().and_then(|ms| isize::try_from(ms).ok()).ok_or_else(|| TuneError::InvalidValue {
        knob: kind.leaf(),
        value: format!("{decay:?}"),
        expected: DECAY_EXPECTED,
    })?;
    let defaults = kind.defaults_key();
    defaults.write(ms)?;
    let per_arena = kind.arena_key()?;
    let (narenas, initialised) = mallctl::arenas()?;
    let change = DecayChange {
        decay,
        arenas_updated: initialised.len(),
        arenas_uninitialised: narenas as usize - initialised.len(),
    };
    for i in initialised {
        per_arena.write(i, ms)?;
        let read = per_arena.read(i)?;
        if read != ms {
            return Err(TuneError::ReadBack {
                knob: format!("arena.{i}.{}", kind.leaf()),
                wrote: ms.to_string(),
                read: read.to_string(),
            });
        }
    }
    let read = defaults.read()?;
    if read != ms {
        return Err(TuneError::ReadBack {
            knob: format!("arenas.{}", kind.leaf()),
            wrote: ms.to_string(),
            read: read.to_string(),
        });
    }
    Ok(change)
}

/// The calling thread's thread-cache limit after [`set_thread_tcache_max`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TcacheMax {
    /// What was asked for, in bytes.
    pub requested: usize,
    /// What jemalloc uses: `requested` rounded up to a size class.
    pub effective: usize,
}

impl TcacheMax {
    /// jemalloc raised the value to the next size class.
    #[must_use]
    pub fn rounded_up(&self) -> bool {
        self.effective > self.requested
    }
}

/// The accepted range of a thread-cache limit, at run time as in [`JemallocConfig::tcache_max`].
const TCACHE_MAX_EXPECTED: &str = tcache_max_range!();

/// Refuses a thread-cache limit jemalloc would clip (above 8 pages, `TCACHE_MAXCLASS_LIMIT`).
fn check_tcache_max(knob: &'static str, bytes: usize) -> Result<(), TuneError> {
    let limit = PAGE.read()?.saturating_mul(8);
    if bytes > limit {
        return Err(TuneError::InvalidValue {
            knob,
            value: format!("{bytes} (this build allows 0 to {limit})"),
            expected: TCACHE_MAX_EXPECTED,
        });
    }
    Ok(())
}

/// Sets the largest size the **calling thread's** cache holds (`thread.tcache.max`).
///
/// Blocks above the limit go straight to the arena, which avoids the purge-and-refault cycle of
/// reference workloads with 16–32 KiB messages handed between two threads, and costs speed for
/// single-threaded churn of such sizes: measure both. Other threads keep their limit; use
/// [`tcache_max_on_thread_start`] for a runtime's workers. `opt.tcache_max` (the start-up default)
/// is read-only here; set it with [`JemallocConfig::tcache_max`].
///
/// A limit above 8 pages is refused, as [`JemallocConfig::tcache_max`] refuses it at compile time
/// (jemalloc would clip it); one between size classes is rounded up by jemalloc, and
/// [`TcacheMax::effective`] says to what.
///
/// # Errors
///
/// [`TuneError::InvalidValue`] above 8 pages (32 KiB); [`TuneError::WrongBackend`] unless jemalloc
/// is wrapped, or a `mallctl` failure.
pub fn set_thread_tcache_max(bytes: usize) -> Result<TcacheMax, TuneError> {
    require()?;
    check_tcache_max("thread.tcache.max", bytes)?;
    THREAD_TCACHE_MAX.write(bytes)?;
    Ok(TcacheMax { requested: bytes, effective: THREAD_TCACHE_MAX.read()? })
}

/// The calling thread's thread-cache limit in bytes.
///
/// # Errors
///
/// [`TuneError::WrongBackend`] unless jemalloc is wrapped, or a `mallctl` failure.
pub fn thread_tcache_max() -> Result<usize, TuneError> {
    require()?;
    THREAD_TCACHE_MAX.read()
}

/// A closure for `tokio::runtime::Builder::on_thread_start` (or any thread-spawn hook) that sets
/// `thread.tcache.max` on the thread it runs on.
///
/// The backend and the value are checked now, as [`set_thread_tcache_max`] checks them, so a
/// misconfiguration fails at start-up. A failure inside a worker (not expected) is logged once as a
/// `tracing` warning.
///
/// # Errors
///
/// [`TuneError::InvalidValue`] above 8 pages (32 KiB); [`TuneError::WrongBackend`] unless jemalloc
/// is wrapped.
pub fn tcache_max_on_thread_start(bytes: usize) -> Result<impl Fn() + Send + Sync + 'static, TuneError> {
    require()?;
    check_tcache_max("thread.tcache.max", bytes)?;
    static WARNED: AtomicBool = AtomicBool::new(false);
    Ok(move || {
        if let Err(e) = set_thread_tcache_max(bytes) {
            if !WARNED.swap(true, Ordering::Relaxed) {
                tracing::warn!(error = %e, bytes, "frag: could not set thread.tcache.max on a worker thread");
            }
        }
    })
}

/// Turns the calling thread's cache on or off (`thread.tcache.enabled`); returns the previous state.
///
/// # Errors
///
/// [`TuneError::WrongBackend`] unless jemalloc is wrapped, or a `mallctl` failure.
pub fn set_thread_tcache_enabled(enabled: bool) -> Result<bool, TuneError> {
    require()?;
    let before = THREAD_TCACHE_ENABLED.read()?;
    THREAD_TCACHE_ENABLED.write(enabled)?;
    Ok(before)
}

/// Returns every block in the calling thread's cache to its arena (`thread.tcache.flush`).
///
/// # Errors
///
/// [`TuneError::WrongBackend`] unless jemalloc is wrapped, or a `mallctl` failure (e.g. the
/// thread's cache is disabled).
pub fn flush_thread_tcache() -> Result<(), TuneError> {
    require()?;
    mallctl::call(b"thread.tcache.flush\0")
}

/// Tells jemalloc the calling thread goes idle (`thread.idle`): it flushes the thread's cache into
/// its arena and, by jemalloc's own heuristic, may purge that arena. What `frag::reclaim::idle` does
/// on jemalloc.
pub(crate) fn thread_idle() -> Result<(), TuneError> {
    require()?;
    mallctl::call(b"thread.idle\0")
}

/// jemalloc's resident and dirty figures around a purge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Purged {
    /// `stats.resident` before, in bytes.
    pub resident_before: u64,
    /// `stats.resident` after, in bytes.
    pub resident_after: u64,
}

impl Purged {
    /// Bytes of resident memory returned (zero if resident grew meanwhile).
    #[must_use]
    pub fn released(&self) -> u64 {
        self.resident_before.saturating_sub(self.resident_after)
    }
}

fn resident() -> Result<u64, TuneError> {
    mallctl::typed("epoch", tikv_jemalloc_ctl::epoch::advance())?;
    mallctl::typed("stats.resident", tikv_jemalloc_ctl::stats::resident::read()).map(|r| r as u64)
}

fn purge_arenas(leaf: &'static [u8]) -> Result<Purged, TuneError> {
    let resident_before = resident()?;
    mallctl::call(leaf)?;
    Ok(Purged { resident_before, resident_after: resident()? })
}

/// Purges every unused dirty and muzzy page of every arena now (`arena.<MALLCTL_ARENAS_ALL>.purge`),
/// whatever the decay settings. Blocks held in thread caches are not unused: call
/// [`flush_thread_tcache`] first on threads that hold many.
///
/// # Errors
///
/// [`TuneError::WrongBackend`] unless jemalloc is wrapped, or a `mallctl` failure.
pub fn purge_all() -> Result<Purged, TuneError> {
    require()?;
    purge_arenas(all_arenas!("arena", "purge"))
}

/// Purges, in every arena, the pages whose decay time has passed (`arena.<MALLCTL_ARENAS_ALL>.decay`):
/// what the background threads would do next, done now.
///
/// # Errors
///
/// [`TuneError::WrongBackend`] unless jemalloc is wrapped, or a `mallctl` failure.
pub fn decay_all() -> Result<Purged, TuneError> {
    require()?;
    purge_arenas(all_arenas!("arena", "decay"))
}

/// What `frag::tune::release_free_memory` does on jemalloc: flushes
/// the calling thread's cache and purges every arena, with the process's RSS around it.
pub(crate) fn release_free_memory() -> Result<Released, TuneError> {
    require()?;
    let mut result = Ok(());
    // jemalloc allocates its statistics on their first refresh (the purge reads them): that happens
    // before the window, so it does not count against what the purge releases.
    let _ = tikv_jemalloc_ctl::epoch::advance();
    let released = Released::around(|| {
        // A disabled thread cache cannot be flushed; purging still works.
        let _ = flush_thread_tcache();
        result = purge_all().map(drop);
    });
    result.map(|()| released)
}

/// Starts or stops jemalloc's background purging threads (`background_thread`); returns the
/// previous state.
///
/// # Errors
///
/// [`TuneError::WrongBackend`] unless jemalloc is wrapped, or a `mallctl` failure (jemalloc built
/// without background-thread support).
pub fn set_background_threads(enabled: bool) -> Result<bool, TuneError> {
    require()?;
    mallctl::typed("background_thread", tikv_jemalloc_ctl::background_thread::update(enabled))
}

/// Sets the largest number of background threads (`max_background_threads`, at least 1); returns
/// the previous value.
///
/// # Errors
///
/// [`TuneError::InvalidValue`] for 0 or more than the start-up option `max_background_threads`
/// allows (the CPU count unless set; jemalloc refuses anything above it);
/// [`TuneError::WrongBackend`] unless jemalloc is wrapped; a `mallctl` failure.
pub fn set_max_background_threads(n: usize) -> Result<usize, TuneError> {
    require()?;
    let ceiling = mallctl::Key::<usize>::new(b"opt.max_background_threads\0").read()?;
    if n == 0 || n > ceiling {
        return Err(TuneError::InvalidValue {
            knob: "max_background_threads",
            value: format!("{n} (this process allows 1 to {ceiling})"),
            expected: "between 1 and the start-up option max_background_threads (default: the CPU count)",
        });
    }
    mallctl::typed("max_background_threads", tikv_jemalloc_ctl::max_background_threads::update(n))
}
