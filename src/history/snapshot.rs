//! One round of the history: what a report says of where the resident bytes are and who holds them,
//! kept small; and two adjacent rounds merged into one.

use core::time::Duration;

use crate::backend::AllocatorStats;
use crate::backend::heap_split::Part;
use crate::report::Report;
use crate::stats::clock::splitmix64;

/// Sites a snapshot keeps: the report's listed ones (the most bytes in use, then the most pinned).
pub const SITES: usize = 13;
/// Scopes a snapshot keeps, the most bytes in use first.
pub const SCOPES: usize = 8;
/// Bytes of a scope's name a snapshot keeps (cut at a character boundary).
pub const SCOPE_NAME: usize = 48;
/// Size classes a snapshot keeps, the most free bytes in their slabs first.
pub const CLASSES: usize = 24;

/// The resident split of one round ([`Breakdown`](crate::report::diagnosis::Breakdown)'s parts).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Split {
    /// The process's resident bytes the split divides (the parts, and what none explains, add up
    /// to it).
    pub rss_bytes: u64,
    /// Bytes the program asked for and still holds.
    pub live_bytes: u64,
    /// What the allocator's size classes add to the live blocks.
    pub rounding_bytes: u64,
    /// frag's own live blocks (reports, symbolizing, profiles, this history).
    pub frag_bytes: u64,
    /// Free space in pages that also hold live blocks.
    pub holes_bytes: u64,
    /// Free pages the allocator could give back now.
    pub reclaimable_bytes: u64,
    /// The allocator's own bookkeeping.
    pub metadata_bytes: u64,
    /// Resident memory outside the heap (code, stacks, other mappings).
    pub outside_heap_bytes: u64,
}

impl Split {
    /// The bytes of `part`.
    #[must_use]
    pub fn bytes(&self, part: Part) -> u64 {
        match part {
            Part::Live => self.live_bytes,
            Part::Rounding => self.rounding_bytes,
            Part::Frag => self.frag_bytes,
            Part::Holes => self.holes_bytes,
            Part::Reclaimable => self.reclaimable_bytes,
            Part::Metadata => self.metadata_bytes,
            Part::OutsideHeap => self.outside_heap_bytes,
        }
    }
}

/// A site as a snapshot keeps it: the key of its stack, for finding it in other snapshots and for
/// naming it, and its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct SiteMark {
    /// A hash of the site's whole stack ([`SiteRow::stack`](crate::report::SiteRow::stack)): the
    /// same site has the same key in every snapshot of the process.
    pub key: u64,
    /// Estimated bytes in use ([`SiteRow::inuse_bytes`](crate::report::SiteRow::inuse_bytes)).
    pub inuse_bytes: u64,
    /// Estimated free bytes its blocks pin ([`SiteRow::pinned_bytes`](crate::report::SiteRow::pinned_bytes)).
    pub pinned_bytes: Option<u64>,
}

/// A scope as a snapshot keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct ScopeMark {
    /// Its name, at most [`SCOPE_NAME`] bytes; `None` for allocations made outside every scope.
    pub name: Option<Box<str>>,
    /// Estimated bytes in use.
    pub inuse_bytes: u64,
}

/// A size class's holes as a snapshot keeps them (the allocator's own classes: jemalloc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct ClassHoles {
    /// The class's block size.
    pub size: u64,
    /// Free bytes in its slabs.
    pub holes_bytes: u64,
}

/// One round of the [`History`](super::History), or several adjacent ones merged: the figures are
/// those of the last round it covers, with the lowest and highest resident bytes over all of them.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Snapshot {
    /// When the first round it covers was taken, on the history's clock (since the history began).
    #[cfg_attr(feature = "serde", serde(rename = "from_ms", serialize_with = "millis"))]
    pub from: Duration,
    /// When its last round was taken, on the same clock.
    #[cfg_attr(feature = "serde", serde(rename = "to_ms", serialize_with = "millis"))]
    pub to: Duration,
    /// Wall-clock time of its last round, in milliseconds since the Unix epoch.
    pub unix_ms: u64,
    /// How many rounds it covers.
    pub rounds: u32,
    /// Resident bytes at its last round, as the watch reads them (the allocator's figure where it
    /// has one, else the process's).
    pub rss_bytes: u64,
    /// The lowest resident bytes over its rounds.
    pub rss_low_bytes: u64,
    /// The highest resident bytes over its rounds.
    pub rss_high_bytes: u64,
    /// Tracked allocated bytes.
    pub allocated_bytes: u64,
    /// The resident split; `None` without a diagnosis (no `/proc`).
    pub split: Option<Split>,
    /// The allocator's own figures.
    pub allocator: Option<AllocatorStats>,
    /// The report's listed sites, at most [`SITES`].
    pub sites: Box<[SiteMark]>,
    /// The scopes holding the most, at most [`SCOPES`].
    pub scopes: Box<[ScopeMark]>,
    /// The size classes with the most free bytes in their slabs, at most [`CLASSES`], largest first.
    pub hole_classes: Box<[ClassHoles]>,
    /// Requested bytes freed so far (estimated), for the cross-thread share between two snapshots.
    pub freed_bytes: u64,
    /// Of them, bytes freed on another thread than the allocating one (estimated).
    pub cross_thread_bytes: u64,
    /// The memory limit and its target, in bytes, when a reclaimer keeps one.
    pub limit: Option<(u64, u64)>,
}

#[cfg(feature = "serde")]
pub(super) fn millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The key of a site's stack ([`SiteMark::key`]).
pub(crate) fn stack_key(stack: &[u64]) -> u64 {
    stack.iter().fold(0x9e37_79b9_7f4a_7c15 ^ stack.len() as u64, |h, &pc| splitmix64(h ^ pc))
}

/// `name` cut to at most `max` bytes, at a character boundary.
pub(super) fn cut(name: &str, max: usize) -> Box<str> {
    let mut end = name.len().min(max);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].into()
}

impl Snapshot {
    /// The snapshot of `report`, taken at `at` on the history's clock and `unix_ms` on the wall
    /// clock; `None` when the report has no resident figure.
    #[must_use]
    pub fn of(report: &Report, at: Duration, unix_ms: u64) -> Option<Self> {
        let rss = report.resident_bytes()?;
        let split = report.diagnosis.as_ref().map(|d| {
            let b = &d.breakdown;
            Split {
                rss_bytes: b.rss_bytes,
                live_bytes: b.live_bytes,
                rounding_bytes: b.rounding_bytes,
                frag_bytes: b.frag_bytes,
                holes_bytes: b.holes_bytes,
                reclaimable_bytes: b.reclaimable_bytes,
                metadata_bytes: b.metadata_bytes,
                outside_heap_bytes: b.outside_heap_bytes,
            }
        });
        let sites = report.sites.as_ref().map_or(Box::default(), |s| {
            s.top
                .iter()
                .take(SITES)
                .map(|row| SiteMark {
                    key: stack_key(&row.stack),
                    inuse_bytes: row.inuse_bytes,
                    pinned_bytes: row.pinned_bytes,
                })
                .collect()
        });
        let scopes = report.scopes.as_ref().map_or(Box::default(), |s| {
            let mut rows: Vec<_> = s.rows.iter().collect();
            rows.sort_by_key(|r| core::cmp::Reverse(r.inuse_bytes));
            rows.iter()
                .take(SCOPES)
                .map(|r| ScopeMark { name: r.name.as_deref().map(|n| cut(n, SCOPE_NAME)), inuse_bytes: r.inuse_bytes })
                .collect()
        });
        let mut classes: Vec<_> = report
            .allocator_classes
            .iter()
            .map(|c| ClassHoles { size: c.size, holes_bytes: c.free_in_slabs() })
            .filter(|c| c.holes_bytes > 0)
            .collect();
        classes.sort_by_key(|c| core::cmp::Reverse(c.holes_bytes));
        classes.truncate(CLASSES);
        let (freed_bytes, cross_thread_bytes) =
            report.origin.as_ref().map_or((0, 0), |o| (o.freed_bytes, o.cross_thread_bytes));
        Some(Self {
            from: at,
            to: at,
            unix_ms,
            rounds: 1,
            rss_bytes: rss,
            rss_low_bytes: rss,
            rss_high_bytes: rss,
            allocated_bytes: report.tracked.allocated_bytes,
            split,
            allocator: report.allocator,
            sites,
            scopes,
            hole_classes: classes.into_boxed_slice(),
            freed_bytes,
            cross_thread_bytes,
            limit: crate::report::diagnosis::limit_in_force(),
        })
    }

    /// `self` and the next snapshot after it as one: the later one's figures, over both spans.
    pub(super) fn merge(self, later: Self) -> Self {
        Self {
            from: self.from,
            rounds: self.rounds.saturating_add(later.rounds),
            rss_low_bytes: self.rss_low_bytes.min(later.rss_low_bytes),
            rss_high_bytes: self.rss_high_bytes.max(later.rss_high_bytes),
            ..later
        }
    }

    /// A round at `at` seconds of `rss` resident bytes and `allocated` live ones, with nothing
    /// else: what the unit tests build on.
    #[cfg(test)]
    pub(super) fn bare(at: u64, rss: u64, allocated: u64) -> Self {
        Self {
            from: Duration::from_secs(at),
            to: Duration::from_secs(at),
            unix_ms: at * 1000,
            rounds: 1,
            rss_bytes: rss,
            rss_low_bytes: rss,
            rss_high_bytes: rss,
            allocated_bytes: allocated,
            split: None,
            allocator: None,
            sites: Box::default(),
            scopes: Box::default(),
            hole_classes: Box::default(),
            freed_bytes: 0,
            cross_thread_bytes: 0,
            limit: None,
        }
    }

    /// The heap bytes this snapshot holds beyond its own size.
    pub(super) fn heap_bytes(&self) -> usize {
        let names: usize = self.scopes.iter().filter_map(|s| s.name.as_ref()).map(|n| n.len()).sum();
        size_of_val(&*self.sites) + size_of_val(&*self.scopes) + size_of_val(&*self.hole_classes) + names
    }

    /// The most heap bytes a snapshot can hold beyond its own size: the bound the module states.
    pub(super) const MAX_HEAP_BYTES: usize = SITES * size_of::<SiteMark>()
        + SCOPES * (size_of::<ScopeMark>() + SCOPE_NAME)
        + CLASSES * size_of::<ClassHoles>();
}
