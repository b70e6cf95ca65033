//! The `origin` section of a report, from the shards' origin totals and the process-wide tallies.

use super::{LifetimeRow, Origin, OriginPair};
use crate::origin::TALLY;
use crate::origin::tally::{self, LIFETIME_BUCKETS};
use crate::sampler::{self, Sampling, TABLE, W_ONE};
use crate::stats::shard::OriginTotals;
use crate::sync::Ordering;

/// Pairs shown in a report.
const TOP_PAIRS: usize = 10;

/// Below this many sampled frees an estimate is shown as too few to tell (text) and flagged
/// [`Origin::too_few_samples`] (JSON): with 30 samples a share's 95% interval is still about ±0.17.
pub(crate) const MIN_SAMPLES: u64 = 30;

/// Weighted fixed point to a whole estimate.
pub(super) fn units(v: u64) -> u64 {
    (v + W_ONE / 2) / W_ONE
}

fn share(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64)
}

/// Estimated cross-thread share of class `class`'s frees (`None` on fewer than [`MIN_SAMPLES`]
/// sampled frees: too few to tell), and the sampled frees it rests on.
pub(super) fn class_ratio(class: usize) -> (Option<f64>, u64) {
    let (frees, cross, samples) = TALLY.class(class);
    (share(cross, frees).filter(|_| samples >= MIN_SAMPLES), samples)
}

/// Wilson score interval at 95% for a proportion `p` observed with effective sample size `n`.
pub(crate) fn wilson(p: f64, n: f64) -> Option<(f64, f64)> {
    if n.is_nan() || n <= 0.0 || !(0.0..=1.0).contains(&p) {
        return None;
    }
    const Z: f64 = 1.959_964;
    let z2 = Z * Z;
    let denom = 1.0 + z2 / n;
    let center = (p + z2 / (2.0 * n)) / denom;
    let half = Z * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / denom;
    Some(((center - half).max(0.0), (center + half).min(1.0)))
}

/// The effective number of samples (Kish: `(Σw)² / Σw²`) behind an estimate of `weighted` (fixed
/// point) whose squared weights sum to `w2`.
pub(super) fn effective_samples(weighted: u64, w2: u64) -> f64 {
    let w = weighted as f64 / W_ONE as f64;
    if w2 > 0 { w * w / w2 as f64 } else { 0.0 }
}

/// The 95% interval of a Horvitz–Thompson count whose weights (fixed point) sum to `weighted` and
/// whose squared weights sum to `w2`: the estimate ± 1.96 √(Σw² − Σw), the low end at least 0 and
/// the high end at most `cap` (the exact count it is part of).
pub(super) fn count_interval(weighted: u64, w2: u64, cap: u64) -> (u64, u64) {
    const Z: f64 = 1.959_964;
    let est = weighted as f64 / W_ONE as f64;
    let half = Z * (w2 as f64 - est).max(0.0).sqrt();
    let est = units(weighted).min(cap);
    (((est as f64 - half).max(0.0) as u64).min(est), ((est as f64 + half).ceil() as u64).clamp(est, cap.max(est)))
}

/// Estimates `(a, b)` of two parts of an exact total `cap`, each at most what is left of `cap`: an
/// estimate never exceeds the exact count it is part of. The first part and the sum are minimums of
/// non-decreasing sequences, so both, published as counters, never go down.
pub(super) fn clamp_parts(a: u64, b: u64, cap: u64) -> (u64, u64, bool) {
    let a2 = a.min(cap);
    let b2 = b.min(cap - a2);
    (a2, b2, a2 != a || b2 != b)
}

/// What the section knows of a thread: its name, and the exact blocks and requested bytes it freed
/// (deallocations plus reallocations), where its row is still in the report.
pub(super) struct ThreadFacts {
    pub(super) name: Option<String>,
    pub(super) freed: Option<(u64, u64)>,
}

/// Builds the section from the sum of every thread's origin totals. `thread` tells what is known of
/// a thread id; the exact number of blocks freed (deallocations plus reallocations) and of requested
/// bytes freed bound the estimates, process-wide and per freeing thread.
pub(super) fn section(
    all: OriginTotals,
    (exact_frees, exact_freed_bytes): (u64, u64),
    thread: &dyn Fn(u64) -> ThreadFacts,
) -> Option<Origin> {
    let sampling = sampler::sampling();
    let sampled_blocks = TALLY.sampled.load(Ordering::Relaxed);
    if sampling == Sampling::Off && sampled_blocks == 0 {
        return None;
    }
    let frees_w = all.local.saturating_add(all.remote);
    let bytes_w = all.local_bytes.saturating_add(all.remote_bytes);
    let ratio = share(all.remote, frees_w);
    let interval =
        ratio.and_then(|p| wilson(p, effective_samples(frees_w, all.local_w2.saturating_add(all.remote_w2))));

    let mut pairs = TALLY.pairs();
    pairs.sort_by_key(|p| core::cmp::Reverse(p.frees));
    let pairs = pairs
        .into_iter()
        .take(TOP_PAIRS)
        .map(|p| {
            let freer = thread(u64::from(p.free_tid));
            // A pair's frees are some of its freeing thread's frees: never more than that thread made.
            let (max_frees, max_bytes) = freer.freed.unwrap_or((exact_frees, exact_freed_bytes));
            OriginPair {
                alloc_tid: u64::from(p.alloc_tid),
                alloc_thread: thread(u64::from(p.alloc_tid)).name,
                free_tid: u64::from(p.free_tid),
                free_thread: freer.name,
                frees: units(p.frees).min(max_frees),
                bytes: units(p.bytes).min(max_bytes),
            }
        })
        .collect();
    let lifetimes = (0..LIFETIME_BUCKETS)
        .map(|i| {
            let (local, cross) = TALLY.lifetime(i);
            LifetimeRow {
                below_ns: tally::lifetime_upper_ns(i),
                local_frees: units(local),
                cross_thread_frees: units(cross),
            }
        })
        .collect();

    // The cross-thread part first: it is what the section is about, and the ratio (from the
    // unclamped estimates) stays as estimated.
    let (cross_thread_frees, local, clamped) = clamp_parts(units(all.remote), units(all.local), exact_frees);
    let sampled_frees = TALLY.sampled_frees.load(Ordering::Relaxed);
    let enough = sampled_frees >= MIN_SAMPLES;
    let frees_interval =
        enough.then(|| count_interval(frees_w, all.local_w2.saturating_add(all.remote_w2), exact_frees));
    let cross_thread_frees_interval = enough.then(|| count_interval(all.remote, all.remote_w2, exact_frees));
    Some(Origin {
        sampling,
        sampled_blocks,
        sampled_frees,
        dropped_samples: TABLE.dropped(),
        frees: cross_thread_frees + local,
        clamped,
        too_few_samples: sampled_frees < MIN_SAMPLES,
        cross_thread_frees,
        cross_thread_free_ratio: ratio,
        cross_thread_bytes: units(all.remote_bytes).min(exact_freed_bytes),
        cross_thread_byte_ratio: share(all.remote_bytes, bytes_w),
        ratio_interval: interval,
        frees_interval,
        cross_thread_frees_interval,
        pairs,
        dropped_pairs: TALLY.pair_drops(),
        lifetimes,
    })
}

#[cfg(test)]
mod tests {
    use super::wilson;
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

    #[test]
    fn wilson_matches_known_values() {
        // p = 0.3, n = 1000: 0.2723 .. 0.3292 (textbook Wilson).
        let (lo, hi) = wilson(0.3, 1000.0).unwrap();
        assert!((lo - 0.2727).abs() < 1e-3 && (hi - 0.3290).abs() < 1e-3, "{lo} {hi}");
        // All successes: the interval still has width.
        let (lo, hi) = wilson(1.0, 10.0).unwrap();
        assert!(lo < 0.75 && hi > 0.999, "{lo} {hi}");
        assert_eq!(wilson(0.5, 0.0), None);
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
            clock.start((r as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15), mean);
            let (mut w_all, mut w_cross, mut w2) = (0.0, 0.0, 0.0);
            let mut truth_cross = 0usize;
            for i in 0..blocks {
                let size = 16 + (i * 37) % 1009;
                let cross = uniform() < 0.3;
                truth_cross += usize::from(cross);
                if clock.take(size) {
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
