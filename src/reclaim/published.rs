//! What a reclaimer round publishes, decided in one pure function ([`writes`]) that the reclaimer
//! hands to the `metrics` facade: gauges of its totals, counters incremented by what changed since
//! the last round, and the release ratio of an action.

use crate::backend::knob::ThreadMethod;
use crate::publish::names::Metric;

use super::record::{Refault, Round, Totals};
use super::threads::ThreadReleases;

/// How a series changes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Op {
    /// A gauge set to the value.
    Set(f64),
    /// A counter increased by the value.
    Increment(u64),
    /// A histogram recording the value.
    Record(f64),
}

/// One change to one series.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Write {
    pub(super) metric: Metric,
    /// A label of this series beside the reclaimer's own.
    pub(super) label: Option<(&'static str, &'static str)>,
    pub(super) op: Op,
}

/// What was last published of the totals that counters increment from.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Published {
    pub(super) assists: u64,
    pub(super) threads: ThreadReleases,
}

fn set(metric: Metric, v: f64) -> Write {
    Write { metric, label: None, op: Op::Set(v) }
}

fn increment(metric: Metric, label: Option<(&'static str, &'static str)>, v: u64) -> Write {
    Write { metric, label, op: Op::Increment(v) }
}

/// The writes of one round (`round`, with the refault verdict on the previous release if one came
/// due), given the totals after it; `published` moves on to them.
pub(super) fn writes(
    round: &Round,
    refault: Option<&Refault>,
    totals: &Totals,
    published: &mut Published,
) -> Vec<Write> {
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
    use crate::backend::knob::Method;
    use crate::backend::split::Part;
    use crate::reclaim::record::{Action, Skip};
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
    }
}
