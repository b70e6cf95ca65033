//! A `Report` as metric samples: what is published, decided in one pure function.

use std::collections::BTreeMap;

use super::names::Metric;
use crate::report::diagnosis::{Diagnosis, FindingKind, Part, Severity, Source};
use crate::report::{Report, RowKind, Scopes};
use crate::scope::{NO_SCOPE, OTHER_SCOPES};

/// One value to publish.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Sample {
    pub(crate) metric: Metric,
    /// Labels of this series (besides the publisher's own).
    pub(crate) labels: Vec<(&'static str, String)>,
    /// `None`: the report has no value for it this round (see `Names::value` for what is published).
    pub(crate) value: Option<f64>,
}

fn push(out: &mut Vec<Sample>, metric: Metric, value: u64) {
    push_opt(out, metric, Some(value));
}

fn push_opt(out: &mut Vec<Sample>, metric: Metric, value: Option<u64>) {
    push_ratio(out, metric, value.map(|v| v as f64));
}

fn push_ratio(out: &mut Vec<Sample>, metric: Metric, value: Option<f64>) {
    out.push(Sample { metric, labels: Vec::new(), value });
}

/// The label of a size class: its upper bound in bytes, `+Inf` for the last.
pub(crate) fn class_label(max_size: Option<u64>) -> String {
    max_size.map_or_else(|| "+Inf".to_owned(), |m| m.to_string())
}

/// Every sample of `report`. Per-thread series only with `threads = Some(cap)`: threads grouped by
/// name, the `cap - 1` busiest names kept, the rest summed under `thread="other"`.
pub(crate) fn samples(report: &Report, threads: Option<usize>) -> Vec<Sample> {
    let mut out = Vec::new();
    let t = &report.tracked;
    push(&mut out, Metric::TrackedAllocated, t.allocated_bytes);
    push(&mut out, Metric::TrackedUsable, t.usable_bytes);
    push(&mut out, Metric::TrackedPeak, t.peak_allocated_bytes);
    push(&mut out, Metric::LiveBlocks, t.live_blocks);
    push(&mut out, Metric::Allocations, t.allocations);
    push(&mut out, Metric::Deallocations, t.deallocations);
    push(&mut out, Metric::Reallocations, t.reallocations);
    if let Some(a) = &report.allocator {
        push_opt(&mut out, Metric::AllocatorAllocated, a.allocated);
        push_opt(&mut out, Metric::AllocatorActive, a.active);
        push_opt(&mut out, Metric::AllocatorMetadata, a.metadata);
        push_opt(&mut out, Metric::AllocatorResident, a.resident);
        push_opt(&mut out, Metric::AllocatorMapped, a.mapped);
        push_opt(&mut out, Metric::AllocatorRetained, a.retained);
        push_opt(&mut out, Metric::AllocatorFree, a.free);
        push_opt(&mut out, Metric::AllocatorCommitted, a.committed);
    }
    push_opt(&mut out, Metric::ProcessRss, report.process.rss_bytes);
    push_opt(&mut out, Metric::ProcessPss, report.process.pss_bytes);
    push_opt(&mut out, Metric::ProcessAnon, report.process.anon_bytes);
    let cgroup = report.process.cgroup.as_ref();
    push_opt(&mut out, Metric::CgroupCurrent, cgroup.map(|c| c.current_bytes));
    push_opt(&mut out, Metric::CgroupMax, cgroup.and_then(|c| c.max_bytes));
    let f = &report.fragmentation;
    push_ratio(&mut out, Metric::FragmentationRatio, f.ratio);
    push_ratio(&mut out, Metric::ProcessFragmentationRatio, f.process_ratio);
    push(&mut out, Metric::InternalFragmentation, f.internal_bytes);
    if let Some(o) = &report.origin {
        push(&mut out, Metric::CrossThreadFrees, o.cross_thread_frees);
        push(&mut out, Metric::CrossThreadFreedBytes, o.cross_thread_bytes);
        push(&mut out, Metric::SampledFrees, o.frees);
        push_ratio(&mut out, Metric::CrossThreadRatio, o.cross_thread_free_ratio);
    }
    if let Some(d) = &report.diagnosis {
        diagnosis_samples(d, &mut out);
    }
    for c in &report.size_classes {
        let labels = vec![("class", class_label(c.max_size))];
        for (metric, value) in [
            (Metric::ClassLiveBytes, c.live_bytes),
            (Metric::ClassLiveBlocks, c.live_blocks),
            (Metric::ClassUsableBytes, c.usable_bytes),
            (Metric::ClassAllocations, c.allocations),
        ] {
            out.push(Sample { metric, labels: labels.clone(), value: Some(value as f64) });
        }
    }
    if let Some(s) = &report.scopes {
        scope_samples(s, &mut out);
    }
    if let Some(cap) = threads {
        thread_samples(report, cap.max(1), &mut out);
    }
    out
}

/// Per scope: the published scopes under their names, the allocations outside every scope as
/// `none`, every other scope summed as `other` (present even at 0, so that the sum over `scope` is
/// always every sampled byte).
fn scope_samples(s: &Scopes, out: &mut Vec<Sample>) {
    let mut by_label: BTreeMap<String, [u64; 2]> = BTreeMap::new();
    by_label.insert(OTHER_SCOPES.to_owned(), [0; 2]);
    for r in &s.rows {
        let label = match &r.name {
            None => NO_SCOPE,
            Some(name) if r.published => name.as_str(),
            Some(_) => OTHER_SCOPES,
        };
        let sums = by_label.entry(label.to_owned()).or_default();
        sums[0] += r.inuse_bytes;
        sums[1] += r.alloc_bytes;
    }
    for (label, [live, allocated]) in by_label {
        let labels = vec![("scope", label)];
        out.push(Sample { metric: Metric::ScopeLiveBytes, labels: labels.clone(), value: Some(live as f64) });
        out.push(Sample { metric: Metric::ScopeAllocatedBytes, labels, value: Some(allocated as f64) });
    }
}

/// The breakdown by part (split parts and `unexplained`) and the bytes of every finding kind, 0 for
/// kinds not raised now (a gauge keeps its last value otherwise).
fn diagnosis_samples(d: &Diagnosis, out: &mut Vec<Sample>) {
    let b = &d.breakdown;
    for part in Part::ALL.into_iter().filter(|p| b.source(*p) != Source::NotSplit) {
        let labels = vec![("part", part.name().to_owned())];
        out.push(Sample { metric: Metric::ResidentPart, labels, value: Some(b.bytes(part) as f64) });
    }
    let labels = vec![("part", "unexplained".to_owned())];
    out.push(Sample { metric: Metric::ResidentPart, labels, value: Some(b.unexplained_bytes as f64) });
    for kind in FindingKind::ALL.into_iter().filter(|k| *k != FindingKind::ConfigTrap) {
        let bytes: u64 = d.findings.iter().filter(|f| f.kind == kind).map(|f| f.bytes).sum();
        out.push(Sample {
            metric: Metric::FindingBytes,
            labels: vec![("kind", kind.name().to_owned())],
            value: Some(bytes as f64),
        });
    }
    let warn = d.findings.iter().filter(|f| f.severity == Severity::Warn).count();
    out.push(Sample { metric: Metric::FindingsWarn, labels: Vec::new(), value: Some(warn as f64) });
}

fn thread_samples(report: &Report, cap: usize, out: &mut Vec<Sample>) {
    let mut by_name: BTreeMap<String, [u64; 4]> = BTreeMap::new();
    for row in &report.threads {
        let name = match row.kind {
            RowKind::Retired => "retired".to_owned(),
            RowKind::Overflow => "overflow".to_owned(),
            _ if !row.alive => "retired".to_owned(),
            _ => row.name.clone().unwrap_or_else(|| "unnamed".to_owned()),
        };
        let sums = by_name.entry(name).or_default();
        for (s, v) in sums.iter_mut().zip([row.allocations, row.allocated_bytes, row.freed_bytes, row.freed_elsewhere])
        {
            *s += v;
        }
    }
    let mut rows: Vec<(String, [u64; 4])> = by_name.into_iter().collect();
    rows.sort_by_key(|(_, s)| core::cmp::Reverse(s[0]));
    if rows.len() > cap {
        let rest = rows.split_off(cap - 1);
        let mut other = [0u64; 4];
        for (_, s) in rest {
            other.iter_mut().zip(s).for_each(|(o, v)| *o += v);
        }
        rows.push(("other".to_owned(), other));
    }
    for (name, s) in rows {
        for (metric, value) in [
            (Metric::ThreadAllocations, s[0]),
            (Metric::ThreadAllocatedBytes, s[1]),
            (Metric::ThreadFreedBytes, s[2]),
            (Metric::ThreadFreedElsewhere, s[3]),
        ] {
            out.push(Sample { metric, labels: vec![("thread", name.clone())], value: Some(value as f64) });
        }
    }
}
