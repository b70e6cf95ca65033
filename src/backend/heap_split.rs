//! The vocabulary of the diagnosis's heap split, which each backend fills from its own figures
//! ([`KnownIntrospect::split_heap`](super::introspect::KnownIntrospect::split_heap)): the buckets, how a
//! figure was obtained, and why a bucket is not split. Public as `frag::report::diagnosis::*`.

use core::fmt;

use super::list::Backend;

/// How a bucket's figure was obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum Source {
    /// Counted: by `frag` itself or by the allocator's statistics of resident pages.
    Measured,
    /// Derived from figures that are not quite resident bytes (glibc's free-chunk totals are address
    /// space, resident or not): right in order of magnitude, not to the page.
    Estimated,
    /// The backend cannot tell this bucket apart: its bytes are in another bucket (see
    /// `report::diagnosis::Breakdown::not_split`) or in `unexplained`.
    NotSplit,
}

/// One bucket of the `report::diagnosis::Breakdown`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum Part {
    /// Requested bytes of live blocks.
    Live,
    /// Usable minus requested bytes of live blocks (internal fragmentation).
    Rounding,
    /// Usable bytes of frag's own live blocks (reports, symbolizing, profiles, its threads).
    Frag,
    /// Free space in pages that hold live blocks.
    Holes,
    /// Free whole pages the allocator holds and could return now.
    Reclaimable,
    /// The allocator's own bookkeeping.
    Metadata,
    /// Resident memory the allocator does not account for.
    OutsideHeap,
}

impl Part {
    /// Every part, in breakdown order.
    pub const ALL: [Part; 7] =
        [Part::Live, Part::Rounding, Part::Frag, Part::Holes, Part::Reclaimable, Part::Metadata, Part::OutsideHeap];

    /// The bucket's name as in the JSON report, without `_bytes`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Part::Live => "live",
            Part::Rounding => "rounding",
            Part::Frag => "frag",
            Part::Holes => "holes",
            Part::Reclaimable => "reclaimable",
            Part::Metadata => "metadata",
            Part::OutsideHeap => "outside_heap",
        }
    }
}

/// Why the breakdown leaves a bucket unsplit, and where its bytes are instead.
///
/// Prints, and serialises (feature `serde`), as that sentence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NotSplit {
    /// The backend's statistics could not be read, or lack a figure the split needs: holes,
    /// reclaimable and metadata are in `unexplained`.
    NoStatistics(Backend),
    /// The allocator gives no figure of resident memory at all (`None`: an allocator `frag` does not
    /// know): holes, reclaimable, metadata and outside-heap bytes are in `unexplained`.
    NoResidentFigures(Option<Backend>),
    /// glibc's `malloc_info` failed: whole free pages inside free chunks are counted in holes.
    GlibcMallocInfo,
    /// mimalloc's commit figure does not tell free pages or bookkeeping apart: they are in holes.
    MimallocCommitted,
    /// A [`Introspect`](crate::Introspect)'s statistics lack the figure of this bucket: it is in
    /// `unexplained`.
    ProbeLacks(Part),
}

impl fmt::Display for NotSplit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoStatistics(b) => {
                write!(f, "{b} statistics unavailable or incomplete: holes, reclaimable, metadata in unexplained")
            }
            Self::NoResidentFigures(b) => write!(
                f,
                "{} reports no resident figures: holes, reclaimable, metadata and outside_heap in unexplained",
                b.map_or("this allocator", Backend::name)
            ),
            Self::GlibcMallocInfo => {
                f.write_str("glibc: malloc_info failed: whole free pages inside free chunks are counted in holes")
            }
            Self::MimallocCommitted => {
                f.write_str("mimalloc: reclaimable and metadata are counted in holes (committed - usable)")
            }
            Self::ProbeLacks(part) => {
                let figure = match part {
                    Part::Holes => "active",
                    Part::Reclaimable => "dirty",
                    Part::OutsideHeap => "resident",
                    _ => part.name(),
                };
                write!(f, "the `Introspect` gives no {figure} ({}): in unexplained", part.name())
            }
        }
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for NotSplit {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// What a backend's figures say about the heap's resident bytes: each bucket's bytes and how they
/// were obtained (`(0, NotSplit)` for one it cannot tell apart).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HeapSplit {
    /// Free space inside pages that hold live blocks.
    pub(crate) holes: (u64, Source),
    /// Free pages the backend could return now.
    pub(crate) reclaimable: (u64, Source),
    /// The backend's own bookkeeping.
    pub(crate) metadata: (u64, Source),
    /// All the heap holds resident, if the backend says: the rest of RSS is outside the heap.
    pub(crate) accounted: Option<(u64, Source)>,
    /// The buckets the figures do not split.
    pub(crate) not_split: Vec<NotSplit>,
}

impl HeapSplit {
    /// A split that says nothing, for the reason `why`.
    pub(crate) fn nothing(why: NotSplit) -> Self {
        let none = (0, Source::NotSplit);
        Self { holes: none, reclaimable: none, metadata: none, accounted: None, not_split: vec![why] }
    }
}
