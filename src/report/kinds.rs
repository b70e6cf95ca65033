//! The report's typed labels: what its ratio was computed from, and the warnings a reader needs to
//! interpret it.

use core::fmt;

/// The figures [`Fragmentation::ratio`](crate::Fragmentation::ratio) was computed from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum RatioInputs {
    /// The allocator's own resident and allocated bytes (jemalloc).
    Allocator,
    /// Process RSS and tracked usable bytes: every backend without both allocator figures.
    Process,
}

impl fmt::Display for RatioInputs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Allocator => "allocator resident vs allocator allocated",
            Self::Process => "process rss_bytes vs tracked usable_bytes",
        })
    }
}

/// Something the reader should know to interpret a report: what is missing from it, or why a figure
/// is not shown. Configuration traps appear here and as
/// [`FindingKind::ConfigTrap`](crate::FindingKind::ConfigTrap) findings.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Warning {
    /// What the warning is about.
    pub kind: WarningKind,
    /// One sentence with the figures and what to do.
    pub message: String,
}

impl Warning {
    pub(crate) fn new(kind: WarningKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// The kinds of [`Warning`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum WarningKind {
    /// No `Tracked` allocator has allocated: every count is zero.
    NotInstalled,
    /// The allocator's own statistics could not be read (or were skipped on a re-entered report).
    AllocatorStats,
    /// `FRAG_ALLOCATOR` named no backend of this build and [`Select`](crate::Select) fell back.
    SelectFallback,
    /// Too little live data for a fragmentation ratio to mean anything.
    SmallHeap,
    /// More threads than per-thread shards: some are counted together.
    PoolFull,
    /// Origin samples were lost because the side table was full.
    DroppedSamples,
    /// A configuration trap ([`tune::Trap`](crate::tune::Trap)).
    ConfigTrap,
    /// The `Tracked` was configured with an invalid sampling rate and uses the default.
    InvalidSampling,
    /// Allocation sites are sampled but have no stacks: the build has no frame pointers.
    NoFramePointers,
    /// Stacks were lost because the site table was full.
    DroppedSites,
    /// The sampled tier runs with sampling off: only a thread's allocated bytes are known; counts,
    /// frees, per-class and live figures are not estimated.
    UnsampledTier,
}
