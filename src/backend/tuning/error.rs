//! Typed errors for every tuning call.

use core::fmt;

use crate::backend::list::Backend;
use crate::backend::wrapped::WrappedBackend;

/// Why a tuning call did not do what was asked.
///
/// Nothing in `frag::tune` panics on bad input: every refusal is one of these, with enough
/// detail to act on.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TuneError {
    /// No `Tracked` allocator is installed (or it has not allocated yet), so there is no allocator
    /// to tune. The call did nothing.
    NotInstalled {
        /// The knob asked for.
        knob: &'static str,
    },
    /// The knob belongs to another allocator than the one `Tracked` wraps. The call did nothing (in
    /// particular it did not initialise a second allocator).
    WrongBackend {
        /// The allocator the knob belongs to.
        wanted: Backend,
        /// The allocator the installed `Tracked` wraps.
        installed: WrappedBackend,
    },
    /// The wrapped allocator has no such knob.
    Unsupported {
        /// The allocator.
        backend: WrappedBackend,
        /// The knob asked for.
        knob: &'static str,
        /// What to do instead, if anything.
        hint: &'static str,
    },
    /// The value is outside the range the allocator accepts (checked before the allocator sees it:
    /// several allocators accept nonsense silently).
    InvalidValue {
        /// The knob.
        knob: &'static str,
        /// The value given, as text.
        value: String,
        /// The accepted values.
        expected: &'static str,
    },
    /// The value is accepted by the allocator but known to misbehave when set this way.
    Refused {
        /// The knob.
        knob: &'static str,
        /// What goes wrong and what to do instead.
        reason: &'static str,
    },
    /// jemalloc's `mallctl` returned an error.
    Mallctl {
        /// The mallctl name.
        name: String,
        /// jemalloc's error, in words.
        message: String,
    },
    /// The value was written but reading it back gave something else.
    ReadBack {
        /// The knob.
        knob: String,
        /// What was written.
        wrote: String,
        /// What was read back.
        read: String,
    },
}

impl fmt::Display for TuneError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotInstalled { knob } => write!(
                f,
                "{knob}: no Tracked allocator is installed (install frag::Tracked with #[global_allocator]): nothing \
                 was changed"
            ),
            Self::WrongBackend { wanted, installed } => {
                write!(f, "{wanted} knob, but the installed Tracked allocator wraps {installed}: nothing was changed")
            }
            Self::Unsupported { backend, knob, hint } => {
                write!(f, "{backend} has no {knob} knob")?;
                if !hint.is_empty() {
                    write!(f, " ({hint})")?;
                }
                Ok(())
            }
            Self::InvalidValue { knob, value, expected } => {
                write!(f, "invalid value {value:?} for {knob}: expected {expected}")
            }
            Self::Refused { knob, reason } => write!(f, "refused to set {knob}: {reason}"),
            Self::Mallctl { name, message } => write!(f, "mallctl {name:?} failed: {message}"),
            Self::ReadBack { knob, wrote, read } => write!(f, "{knob}: wrote {wrote} but read back {read}"),
        }
    }
}

impl std::error::Error for TuneError {}
