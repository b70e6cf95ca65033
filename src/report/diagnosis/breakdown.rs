//! Where the resident bytes go: the process's RSS split into buckets that add up to it exactly.
//!
//! Each backend splits what its own interfaces can tell apart; whatever it cannot is left in one
//! bucket and named in [`Breakdown::not_split`], never guessed. The last bucket, `unexplained`, is RSS
//! minus all others (signed), so the sum is exact by construction.
//!
//! | bucket | jemalloc | glibc | mimalloc | snmalloc; others with its `Introspect`'s figures |
//! |---|---|---|---|---|
//! | live, rounding, frag | tracked | tracked | tracked | tracked |
//! | holes | `active` − tracked usable | free chunks − reclaimable (estimated) | committed (at most anonymous RSS) − tracked usable (with reclaimable and metadata, not split) | not split; the `Introspect`'s `active` − tracked usable |
//! | reclaimable | dirty + muzzy pages, less what jemalloc counts resident above anonymous RSS | `keepcost` + whole pages in free chunks (`malloc_info`), at most anonymous RSS − chunks in use − thread arenas' tops (estimated) | not split | not split; the `Introspect`'s `dirty` |
//! | metadata | `stats.metadata` | in-use chunks − tracked usable (chunk headers, C code's blocks) | not split | not split; the `Introspect`'s `metadata` |
//! | outside heap | RSS − `stats.resident` (capped at anonymous RSS) | RSS − heap − mmapped blocks (capped at anonymous RSS; estimated) | RSS − committed (capped at anonymous RSS) | not split; RSS − the `Introspect`'s `resident` |

use crate::backend::heap_split::{HeapSplit, NotSplit, Part, Source};
use crate::backend::introspect::KnownIntrospect;
use crate::backend::list::with_backend;
use crate::backend::{AllocatorStats, Backend};
use crate::report::figures::HeapCounts;

/// Resident memory split into buckets that sum to [`rss_bytes`](Breakdown::rss_bytes) exactly:
/// `live + rounding + frag + holes + reclaimable + metadata + outside_heap + unexplained = rss`.
///
/// ```no_run
/// # #[global_allocator]
/// # static A: frag::Tracked<std::alloc::System> = frag::Tracked::new(std::alloc::System);
/// if let Some(d) = frag::report().diagnosis {
///     let b = &d.breakdown;
///     println!("live {} MiB, reclaimable {} MiB of {} MiB resident", b.live_bytes >> 20, b.reclaimable_bytes >> 20, b.rss_bytes >> 20);
/// }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Breakdown {
    /// The process's resident set the buckets add up to (`/proc/self/statm`).
    pub rss_bytes: u64,
    /// Requested bytes of live blocks (tracked, exact).
    pub live_bytes: u64,
    /// Usable minus requested bytes over live blocks: internal fragmentation (tracked).
    pub rounding_bytes: u64,
    /// Usable bytes of frag's own live blocks (see [`FragItself`](crate::report::FragItself)): counted apart
    /// from `live_bytes` and `rounding_bytes`, which are the program's.
    pub frag_bytes: u64,
    /// Free space inside pages the allocator keeps for live blocks, including free blocks parked in
    /// thread caches: it cannot be returned while those blocks live.
    pub holes_bytes: u64,
    /// Free whole pages the allocator still holds and could return now (what a purge or
    /// `malloc_trim` releases).
    pub reclaimable_bytes: u64,
    /// The allocator's own bookkeeping.
    pub metadata_bytes: u64,
    /// Resident memory the allocator does not account for: stacks, code, other libraries' mappings
    /// and heaps.
    pub outside_heap_bytes: u64,
    /// RSS minus all of the above: negative when buckets overlap (e.g. allocator figures that count
    /// pages never touched).
    pub unexplained_bytes: i64,
    /// How each bucket's figure was obtained.
    pub sources: Sources,
    /// Buckets this backend cannot split, each with where its bytes are instead.
    pub not_split: Vec<NotSplit>,
}

impl Breakdown {
    /// The figure of `part`.
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

    /// How `part`'s figure was obtained.
    #[must_use]
    pub fn source(&self, part: Part) -> Source {
        let s = &self.sources;
        match part {
            Part::Live => s.live,
            Part::Rounding => s.rounding,
            Part::Frag => s.frag,
            Part::Holes => s.holes,
            Part::Reclaimable => s.reclaimable,
            Part::Metadata => s.metadata,
            Part::OutsideHeap => s.outside_heap,
        }
    }
}

/// How each bucket of a [`Breakdown`] was obtained, one field per [`Part`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Sources {
    /// Live bytes: always measured.
    pub live: Source,
    /// Rounding: always measured.
    pub rounding: Source,
    /// frag's own blocks: measured, or estimated from their samples in the sampled tier.
    pub frag: Source,
    /// Holes.
    pub holes: Source,
    /// Reclaimable pages.
    pub reclaimable: Source,
    /// The allocator's bookkeeping.
    pub metadata: Source,
    /// Resident memory outside the heap.
    pub outside_heap: Source,
}

/// Splits `rss` (of which `anon` is anonymous memory) for `backend` (`None`: a backend `frag` does not
/// know) from the tracked counts, frag's own usable bytes (`frag`) and the allocator's statistics:
/// each known backend splits its heap itself ([`KnownIntrospect::split_heap`]); a user's allocator
/// through its `Introspect`'s figures.
pub(crate) fn split(
    rss: u64,
    anon: Option<u64>,
    backend: Option<Backend>,
    tracked: &HeapCounts,
    frag: u64,
    allocator: Option<&AllocatorStats>,
) -> Breakdown {
    // The allocator holds frag's blocks too: its figures are split against all live usable bytes.
    let usable = tracked.usable_bytes.saturating_add(frag);
    let heap = match (backend, allocator) {
        (Some(b), Some(a)) => with_backend!(b, A => A::split_heap(a, usable, anon)),
        (None, Some(a)) => probe_split(a, usable),
        (_, None) => None,
    }
    .unwrap_or_else(|| HeapSplit::nothing(NotSplit::NoResidentFigures(backend)));
    let (holes, reclaimable, metadata) = (heap.holes, heap.reclaimable, heap.metadata);
    let live = tracked.allocated_bytes;
    let rounding = tracked.usable_bytes.saturating_sub(live);
    let (outside, outside_source) = match heap.accounted {
        Some((accounted, source)) => (rss.saturating_sub(accounted), source),
        None => (0, Source::NotSplit),
    };
    let parts = [live, rounding, frag, holes.0, reclaimable.0, metadata.0, outside];
    let sum: i128 = parts.iter().map(|&v| i128::from(v)).sum();
    let unexplained = (i128::from(rss) - sum).clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
    Breakdown {
        rss_bytes: rss,
        live_bytes: live,
        rounding_bytes: rounding,
        frag_bytes: frag,
        holes_bytes: holes.0,
        reclaimable_bytes: reclaimable.0,
        metadata_bytes: metadata.0,
        outside_heap_bytes: outside,
        unexplained_bytes: unexplained,
        sources: Sources {
            // The sampled tier's live bytes (and so their rounding) are estimates from the samples.
            live: if tracked.estimated { Source::Estimated } else { Source::Measured },
            rounding: if tracked.estimated { Source::Estimated } else { Source::Measured },
            frag: if tracked.estimated { Source::Estimated } else { Source::Measured },
            holes: holes.1,
            reclaimable: reclaimable.1,
            metadata: metadata.1,
            outside_heap: outside_source,
        },
        not_split: heap.not_split,
    }
}

/// An allocator `frag` does not know, whose introspect gives some of the figures: each bucket it has is
/// measured (by the `Introspect`), the others are not split. `None` when it gives no resident figure.
fn probe_split(a: &AllocatorStats, usable: u64) -> Option<HeapSplit> {
    if a.active.is_none() && a.resident.is_none() {
        return None;
    }
    let or_not = |v: Option<u64>| v.map_or((0, Source::NotSplit), |v| (v, Source::Measured));
    let missing = [(Part::Holes, a.active), (Part::Reclaimable, a.dirty), (Part::Metadata, a.metadata)];
    Some(HeapSplit {
        holes: or_not(a.active.map(|act| act.saturating_sub(usable))),
        reclaimable: or_not(a.dirty),
        metadata: or_not(a.metadata),
        accounted: a.resident.map(|r| (r, Source::Measured)),
        not_split: missing.iter().filter(|(_, v)| v.is_none()).map(|(part, _)| NotSplit::ProbeLacks(*part)).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracked(live: u64, usable: u64) -> HeapCounts {
        HeapCounts { allocated_bytes: live, usable_bytes: usable, ..HeapCounts::default() }
    }

    /// jemalloc figures: 120 active, 10 metadata, 160 resident, 25 dirty.
    #[cfg(feature = "jemalloc")]
    fn jemalloc() -> AllocatorStats {
        AllocatorStats {
            active: Some(120),
            metadata: Some(10),
            resident: Some(160),
            dirty: Some(25),
            ..AllocatorStats::default()
        }
    }

    /// glibc figures: 150 in use, 60 free (15 of it the top), 200 arena, 10 mmapped.
    fn glibc(free_whole_pages: Option<u64>) -> AllocatorStats {
        AllocatorStats {
            allocated: Some(150),
            free: Some(60),
            arena: Some(200),
            mmap: Some(10),
            top_releasable: Some(15),
            free_whole_pages,
            ..AllocatorStats::default()
        }
    }

    fn sum(b: &Breakdown) -> i128 {
        Part::ALL.iter().map(|p| i128::from(b.bytes(*p))).sum::<i128>() + i128::from(b.unexplained_bytes)
    }

    #[cfg(feature = "jemalloc")]
    #[test]
    fn jemalloc_buckets_follow_its_statistics_and_sum_to_rss() {
        let a = jemalloc();
        let b = split(200, None, Some(Backend::Jemalloc), &tracked(90, 100), 0, Some(&a));
        assert_eq!(
            (b.live_bytes, b.rounding_bytes, b.holes_bytes, b.reclaimable_bytes, b.metadata_bytes),
            (90, 10, 20, 25, 10)
        );
        assert_eq!(b.outside_heap_bytes, 40);
        // resident 160 = active 120 + dirty 25 + metadata 10 + 5 unaccounted.
        assert_eq!(b.unexplained_bytes, 5);
        assert_eq!(sum(&b), 200);
        assert!(b.not_split.is_empty());
    }

    /// frag's own blocks are a bucket of their own, taken from the holes they would otherwise be
    /// (the allocator's `active` holds them), never from the program's live bytes.
    #[cfg(feature = "jemalloc")]
    #[test]
    fn frags_own_blocks_are_their_own_bucket() {
        let a = jemalloc();
        let b = split(200, None, Some(Backend::Jemalloc), &tracked(90, 100), 15, Some(&a));
        assert_eq!((b.live_bytes, b.rounding_bytes, b.frag_bytes, b.holes_bytes), (90, 10, 15, 5));
        assert_eq!(b.source(Part::Frag), Source::Measured);
        assert_eq!(sum(&b), 200);
    }

    /// jemalloc counting 30 bytes above the anonymous RSS: not resident, taken from its dirty pages.
    #[cfg(feature = "jemalloc")]
    #[test]
    fn jemalloc_resident_above_anonymous_rss_is_not_reclaimable() {
        let a = jemalloc();
        let b = split(200, Some(130), Some(Backend::Jemalloc), &tracked(90, 100), 0, Some(&a));
        assert_eq!((b.reclaimable_bytes, b.outside_heap_bytes), (0, 70));
        assert_eq!(b.source(Part::Reclaimable), Source::Estimated);
        assert_eq!(sum(&b), 200);
    }

    #[cfg(feature = "jemalloc")]
    #[test]
    fn overlapping_figures_make_unexplained_negative_not_the_sum_wrong() {
        let a = AllocatorStats {
            active: Some(500),
            metadata: Some(50),
            resident: Some(100),
            dirty: Some(80),
            ..AllocatorStats::default()
        };
        let b = split(100, None, Some(Backend::Jemalloc), &tracked(10, 20), 0, Some(&a));
        assert!(b.unexplained_bytes < 0);
        assert_eq!(sum(&b), 100);
    }

    #[test]
    fn unknown_backends_say_what_they_cannot_split() {
        let b = split(1000, None, None, &tracked(300, 400), 0, None);
        assert_eq!((b.live_bytes, b.rounding_bytes, b.unexplained_bytes), (300, 100, 600));
        assert_eq!(b.source(Part::Holes), Source::NotSplit);
        assert_eq!(b.not_split.len(), 1);
        assert_eq!(sum(&b), 1000);
    }

    #[test]
    fn glibc_figures_are_estimates() {
        let a = glibc(None);
        let b = split(300, None, Some(Backend::System), &tracked(100, 120), 0, Some(&a));
        assert_eq!((b.holes_bytes, b.reclaimable_bytes, b.metadata_bytes, b.outside_heap_bytes), (45, 15, 30, 90));
        assert_eq!(b.source(Part::Reclaimable), Source::Estimated);
        assert_eq!(sum(&b), 300);
    }

    /// After a trim, free chunks still count the pages it returned: no more is reclaimable than the
    /// anonymous memory beyond the chunks in use.
    #[test]
    fn glibc_reclaimable_is_capped_by_what_can_be_resident() {
        let a = glibc(Some(30));
        let uncapped = split(300, None, Some(Backend::System), &tracked(100, 120), 0, Some(&a));
        assert_eq!((uncapped.reclaimable_bytes, uncapped.holes_bytes), (45, 15));
        assert!(uncapped.not_split.is_empty());
        let capped = split(300, Some(180), Some(Backend::System), &tracked(100, 120), 0, Some(&a));
        assert_eq!((capped.reclaimable_bytes, capped.holes_bytes, capped.outside_heap_bytes), (30, 30, 120));
        assert_eq!(sum(&capped), 300);
    }
}
