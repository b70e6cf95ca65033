//! A finding: what it is about, how serious, the bytes it explains and what to change.

/// What a [`Finding`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum FindingKind {
    /// Most resident memory is live data: not a fragmentation problem.
    LiveData,
    /// Size-class rounding wastes a large share of live usable bytes.
    Rounding,
    /// Much free space is trapped in pages that hold live blocks.
    Holes,
    /// The allocator holds many free pages it could return now.
    Reclaimable,
    /// A large share of freed bytes was freed on another thread than the allocating one.
    CrossThread,
    /// The allocator's bookkeeping is a large share of resident memory.
    Metadata,
    /// Much of resident memory is not the heap.
    OutsideHeap,
    /// An allocator setting that does not do what it seems to.
    ConfigTrap,
    /// What the heap cannot release (live data, rounding, holes, the allocator's bookkeeping) exceeds
    /// the soft memory limit's target: no reclaimer can keep RSS under it.
    OverLimit,
    /// Resident memory stepped up to a new plateau lately, and what moved it, part by part (the
    /// publisher's watch and the history explain each step; the finding stays an hour).
    Step,
}

impl FindingKind {
    /// Every kind.
    pub const ALL: [FindingKind; 10] = [
        FindingKind::LiveData,
        FindingKind::Rounding,
        FindingKind::Holes,
        FindingKind::Reclaimable,
        FindingKind::CrossThread,
        FindingKind::Metadata,
        FindingKind::OutsideHeap,
        FindingKind::ConfigTrap,
        FindingKind::OverLimit,
        FindingKind::Step,
    ];

    /// The kind's name as in the JSON report.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            FindingKind::LiveData => "live_data",
            FindingKind::Rounding => "rounding",
            FindingKind::Holes => "holes",
            FindingKind::Reclaimable => "reclaimable",
            FindingKind::CrossThread => "cross_thread",
            FindingKind::Metadata => "metadata",
            FindingKind::OutsideHeap => "outside_heap",
            FindingKind::ConfigTrap => "config_trap",
            FindingKind::OverLimit => "over_limit",
            FindingKind::Step => "step",
        }
    }
}

/// How much a [`Finding`] matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum Severity {
    /// Context: worth knowing, nothing to fix.
    Info,
    /// Explains a large part of resident memory, or is a known cause of growth: act on it.
    Warn,
}

/// One thing the report found, with what to do about it on this backend.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Finding {
    /// What it is about.
    pub kind: FindingKind,
    /// How much it matters.
    pub severity: Severity,
    /// Resident bytes the finding explains; for `reclaimable`, what applying the remedy releases.
    pub bytes: u64,
    /// Whether `bytes` is an estimate (from estimated buckets or sampled origin figures).
    pub estimated: bool,
    /// One sentence with the figures.
    pub summary: String,
    /// What to change, on this backend.
    pub remedy: String,
}
