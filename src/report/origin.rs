//! The `origin` section of a report, from the shards' origin totals and the process-wide tallies.

use crate::estimate::{
    ClassSum, MIN_SAMPLES_INTERVAL, MIN_SAMPLES_SHARE, bytes_interval, count_interval, effective_samples, units, wilson,
};
use crate::origin::TALLY;
use crate::origin::tally::{self, LIFETIME_DECADES};
use crate::sampler::{self, Sampling, TABLE};
use crate::stats::class::NUM_CLASSES;
use crate::stats::shard::OriginTotals;
use crate::sync::Ordering;

/// Where blocks are freed relative to where they were allocated, estimated from sampled blocks.
///
/// Counts and bytes are estimates: each sampled block stands for the inverse of its sampling
/// probability. With [`Sampling::EveryBlock`] they are exact (for blocks
/// allocated and freed while it was on).
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Origin {
    /// The sampling in effect (figures from earlier samples stay when it is off now); serialises as
    /// `{"mean_bytes": n}`, `"every_block"` or `"off"`.
    pub sampling: crate::sampler::Sampling,
    /// Blocks sampled at allocation and recorded in the side table.
    pub sampled_blocks: u64,
    /// Sampled blocks freed since (the figures below come from these).
    pub sampled_frees: u64,
    /// Samples lost because the side table was full around their address.
    pub dropped_samples: u64,
    /// Frees of blocks, local and cross-thread: deallocations and the old blocks of reallocations.
    /// Exact in the [`Exact`](crate::Exact) tier (`frees_exact`), estimated from the samples in the
    /// sampled tier. JSON: `est_frees`.
    #[cfg_attr(feature = "serde", serde(rename = "est_frees"))]
    pub frees: u64,
    /// Whether `frees` is the exact count (the exact tier counts every free): `cross_thread_frees`
    /// is then the estimated share of it.
    pub frees_exact: bool,
    /// Fewer than 30 sampled frees: the estimates are too few to tell (the text report says so
    /// instead of printing them).
    pub too_few_samples: bool,
    /// Estimated frees made on another thread than the allocating one. JSON: `est_cross_thread_frees`.
    #[cfg_attr(feature = "serde", serde(rename = "est_cross_thread_frees"))]
    pub cross_thread_frees: u64,
    /// `cross_thread_frees / frees`.
    pub cross_thread_free_ratio: Option<f64>,
    /// Estimated requested bytes freed, local and cross-thread. JSON: `est_freed_bytes`.
    #[cfg_attr(feature = "serde", serde(rename = "est_freed_bytes"))]
    pub freed_bytes: u64,
    /// Estimated requested bytes freed on another thread than the allocating one. JSON: `est_cross_thread_bytes`.
    #[cfg_attr(feature = "serde", serde(rename = "est_cross_thread_bytes"))]
    pub cross_thread_bytes: u64,
    /// `cross_thread_bytes` over estimated freed bytes.
    pub cross_thread_byte_ratio: Option<f64>,
    /// 95% interval of `cross_thread_free_ratio` (Wilson score with the samples' effective size).
    pub ratio_interval: Option<(f64, f64)>,
    /// 95% interval of `frees` (`None` with too few samples; a single point when `frees_exact`).
    /// Each block is sampled on its own (disjoint stretches of a Poisson process over allocated
    /// bytes). The interval is built size class by size class: a class with enough sampled frees
    /// adds the normal spread (variance `Σ w(w − 1)` over its samples, `w` each one's weight), a class
    /// with few adds Poisson limits on its count, and a class with none the most its unseen frees
    /// could be, so on tiny blocks the upper end is a bound (docs/SAMPLING.md). JSON:
    /// `est_frees_interval`.
    #[cfg_attr(feature = "serde", serde(rename = "est_frees_interval"))]
    pub frees_interval: Option<(u64, u64)>,
    /// 95% interval of `cross_thread_frees`: the ends of `frees_interval` times the ends of
    /// `ratio_interval`. JSON: `est_cross_thread_frees_interval`.
    #[cfg_attr(feature = "serde", serde(rename = "est_cross_thread_frees_interval"))]
    pub cross_thread_frees_interval: Option<(u64, u64)>,
    /// 95% interval of `cross_thread_bytes`: each sampled free of `s` bytes and weight `w` adds
    /// `w(w − 1)s²` to the estimate's variance. JSON: `est_cross_thread_bytes_interval`.
    #[cfg_attr(feature = "serde", serde(rename = "est_cross_thread_bytes_interval"))]
    pub cross_thread_bytes_interval: Option<(u64, u64)>,
    /// Largest cells of the (allocating thread → freeing thread) matrix, by frees.
    pub pairs: Vec<OriginPair>,
    /// Matrix cells that did not fit (more distinct thread pairs than the matrix holds).
    pub dropped_pairs: u64,
    /// Frees by block lifetime (allocation to free), local and cross-thread.
    pub lifetimes: Vec<LifetimeRow>,
}

/// One cell of the origin matrix.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct OriginPair {
    /// OS thread id of the allocating thread.
    pub alloc_tid: u64,
    /// Its name, if it is still known.
    pub alloc_thread: Option<String>,
    /// OS thread id of the freeing thread.
    pub free_tid: u64,
    /// Its name, if it is still known.
    pub free_thread: Option<String>,
    /// Estimated frees.
    #[cfg_attr(feature = "serde", serde(rename = "est_frees"))]
    pub frees: u64,
    /// Estimated requested bytes freed. JSON: `est_bytes`.
    #[cfg_attr(feature = "serde", serde(rename = "est_bytes"))]
    pub bytes: u64,
    /// 95% intervals of `frees` and `bytes` (as [`Origin::frees_interval`] and
    /// [`Origin::cross_thread_bytes_interval`]); `None` when the pair's samples weigh less than 30
    /// equal ones. JSON: `est_frees_interval`, `est_bytes_interval`.
    #[cfg_attr(feature = "serde", serde(rename = "est_frees_interval"))]
    pub frees_interval: Option<(u64, u64)>,
    /// See `frees_interval`.
    #[cfg_attr(feature = "serde", serde(rename = "est_bytes_interval"))]
    pub bytes_interval: Option<(u64, u64)>,
}

/// Frees of blocks whose lifetime fell in one decade.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct LifetimeRow {
    /// Lifetimes below this many nanoseconds (and at least the previous row's bound); `None` for the
    /// last row.
    pub below_ns: Option<u64>,
    /// Estimated frees on the allocating thread.
    #[cfg_attr(feature = "serde", serde(rename = "est_local_frees"))]
    pub local_frees: u64,
    /// Estimated frees on another thread.
    pub cross_thread_frees: u64,
}

/// Pairs shown in a report.
const TOP_PAIRS: usize = 10;

fn share(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64)
}

/// Estimated cross-thread share of class `class`'s frees and its 95% interval (`None` on fewer than
/// `MIN_SAMPLES_SHARE` sampled frees: too few to tell), and the sampled frees it rests on.
pub(super) fn class_ratio(class: usize) -> (Option<f64>, Option<(f64, f64)>, u64) {
    let c = TALLY.class(class);
    let ratio = share(c.cross, c.frees).filter(|_| c.samples >= MIN_SAMPLES_SHARE);
    (ratio, ratio.and_then(|p| wilson(p, effective_samples(c.frees, c.w2))), c.samples)
}

/// Estimates `(a, b)` of two parts of an exact total `cap`, each at most what is left of `cap`: an
/// estimate never exceeds the exact count it is part of. The first part and the sum are minimums of
/// non-decreasing sequences, so both, published as counters, never go down.
pub(super) fn clamp_parts(a: u64, b: u64, cap: u64) -> (u64, u64, bool) {
    let a2 = a.min(cap);
    let b2 = b.min(cap - a2);
    (a2, b2, a2 != a || b2 != b)
}

/// What the section knows of a thread: its name, and the blocks it freed (deallocations plus
/// reallocations) and their requested bytes, where its row is still in the report and the tier
/// counts them exactly.
pub(super) struct ThreadFacts {
    pub(super) name: Option<String>,
    pub(super) freed: Option<(u64, u64)>,
}

/// The process's frees: the exact count where the tier keeps one, else the estimate from the origin
/// sums; and its 95% interval (`None` on too few samples).
fn frees(all: &OriginTotals, exact: Option<u64>, enough: bool) -> (u64, Option<(u64, u64)>) {
    if let Some(n) = exact {
        return (n, Some((n, n)));
    }
    let estimate = units(all.local.saturating_add(all.remote));
    let mean = sampler::interval_mean();
    let mut sum = ClassSum::default();
    for i in 0..NUM_CLASSES {
        let c = TALLY.class(i);
        sum.add(c.frees, c.w2, crate::stats::class::weights(i, mean));
    }
    (estimate, enough.then(|| sum.interval(estimate, u64::MAX)))
}

/// `share` of `whole`, and the ends of `whole`'s interval times the ends of the share's.
fn part(share: f64, share_interval: (f64, f64), whole: u64, whole_interval: (u64, u64)) -> (u64, (u64, u64)) {
    let of = |s: f64, n: u64| libm::round(s * n as f64) as u64;
    let estimate = of(share, whole);
    let (lo, hi) = (of(share_interval.0, whole_interval.0), of(share_interval.1, whole_interval.1));
    (estimate, (lo.min(estimate), hi.max(estimate)))
}

/// Builds the section from the sum of every thread's origin totals. `exact` is the exact number of
/// frees (deallocations plus reallocations) and of requested bytes freed, where the tier counts them;
/// `thread` tells what is known of a thread id.
pub(super) fn section(
    all: OriginTotals,
    exact: Option<(u64, u64)>,
    thread: &dyn Fn(u64) -> ThreadFacts,
) -> Option<Origin> {
    let sampling = sampler::sampling();
    // Frees first: a block is counted as sampled before it can be freed, so read in this order the
    // frees are not more than the blocks, whatever the report itself allocates and frees meanwhile.
    let sampled_frees = TALLY.sampled_frees();
    let sampled_blocks = TALLY.sampled.load(Ordering::Relaxed);
    if sampling == Sampling::Off && sampled_blocks == 0 {
        return None;
    }
    let frees_w = all.local.saturating_add(all.remote);
    let frees_w2 = all.local_w2.saturating_add(all.remote_w2);
    let bytes_w = all.local_bytes.saturating_add(all.remote_bytes);
    let ratio = share(all.remote, frees_w);
    let interval = ratio.and_then(|p| wilson(p, effective_samples(frees_w, frees_w2)));
    let enough = sampled_frees as f64 >= MIN_SAMPLES_INTERVAL;
    let (frees, frees_interval) = frees(&all, exact.map(|e| e.0), enough);
    let max_bytes = exact.map_or(u64::MAX, |e| e.1);

    let mut pairs = TALLY.pairs();
    pairs.sort_by_key(|p| core::cmp::Reverse(p.sums.w));
    let pairs = pairs
        .into_iter()
        .take(TOP_PAIRS)
        .map(|p| {
            let s = p.sums;
            let freer = thread(u64::from(p.free_tid));
            // A cell's frees are some of its freeing thread's: never more than it made, where known.
            let (max_frees, max_bytes) = freer.freed.unwrap_or((u64::MAX, u64::MAX));
            let bytes = units(s.wb).min(max_bytes);
            let enough = effective_samples(s.w, s.w2) >= MIN_SAMPLES_INTERVAL;
            OriginPair {
                alloc_tid: u64::from(p.alloc_tid),
                alloc_thread: thread(u64::from(p.alloc_tid)).name,
                free_tid: u64::from(p.free_tid),
                free_thread: freer.name,
                frees: units(s.w).min(max_frees),
                bytes,
                frees_interval: enough.then(|| count_interval(s.w, s.w2, max_frees)),
                bytes_interval: enough.then(|| bytes_interval(bytes, s.bytes_var, max_bytes)),
            }
        })
        .collect();
    let lifetimes = (0..LIFETIME_DECADES)
        .map(|i| {
            let (local, cross) = TALLY.lifetime(i);
            LifetimeRow {
                below_ns: tally::lifetime_upper_ns(i),
                local_frees: units(local),
                cross_thread_frees: units(cross),
            }
        })
        .collect();

    // The cross-thread frees are the estimated share of the frees: in the sampled tier the same as
    // their own estimate, in the exact tier the share of the exact count (a ratio estimator, as
    // precise as the share; a dip between reports does not lower the published counter, which is
    // set with `absolute`). Their interval is the frees' interval times the share's.
    let cross = ratio.zip(interval).zip(frees_interval).map(|((r, ri), fi)| part(r, ri, frees, fi));
    let cross_thread_frees = cross.map_or(units(all.remote).min(frees), |c| c.0);
    let cross_thread_bytes = units(all.remote_bytes).min(max_bytes);
    Some(Origin {
        sampling,
        sampled_blocks,
        sampled_frees,
        dropped_samples: TABLE.dropped(),
        frees,
        frees_exact: exact.is_some(),
        too_few_samples: sampled_frees < MIN_SAMPLES_SHARE,
        cross_thread_frees,
        cross_thread_free_ratio: ratio,
        freed_bytes: units(bytes_w).min(max_bytes),
        cross_thread_bytes,
        cross_thread_byte_ratio: share(all.remote_bytes, bytes_w),
        ratio_interval: interval,
        frees_interval,
        cross_thread_frees_interval: cross.map(|c| c.1).filter(|_| enough),
        cross_thread_bytes_interval: enough
            .then(|| bytes_interval(cross_thread_bytes, all.remote_bytes_var, max_bytes)),
        pairs,
        dropped_pairs: TALLY.pair_drops(),
        lifetimes,
    })
}

#[cfg(test)]
mod tests {
    use crate::estimate::wilson;
    use crate::stats::clock::Clock;

    #[test]
    fn parts_never_exceed_their_exact_total() {
        use super::clamp_parts;
        assert_eq!(clamp_parts(3, 4, 10), (3, 4, false));
        assert_eq!(clamp_parts(8, 4, 10), (8, 2, true));
        assert_eq!(clamp_parts(12, 4, 10), (10, 0, true));
        // Monotone: as the estimates and the total grow, neither clamped part goes down.
        let mut last = (0, 0);
        for (a, b, cap) in [(5, 5, 8), (6, 5, 9), (6, 9, 12), (7, 9, 20)] {
            let (x, y, _) = clamp_parts(a, b, cap);
            assert!(x >= last.0 && x + y >= last.0 + last.1, "{a} {b} {cap}");
            last = (x, y);
        }
    }

    /// The interval's coverage, by simulation: many independent sampling clocks (the real one)
    /// over a workload with a known cross-thread share, each estimated and bounded the way `section`
    /// does it.
    #[test]
    fn interval_covers_the_truth_95_percent_of_the_time() {
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut uniform = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        let mean = 64 << 10;
        let (replicates, blocks) = (400, 100_000);
        let mut covered = 0;
        for r in 0..replicates {
            let clock = Clock::new();
            // Seeds far apart (a clock's draws walk its seed by a fixed step).
            clock.start(crate::stats::clock::splitmix64(r as u64), mean);
            let (mut w_all, mut w_cross, mut w2) = (0.0, 0.0, 0.0);
            let mut truth_cross = 0usize;
            for i in 0..blocks {
                let size = 16 + (i * 37) % 1009;
                let cross = uniform() < 0.3;
                truth_cross += usize::from(cross);
                if clock.count_down(size) {
                    continue;
                }
                if let Some(w) = clock.charge(size, mean, false).and_then(|e| e.weight) {
                    w_all += w;
                    w2 += w * w;
                    if cross {
                        w_cross += w;
                    }
                }
            }
            let truth = truth_cross as f64 / blocks as f64;
            let (lo, hi) = wilson(w_cross / w_all, w_all * w_all / w2).unwrap();
            covered += usize::from(lo <= truth && truth <= hi);
        }
        let coverage = covered as f64 / replicates as f64;
        // 95% nominal; with 400 replicates the binomial noise is about ±2 points.
        assert!((0.91..=0.99).contains(&coverage), "coverage {coverage}");
    }
}
