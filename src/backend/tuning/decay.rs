//! How long an allocator waits before returning freed pages to the OS.

use core::fmt;
use core::time::Duration;

/// A purge delay: how long freed pages may stay resident before the allocator returns them.
///
/// Used for jemalloc's `dirty_decay_ms` / `muzzy_decay_ms` and mimalloc's `purge_delay`. Allocators
/// count in whole milliseconds, so `After` takes a whole, non-zero number of them.
///
/// ```
/// use std::time::Duration;
/// use frag::tune::Decay;
///
/// assert_eq!(Decay::from_millis(-1), Some(Decay::Disabled));
/// assert_eq!(Decay::from_millis(0), Some(Decay::Immediate));
/// assert_eq!(Decay::from_millis(1000), Some(Decay::After(Duration::from_secs(1))));
/// assert_eq!(Decay::After(Duration::from_secs(10)).as_millis(), Some(10_000));
/// assert_eq!(Decay::After(Duration::from_micros(1500)).as_millis(), None); // not whole ms
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Decay {
    /// Never purge (jemalloc `-1`, mimalloc `-1`).
    Disabled,
    /// Purge as soon as pages become unused (`0`): the least resident memory, the most `madvise`
    /// calls and page faults.
    Immediate,
    /// Purge pages unused for this long (jemalloc's default is 10 s, mimalloc's 10 ms).
    After(Duration),
}

impl Decay {
    /// The largest delay jemalloc accepts, in milliseconds (its nanosecond clock's range).
    pub const MAX_MILLIS: i64 = 18_446_744_072_000;

    /// The allocator's integer form: `-1`, `0` or whole milliseconds; `None` if `After` holds zero,
    /// a fraction of a millisecond, or more than [`MAX_MILLIS`](Self::MAX_MILLIS).
    #[must_use]
    pub const fn as_millis(self) -> Option<i64> {
        match self {
            Self::Disabled => Some(-1),
            Self::Immediate => Some(0),
            Self::After(d) => {
                if d.subsec_nanos() % 1_000_000 != 0 || d.is_zero() || d.as_millis() > Self::MAX_MILLIS as u128 {
                    None
                } else {
                    Some(d.as_millis() as i64)
                }
            }
        }
    }

    /// The decay an allocator's integer means; `None` below `-1` or above
    /// [`MAX_MILLIS`](Self::MAX_MILLIS).
    #[must_use]
    pub const fn from_millis(ms: i64) -> Option<Self> {
        match ms {
            -1 => Some(Self::Disabled),
            0 => Some(Self::Immediate),
            1..=Self::MAX_MILLIS => Some(Self::After(Duration::from_millis(ms as u64))),
            _ => None,
        }
    }
}

impl fmt::Display for Decay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Disabled => f.write_str("disabled"),
            Self::Immediate => f.write_str("immediate"),
            Self::After(d) => write!(f, "{d:?}"),
        }
    }
}

/// The accepted decays, in words, as a literal (so that `concat!` can prefix it at compile time).
macro_rules! decay_range {
    () => {
        "Disabled, Immediate, or After(whole milliseconds from 1 ms to Decay::MAX_MILLIS = 18446744072000 ms)"
    };
}
pub(crate) use decay_range;

/// The accepted decays, in words: every refusal of one names them.
pub(crate) const DECAY_EXPECTED: &str = decay_range!();
