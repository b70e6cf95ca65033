//! How far Go's debug endpoints let a caller go: the longest delta profile, how many wait at once,
//! how many addresses one `/debug/pprof/symbol` request names, how long a request waits for the
//! symbolizer, and what profiles leave out. One setting for the process, as the sampling is.

use core::fmt;
use std::time::Duration;

use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// The limits of Go's debug endpoints ([`go_answer`](super::go_answer),
/// [`symbol_answer`](super::symbol_answer), `http::handle` and
/// `http::serve` (feature `tokio`)), for the whole process: read them with [`serving`], change
/// them with [`set_serving`]. Each bounds what one caller can make the service spend: threads and
/// time in delta waits, CPU and memory in the symbolizer.
///
/// # Example
///
/// ```
/// let mut s = frag::profile::serving();
/// s.max_seconds = 30; // a proxy in front of the debug listener times out at 35 s
/// s.redacted = true; // the profiles go to a vendor: no tenant names, no build IDs
/// frag::profile::set_serving(s)?;
/// assert_eq!(frag::profile::serving().max_seconds, 30);
/// # Ok::<(), frag::profile::ServingError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Serving {
    /// The longest `?seconds=N` a delta profile takes; a longer one is refused with 400, naming it.
    /// Default 60, accepted [`Serving::MAX_SECONDS`]. Go refuses a delta at or above the server's
    /// write timeout: keep it below the timeout of whatever stands between the client and the
    /// service.
    pub max_seconds: u64,
    /// How many delta profiles wait at once in the process; another is refused with 429 and a
    /// `Retry-After` for the first of them to end. Default 1 (Go runs one CPU profile at a time),
    /// accepted [`Serving::DELTA_WAITS`]; 0 refuses every delta profile (400).
    pub delta_waits: usize,
    /// The most addresses one `/debug/pprof/symbol` request names; a request with more is refused
    /// with 413, naming the limit. Default 65,536: `go tool pprof` asks for every unnamed location of
    /// a profile's mapping at once, and a profile has at most 4096 sites (16 distinct frames each).
    /// Accepted [`Serving::SYMBOL_ADDRESSES`].
    pub symbol_addresses: usize,
    /// How long a request that needs the symbolizer waits for another one's turn to end (one
    /// symbolizes at a time) before it is refused with 503 and a `Retry-After`. Default 2 s,
    /// accepted up to [`Serving::MAX_SYMBOLIZER_WAIT`].
    pub symbolizer_wait: Duration,
    /// Every profile frag builds (served, and [`heap_pprof`](super::heap_pprof)) leaves out the
    /// `scope` labels (often tenant names) and the mappings' build IDs (which name the exact build,
    /// and with the mappings' addresses its layout in memory). Default off: profilers such as Parca
    /// and Grafana Alloy symbolize by build ID, and need [`GoQuery::symbolize`](super::GoQuery::symbolize)
    /// then.
    pub redacted: bool,
}

impl Serving {
    /// The accepted [`max_seconds`](Self::max_seconds).
    pub const MAX_SECONDS: core::ops::RangeInclusive<u64> = 1..=3600;
    /// The accepted [`delta_waits`](Self::delta_waits).
    pub const DELTA_WAITS: core::ops::RangeInclusive<usize> = 0..=MAX_DELTA_WAITS;
    /// The accepted [`symbol_addresses`](Self::symbol_addresses).
    pub const SYMBOL_ADDRESSES: core::ops::RangeInclusive<usize> = 1..=1 << 20;
    /// The longest accepted [`symbolizer_wait`](Self::symbolizer_wait).
    pub const MAX_SYMBOLIZER_WAIT: Duration = Duration::from_secs(60);

    const DEFAULT: Self = Self {
        max_seconds: 60,
        delta_waits: 1,
        symbol_addresses: 1 << 16,
        symbolizer_wait: Duration::from_secs(2),
        redacted: false,
    };

    fn check(&self) -> Result<(), ServingError> {
        let bad = |setting, value: String, accepted| Err(ServingError { setting, value, accepted });
        if !Self::MAX_SECONDS.contains(&self.max_seconds) {
            return bad("max_seconds", self.max_seconds.to_string(), "1 to 3600");
        }
        if !Self::DELTA_WAITS.contains(&self.delta_waits) {
            return bad("delta_waits", self.delta_waits.to_string(), "0 to 64");
        }
        if !Self::SYMBOL_ADDRESSES.contains(&self.symbol_addresses) {
            return bad("symbol_addresses", self.symbol_addresses.to_string(), "1 to 1048576");
        }
        if self.symbolizer_wait > Self::MAX_SYMBOLIZER_WAIT {
            return bad("symbolizer_wait", format!("{:?}", self.symbolizer_wait), "at most 60 s");
        }
        Ok(())
    }
}

impl Default for Serving {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The most delta waits [`Serving::delta_waits`] allows: the admission's slots.
pub(super) const MAX_DELTA_WAITS: usize = 64;

/// A [`Serving`] value out of its range.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServingError {
    /// The field's name.
    pub setting: &'static str,
    /// The value given.
    pub value: String,
    /// What the field accepts.
    pub accepted: &'static str,
}

impl fmt::Display for ServingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Serving::{} = {}: expected {}", self.setting, self.value, self.accepted)
    }
}

impl std::error::Error for ServingError {}

static MAX_SECONDS: AtomicU64 = AtomicU64::new(Serving::DEFAULT.max_seconds);
static DELTA_WAITS: AtomicUsize = AtomicUsize::new(Serving::DEFAULT.delta_waits);
static SYMBOL_ADDRESSES: AtomicUsize = AtomicUsize::new(Serving::DEFAULT.symbol_addresses);
static SYMBOLIZER_WAIT_MS: AtomicU64 = AtomicU64::new(Serving::DEFAULT.symbolizer_wait.as_millis() as u64);
static REDACTED: AtomicBool = AtomicBool::new(Serving::DEFAULT.redacted);

/// The endpoints' limits in effect.
#[must_use]
pub fn serving() -> Serving {
    Serving {
        max_seconds: MAX_SECONDS.load(Ordering::Relaxed),
        delta_waits: DELTA_WAITS.load(Ordering::Relaxed),
        symbol_addresses: SYMBOL_ADDRESSES.load(Ordering::Relaxed),
        symbolizer_wait: Duration::from_millis(SYMBOLIZER_WAIT_MS.load(Ordering::Relaxed)),
        redacted: REDACTED.load(Ordering::Relaxed),
    }
}

/// Sets the endpoints' limits for the process, from the next request on (a delta profile already
/// waiting keeps its length).
///
/// # Errors
///
/// [`ServingError`], naming the field out of range and what it accepts; nothing is changed then.
pub fn set_serving(s: Serving) -> Result<(), ServingError> {
    s.check()?;
    MAX_SECONDS.store(s.max_seconds, Ordering::Relaxed);
    DELTA_WAITS.store(s.delta_waits, Ordering::Relaxed);
    SYMBOL_ADDRESSES.store(s.symbol_addresses, Ordering::Relaxed);
    SYMBOLIZER_WAIT_MS.store(s.symbolizer_wait.as_millis() as u64, Ordering::Relaxed);
    REDACTED.store(s.redacted, Ordering::Relaxed);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each field's bounds, against the ranges the docs state: the value just inside is taken, the
    /// one just outside refused by name, and a refusal changes nothing.
    #[test]
    fn each_limit_is_checked_against_its_range() {
        let with = |f: fn(&mut Serving)| {
            let mut s = Serving::default();
            f(&mut s);
            s.check().map_err(|e| e.setting)
        };
        assert_eq!(with(|s| s.max_seconds = 3600), Ok(()));
        assert_eq!(with(|s| s.max_seconds = 0), Err("max_seconds"));
        assert_eq!(with(|s| s.max_seconds = 3601), Err("max_seconds"));
        assert_eq!(with(|s| s.delta_waits = 0), Ok(()));
        assert_eq!(with(|s| s.delta_waits = 65), Err("delta_waits"));
        assert_eq!(with(|s| s.symbol_addresses = 0), Err("symbol_addresses"));
        assert_eq!(with(|s| s.symbol_addresses = 1 << 20), Ok(()));
        assert_eq!(with(|s| s.symbolizer_wait = Duration::from_millis(60_001)), Err("symbolizer_wait"));
        let before = serving();
        let e = set_serving(Serving { max_seconds: 0, ..before }).unwrap_err();
        assert_eq!(e.to_string(), "Serving::max_seconds = 0: expected 1 to 3600");
        assert_eq!(serving(), before);
    }
}
