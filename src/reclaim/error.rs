//! Why a reclaimer cannot run.

use super::limit::{self, LimitError};
use crate::backend::tuning::TuneError;

/// Why a reclaimer cannot run.
#[derive(Debug)]
#[non_exhaustive]
pub enum ReclaimError {
    /// A setting is out of range.
    InvalidSetting {
        /// The setting.
        setting: &'static str,
        /// The value given, as text.
        value: String,
        /// The accepted values.
        expected: &'static str,
    },
    /// No allocator to act on: no `Tracked` installed ([`TuneError::NotInstalled`]), or one that
    /// cannot return memory on request ([`TuneError::Unsupported`]: snmalloc, a user's allocator).
    Backend(TuneError),
    /// The memory limit was refused: `FRAG_MEMORY_LIMIT`'s text (`from_env`), or a limit given that
    /// cannot be resolved on this machine.
    Limit {
        /// Whether the limit came from `FRAG_MEMORY_LIMIT`.
        from_env: bool,
        /// Why it was refused.
        error: LimitError,
    },
    /// A spawned reclaimer is already running in this process.
    AlreadyRunning,
    /// The thread could not be spawned.
    Spawn(std::io::Error),
}

impl core::fmt::Display for ReclaimError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::InvalidSetting { setting, value, expected } => {
                write!(f, "reclaimer setting {setting} = {value}: expected {expected}")
            }
            Self::Backend(e) => write!(f, "the reclaimer has nothing to act on: {e}"),
            Self::Limit { from_env: true, error } => write!(f, "{}: {error}", limit::ENV_VAR),
            Self::Limit { from_env: false, error } => error.fmt(f),
            Self::AlreadyRunning => f.write_str("a reclaimer is already running in this process"),
            Self::Spawn(e) => write!(f, "spawning the reclaimer thread: {e}"),
        }
    }
}

impl std::error::Error for ReclaimError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Backend(e) => Some(e),
            Self::Spawn(e) => Some(e),
            Self::Limit { error, .. } => Some(error),
            _ => None,
        }
    }
}
