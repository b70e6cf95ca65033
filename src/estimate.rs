//! Estimates from samples: the fixed point the tallies keep them in, what each sample adds to their
//! variance, and their 95% intervals.
//!
//! A block of `s` bytes is sampled with probability `p = 1 - exp(-s / mean)` and stands for `w = 1/p`
//! blocks (Horvitz–Thompson). Each block is sampled on its own, so the variance of a count estimated
//! as `Σ w` is estimated by `Σ w(w − 1)` over the samples, and that of a byte total `Σ w·s` by
//! `Σ w(w − 1)·s²`. The tallies keep, beside each weighted sum, the sum of squared weights `Σ w²`
//! (from which the count's variance and the samples' effective number follow) and, for byte totals,
//! the byte variance itself. An interval is the estimate ± 1.96 standard errors, cut to what is
//! possible: never below 0, never above an exact total the estimate is part of.
//!
//! Leaf module: used by the tallies (cold path: no allocation) and the report.

/// The "too few samples" rules, one per kind of estimate. Below its rule an estimate is not shown: the
/// text report says "few", the JSON form has `None` (or `too_few_samples`).
///
/// A share (the cross-thread share of frees of the process, a class, a thread, a site) needs this many
/// sampled frees: with 30 a share's 95% interval is still about ±0.17.
pub(crate) const MIN_SAMPLES_SHARE: u64 = 30;

/// An interval on a count or byte estimate needs this many samples (effective samples where the
/// weights differ, see [`effective_samples`]): below it the normal approximation of the interval is
/// poor.
pub(crate) const MIN_SAMPLES_INTERVAL: f64 = 30.0;

/// A finding built on a share (the diagnosis's cross-thread finding) needs this many sampled frees:
/// the share is then known to about ±0.1.
pub(crate) const MIN_SAMPLES_FINDING: u64 = 100;

/// Fixed-point unit of weighted estimates: a tally of `W_ONE` is one block.
pub(crate) const W_ONE: u64 = 256;

/// Byte variances are kept in units of this many bytes squared: a sample adds at most about
/// `mean²` (`w(w − 1)s²` falls as `s` grows past the mean), so a `u64` holds the sum over 2^36
/// samples at the default mean, and small means keep a few significant digits.
const BYTES_VAR_UNIT: f64 = 1024.0;

/// The normal quantile of a two-sided 95% interval.
const Z95: f64 = 1.959_964;

/// What one sample of `weight` and `size` bytes adds to the tallies, in their fixed point.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SampleSums {
    /// `w`, in `W_ONE` units (at least one unit).
    pub(crate) w: u64,
    /// `w·s`, in `W_ONE` units.
    pub(crate) wb: u64,
    /// `w²`, a plain integer (at least 1).
    pub(crate) w2: u64,
    /// `w(w − 1)·s²`, in `BYTES_VAR_UNIT` units.
    pub(crate) bytes_var: u64,
}

impl SampleSums {
    /// The sums of one sample. No allocation, no panic (float to integer casts saturate).
    pub(crate) fn of(weight: f64, size: u64) -> Self {
        // A request's size fits an `i64` (`Layout`), which converts in one instruction.
        let s = size as i64 as f64;
        Self {
            w: nearest(weight * W_ONE as f64).max(1),
            wb: nearest(weight * s * W_ONE as f64),
            w2: nearest(weight * weight).max(1),
            bytes_var: nearest(weight * (weight - 1.0) * s * s / BYTES_VAR_UNIT),
        }
    }
}

/// `x` rounded to the nearest integer, halves up: 0 below 0.5 (and for NaN), `i64::MAX` from 2^63
/// on (where no sample's figure reaches: a weight times a size is about the size plus the mean). As
/// `libm::round` below 2^63, in a few instructions where it takes about thirty: a sample computes
/// eight of these.
#[inline]
pub(crate) fn nearest(x: f64) -> u64 {
    match whole_and_fraction(x) {
        Ok((whole, fraction)) => whole + u64::from(fraction >= 0.5),
        Err(rounded) => rounded,
    }
}

/// `x` taken apart below 2^63 (`Ok`): its truncation, a whole number below 2^63 (so adding one
/// cannot overflow), and the fraction left, which is exact (below 2^53 the subtraction is; above,
/// `x` is whole). Outside that range (`Err`), what any rounding of `x` is: 0 for NaN and negatives,
/// `i64::MAX` from 2^63 on. Through `i64`, which converts to and from `f64` in one instruction each
/// way, after one range test: an `as` cast would add its own saturation tests to each conversion.
#[inline(always)]
pub(crate) fn whole_and_fraction(x: f64) -> Result<(u64, f64), u64> {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if x >= TWO_63 {
        return Err(i64::MAX as u64);
    }
    if x.is_nan() || x < 0.0 {
        return Err(0);
    }
    // SAFETY: `x` is finite and in [0, 2^63), so its truncation fits an `i64`.
    let whole = unsafe { x.to_int_unchecked::<i64>() };
    Ok((whole as u64, x - whole as f64))
}

/// Weighted fixed point to a whole estimate.
pub(crate) fn units(v: u64) -> u64 {
    (v + W_ONE / 2) / W_ONE
}

/// `estimate` ± 1.96 `sqrt(variance)`, at least 0 and at most `cap` (the exact total the estimate
/// is part of; `u64::MAX` for none); it always contains `estimate.min(cap)`.
fn around(estimate: u64, variance: f64, cap: u64) -> (u64, u64) {
    let est = estimate.min(cap);
    let half = Z95 * variance.max(0.0).sqrt();
    (((est as f64 - half).max(0.0) as u64).min(est), ((est as f64 + half).ceil() as u64).clamp(est, cap.max(est)))
}

/// The normal 95% interval of a count whose weights (fixed point) sum to `weighted` and whose
/// squared weights sum to `w2`: variance `Σw² − Σw`. For the origin matrix's cells, which have no
/// class split; process-wide and class counts use [`ClassSum`] (the tests show where this one
/// fails on tiny blocks).
pub(crate) fn count_interval(weighted: u64, w2: u64, cap: u64) -> (u64, u64) {
    let est = weighted as f64 / W_ONE as f64;
    around(units(weighted), w2 as f64 - est, cap)
}

/// The 95% interval of a byte total estimated as `estimate` bytes, whose samples' byte variances
/// ([`SampleSums::bytes_var`]) sum to `bytes_var`.
pub(crate) fn bytes_interval(estimate: u64, bytes_var: u64, cap: u64) -> (u64, u64) {
    around(estimate, bytes_var as f64 * BYTES_VAR_UNIT, cap)
}

/// The 95% interval of a group's live bytes (a scope's) estimated as `estimate` from `samples` live
/// samples whose byte variances sum to `bytes_var`, sampled at a mean of `mean` bytes (`None`: every
/// block is sampled, and the estimate is exact).
///
/// With [`MIN_SAMPLES_INTERVAL`] samples or more, the normal interval ([`bytes_interval`]). With
/// fewer, its variance, estimated from the samples seen, misses the blocks nobody sampled (a group
/// with no sample gets the interval (0, 0) whatever it holds). There the samples are close to a
/// Poisson draw whose mean is `Σ p` over the group's live blocks, and every sample stands for at
/// least `mean` bytes (`w·s = s / (1 − e^(−s/mean)) ≥ mean`, growing with `s`): Garwood's limits of
/// that Poisson mean, times `mean` below and times the larger of `mean` and the bytes each sample
/// stands for on average above, bound the bytes.
pub(crate) fn live_bytes_interval(estimate: u64, bytes_var: u64, samples: u64, mean: Option<u64>) -> (u64, u64) {
    let Some(mean) = mean.filter(|_| (samples as f64) < MIN_SAMPLES_INTERVAL) else {
        return bytes_interval(estimate, bytes_var, u64::MAX);
    };
    let (low, high) = POISSON_95[(samples as usize).min(POISSON_95.len() - 1)];
    let per_sample = (estimate as f64 / samples.max(1) as f64).max(mean as f64);
    (((low * mean as f64) as u64).min(estimate), ((high * per_sample).ceil() as u64).max(estimate))
}

/// Garwood's exact two-sided 95% limits of a Poisson mean after observing `k` events, `k` below
/// [`MIN_SAMPLES_INTERVAL`] (checked against the Poisson distribution in the tests).
const POISSON_95: [(f64, f64); 30] = [
    (0.0, 3.6889),
    (0.0253, 5.5716),
    (0.2422, 7.2247),
    (0.6187, 8.7673),
    (1.0899, 10.2416),
    (1.6235, 11.6683),
    (2.2019, 13.0595),
    (2.8144, 14.4227),
    (3.4538, 15.7632),
    (4.1154, 17.0848),
    (4.7954, 18.3904),
    (5.4912, 19.6820),
    (6.2006, 20.9616),
    (6.9220, 22.2304),
    (7.6539, 23.4896),
    (8.3954, 24.7402),
    (9.1454, 25.9830),
    (9.9031, 27.2186),
    (10.6679, 28.4478),
    (11.4392, 29.6709),
    (12.2165, 30.8884),
    (12.9993, 32.1007),
    (13.7873, 33.3083),
    (14.5800, 34.5113),
    (15.3773, 35.7101),
    (16.1787, 36.9049),
    (16.9841, 38.0960),
    (17.7932, 39.2836),
    (18.6058, 40.4678),
    (19.4218, 41.6488),
];

/// The weight `1/p` of a block of `size` bytes (at least 1) sampled at a mean of `mean` bytes.
pub(crate) fn weight_of(size: u64, mean: u64) -> f64 {
    1.0 / -libm::expm1(-(size.max(1) as f64) / mean.max(1) as f64)
}

/// The weights of a size class's largest and smallest blocks: `(w_min, w_max)`.
pub(crate) type ClassWeights = (f64, f64);

/// The 95% interval of one size class's count, as `(below, above)` distances from the estimate.
///
/// Its weights (fixed point) sum to `weighted` and their squares to `w2`. With enough samples (see
/// [`MIN_SAMPLES_INTERVAL`], effective) the normal interval of [`count_interval`]. With fewer, the
/// normal interval's variance, estimated from the samples seen, misses the blocks nobody sampled: on a
/// class of 1-byte blocks, sampled one in 524,288 at the default mean, most processes see none. There
/// the number of samples is close to a Poisson draw whose mean is the class's blocks times their
/// sampling probability, so Garwood's exact limits of that mean, times the class's smallest weight
/// (below) and largest (above), bound the count; a class with no sample at all still gets an upper
/// bound. Classes whose smallest block is sampled with probability ½ or more keep the normal interval:
/// there the Poisson limits would overstate a count that is nearly exact.
fn class_spread(weighted: u64, w2: u64, (w_min, w_max): ClassWeights) -> Spread {
    let est = weighted as f64 / W_ONE as f64;
    let k = effective_samples(weighted, w2);
    if k >= MIN_SAMPLES_INTERVAL || w_max < 2.0 {
        let half = Z95 * (w2 as f64 - est).max(0.0).sqrt();
        return Spread { below: half, above: half, poisson: false };
    }
    let (low, high) = POISSON_95[(libm::round(k) as usize).min(POISSON_95.len() - 1)];
    Spread { below: (est - low * w_min).max(0.0), above: (high * w_max - est).max(0.0), poisson: true }
}

/// A class's distances from its estimate down and up to the ends of its 95% interval, and whether
/// they are Poisson limits (few samples) rather than a normal spread.
struct Spread {
    below: f64,
    above: f64,
    poisson: bool,
}

/// The 95% interval of size class's count estimate `estimate`, whose weights (fixed point) sum to
/// `weighted` and whose squared weights sum to `w2`, with the class's weights `weights` (see
/// [`class_spread`]).
pub(crate) fn class_count_interval(estimate: u64, weighted: u64, w2: u64, weights: ClassWeights) -> (u64, u64) {
    let Spread { below, above, .. } = class_spread(weighted, w2, weights);
    let e = estimate as f64;
    (((e - below).max(0.0) as u64).min(estimate), ((e + above).ceil() as u64).max(estimate))
}

/// A count estimated over the size classes, whose 95% interval combines each class's (see
/// [`class_spread`]). Classes with enough samples add their normal spreads in quadrature, and so do
/// classes with few, among themselves and on each side on its own. Below, the two sums add: a class
/// with few samples is skewed (one rare sample of a heavy weight lifts its estimate far above its
/// count), and in one quadrature its long distance down would swallow the other classes' spread.
/// Above, one quadrature. A class with no sample still adds its upper bound: its blocks may have
/// gone unseen.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ClassSum {
    normal2: f64,
    sparse_below2: f64,
    sparse_above2: f64,
}

impl ClassSum {
    /// Adds one class: its weights (fixed point) sum to `weighted`, their squares to `w2`.
    pub(crate) fn add(&mut self, weighted: u64, w2: u64, weights: ClassWeights) {
        let Spread { below, above, poisson } = class_spread(weighted, w2, weights);
        if poisson {
            self.sparse_below2 += below * below;
            self.sparse_above2 += above * above;
        } else {
            self.normal2 += below * below;
        }
    }

    /// The interval around the total's estimate `estimate`, at most `cap` (an exact total it is part
    /// of; `u64::MAX` for none).
    pub(crate) fn interval(&self, estimate: u64, cap: u64) -> (u64, u64) {
        let est = estimate.min(cap);
        let e = est as f64;
        let below = self.normal2.sqrt() + self.sparse_below2.sqrt();
        let above = (self.normal2 + self.sparse_above2).sqrt();
        (((e - below).max(0.0) as u64).min(est), ((e + above).ceil() as u64).clamp(est, cap.max(est)))
    }
}

/// The effective number of samples (Kish: `(Σw)² / Σw²`) behind an estimate of `weighted` (fixed
/// point) whose squared weights sum to `w2`.
pub(crate) fn effective_samples(weighted: u64, w2: u64) -> f64 {
    let w = weighted as f64 / W_ONE as f64;
    if w2 > 0 { w * w / w2 as f64 } else { 0.0 }
}

/// Wilson score interval at 95% for a proportion `p` observed with effective sample size `n`.
pub(crate) fn wilson(p: f64, n: f64) -> Option<(f64, f64)> {
    if n.is_nan() || n <= 0.0 || !(0.0..=1.0).contains(&p) {
        return None;
    }
    let z2 = Z95 * Z95;
    let denom = 1.0 + z2 / n;
    let center = (p + z2 / (2.0 * n)) / denom;
    let half = Z95 * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / denom;
    Some(((center - half).max(0.0), (center + half).min(1.0)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::clock::Clock;

    /// `nearest` against `libm::round` (the rounding it replaces) where halves, the 2^52 and 2^53
    /// edges and random values up to 2^70 put the shortcut to the test; saturating at and past 2^63.
    #[test]
    fn nearest_rounds_as_libm_does() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut values = vec![0.0, 0.49999999999999994, 0.5, 1.5, 2.5, 4_503_599_627_370_495.5];
        for e in [52, 53, 54, 63] {
            let p = (1u64 << e) as f64;
            values.extend([p - 1.0, p - 0.5, p, p + 1.0, p + 2.0]);
        }
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let scale = (1u64 << (x % 70).min(63)) as f64 * if x % 70 > 63 { 128.0 } else { 1.0 };
            let v = (x >> 11) as f64 / (1u64 << 53) as f64 * scale;
            values.extend([v, libm::floor(v) + 0.5]);
        }
        for v in values {
            let want = libm::round(v);
            if want >= 9_223_372_036_854_775_808.0 {
                assert!(nearest(v) >= i64::MAX as u64, "{v}: {}", nearest(v));
            } else {
                assert_eq!(nearest(v), want as u64, "{v}");
            }
        }
        assert_eq!((nearest(-0.7), nearest(f64::NAN)), (0, 0));
        assert!(nearest(f64::INFINITY) >= i64::MAX as u64);
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

    /// Against a model of a group's sampling (blocks of 1 to 64 KiB, each sampled on its own with
    /// its probability at the default mean): the live-bytes interval covers the group's bytes in at
    /// least 93% of 2,000 draws, for groups from 256 KiB (no sample at all one time in two) to
    /// 64 MiB. Without the few-samples rule the small groups fall far below (broken on purpose:
    /// 0.39 at 256 KiB).
    #[test]
    fn live_bytes_intervals_cover_small_and_large_groups() {
        let mean = 512u64 << 10;
        let mut state = 7u64;
        let mut next = || {
            state = crate::stats::clock::splitmix64(state);
            state
        };
        for bytes in [256u64 << 10, 1600 << 10, 5 << 20, 64 << 20] {
            let sizes: Vec<u64> = {
                let mut v = Vec::new();
                let mut total = 0;
                while total < bytes {
                    let s = (1024 + next() % (63 << 10)).min(bytes - total).max(1);
                    total += s;
                    v.push(s);
                }
                v
            };
            let trials = 2000;
            let mut covered = 0;
            for _ in 0..trials {
                let (mut est, mut var, mut k) = (0.0, 0u64, 0u64);
                for &size in &sizes {
                    let w = weight_of(size, mean);
                    if ((next() >> 11) as f64 / (1u64 << 53) as f64) < 1.0 / w {
                        est += w * size as f64;
                        var += SampleSums::of(w, size).bytes_var;
                        k += 1;
                    }
                }
                let (lo, hi) = live_bytes_interval(est.round() as u64, var, k, Some(mean));
                covered += u64::from(lo <= bytes && bytes <= hi);
            }
            let share = covered as f64 / trials as f64;
            assert!(share >= 0.93, "{bytes} B: covered {share:.3}");
        }
        // Every block sampled: exact.
        assert_eq!(live_bytes_interval(1000, 0, 3, None), (1000, 1000));
    }

    #[test]
    fn intervals_hold_the_estimate_within_bounds() {
        assert_eq!(bytes_interval(1000, 0, u64::MAX), (1000, 1000));
        // A variance of 10 × 1024 B²: 1.96 × 101.2 = 198.3 either side.
        assert_eq!(bytes_interval(1000, 10, u64::MAX), (801, 1199));
        // Cut at 0 and at the exact total.
        assert_eq!(bytes_interval(100, 1_000_000, 150), (0, 150));
        assert_eq!(bytes_interval(200, 0, 150), (150, 150));
        // One sample of weight 1 (a block always sampled) adds no variance.
        assert_eq!(SampleSums::of(1.0, 1 << 30).bytes_var, 0);
    }

    /// Coverage by simulation, with the real sampling clock: many independent replicates of a
    /// workload with known totals; each replicate's count and byte estimates, with their intervals
    /// built from the per-sample sums, cover the truth about 95% of the time.
    #[test]
    fn count_and_byte_intervals_cover_the_truth_95_percent_of_the_time() {
        let mean = 64 << 10;
        let (replicates, blocks) = (400, 60_000);
        let (mut counts, mut bytes) = (0, 0);
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for r in 0..replicates {
            let clock = Clock::new();
            // Seeds far apart: a clock's draws walk its seed by a fixed step, so seeds one step apart
            // would give replicates the same draws shifted by one.
            clock.start(crate::stats::clock::splitmix64(r as u64), mean);
            let (mut sums, mut truth_blocks, mut truth_bytes) = (SampleSums::default(), 0u64, 0u64);
            for _ in 0..blocks {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Mostly small blocks, some up to 256 KiB: weights from about 1 to 4,000.
                let size = if x % 16 == 0 { 16 + (x >> 8) % (256 << 10) } else { 16 + (x >> 8) % 2048 } as usize;
                // Half the blocks are "of interest" (say, freed on another thread).
                let of_interest = (x >> 40) & 1 == 1;
                if of_interest {
                    truth_blocks += 1;
                    truth_bytes += size as u64;
                }
                if clock.count_down(size) {
                    continue;
                }
                let event = clock.charge(size, mean, false);
                if let Some(w) = event.and_then(|e| e.weight).filter(|_| of_interest) {
                    let s = SampleSums::of(w, size as u64);
                    sums.w += s.w;
                    sums.wb += s.wb;
                    sums.w2 += s.w2;
                    sums.bytes_var += s.bytes_var;
                }
            }
            let (lo, hi) = count_interval(sums.w, sums.w2, u64::MAX);
            counts += usize::from((lo..=hi).contains(&truth_blocks));
            let (lo, hi) = bytes_interval(units(sums.wb), sums.bytes_var, u64::MAX);
            bytes += usize::from((lo..=hi).contains(&truth_bytes));
        }
        // 95% nominal; with 400 replicates the binomial noise is about ±2 points.
        for (name, covered) in [("counts", counts), ("bytes", bytes)] {
            let coverage = covered as f64 / replicates as f64;
            assert!((0.91..=0.99).contains(&coverage), "{name}: coverage {coverage}");
        }
    }

    /// Garwood's limits, checked against the Poisson distribution: at the upper limit `k` or fewer
    /// events have probability 2.5%, at the lower limit `k` or more.
    #[test]
    fn poisson_limits_are_garwoods() {
        let cdf = |k: usize, l: f64| {
            let (mut term, mut sum) = (libm::exp(-l), 0.0);
            for i in 0..=k {
                if i > 0 {
                    term *= l / i as f64;
                }
                sum += term;
            }
            sum
        };
        for (k, &(low, high)) in POISSON_95.iter().enumerate() {
            assert!((cdf(k, high) - 0.025).abs() < 1e-4, "k {k}: upper {high}");
            if k > 0 {
                assert!((1.0 - cdf(k - 1, low) - 0.025).abs() < 1e-4, "k {k}: lower {low}");
            }
        }
    }

    /// Coverage on tiny blocks, by simulation with the real sampling clock: sizes log-uniform from
    /// 1 B to 64 KiB, where most replicates sample none of the smallest blocks. The count's interval
    /// built class by class covers the truth at least 90% of the time; the plain normal interval,
    /// whose variance comes from the samples seen, does not.
    #[test]
    fn count_intervals_cover_tiny_blocks() {
        use crate::stats::class::{Class, NUM_CLASSES};
        let mean = 512 << 10;
        let (replicates, blocks) = (100, 100_000);
        let (mut classed, mut normal) = (0, 0);
        let mut widths = Vec::new();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for r in 0..replicates {
            let clock = Clock::new();
            clock.start(crate::stats::clock::splitmix64(r as u64 + 1000), mean);
            let mut per_class = [(0u64, 0u64); NUM_CLASSES];
            for _ in 0..blocks {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // 2^(16 u), u uniform in [0, 1): 1 B to 64 KiB, log-uniform.
                let u = (x >> 11) as f64 / (1u64 << 53) as f64;
                let size = libm::exp2(16.0 * u) as usize;
                if clock.count_down(size) {
                    continue;
                }
                if let Some(w) = clock.charge(size, mean, false).and_then(|e| e.weight) {
                    let s = SampleSums::of(w, size as u64);
                    let c = &mut per_class[Class::of(size).index()];
                    c.0 += s.w;
                    c.1 += s.w2;
                }
            }
            let (mut sum, mut w, mut w2) = (ClassSum::default(), 0, 0);
            for (i, &(cw, cw2)) in per_class.iter().enumerate() {
                sum.add(cw, cw2, crate::stats::class::weights(i, mean));
                w += cw;
                w2 += cw2;
            }
            let (lo, hi) = sum.interval(units(w), u64::MAX);
            classed += usize::from((lo..=hi).contains(&(blocks as u64)));
            widths.push((lo as f64 / blocks as f64, units(w) as f64 / blocks as f64, hi as f64 / blocks as f64));
            let (lo, hi) = count_interval(w, w2, u64::MAX);
            normal += usize::from((lo..=hi).contains(&(blocks as u64)));
        }
        widths.sort_by(|a, b| a.1.total_cmp(&b.1));
        eprintln!(
            "classed {classed} / {replicates}, normal {normal} / {replicates}; median low / estimate / high over the truth: {:?}",
            widths[widths.len() / 2]
        );
        assert!(classed >= 90, "the classed interval covered {classed} of {replicates}");
        assert!(normal < 90, "the normal interval covered {normal} of {replicates}: the workload is too easy");
    }
}
