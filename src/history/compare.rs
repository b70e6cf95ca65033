//! Two moments of the history side by side: what moved between them part by part, largest first,
//! which sites, scopes and size classes moved it, and the cause that names, with the diagnosis's
//! remedy for it.

use core::fmt::{self, Display, Formatter};
use core::time::Duration;
use std::collections::HashMap;

use super::snapshot::{SiteMark, Snapshot, stack_key};
use crate::backend::WrappedBackend;
use crate::backend::heap_split::Part;
use crate::format::{Bytes, Percent, SignedBytes, TimeOfDay};
use crate::report::diagnosis::{Evidence, Finding, FindingKind, Severity};
use crate::report::{self, Report};
use crate::sites::read::{self, Grouping};

/// Sites a comparison keeps, those that grew the most first.
pub const MOVED_SITES: usize = 5;
/// Scopes a comparison keeps, those that grew the most first.
pub const MOVED_SCOPES: usize = 3;
/// The share of the holes' rise the class span covers (the classes that grew the most, until they
/// add up to it).
const CLASS_COVER: f64 = 0.8;
/// Bytes freed between two snapshots below which no cross-thread share is given.
const MIN_FREED: u64 = 1 << 20;
/// A cross-thread share during the comparison at least this, and twice the one before, makes
/// cross-thread frees the cause of a rise in holes or free pages.
const CROSS_SHARE: f64 = 0.25;

/// One part of the resident split in both snapshots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct PartMove {
    /// The part.
    pub part: Part,
    /// Its bytes before.
    pub before: u64,
    /// Its bytes after.
    pub after: u64,
}

impl PartMove {
    /// `after − before`.
    #[must_use]
    pub fn delta(&self) -> i64 {
        signed(self.before, self.after)
    }
}

/// A site in both snapshots (0 where one does not list it).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct SiteMove {
    /// Its key ([`SiteMark::key`](super::SiteMark::key)).
    pub key: u64,
    /// Its leaf frames after the allocation machinery, `function (file:line)`, once
    /// [`Comparison::explain`] named them; empty before, or where the process cannot symbolize.
    pub frames: Vec<String>,
    /// Estimated bytes in use before and after.
    pub inuse_bytes: (u64, u64),
    /// Estimated pinned bytes before and after; `None` where the backend does not split its holes
    /// by class.
    pub pinned_bytes: Option<(u64, u64)>,
}

impl SiteMove {
    /// The function that names the site: its first named frame without the file and line.
    #[must_use]
    pub fn function(&self) -> Option<&str> {
        let first = self.frames.first()?;
        Some(first.split_once(" (").map_or(first.as_str(), |(f, _)| f))
    }

    fn pinned_delta(&self) -> i64 {
        self.pinned_bytes.map_or(0, |(b, a)| signed(b, a))
    }

    fn inuse_delta(&self) -> i64 {
        signed(self.inuse_bytes.0, self.inuse_bytes.1)
    }
}

/// A scope in both snapshots.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct ScopeMove {
    /// Its name, as the snapshots keep it.
    pub name: Option<Box<str>>,
    /// Estimated bytes in use before and after.
    pub inuse_bytes: (u64, u64),
}

/// The size classes whose holes grew the most, as a span of block sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct ClassSpan {
    /// The smallest block size among them.
    pub min_size: u64,
    /// The largest.
    pub max_size: u64,
    /// How much their holes grew, together.
    pub holes_rise_bytes: u64,
}

/// The share of freed bytes that crossed threads (freed on another thread than the allocating
/// one), between the two snapshots and before them. By bytes, as the diagnosis's cross-thread
/// finding: a count of frees estimated from samples is dominated by the rare sampled small block,
/// whose weight is large.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct CrossThreadShare {
    /// Cross-thread bytes over bytes freed between the two snapshots (estimates).
    pub during: f64,
    /// The same over as long a time before the first snapshot (or since the start, where the
    /// history is shorter); `None` with too few frees.
    pub before: Option<f64>,
}

/// What moved between two snapshots of the [`History`](super::History), and why:
/// [`History::compare`](super::History::compare) builds it, [`explain`](Self::explain) names its
/// sites and adds the remedy; `Display` writes it as one line.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Comparison {
    /// The last round of the snapshot compared as before, on the history's clock.
    #[cfg_attr(feature = "serde", serde(rename = "before_ms", serialize_with = "super::snapshot::millis"))]
    pub before: Duration,
    /// The last round of the snapshot compared as after.
    #[cfg_attr(feature = "serde", serde(rename = "after_ms", serialize_with = "super::snapshot::millis"))]
    pub after: Duration,
    /// Wall-clock times of the two, in milliseconds since the Unix epoch.
    pub unix_ms: (u64, u64),
    /// Resident bytes before and after: the process's, which the parts split, where both snapshots
    /// have a split; else as the watch reads them ([`Snapshot::rss_bytes`]).
    pub rss_bytes: (u64, u64),
    /// Tracked allocated bytes before and after.
    pub allocated_bytes: (u64, u64),
    /// The parts of the resident split, the largest move first; empty where either snapshot has
    /// no split.
    pub parts: Vec<PartMove>,
    /// The sites that grew the most (by pinned bytes when holes moved most, else by bytes in
    /// use), at most [`MOVED_SITES`].
    pub sites: Vec<SiteMove>,
    /// The scopes that grew the most, at most [`MOVED_SCOPES`].
    pub scopes: Vec<ScopeMove>,
    /// The size classes whose holes grew the most (jemalloc's classes); `None` where none grew.
    pub hole_classes: Option<ClassSpan>,
    /// The cross-thread share of freed bytes; `None` with under 1 MiB freed between the two.
    pub cross_thread: Option<CrossThreadShare>,
    /// What moved resident memory the most, as the diagnosis names it; `None` without a split, or
    /// where frag's own memory moved it.
    pub cause: Option<FindingKind>,
    /// What to change, as the diagnosis says it for `cause` on this backend; `None` until
    /// [`explain`](Self::explain).
    pub remedy: Option<String>,
}

fn signed(before: u64, after: u64) -> i64 {
    if after >= before {
        i64::try_from(after - before).unwrap_or(i64::MAX)
    } else {
        i64::try_from(before - after).map_or(i64::MIN, |d| -d)
    }
}

/// The share `cross / freed` of the bytes freed between two cumulative counts.
fn share(earlier: (u64, u64), later: (u64, u64)) -> Option<f64> {
    let freed = later.0.checked_sub(earlier.0)?;
    let cross = later.1.saturating_sub(earlier.1).min(freed);
    (freed >= MIN_FREED).then(|| cross as f64 / freed as f64)
}

impl Comparison {
    /// `before` against `after`; `earlier`, as long before `before` as `after` is after it, gives
    /// the cross-thread share before.
    pub(super) fn between(earlier: &Snapshot, before: &Snapshot, after: &Snapshot) -> Self {
        let rss_bytes = match (before.split, after.split) {
            (Some(b), Some(a)) => (b.rss_bytes, a.rss_bytes),
            _ => (before.rss_bytes, after.rss_bytes),
        };
        let rise = signed(rss_bytes.0, rss_bytes.1);
        let parts = match (before.split, after.split) {
            (Some(b), Some(a)) => {
                let mut parts: Vec<PartMove> = Part::ALL
                    .iter()
                    .map(|&part| PartMove { part, before: b.bytes(part), after: a.bytes(part) })
                    .collect();
                parts.sort_by_key(|p| core::cmp::Reverse(p.delta().unsigned_abs()));
                parts
            }
            _ => Vec::new(),
        };
        let counts = |s: &Snapshot| (s.freed_bytes, s.cross_thread_bytes);
        let cross_thread = share(counts(before), counts(after)).map(|during| CrossThreadShare {
            during,
            before: if earlier.to < before.to {
                share(counts(earlier), counts(before))
            } else {
                share((0, 0), counts(before))
            },
        });
        let cause = cause(&parts, rise, cross_thread);
        let by_pins = matches!(cause, Some(FindingKind::Holes | FindingKind::CrossThread));
        Self {
            before: before.to,
            after: after.to,
            unix_ms: (before.unix_ms, after.unix_ms),
            rss_bytes,
            allocated_bytes: (before.allocated_bytes, after.allocated_bytes),
            parts,
            sites: moved_sites(before, after, by_pins),
            scopes: moved_scopes(before, after),
            hole_classes: class_span(before, after),
            cross_thread,
            cause,
            remedy: None,
        }
    }

    /// Names the sites from the program's debug information (the site table keeps every stack for
    /// the life of the process) and takes the remedy for the cause from `report`'s diagnosis, as
    /// frag's own work. Symbolizing reads the debug information, as
    /// [`Sites::symbolize`](crate::report::Sites::symbolize) does, with the same cost.
    pub fn explain(&mut self, report: &Report) {
        crate::own::handed_over(|| {
            self.name_sites();
            self.remedy = self.cause.and_then(|kind| remedy(report, kind));
        });
    }

    fn name_sites(&mut self) {
        if self.sites.is_empty() {
            return;
        }
        let mut wanted: HashMap<u64, usize> = self.sites.iter().enumerate().map(|(i, s)| (s.key, i)).collect();
        let mut found: Vec<(usize, Vec<usize>)> = Vec::new();
        for site in read::snapshot(&HashMap::new(), Grouping::Stack) {
            let stack: Vec<u64> = site.stack.iter().map(|&pc| pc as u64).collect();
            if let Some(i) = wanted.remove(&stack_key(&stack)) {
                found.push((i, site.stack));
            }
        }
        let stacks: Vec<Vec<usize>> = found.iter().map(|(_, s)| s.clone()).collect();
        let Some(named) = crate::report::sites::told_apart(&stacks) else { return };
        for ((i, _), frames) in found.into_iter().zip(named) {
            self.sites[i].frames = frames;
        }
    }

    /// Resident bytes after less before.
    #[must_use]
    pub fn rss_delta(&self) -> i64 {
        signed(self.rss_bytes.0, self.rss_bytes.1)
    }

    /// The move of `part`, if the snapshots have a split.
    #[must_use]
    pub fn part(&self, part: Part) -> Option<&PartMove> {
        self.parts.iter().find(|p| p.part == part)
    }
}

/// What to change for `kind`, as `report`'s diagnosis says it on its backend (its finding's remedy
/// where it raised one); `None` without a diagnosis.
fn remedy(report: &Report, kind: FindingKind) -> Option<String> {
    let d = report.diagnosis.as_ref()?;
    if let Some(f) = d.findings.iter().find(|f| f.kind == kind) {
        return Some(f.remedy.clone());
    }
    let evidence = Evidence {
        backend: report.backend.and_then(WrappedBackend::known),
        breakdown: &d.breakdown,
        classes: &report.size_classes,
        origin: report.origin.as_ref(),
        sites: report.sites.as_ref(),
        traps: &[],
        limit: report::diagnosis::limit_in_force(),
        step: None,
    };
    Some(report::diagnosis::remedy(&evidence, kind))
}

/// The part group that moved resident memory the most in its direction: live data with its
/// rounding, or one of the others; holes or free pages with cross-thread frees on the rise are
/// cross-thread frees.
fn cause(parts: &[PartMove], rise: i64, cross: Option<CrossThreadShare>) -> Option<FindingKind> {
    if parts.is_empty() {
        return None;
    }
    let delta = |part| parts.iter().find(|p| p.part == part).map_or(0, PartMove::delta);
    let sign = if rise < 0 { -1 } else { 1 };
    let groups = [
        (Some(FindingKind::LiveData), delta(Part::Live) + delta(Part::Rounding)),
        (Some(FindingKind::Holes), delta(Part::Holes)),
        (Some(FindingKind::Reclaimable), delta(Part::Reclaimable)),
        (Some(FindingKind::Metadata), delta(Part::Metadata)),
        (Some(FindingKind::OutsideHeap), delta(Part::OutsideHeap)),
        (None, delta(Part::Frag)),
    ];
    let (kind, _) = groups.into_iter().max_by_key(|(_, d)| d.saturating_mul(sign))?;
    let crossing = cross.is_some_and(|c| c.during >= CROSS_SHARE && c.before.is_none_or(|b| c.during >= 2.0 * b));
    match kind {
        Some(FindingKind::Holes | FindingKind::Reclaimable) if crossing && rise > 0 => Some(FindingKind::CrossThread),
        Some(FindingKind::LiveData) if delta(Part::Rounding) > 2 * delta(Part::Live).max(0) => {
            Some(FindingKind::Rounding)
        }
        k => k,
    }
}

/// The sites listed in either snapshot (a site not listed in one counts 0 there), those whose
/// pinned bytes (`by_pins`) or bytes in use grew the most first.
fn moved_sites(before: &Snapshot, after: &Snapshot, by_pins: bool) -> Vec<SiteMove> {
    let mut keys: Vec<u64> = after.sites.iter().map(|m| m.key).collect();
    keys.extend(before.sites.iter().map(|m| m.key).filter(|k| !after.sites.iter().any(|m| m.key == *k)));
    let mark = |s: &Snapshot, key: u64| s.sites.iter().find(|m| m.key == key).copied();
    let mut moves: Vec<SiteMove> = keys
        .into_iter()
        .map(|key| {
            let (b, a) = (mark(before, key), mark(after, key));
            let inuse = |m: Option<SiteMark>| m.map_or(0, |m| m.inuse_bytes);
            let pinned = |m: Option<SiteMark>| m.and_then(|m| m.pinned_bytes);
            SiteMove {
                key,
                frames: Vec::new(),
                inuse_bytes: (inuse(b), inuse(a)),
                pinned_bytes: (pinned(b).is_some() || pinned(a).is_some())
                    .then(|| (pinned(b).unwrap_or(0), pinned(a).unwrap_or(0))),
            }
        })
        .collect();
    let key = |m: &SiteMove| if by_pins && m.pinned_bytes.is_some() { m.pinned_delta() } else { m.inuse_delta() };
    moves.retain(|m| key(m) > 0);
    moves.sort_by_key(|m| core::cmp::Reverse(key(m)));
    moves.truncate(MOVED_SITES);
    moves
}

fn moved_scopes(before: &Snapshot, after: &Snapshot) -> Vec<ScopeMove> {
    let mut moves: Vec<ScopeMove> = after
        .scopes
        .iter()
        .map(|s| {
            let was = before.scopes.iter().find(|b| b.name == s.name).map_or(0, |b| b.inuse_bytes);
            ScopeMove { name: s.name.clone(), inuse_bytes: (was, s.inuse_bytes) }
        })
        .filter(|m| m.inuse_bytes.1 > m.inuse_bytes.0)
        .collect();
    moves.sort_by_key(|m| core::cmp::Reverse(m.inuse_bytes.1 - m.inuse_bytes.0));
    moves.truncate(MOVED_SCOPES);
    moves
}

fn class_span(before: &Snapshot, after: &Snapshot) -> Option<ClassSpan> {
    let mut rises: Vec<(u64, u64)> = after
        .hole_classes
        .iter()
        .filter_map(|c| {
            let was = before.hole_classes.iter().find(|b| b.size == c.size).map_or(0, |b| b.holes_bytes);
            (c.holes_bytes > was).then(|| (c.size, c.holes_bytes - was))
        })
        .collect();
    rises.sort_by_key(|&(_, r)| core::cmp::Reverse(r));
    let total: u64 = rises.iter().map(|&(_, r)| r).sum();
    let mut span: Option<ClassSpan> = None;
    for (size, rise) in rises {
        let s = span.get_or_insert(ClassSpan { min_size: size, max_size: size, holes_rise_bytes: 0 });
        s.min_size = s.min_size.min(size);
        s.max_size = s.max_size.max(size);
        s.holes_rise_bytes += rise;
        if s.holes_rise_bytes as f64 >= CLASS_COVER * total as f64 {
            break;
        }
    }
    span
}

/// The words for a cause.
fn meaning(kind: FindingKind) -> &'static str {
    match kind {
        FindingKind::LiveData => {
            "live data explains it: the program's data grew (a leak or real growth), not fragmentation"
        }
        FindingKind::Rounding => "size-class rounding of new live blocks",
        FindingKind::Holes => "fragmentation: free space trapped in pages that hold live blocks",
        FindingKind::Reclaimable => "free pages the allocator keeps rather than returns",
        FindingKind::CrossThread => "cross-thread frees filling another thread's arena or cache",
        FindingKind::Metadata => "the allocator's own bookkeeping",
        FindingKind::OutsideHeap => "memory outside the heap (stacks, mappings, code)",
        _ => "",
    }
}

impl Comparison {
    fn write_sites(&self, f: &mut Formatter<'_>, by_pins: bool) -> fmt::Result {
        let named: Vec<&SiteMove> = self.sites.iter().take(3).collect();
        for (i, s) in named.iter().enumerate() {
            let name = s.function().map_or_else(|| format!("site {:016x}", s.key), |n| format!("`{n}`"));
            let sep = if i == 0 { if by_pins { ", pinned by " } else { ", held by " } } else { ", " };
            write!(f, "{sep}{name} (")?;
            if let Some((b, a)) = s.pinned_bytes.filter(|_| by_pins) {
                write!(f, "{} pinned, ", SignedBytes(signed(b, a)))?;
            }
            write!(f, "{} live)", SignedBytes(s.inuse_delta()))?;
        }
        Ok(())
    }
}

/// The comparison without its remedy, for a [`Finding`]'s summary.
struct Summary<'a>(&'a Comparison);

impl Display for Summary<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        self.0.write(f, false)
    }
}

/// One line: the resident move, each part that moved (largest first) with what moved it, the
/// cross-thread share, and the cause with its remedy.
///
/// `RSS +41.0 MiB (118.0 MiB → 159.0 MiB) between 14:02:40 and 14:03:10 UTC; holes +33.0 MiB in
/// classes 14.0 KiB..=16.0 KiB, pinned by `upload::handle` (+29.0 MiB pinned, +0.4 MiB live); ...`
impl Display for Comparison {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        self.write(f, true)
    }
}

impl Comparison {
    /// The finding a report carries for this step while it is recent: kind `step`, the resident
    /// rise as its bytes, the comparison as its summary and the cause's remedy.
    pub(crate) fn finding(&self, severity: Severity) -> Finding {
        Finding {
            kind: FindingKind::Step,
            severity,
            bytes: self.rss_delta().max(0).unsigned_abs(),
            estimated: true,
            summary: Summary(self).to_string(),
            remedy: self.remedy.clone().unwrap_or_default(),
        }
    }

    /// The step in a few words, as the history's picture labels it: the resident move and the part
    /// that moved most, with the classes and the site behind it.
    ///
    /// `RSS +41.0 MiB: holes +33.0 MiB in classes 14.0 KiB..=16.0 KiB, pinned by upload::handle`
    #[must_use]
    pub fn headline(&self) -> String {
        let mut s = format!("RSS {}", SignedBytes(self.rss_delta()));
        let Some(p) = self.parts.first().filter(|p| p.delta() != 0) else { return s };
        s += &format!(": {} {}", p.part.name().replace('_', " "), SignedBytes(p.delta()));
        let site = self.sites.first().and_then(SiteMove::function);
        match p.part {
            Part::Holes if p.delta() > 0 => {
                match self.hole_classes {
                    Some(c) if c.min_size == c.max_size => s += &format!(" in class {}", Bytes(c.min_size)),
                    Some(c) => s += &format!(" in classes {}..={}", Bytes(c.min_size), Bytes(c.max_size)),
                    None => {}
                }
                if let Some(f) = site {
                    s += &format!(", pinned by {f}");
                }
            }
            Part::Live if p.delta() > 0 => {
                if let Some(f) = site {
                    s += &format!(", held by {f}");
                }
            }
            _ => {}
        }
        if self.cause == Some(FindingKind::CrossThread) {
            s += ", cross-thread frees";
        }
        s
    }

    fn write(&self, f: &mut Formatter<'_>, with_remedy: bool) -> fmt::Result {
        let rise = self.rss_delta();
        write!(
            f,
            "RSS {} ({} → {}) between {} and {} UTC",
            SignedBytes(rise),
            Bytes(self.rss_bytes.0),
            Bytes(self.rss_bytes.1),
            TimeOfDay { unix_ms: self.unix_ms.0, millis: false },
            TimeOfDay { unix_ms: self.unix_ms.1, millis: false }
        )?;
        let notable = (rise.unsigned_abs() / 50).max(64 << 10);
        let by_pins = matches!(self.cause, Some(FindingKind::Holes | FindingKind::CrossThread));
        for p in self.parts.iter().filter(|p| p.delta().unsigned_abs() >= notable).take(4) {
            write!(f, "; {} {}", p.part.name().replace('_', " "), SignedBytes(p.delta()))?;
            match p.part {
                Part::Holes if p.delta() > 0 => {
                    if let Some(c) = self.hole_classes {
                        let (lo, hi) = (Bytes(c.min_size), Bytes(c.max_size));
                        if c.min_size == c.max_size {
                            write!(f, " in class {lo}")?
                        } else {
                            write!(f, " in classes {lo}..={hi}")?
                        }
                    }
                    if by_pins {
                        self.write_sites(f, true)?;
                    }
                }
                Part::Live if p.delta() > 0 && !by_pins => {
                    self.write_sites(f, false)?;
                    for s in &self.scopes {
                        let grew = SignedBytes(signed(s.inuse_bytes.0, s.inuse_bytes.1));
                        match s.name.as_deref() {
                            Some(name) => write!(f, ", scope `{name}` ({grew})")?,
                            None => write!(f, ", outside every scope ({grew})")?,
                        }
                    }
                }
                _ => {}
            }
        }
        if let Some(c) = self.cross_thread {
            write!(f, "; cross-thread frees {} during the step", Percent(c.during, 0))?;
            if let Some(b) = c.before {
                write!(f, " ({} before)", Percent(b, 0))?;
            }
        }
        if let Some(kind) = self.cause {
            write!(f, " → {}", meaning(kind))?;
            if let Some(r) = self.remedy.as_ref().filter(|_| with_remedy) {
                write!(f, ": {r}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::History;
    use super::super::snapshot::{ClassHoles, ScopeMark, SiteMark, Split};
    use super::*;

    const MIB: u64 = 1 << 20;

    /// A round at `i` × 5 s: resident bytes the sum of `split`, the cumulative frees given.
    fn round(i: u64, split: Split, sites: &[(u64, u64, u64)], classes: &[(u64, u64)], frees: (u64, u64)) -> Snapshot {
        Snapshot {
            unix_ms: 1_700_000_000_000 + 5_000 * i,
            split: Some(split),
            sites: sites
                .iter()
                .map(|&(key, inuse_bytes, pinned)| SiteMark { key, inuse_bytes, pinned_bytes: Some(pinned) })
                .collect(),
            scopes: vec![ScopeMark { name: Some("uploads".into()), inuse_bytes: split.live_bytes / 2 }].into(),
            hole_classes: classes.iter().map(|&(size, holes_bytes)| ClassHoles { size, holes_bytes }).collect(),
            freed_bytes: frees.0,
            cross_thread_bytes: frees.1,
            ..Snapshot::bare(5 * i, split.rss_bytes, split.live_bytes)
        }
    }

    fn split(live: u64, holes: u64, reclaimable: u64) -> Split {
        Split {
            rss_bytes: (live + holes + reclaimable + 20) * MIB,
            live_bytes: live * MIB,
            holes_bytes: holes * MIB,
            reclaimable_bytes: reclaimable * MIB,
            outside_heap_bytes: 20 * MIB,
            ..Split::default()
        }
    }

    /// A history of 40 rounds with a step at round 20 of the given parts; the comparison of round
    /// 19 against round 25.
    fn step(after: Split, sites: &[(u64, u64, u64)], classes: &[(u64, u64)], cross: (u64, u64)) -> Comparison {
        let mut h = History::new();
        let before = split(100, 10, 2);
        for i in 0..40 {
            let frees = MIB * i;
            let f = if i < 20 {
                (frees, frees * cross.0 / 100)
            } else {
                let c0 = 20 * MIB * cross.0 / 100;
                (frees, c0 + (frees - 20 * MIB) * cross.1 / 100)
            };
            let s = if i < 20 {
                round(i, before, &[(1, 10 * MIB, MIB), (2, 30 * MIB, 0)], &[(16_384, 4 * MIB), (64, MIB)], f)
            } else {
                round(i, after, sites, classes, f)
            };
            h.record(s);
        }
        h.compare(Duration::from_secs(5 * 19), Duration::from_secs(5 * 25)).expect("a comparison")
    }

    /// Holes up 33 MiB in 14–16 KiB, pinned by site 1: the part, the classes covering the rise, the
    /// site by its pins, and the share of cross-thread frees during and before, against the model.
    #[test]
    fn holes_pinned_by_one_site() {
        let c = step(
            split(102, 43, 8),
            &[(1, 10 * MIB + MIB / 2, 30 * MIB), (2, 31 * MIB, MIB)],
            &[(16_384, 20 * MIB), (14_336, 14 * MIB), (64, MIB + 1)],
            (9, 34),
        );
        assert_eq!(c.rss_delta(), 41 * MIB as i64);
        assert_eq!(c.parts[0].part, Part::Holes);
        assert_eq!(c.parts[0].delta(), 33 * MIB as i64);
        assert_eq!(c.cause, Some(FindingKind::CrossThread), "30% during, 9% before");
        let span = c.hole_classes.expect("a span");
        assert_eq!((span.min_size, span.max_size), (14_336, 16_384));
        assert_eq!(span.holes_rise_bytes, 30 * MIB);
        assert_eq!(c.sites[0].key, 1, "{:?}", c.sites);
        assert_eq!(c.sites[0].pinned_bytes, Some((MIB, 30 * MIB)));
        // Rounds 19 to 25: one interval at 9%, five at 34%; before, six at 9%.
        let cross = c.cross_thread.expect("a share");
        let during = (1_000.0 * 0.09 + 5_000.0 * 0.34) / 6_000.0;
        assert!((cross.during - during).abs() < 0.001 && (cross.before.unwrap() - 0.09).abs() < 0.001, "{cross:?}");
        let text = c.to_string();
        assert!(text.starts_with("RSS +41.0 MiB (132.0 MiB → 173.0 MiB) between"), "{text}");
        assert!(text.contains("holes +33.0 MiB in classes 14.0 KiB..=16.0 KiB, pinned by site"), "{text}");
        assert!(text.contains("(+29.0 MiB pinned, +512.0 KiB live)"), "{text}");
        assert!(text.contains("cross-thread frees 30% during the step (9% before)"), "{text}");
    }

    /// Without cross-thread frees on the rise, the same holes are holes.
    #[test]
    fn holes_without_crossing_are_holes() {
        let c = step(split(102, 43, 8), &[(1, 10 * MIB, 30 * MIB)], &[(16_384, 30 * MIB)], (30, 32));
        assert_eq!(c.cause, Some(FindingKind::Holes));
    }

    /// Growth that live data explains says so and names the site and scope that grew, by bytes in
    /// use.
    #[test]
    fn live_growth_names_what_grew() {
        let c = step(split(150, 11, 2), &[(1, 10 * MIB, MIB), (2, 79 * MIB, 0)], &[(16_384, 5 * MIB)], (5, 5));
        assert_eq!(c.cause, Some(FindingKind::LiveData));
        assert_eq!(c.parts[0].part, Part::Live);
        assert_eq!(c.sites.len(), 1, "only the site that grew: {:?}", c.sites);
        assert_eq!((c.sites[0].key, c.sites[0].inuse_bytes), (2, (30 * MIB, 79 * MIB)));
        assert_eq!(c.scopes[0].inuse_bytes, (50 * MIB, 75 * MIB));
        let text = c.to_string();
        assert!(text.contains("live +50.0 MiB, held by site"), "{text}");
        assert!(text.contains("scope `uploads` (+25.0 MiB)"), "{text}");
        assert!(text.contains("live data explains it"), "{text}");
    }

    /// Free pages the allocator keeps: reclaimable, and the comparison the other way round (a fall)
    /// names the part that fell.
    #[test]
    fn reclaimable_and_a_fall() {
        let c = step(split(101, 10, 40), &[], &[], (5, 5));
        assert_eq!(c.cause, Some(FindingKind::Reclaimable));
        let mut h = History::new();
        h.record(round(0, split(101, 10, 40), &[], &[], (0, 0)));
        h.record(round(1, split(100, 10, 2), &[], &[], (0, 0)));
        let fall = h.compare(Duration::ZERO, Duration::from_secs(5)).unwrap();
        assert_eq!((fall.cause, fall.rss_delta()), (Some(FindingKind::Reclaimable), -39 * MIB as i64));
    }

    /// The diff taken against the wrong round (after the step, not before it) finds nothing moved.
    #[test]
    fn the_wrong_round_shows_no_step() {
        let mut h = History::new();
        for i in 0..40 {
            let s = if i < 20 { split(100, 10, 2) } else { split(102, 43, 8) };
            h.record(round(i, s, &[], &[], (0, 0)));
        }
        let c = h.compare(Duration::from_secs(5 * 21), Duration::from_secs(5 * 25)).unwrap();
        assert_eq!(c.rss_delta(), 0);
        assert!(c.parts.iter().all(|p| p.delta() == 0));
    }
}
