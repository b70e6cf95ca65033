//! What the breakdown means: the findings drawn from it, graded by `thresholds`, each with its remedy
//! (the backend's part from [`KnownIntrospect::remedy`]). One rule per kind of finding (`RULES`), each
//! tested on its own below.

use crate::backend::Backend;
use crate::backend::introspect::{KnownIntrospect, Remedy};
use crate::backend::list::with_backend;
use crate::estimate::MIN_SAMPLES_FINDING;
use crate::format::{Approx, Bytes, ClassRange, Percent};
use crate::report::figures::SizeClassRow;
use crate::report::origin::Origin;
use crate::report::sites::{SiteRow, Sites};
use crate::tune::Trap;

use super::breakdown::Breakdown;
use super::kinds::{Finding, FindingKind, Severity};
use super::thresholds::{
    CROSS_THREAD, HOLES, LIVE_DATA, METADATA, OUTSIDE_HEAP, RECLAIMABLE, ROUNDING, Thresholds, grade,
};
use crate::backend::heap_split::{NotSplit, Part, Source};

/// Everything the findings are drawn from.
pub(crate) struct Evidence<'a> {
    pub backend: Option<Backend>,
    pub breakdown: &'a Breakdown,
    pub classes: &'a [SizeClassRow],
    pub origin: Option<&'a Origin>,
    pub sites: Option<&'a Sites>,
    pub traps: &'a [Trap],
    /// The soft memory limit a reclaimer keeps, and its target.
    pub limit: Option<(u64, u64)>,
    /// The last step of resident memory the watch explained, while recent (`step`).
    pub step: Option<&'a Finding>,
}

/// A class row's request sizes, `64..=80 B`.
fn class_name(c: &SizeClassRow) -> ClassRange {
    ClassRange { min: c.min_size, max: c.max_size, unit: true }
}

/// The `n` classes with the most of `key`, named, with their figure.
fn top_classes(classes: &[SizeClassRow], n: usize, key: fn(&SizeClassRow) -> u64) -> String {
    let mut sorted: Vec<&SizeClassRow> = classes.iter().filter(|c| key(c) > 0).collect();
    sorted.sort_by_key(|c| core::cmp::Reverse(key(c)));
    let names: Vec<String> = sorted.iter().take(n).map(|c| format!("{} ({})", class_name(c), Bytes(key(c)))).collect();
    if names.is_empty() { "no class stands out".to_owned() } else { names.join(", ") }
}

/// The rules, one per kind of finding that has bytes: each reads the evidence and draws its finding,
/// or none.
const RULES: &[fn(&Evidence<'_>) -> Option<Finding>] =
    &[live_data, rounding, holes, reclaimable, cross_thread, metadata, outside_heap, over_limit, step];

/// The last step explained, as it was explained.
fn step(e: &Evidence<'_>) -> Option<Finding> {
    e.step.cloned()
}

/// The findings, largest effect first (traps, which have no bytes, last among equals).
pub(crate) fn find(e: &Evidence<'_>) -> Vec<Finding> {
    let mut out: Vec<Finding> = RULES.iter().filter_map(|rule| rule(e)).collect();
    out.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(b.severity.cmp(&a.severity)));
    out.extend(e.traps.iter().map(|t| Finding {
        kind: FindingKind::ConfigTrap,
        severity: Severity::Warn,
        bytes: 0,
        estimated: false,
        summary: t.to_string(),
        remedy: t.remedy(),
    }));
    out
}

/// What to change for `kind` on the evidence's backend: the remedy of the kind's finding, which a
/// step explained by the history repeats (a step's own is the remedy for its cause).
pub(crate) fn remedy(e: &Evidence<'_>, kind: FindingKind) -> String {
    match kind {
        FindingKind::LiveData => {
            format!("look at what holds it: most live bytes in {}", top_classes(e.classes, 3, |c| c.live_bytes))
        }
        FindingKind::Rounding => format!(
            "requests just above a class boundary waste most; largest waste in {}: size those buffers to \
             the class (e.g. Vec::with_capacity to a class size) or pool them",
            top_classes(e.classes, 3, |c| c.internal_bytes)
        ),
        FindingKind::Holes => holes_remedy(e),
        FindingKind::Reclaimable => reclaimable_remedy(e.backend),
        FindingKind::CrossThread => {
            let advice = backend_remedy(e.backend, Remedy::CrossThread).map(|r| format!("; {r}")).unwrap_or_default();
            format!(
                "keep a buffer's allocation and free on one thread (thread-per-core, or return buffers to their \
                 owner); snmalloc and mimalloc handle remote frees cheaply{advice}"
            )
        }
        FindingKind::Metadata => backend_remedy(e.backend, Remedy::Metadata)
            .unwrap_or("nothing to tune directly: it follows the number of arenas, threads and extents")
            .to_owned(),
        FindingKind::OutsideHeap => "not heap fragmentation: look at thread stacks, memory-mapped files, other \
                                     libraries' own heaps (C code's malloc) and code (/proc/<pid>/smaps lists each \
                                     mapping)"
            .to_owned(),
        FindingKind::ConfigTrap => e.traps.iter().map(Trap::remedy).collect::<Vec<_>>().join("; "),
        FindingKind::OverLimit => over_limit(e).map(|f| f.remedy).unwrap_or_default(),
        FindingKind::Step => e.step.map(|f| f.remedy.clone()).unwrap_or_default(),
    }
}

/// Resident bytes, as the divisor of every share (at least 1).
fn rss(b: &Breakdown) -> f64 {
    b.rss_bytes.max(1) as f64
}

/// Whether the breakdown's `part` is other than measured.
fn estimated(b: &Breakdown, part: Part) -> bool {
    b.source(part) != Source::Measured
}

/// Live blocks hold most of resident memory: growth is the program's.
fn live_data(e: &Evidence<'_>) -> Option<Finding> {
    let b = e.breakdown;
    let usable = b.live_bytes + b.rounding_bytes;
    let severity = grade(usable as f64 / rss(b), usable, &LIVE_DATA)?;
    Some(Finding {
        kind: FindingKind::LiveData,
        severity,
        bytes: usable,
        estimated: estimated(b, Part::Live) || estimated(b, Part::Rounding),
        summary: format!(
            "{} of {} resident ({}) is held by live blocks ({} live, {} of size-class rounding): growth \
             here is the program's, not fragmentation",
            Approx(Bytes(usable), estimated(b, Part::Live)),
            Bytes(b.rss_bytes),
            Percent(usable as f64 / rss(b), 0),
            Approx(Bytes(b.live_bytes), estimated(b, Part::Live)),
            Approx(Bytes(b.rounding_bytes), estimated(b, Part::Rounding)),
        ),
        remedy: remedy(e, FindingKind::LiveData),
    })
}

/// Size-class rounding wastes a share of live usable bytes.
fn rounding(e: &Evidence<'_>) -> Option<Finding> {
    let b = e.breakdown;
    let usable = b.live_bytes + b.rounding_bytes;
    let share = if usable > 0 { b.rounding_bytes as f64 / usable as f64 } else { 0.0 };
    let severity = grade(share, b.rounding_bytes, &ROUNDING)?;
    Some(Finding {
        kind: FindingKind::Rounding,
        severity,
        bytes: b.rounding_bytes,
        estimated: estimated(b, Part::Rounding),
        summary: format!(
            "size-class rounding wastes {} ({} of live usable bytes)",
            Bytes(b.rounding_bytes),
            Percent(share, 0)
        ),
        remedy: remedy(e, FindingKind::Rounding),
    })
}

/// A finding on one bucket of the breakdown graded as a share of RSS: its `kind`, the bucket's
/// `bytes` from `part`, its `thresholds`, the `summary` of (bytes, share), and the remedy.
fn share_of_rss(
    e: &Evidence<'_>,
    (kind, part, thresholds): (FindingKind, Part, &Thresholds),
    summary: fn(u64, f64) -> String,
    remedy: impl FnOnce() -> String,
) -> Option<Finding> {
    let b = e.breakdown;
    let bytes = b.bytes(part);
    let share = bytes as f64 / rss(b);
    let severity = grade(share, bytes, thresholds)?;
    Some(Finding {
        kind,
        severity,
        bytes,
        estimated: estimated(b, part),
        summary: summary(bytes, share),
        remedy: remedy(),
    })
}

/// Free space inside pages that still hold live blocks.
fn holes(e: &Evidence<'_>) -> Option<Finding> {
    share_of_rss(
        e,
        (FindingKind::Holes, Part::Holes, &HOLES),
        |bytes, share| {
            format!(
                "{} ({} of resident) is free space inside pages that still hold live blocks",
                Bytes(bytes),
                Percent(share, 0)
            )
        },
        || remedy(e, FindingKind::Holes),
    )
}

/// Free pages the allocator could return now.
fn reclaimable(e: &Evidence<'_>) -> Option<Finding> {
    share_of_rss(
        e,
        (FindingKind::Reclaimable, Part::Reclaimable, &RECLAIMABLE),
        |bytes, share| {
            format!(
                "the allocator holds {} of free pages ({} of resident) it could return now",
                Bytes(bytes),
                Percent(share, 0)
            )
        },
        || remedy(e, FindingKind::Reclaimable),
    )
}

/// The allocator's own bookkeeping.
fn metadata(e: &Evidence<'_>) -> Option<Finding> {
    share_of_rss(
        e,
        (FindingKind::Metadata, Part::Metadata, &METADATA),
        |bytes, share| format!("allocator bookkeeping takes {} ({} of resident)", Bytes(bytes), Percent(share, 0)),
        || remedy(e, FindingKind::Metadata),
    )
}

/// Resident memory that is not the Rust heap.
fn outside_heap(e: &Evidence<'_>) -> Option<Finding> {
    share_of_rss(
        e,
        (FindingKind::OutsideHeap, Part::OutsideHeap, &OUTSIDE_HEAP),
        |bytes, share| format!("{} ({} of resident) is not the Rust heap", Bytes(bytes), Percent(share, 0)),
        || remedy(e, FindingKind::OutsideHeap),
    )
}

/// Over a soft memory limit's target with more kept than the heap can release.
fn over_limit(e: &Evidence<'_>) -> Option<Finding> {
    let b = e.breakdown;
    let (limit, target) = e.limit?;
    let kept = b.rss_bytes.saturating_sub(b.reclaimable_bytes);
    if b.rss_bytes <= target || kept <= target {
        return None;
    }
    // What stays after a release, by what holds it: the program's data with the process around
    // the heap, or free space its blocks pin.
    let data = b.live_bytes + b.rounding_bytes + b.frag_bytes + b.metadata_bytes + b.outside_heap_bytes;
    let (summary, remedy) = if data > target || b.holes_bytes == 0 {
        (
            format!(
                "the heap cannot release enough to meet the memory limit: {} resident, of which {} is live data \
                 and {} could be released, against the limit's target {} (limit {})",
                Bytes(b.rss_bytes),
                Approx(Bytes(b.live_bytes), estimated(b, Part::Live)),
                Approx(Bytes(b.reclaimable_bytes), estimated(b, Part::Reclaimable)),
                Bytes(target),
                Bytes(limit)
            ),
            "this is the program's data, not fragmentation: raise the limit (FRAG_MEMORY_LIMIT, \
             Reclaimer::limit) or hold less; the sites section names what holds the live bytes"
                .to_owned(),
        )
    } else {
        let unsplit = b.not_split.iter().any(|n| matches!(n, NotSplit::MimallocCommitted));
        (
            format!(
                "the heap cannot release enough to meet the memory limit: {} resident against the limit's target \
                 {} (limit {}), and what stays over it is {} of free space inside pages that still hold live \
                 blocks{}, which the allocator returns only once those blocks are freed; live data is {}",
                Bytes(b.rss_bytes),
                Bytes(target),
                Bytes(limit),
                Approx(Bytes(b.holes_bytes), estimated(b, Part::Holes)),
                if unsplit {
                    " (free pages not yet purged counted in: this backend does not tell them apart)"
                } else {
                    ""
                },
                Approx(Bytes(b.live_bytes), estimated(b, Part::Live)),
            ),
            holes_remedy(e),
        )
    };
    Some(Finding {
        kind: FindingKind::OverLimit,
        severity: Severity::Warn,
        bytes: kept - target,
        estimated: estimated(b, Part::Live) || estimated(b, Part::Reclaimable) || estimated(b, Part::Holes),
        summary,
        remedy,
    })
}

/// The sites whose live blocks pin the most holes (estimates), by their row in the sites section,
/// with the figure; `None` where the pins are not split or no site pins anything.
fn top_pinning(sites: Option<&Sites>, n: usize) -> Option<String> {
    pinning_rows(&sites?.top, n)
}

fn pinning_rows(top: &[SiteRow], n: usize) -> Option<String> {
    let mut rows: Vec<(usize, &SiteRow)> =
        top.iter().enumerate().filter(|(_, r)| r.pinned_bytes.unwrap_or(0) > 0).collect();
    rows.sort_by_key(|(_, r)| core::cmp::Reverse(r.pinned_bytes));
    // By row number: at report time the frames are still addresses (`Sites::symbolize` names them).
    let names: Vec<String> =
        rows.iter().take(n).map(|(i, r)| format!("#{} (~{})", i + 1, Bytes(r.pinned_bytes.unwrap_or(0)))).collect();
    (!names.is_empty()).then(|| names.join(", "))
}

fn holes_remedy(e: &Evidence<'_>) -> String {
    let pinned = top_classes(e.classes, 3, |c| c.live_bytes);
    let sites = top_pinning(e.sites, 3)
        .map(|rows| {
            format!(
                "; the sites pinning the most are the sites section's rows {rows}: allocate their long-lived \
                 small blocks apart (an arena, a pool, a bump allocator for known lifetimes) or shorten their \
                 lifetime"
            )
        })
        .unwrap_or_default();
    let cross = e
        .origin
        .filter(|o| o.sampled_frees >= MIN_SAMPLES_FINDING)
        .and_then(|o| o.cross_thread_byte_ratio)
        .filter(|r| *r >= CROSS_THREAD.info)
        .map(|r| format!("; about {} of freed bytes cross threads, which scatters frees over pages", Percent(r, 0)))
        .unwrap_or_default();
    let choice = backend_remedy(e.backend, Remedy::Holes).map(|r| format!("; {r}")).unwrap_or_default();
    format!("long-lived blocks pin partly used pages; the classes with most live bytes: {pinned}{sites}{cross}{choice}")
}

fn reclaimable_remedy(backend: Option<Backend>) -> String {
    backend_remedy(backend, Remedy::Reclaimable)
        .unwrap_or("frag::tune::release_free_memory() where the backend supports it")
        .to_owned()
}

/// What the wrapped backend adds to the remedy for `topic` ([`KnownIntrospect::remedy`]).
fn backend_remedy(backend: Option<Backend>, topic: Remedy) -> Option<&'static str> {
    with_backend!(backend?, A => A::remedy(topic))
}

fn cross_thread(e: &Evidence<'_>) -> Option<Finding> {
    let o = e.origin.filter(|o| o.sampled_frees >= MIN_SAMPLES_FINDING)?;
    let ratio = o.cross_thread_byte_ratio?;
    let b = e.breakdown;
    // What cross-thread frees can pin: the free space the heap holds, in proportion to their share.
    let bytes = ((b.holes_bytes + b.reclaimable_bytes) as f64 * ratio) as u64;
    let severity = grade(ratio, bytes, &CROSS_THREAD)?;
    let classes = {
        let mut c: Vec<&SizeClassRow> =
            e.classes.iter().filter(|c| c.cross_thread_ratio.is_some_and(|r| r >= 0.3)).collect();
        c.sort_by_key(|c| core::cmp::Reverse(c.allocations));
        let names: Vec<String> = c.iter().take(3).map(|c| class_name(c).to_string()).collect();
        if names.is_empty() { String::new() } else { format!(" (mostly {})", names.join(", ")) }
    };
    Some(Finding {
        kind: FindingKind::CrossThread,
        severity,
        bytes,
        estimated: true,
        summary: format!(
            "about {} of freed bytes were freed on another thread than the allocating one{classes} \
             ({} sampled frees); {} is that share of the heap's free space (holes and reclaimable \
             pages), what such frees may keep resident",
            Percent(ratio, 0),
            o.sampled_frees,
            Approx(Bytes(bytes), true),
        ),
        remedy: remedy(e, FindingKind::CrossThread),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(pinned: Option<u64>) -> SiteRow {
        SiteRow {
            stack: vec![0x1000],
            frames: vec!["0x1000".to_owned()],
            inuse_bytes: 1 << 20,
            inuse_blocks: 10,
            alloc_bytes: 1 << 20,
            inuse_bytes_interval: (0, 2 << 20),
            alloc_bytes_interval: (0, 2 << 20),
            alloc_blocks: 10,
            samples: 2,
            cross_thread_share: None,
            free_samples: 0,
            median_lifetime_ns: None,
            pinned_bytes: pinned,
        }
    }

    #[test]
    fn the_rows_pinning_the_most_are_named_by_number_largest_first() {
        let rows = [row(Some(10 << 10)), row(Some(0)), row(Some(3 << 20)), row(Some(1 << 20))];
        assert_eq!(pinning_rows(&rows, 2).as_deref(), Some("#3 (~3.0 MiB), #4 (~1.0 MiB)"));
        assert_eq!(pinning_rows(&[row(None), row(Some(0))], 3), None, "not split, or nothing pinned");
    }

    const MIB: u64 = 1 << 20;

    /// A breakdown of 100 MiB resident, every bucket measured, with `parts` (live, rounding, holes,
    /// reclaimable, metadata, outside heap) in MiB.
    fn breakdown(parts: [u64; 6]) -> Breakdown {
        let [live, rounding, holes, reclaimable, metadata, outside] = parts.map(|p| p * MIB);
        let m = Source::Measured;
        Breakdown {
            rss_bytes: 100 * MIB,
            live_bytes: live,
            rounding_bytes: rounding,
            frag_bytes: 0,
            holes_bytes: holes,
            reclaimable_bytes: reclaimable,
            metadata_bytes: metadata,
            outside_heap_bytes: outside,
            unexplained_bytes: 0,
            sources: super::super::breakdown::Sources {
                live: m,
                rounding: m,
                frag: m,
                holes: m,
                reclaimable: m,
                metadata: m,
                outside_heap: m,
            },
            not_split: Vec::new(),
        }
    }

    fn evidence(b: &Breakdown, limit: Option<(u64, u64)>) -> Evidence<'_> {
        Evidence { backend: None, breakdown: b, classes: &[], origin: None, sites: None, traps: &[], limit, step: None }
    }

    /// Each rule on its own: quiet below its threshold, `info` from it, `warn` from the next, with
    /// the bucket's bytes.
    #[test]
    fn each_rule_grades_its_own_bucket() {
        type Rule = fn(&Evidence<'_>) -> Option<Finding>;
        // (rule, kind, the bucket's index in `breakdown`'s parts, quiet, info, warn (0: none)) in MiB of 100.
        let cases: [(Rule, FindingKind, usize, u64, u64, u64); 5] = [
            (holes, FindingKind::Holes, 2, 9, 15, 25),
            (reclaimable, FindingKind::Reclaimable, 3, 4, 7, 12),
            (metadata, FindingKind::Metadata, 4, 9, 12, 0),
            (outside_heap, FindingKind::OutsideHeap, 5, 24, 30, 60),
            (live_data, FindingKind::LiveData, 0, 40, 60, 0),
        ];
        for (rule, kind, at, quiet, info, warn) in cases {
            let with = |mib: u64| {
                let mut parts = [0; 6];
                parts[at] = mib;
                rule(&evidence(&breakdown(parts), None))
            };
            assert!(with(quiet).is_none(), "{kind:?} at {quiet} MiB");
            let f = with(info).unwrap_or_else(|| panic!("{kind:?} at {info} MiB"));
            assert_eq!((f.kind, f.severity, f.bytes), (kind, Severity::Info, info * MIB));
            if warn > 0 {
                assert_eq!(with(warn).map(|f| f.severity), Some(Severity::Warn), "{kind:?} at {warn} MiB");
            }
        }
        // Rounding is a share of live usable bytes: 12 of 100 live usable is `info`.
        let f = rounding(&evidence(&breakdown([88, 12, 0, 0, 0, 0]), None)).expect("rounding");
        assert_eq!((f.kind, f.severity), (FindingKind::Rounding, Severity::Info));
        assert!(rounding(&evidence(&breakdown([95, 5, 0, 0, 0, 0]), None)).is_none());
    }

    /// Over the limit's target only when what the heap cannot release is over it too.
    #[test]
    fn over_limit_needs_more_kept_than_the_target() {
        let b = breakdown([80, 0, 0, 5, 0, 15]);
        assert!(over_limit(&evidence(&b, None)).is_none(), "no limit");
        assert!(over_limit(&evidence(&b, Some((120 * MIB, 114 * MIB)))).is_none(), "under the target");
        assert!(over_limit(&evidence(&b, Some((99 * MIB, 96 * MIB)))).is_none(), "releasable down to 95 MiB");
        let f = over_limit(&evidence(&b, Some((90 * MIB, 85 * MIB)))).expect("over");
        assert_eq!((f.kind, f.bytes), (FindingKind::OverLimit, 10 * MIB));
        assert!(f.summary.contains("live data") && f.remedy.contains("raise the limit"), "{f:?}");
    }

    /// Over the limit with live data under its target: what stays is holes, and the finding says so,
    /// with the holes' remedy.
    #[test]
    fn over_limit_names_the_holes_when_live_data_fits() {
        let b = breakdown([40, 5, 45, 0, 2, 8]);
        let f = over_limit(&evidence(&b, Some((90 * MIB, 85 * MIB)))).expect("over");
        assert_eq!((f.kind, f.bytes), (FindingKind::OverLimit, 15 * MIB));
        assert!(f.summary.contains("45.0 MiB of free space inside pages"), "{}", f.summary);
        assert!(!f.remedy.contains("raise the limit"), "{}", f.remedy);
    }

    /// `find` runs every rule and orders the findings by bytes, largest first.
    #[test]
    fn findings_come_largest_first() {
        let b = breakdown([0, 0, 15, 7, 12, 30]);
        let kinds: Vec<FindingKind> = find(&evidence(&b, None)).iter().map(|f| f.kind).collect();
        assert_eq!(
            kinds,
            [FindingKind::OutsideHeap, FindingKind::Holes, FindingKind::Metadata, FindingKind::Reclaimable]
        );
    }
}
