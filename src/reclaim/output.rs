//! What a reclaimer round tells the outside ([`Output::emit`]): its metrics, decided in one pure
//! function ([`writes`]) and handed to the `metrics` facade (gauges of its totals, counters
//! incremented by what changed since the last round, the release ratio of an action), and its
//! `tracing` events (actions, refault verdicts, skips, refusals, the limit's warnings).

use metrics::Label;

use super::engine::Step;
use super::limit::pressure::{Exhausted, Warning};
use super::outcome::{Refault, Round, Skip, Totals};
use super::threads::ThreadReleases;
use crate::backend::tuning::ThreadMethod;
use crate::format::Bytes;
use crate::publish::names::{Metric, Series};

/// What the reclaimer has told so far: the figures counters increment from, and the last skip's
/// reason (a skip is logged when the reason changes).
#[derive(Debug, Default)]
pub(super) struct Output {
    published: Published,
    last_skip: Option<&'static str>,
}

impl Output {
    /// Emits the round's metrics under `series` and its `tracing` events: every action and refault
    /// verdict at debug level, a skip when its reason differs from the previous round's, a refusal
    /// and the limit's warnings as warnings.
    pub(super) fn emit(&mut self, series: &mut Series, step: &Step, totals: &Totals) {
        let (names, base) = series.names();
        for w in writes(&step.round, step.refault.as_ref(), totals, &mut self.published) {
            let mut labels = base.to_vec();
            labels.extend(w.label.map(|(k, v)| Label::new(k, v)));
            let name = names.get(w.metric);
            match w.op {
                Op::Set(v) => metrics::gauge!(name, labels).set(v),
                Op::Increment(v) => metrics::counter!(name, labels).increment(v),
                Op::Record(v) => metrics::histogram!(name, labels).record(v),
            }
        }
        if let Some(r) = &step.refault {
            tracing::debug!(
                target: "frag",
                regained_bytes = r.regained_bytes,
                minor_faults = r.minor_faults,
                backoff = totals.backoff,
                "frag reclaimer: after the last release, {r}"
            );
        }
        match &step.round {
            Round::Acted(a) => {
                self.last_skip = None;
                tracing::debug!(
                    target: "frag",
                    method = a.method.name(),
                    predicted_bytes = a.predicted_bytes,
                    released_bytes = a.released_bytes(),
                    rss_after = a.rss_after,
                    wall_us = a.wall.as_micros() as u64,
                    cpu_us = a.cpu.as_micros() as u64,
                    "frag reclaimer: {a}"
                );
            }
            Round::Skipped(s) => {
                if let Skip::Failed(e) = s {
                    tracing::warn!(target: "frag", error = %e, "frag reclaimer: the backend refused to release memory");
                } else if self.last_skip != Some(s.name()) {
                    tracing::debug!(target: "frag", reason = s.name(), "frag reclaimer: no action: {s}");
                }
                self.last_skip = Some(s.name());
            }
        }
        for w in &step.warnings {
            match *w {
                Warning::Exhausted(e) => warn_exhausted(e),
                Warning::Eta { eta, slope, limit } => warn_eta(eta, slope, limit),
            }
        }
    }
}

/// Says that live data and the allocator's floor exceed the limit, and which of them keeps RSS over.
fn warn_exhausted(e: Exhausted) {
    let why = if e.by_holes() {
        format!(
            "{} of it is free space inside pages that still hold live blocks (holes), which the allocator \
             returns only once those blocks are freed: this is fragmentation, and the report's holes finding \
             names the classes and sites that pin it",
            Bytes(e.pinned)
        )
    } else {
        "this is the program's data, not fragmentation: raise the limit or hold less".to_owned()
    };
    tracing::warn!(
        target: "frag",
        rss = e.rss,
        live_bytes = e.live,
        releasable_bytes = e.releasable,
        holes_bytes = e.pinned,
        limit = e.limit.bytes,
        target_bytes = e.limit.target,
        "frag reclaimer: RSS {} is over the memory limit's target {} (limit {}), and releasing all {} the heap \
         holds free would not bring it under: the program's live data ({}) and the allocator's floor exceed \
         the limit; {why}. The reclaimer goes on at its base CPU share.",
        Bytes(e.rss),
        Bytes(e.limit.target),
        Bytes(e.limit.bytes),
        Bytes(e.releasable),
        Bytes(e.live)
    );
}

/// Says that RSS will reach `limit` in `eta` at `slope` bytes per second.
fn warn_eta(eta: core::time::Duration, slope: f64, limit: u64) {
    tracing::warn!(
        target: "frag",
        eta_secs = eta.as_secs(),
        bytes_per_sec = slope as u64,
        limit,
        "frag reclaimer: memory limit {} in ~{} at +{}/s",
        Bytes(limit),
        crate::format::Span(eta),
        Bytes(slope as u64)
    );
}

/// How a series changes.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    /// A gauge set to the value.
    Set(f64),
    /// A counter increased by the value.
    Increment(u64),
    /// A histogram recording the value.
    Record(f64),
}

/// One change to one series.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Write {
    metric: Metric,
    /// A label of this series beside the reclaimer's own.
    label: Option<(&'static str, &'static str)>,
    op: Op,
}

/// What was last published of the totals that counters increment from.
#[derive(Clone, Copy, Debug, Default)]
struct Published {
    assists: u64,
    threads: ThreadReleases,
}

fn set(metric: Metric, v: f64) -> Write {
    Write { metric, label: None, op: Op::Set(v) }
}

fn increment(metric: Metric, label: Option<(&'static str, &'static str)>, v: u64) -> Write {
    Write { metric, label, op: Op::Increment(v) }
}

/// The writes of one round (`round`, with the refault verdict on the previous release if one came
/// due), given the totals after it; `published` moves on to them.
fn writes(round: &Round, refault: Option<&Refault>, totals: &Totals, published: &mut Published) -> Vec<Write> {
    let mut out =
        vec![set(Metric::ReclaimSeconds, totals.cpu.as_secs_f64()), set(Metric::ReclaimCpuShare, totals.share)];
    let assists = totals.assists.saturating_sub(core::mem::replace(&mut published.assists, totals.assists));
    // Registered from the first round with a limit, so that a dashboard shows zero, not nothing.
    if assists > 0 || totals.limit_bytes.is_some() {
        out.push(increment(Metric::ReclaimAssists, None, assists));
    }
    out.push(set(Metric::ReclaimAssistSeconds, totals.assist_cpu.as_secs_f64()));
    if let (Some(limit), Some(target)) = (totals.limit_bytes, totals.target_bytes) {
        out.push(set(Metric::MemoryLimit, limit as f64));
        out.push(set(Metric::MemoryLimitTarget, target as f64));
        out.push(set(Metric::ReclaimOverTarget, totals.over_target.as_secs_f64()));
        for (part, bytes) in totals.held.unwrap_or_default().parts() {
            out.push(Write { metric: Metric::MemoryLimitHeld, label: Some(("part", part)), op: Op::Set(bytes as f64) });
        }
    }
    let (now, before) = (totals.threads, core::mem::replace(&mut published.threads, totals.threads));
    for method in [ThreadMethod::Idle, ThreadMethod::Collect] {
        let new = now.count(method).saturating_sub(before.count(method));
        if new > 0 {
            out.push(increment(Metric::ReclaimThreadReleases, Some(("method", method.name())), new));
        }
    }
    let bytes = now.released_bytes.saturating_sub(before.released_bytes);
    if bytes > 0 {
        out.push(increment(Metric::ReclaimThreadReleasedBytes, None, bytes));
    }
    if let Some(r) = refault {
        out.push(increment(Metric::ReclaimRefaultBytes, None, r.regained_bytes));
        out.push(increment(Metric::ReclaimRefaultFaults, None, r.minor_faults));
    }
    match round {
        Round::Acted(a) => {
            out.push(increment(Metric::ReclaimActions, Some(("method", a.method.name())), 1));
            out.push(increment(Metric::ReclaimedBytes, None, a.released_bytes()));
            out.push(increment(Metric::ReclaimPredicted, None, a.predicted_bytes));
            if let Some(ratio) = a.release_ratio() {
                out.push(Write { metric: Metric::ReclaimReleaseRatio, label: None, op: Op::Record(ratio) });
            }
        }
        Round::Skipped(s) => out.push(increment(Metric::ReclaimSkipped, Some(("reason", s.name())), 1)),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::heap_split::Part;
    use crate::backend::tuning::Method;
    use crate::reclaim::outcome::{Action, Skip};
    use core::time::Duration;

    fn find(writes: &[Write], metric: Metric) -> Vec<(Option<(&'static str, &'static str)>, Op)> {
        writes.iter().filter(|w| w.metric == metric).map(|w| (w.label, w.op)).collect()
    }

    /// Counters move by what changed since the round before; gauges carry the totals; a limit
    /// registers the assists counter at zero.
    #[test]
    fn a_round_publishes_its_changes() {
        let mut published = Published::default();
        let mut totals = Totals { cpu: Duration::from_millis(250), share: 0.01, ..Totals::default() };
        let w = writes(&Round::Skipped(Skip::FirstRound), None, &totals, &mut published);
        assert_eq!(find(&w, Metric::ReclaimSeconds), [(None, Op::Set(0.25))]);
        assert_eq!(find(&w, Metric::ReclaimSkipped), [(Some(("reason", Skip::FirstRound.name())), Op::Increment(1))]);
        assert!(find(&w, Metric::ReclaimAssists).is_empty(), "no limit, no assists: not registered");
        assert!(find(&w, Metric::MemoryLimit).is_empty());

        totals.assists = 3;
        totals.limit_bytes = Some(1 << 30);
        totals.target_bytes = Some(950 << 20);
        let action = Action {
            at: Duration::from_secs(1),
            method: Method::Collect,
            predicted_bytes: 100,
            predicted_from: Part::Reclaimable,
            rss_before: 1_000,
            rss_after: 920,
            wall: Duration::from_millis(1),
            cpu: Duration::from_millis(1),
            refault: None,
        };
        let w = writes(&Round::Acted(action), None, &totals, &mut published);
        assert_eq!(find(&w, Metric::ReclaimAssists), [(None, Op::Increment(3))]);
        assert_eq!(find(&w, Metric::MemoryLimit), [(None, Op::Set((1u64 << 30) as f64))]);
        assert_eq!(find(&w, Metric::ReclaimActions), [(Some(("method", Method::Collect.name())), Op::Increment(1))]);
        assert_eq!(find(&w, Metric::ReclaimedBytes), [(None, Op::Increment(80))]);
        assert_eq!(find(&w, Metric::ReclaimReleaseRatio), [(None, Op::Record(0.8))]);
        // Nothing new: the assists counter stays registered at zero more.
        let w = writes(&Round::Skipped(Skip::FirstRound), None, &totals, &mut published);
        assert_eq!(find(&w, Metric::ReclaimAssists), [(None, Op::Increment(0))]);
        // Under the target every part of what holds RSS over it reads 0; over it, the round's parts.
        assert!(find(&w, Metric::MemoryLimitHeld).iter().all(|(_, op)| *op == Op::Set(0.0)));
        totals.held = Some(super::super::outcome::Held { rss: 100, live: 40, holes: 45, reclaimable: 5, other: 10 });
        let w = writes(&Round::Skipped(Skip::FirstRound), None, &totals, &mut published);
        assert_eq!(
            find(&w, Metric::MemoryLimitHeld),
            [
                (Some(("part", "live")), Op::Set(40.0)),
                (Some(("part", "holes")), Op::Set(45.0)),
                (Some(("part", "reclaimable")), Op::Set(5.0)),
                (Some(("part", "other")), Op::Set(10.0))
            ]
        );
    }
}
