//! A thread's sampling clock: a Poisson countdown over the bytes it allocates.
//!
//! Every allocation (and the new size of every reallocation) takes its size off `left`, **before**
//! the inner call (a thread's own clock has `left` in a thread-local while the thread runs:
//! `stats::thread` hands it over). While `left` stays at zero or above nothing else happens: that
//! test is all the sampler costs on the fast path. When an allocation would take it below zero, an
//! *event* fires on the cold path: that allocation is sampled, and a new interval is drawn from an exponential
//! distribution with the configured mean. Exponential intervals make the events a Poisson process
//! over allocated bytes, so a block of `s` bytes is sampled with probability `1 - exp(-s / mean)`
//! whatever came before it and wherever the allocator puts it: every byte has the same chance. Each
//! sample is weighted by the inverse of that probability ([`weight`]).
//!
//! The clock also counts, exactly, the bytes its thread allocated: the bytes of finished intervals
//! (`finished`, updated at events) plus what the current interval has used (`start - left`), as of
//! the last hand-over of `left` (`stats::thread`). That costs the fast path nothing beyond the
//! countdown itself.
//!
//! The draws come from a per-clock Weyl sequence hashed with SplitMix64, seeded when a thread claims
//! its shard: allocation-free, lock-free, independent of addresses.
//!
//! This file depends on nothing but `sync`: the shards embed a clock, and the sampler (`sampler`)
//! decides what to do with its events.

use crate::sync::{AtomicI64, AtomicU64, Ordering};

/// What a clock's countdown restarts from when sampling is off: events still come (they fold live
/// bytes in, in the exact tier), just rarely.
pub(crate) const OFF_INTERVAL: u64 = 64 << 20;

/// A thread's clock. Written by its owner with plain load + store, or by anyone with atomic
/// read-modify-writes (the overflow shard); read by reports at any time.
#[derive(Debug)]
pub(crate) struct Clock {
    /// Bytes the current interval has left: the allocation that would take it below zero is the
    /// event. 0 in a clock nobody started (the parked shard): every allocation there is an event
    /// (`GlobalAlloc` requests are never of 0 bytes), which the cold path turns into a shard claim,
    /// so nothing ever writes to such a clock.
    left: AtomicI64,
    /// What `left` was set to when the current interval started.
    start: AtomicI64,
    /// Bytes allocated in finished intervals.
    finished: AtomicU64,
    /// The mean the current interval was drawn with (`u64::MAX`: sampling was off, 0: every block).
    mean: AtomicU64,
    /// State of the pseudo-random sequence (a Weyl counter, hashed on use).
    rng: AtomicU64,
    /// Bytes allocated since the owner last folded its live figure in (exact tier, see
    /// `stats::live`).
    unfolded: AtomicU64,
}

/// What an event decided.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Event {
    /// `Some(weight)` when the allocation is sampled: the inverse of its sampling probability.
    pub(crate) weight: Option<f64>,
    /// Bytes allocated since live bytes were last folded in: the caller folds above a
    /// threshold and calls [`Clock::folded`].
    pub(crate) unfolded: u64,
}

impl Clock {
    pub(crate) const fn new() -> Self {
        Self {
            left: AtomicI64::new(0),
            start: AtomicI64::new(0),
            finished: AtomicU64::new(0),
            mean: AtomicU64::new(0),
            rng: AtomicU64::new(0),
            unfolded: AtomicU64::new(0),
        }
    }

    /// The countdown as the clock holds it (for its owner's thread-local: `stats::thread`).
    #[inline]
    pub(crate) fn countdown(&self) -> i64 {
        self.left.load(Ordering::Relaxed)
    }

    /// Takes the owner's countdown `left` back from its thread-local (`stats::thread`). Owner only.
    #[inline]
    pub(crate) fn take_countdown(&self, left: i64) {
        self.left.store(left, Ordering::Relaxed);
    }

    /// Takes `size` bytes off the countdown where the clock itself holds it (the models in tests;
    /// a thread's own clock has its countdown in a thread-local: `stats::thread::count_down`).
    #[cfg(test)]
    pub(crate) fn count_down(&self, size: usize) -> bool {
        counted_down(self.left.load(Ordering::Relaxed), size)
            .map(|left| self.left.store(left, Ordering::Relaxed))
            .is_some()
    }

    /// Starts a freshly claimed clock: seeds its sequence and draws its first interval. Owner only.
    /// What the clock counted before (a previous owner's bytes) stays counted.
    pub(crate) fn start(&self, seed: u64, mean: u64) {
        self.rng.store(seed, Ordering::Relaxed);
        self.restart_now(mean);
    }

    /// An allocation of `size` bytes on the cold path, by the owner (`shared == false`) or by anyone
    /// (the overflow shard): takes it off the countdown, and when the interval ends, samples it and
    /// draws the next interval with `mean` (the sampler's current setting).
    #[inline]
    pub(crate) fn charge(&self, size: usize, mean: u64, shared: bool) -> Option<Event> {
        let size = size as i64;
        let left = if shared {
            self.left.fetch_sub(size, Ordering::Relaxed).wrapping_sub(size)
        } else {
            let left = self.left.load(Ordering::Relaxed).wrapping_sub(size);
            self.left.store(left, Ordering::Relaxed);
            left
        };
        if left >= 0 {
            return None;
        }
        // The interval is over: `start - left` bytes went through it, this allocation included.
        let used = self.start.load(Ordering::Relaxed).wrapping_sub(left).max(0) as u64;
        let interval_mean = self.mean.load(Ordering::Relaxed);
        self.finished.fetch_add(used, Ordering::Relaxed);
        let unfolded = self.unfolded.fetch_add(used, Ordering::Relaxed).wrapping_add(used);
        self.restart(mean);
        Some(Event { weight: weight(size as u64, interval_mean), unfolded })
    }

    /// Ends the current interval now and starts one at `mean` (a new setting, applied at once on the
    /// thread that made it). Owner only. The exponential distribution has no memory, so restarting
    /// at any moment keeps the sample unbiased.
    pub(crate) fn restart_now(&self, mean: u64) {
        let used = self.start.load(Ordering::Relaxed).wrapping_sub(self.left.load(Ordering::Relaxed)).max(0) as u64;
        self.finished.fetch_add(used, Ordering::Relaxed);
        self.unfolded.fetch_add(used, Ordering::Relaxed);
        self.restart(mean);
    }

    /// Gives back the charge of an allocation of `size` bytes that failed (null): the clock counts
    /// what was handed out. Where that charge ended the interval (`ended`: it was sampled), the
    /// interval drawn after it stands, and only the finished count loses the bytes: the exponential
    /// distribution has no memory, so the next sample is as likely as it would have been. Adding them
    /// back on the countdown instead would leave the next `size` bytes unsampled (the next block, in
    /// "every block" mode).
    pub(crate) fn refund(&self, size: usize, shared: bool, ended: bool) {
        if ended {
            self.finished.fetch_sub(size as u64, Ordering::Relaxed);
            let _ = self
                .unfolded
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| Some(u.saturating_sub(size as u64)));
        } else if shared {
            self.left.fetch_add(size as i64, Ordering::Relaxed);
        } else {
            self.left.store(self.left.load(Ordering::Relaxed).wrapping_add(size as i64), Ordering::Relaxed);
        }
    }

    /// The owner freed about `bytes` (a sampled free's weighted bytes): they count towards its next
    /// publication of live bytes. Returns the bytes moved since the last one. Owner only.
    #[inline]
    pub(crate) fn moved(&self, bytes: u64) -> u64 {
        let moved = self.unfolded.load(Ordering::Relaxed).saturating_add(bytes);
        self.unfolded.store(moved, Ordering::Relaxed);
        moved
    }

    /// Counts `bytes` allocated that the countdown did not see (an allocator that samples itself
    /// reports its thread's bytes: see `hooked`). Owner only.
    #[cfg_attr(not(feature = "jemalloc"), allow(dead_code))] // used by `hooked` alone
    pub(crate) fn add_allocated(&self, bytes: u64) {
        self.finished.store(self.finished.load(Ordering::Relaxed).wrapping_add(bytes), Ordering::Relaxed);
    }

    /// The owner folded its live bytes in.
    pub(crate) fn folded(&self) {
        self.unfolded.store(0, Ordering::Relaxed);
    }

    /// Draws a new interval with mean `mean` and starts it.
    fn restart(&self, mean: u64) {
        let interval = match mean {
            u64::MAX => OFF_INTERVAL as i64,
            m => draw(self.rng.fetch_add(GOLDEN, Ordering::Relaxed), m),
        };
        self.mean.store(mean, Ordering::Relaxed);
        self.start.store(interval, Ordering::Relaxed);
        self.left.store(interval, Ordering::Relaxed);
    }

    /// Bytes allocated through this clock so far: exact, up to the operation running while it is
    /// read. Allocation-free; any thread.
    pub(crate) fn allocated(&self) -> u64 {
        let finished = self.finished.load(Ordering::Relaxed);
        let current = self.start.load(Ordering::Relaxed).wrapping_sub(self.left.load(Ordering::Relaxed));
        finished.wrapping_add(current.max(0) as u64)
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

/// The fast path's rule: the countdown `left` once `size` bytes are taken off it, or `None` when
/// that would take it below zero, which ends the interval (an event, on the cold path:
/// [`Clock::charge`]). Its callers subtract in memory and branch on the sign.
#[inline(always)]
pub(crate) fn counted_down(left: i64, size: usize) -> Option<i64> {
    let left = left.wrapping_sub(size as i64);
    (left >= 0).then_some(left)
}

/// The inverse of the probability that an allocation of `size` bytes ends an interval of mean
/// `mean`: what one sample of it stands for. `None` when sampling was off; 1 for every block.
#[inline]
pub(crate) fn weight(size: u64, mean: u64) -> Option<f64> {
    match mean {
        u64::MAX => None,
        0 => Some(1.0),
        m => {
            let p = ends_an_interval(size.max(1) as f64 / m as f64);
            Some(if p > 0.0 { 1.0 / p } else { 1.0 })
        }
    }
}

/// `1 - exp(-x)` for `x` ≥ 0, without cancellation for small `x`: below 2^-8 (a block of up to 2 KiB
/// at the default mean) by four terms of its series, whose first term left out is below 2^-32 / 120
/// of the result (libm's `expm1` costs about 40 instructions a sample), else by `expm1`.
#[inline]
fn ends_an_interval(x: f64) -> f64 {
    if x < 1.0 / 256.0 { x * (1.0 - x / 2.0 * (1.0 - x / 3.0 * (1.0 - x / 4.0))) } else { -libm::expm1(-x) }
}

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64: the output for the Weyl state `z`.
pub(crate) fn splitmix64(z: u64) -> u64 {
    let mut z = z.wrapping_add(GOLDEN);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// An exponential draw with mean `mean` from the Weyl state `state`, capped at 64 means; 0 for a
/// mean of 0 (every block).
fn draw(state: u64, mean: u64) -> i64 {
    if mean == 0 {
        return 0;
    }
    // Uniform in (0, 1]: 53 random bits, never zero.
    let u = ((splitmix64(state) >> 11) + 1) as f64 / (1u64 << 53) as f64;
    let x = -libm::log(u) * mean as f64;
    x.min(mean as f64 * 64.0).min(i64::MAX as f64 / 2.0) as i64
}

/// Monotonic nanoseconds, from the vDSO: no allocation, no lock.
pub(crate) fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer; CLOCK_MONOTONIC is always available on our targets.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The series agrees with libm's `expm1` below its threshold to within its first term left out
    /// (2^-32 / 120 of the result there), and the two meet there.
    #[test]
    fn the_series_is_expm1() {
        let xs = (0..2000).map(|i| (1.0 / 256.0) * f64::from(i) / 1000.0).chain([1e-300, 1e-12, 1e-6]);
        for x in xs {
            let want = -libm::expm1(-x);
            assert!(
                (ends_an_interval(x) - want).abs() <= (2f64.powi(-32) / 120.0 + 1e-15) * want,
                "{x}: {} against {want}",
                ends_an_interval(x)
            );
        }
    }

    #[test]
    fn draws_have_the_requested_mean() {
        let n = 200_000u64;
        let mean = (0..n).map(|i| draw(i.wrapping_mul(GOLDEN), 1 << 20) as f64).sum::<f64>() / n as f64;
        assert!((mean / (1 << 20) as f64 - 1.0).abs() < 0.02, "{mean}");
    }

    /// The clock counts every byte, whatever the events, and its samples weigh what they stand for:
    /// the weighted count and bytes of sampled blocks estimate the true ones (many independent clocks).
    #[test]
    fn counts_exactly_and_samples_without_bias() {
        let mean = 64 << 10;
        let (mut blocks, mut bytes, mut est_blocks, mut est_bytes) = (0.0, 0.0, 0.0, 0.0);
        for seed in 0..20u64 {
            let c = Clock::new();
            c.start(seed.wrapping_mul(0xD6E8_FEB8_6659_FD93), mean);
            let mut total = 0u64;
            for i in 0..50_000u64 {
                let size = 16usize << ((i * 7 + seed) % 13);
                total += size as u64;
                blocks += 1.0;
                bytes += size as f64;
                if !c.count_down(size) {
                    if let Some(Event { weight: Some(w), .. }) = c.charge(size, mean, false) {
                        est_blocks += w;
                        est_bytes += w * size as f64;
                    }
                }
            }
            assert_eq!(c.allocated(), total, "seed {seed}");
        }
        assert!((est_bytes / bytes - 1.0).abs() < 0.03, "{est_bytes} vs {bytes}");
        assert!((est_blocks / blocks - 1.0).abs() < 0.1, "{est_blocks} vs {blocks}");
    }

    /// A failed allocation counts nothing: the clock's bytes are those handed out, and where it was
    /// sampled, the next allocation is as likely to be sampled as without it (in "every block" mode:
    /// it is), against a clock that never saw the failure.
    #[test]
    fn a_refund_leaves_the_next_interval_as_drawn() {
        for (mean, failed) in [(0, 5_000_777usize), (64 << 10, 5_000_777)] {
            let (with, without) = (Clock::new(), Clock::new());
            with.start(42, mean);
            without.start(42, mean);
            // The failed allocation ends an interval (a block of megabytes always does at these means).
            assert!(!with.count_down(failed));
            let event = with.charge(failed, mean, false).expect("an event");
            with.refund(failed, false, event.weight.is_some());
            assert_eq!(with.allocated(), without.allocated(), "mean {mean}: bytes of the failure counted");
            // The next allocation: sampled in "every block" mode, and the countdown no longer than a
            // fresh draw (never the failure's bytes on top of it).
            assert!(with.countdown() <= 4 * mean.max(1) as i64, "mean {mean}: countdown {}", with.countdown());
            if mean == 0 {
                assert!(!with.count_down(64), "every block: the next block is sampled");
            }
            // Before an event, the bytes go back on the countdown.
            let left = without.countdown();
            if left > 100 {
                assert!(without.count_down(100));
                without.refund(100, false, false);
                assert_eq!(without.countdown(), left);
            }
        }
    }

    #[test]
    fn an_unstarted_clock_sends_every_allocation_to_the_cold_path() {
        let c = Clock::new();
        assert!(!c.count_down(1));
        assert_eq!(c.allocated(), 0);
    }

    #[test]
    fn weights_are_inverse_probabilities() {
        assert_eq!(weight(64, 0), Some(1.0));
        assert_eq!(weight(64, u64::MAX), None);
        // 1 / (1 - e^-x) = 1/x + 1/2 + O(x).
        let w = weight(64, 512 << 10).unwrap();
        assert!((w - ((512 << 10) as f64 / 64.0 + 0.5)).abs() < 0.01, "{w}");
        assert!((weight(1 << 40, 512 << 10).unwrap() - 1.0).abs() < 1e-9);
    }
}
