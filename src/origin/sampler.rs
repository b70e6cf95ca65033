//! When to sample, and what a sample weighs. This module is the only owner of a shard's event
//! countdown (`Shard::hot`): nothing else reads or writes it.
//!
//! Every thread keeps a countdown in its shard. Each *eligible* operation (see `gate`: the rare ones
//! that reach the cold path) takes its *charge* off it: the block's size plus a fixed [`OP_CHARGE`],
//! scaled by `2^E` for a small block, which stands for the `2^E` operations that were not eligible.
//! When the countdown runs out an *event* fires (`origin::on_alloc` / `on_free`): the block being
//! allocated, if any, is sampled, the shard's classes are published to `stats::live` once enough
//! bytes moved, and a new countdown is drawn from an exponential distribution with mean `period()`.
//!
//! Exponential intervals make the events a Poisson process over the stream of charges, so whether a
//! block is sampled does not depend on what came before it (no aliasing with periodic workloads).
//! A large block of `s` bytes is sampled with probability `1 - exp(-(s + OP_CHARGE) / period)`, a
//! small one with `2^-E × (1 - exp(-2^E (s + OP_CHARGE) / period))`, about the same; estimates are
//! weighted by the inverse. The fixed charge makes small blocks roughly "one in N"
//! (N = period / OP_CHARGE), while large blocks, which carry most bytes, are sampled in proportion to
//! their size, as in jemalloc's and tcmalloc's heap profilers.
//!
//! The draws come from a per-shard Weyl sequence hashed with SplitMix64, seeded from the slot's
//! index and generation: allocation-free, lock-free, and reproducible for a given sequence of
//! operations on a thread.

use super::gate;
use crate::stats::shard::{Anyone, Owner, Shard, Writer};
use crate::sync::{AtomicI64, AtomicU64, Ordering};

/// Bytes every operation is charged on top of its size.
pub(crate) const OP_CHARGE: u64 = 8 << 10;

/// Fixed-point unit of weighted estimates.
pub(crate) const W_ONE: u64 = 256;

/// Events without sampling still publish the live figure: one per this many charged bytes.
pub(crate) const UNSAMPLED_INTERVAL: u64 = 64 << 20;

/// Publish a shard's classes to `stats::live` once this many charged bytes moved since the last time.
pub(crate) const FLUSH_CHARGE: u64 = 16 << 20;

/// Sampling turned off: `RATE` holds this.
const OFF: u64 = u64::MAX;

/// log2 of "one in N", or `OFF`. 0 means every block.
static RATE_LOG2: AtomicU64 = AtomicU64::new(super::DEFAULT_RATE_LOG2);

/// What an eligible operation on a block of `size` bytes takes off the countdown, and the `E` it
/// was scaled with (see the module docs).
pub(crate) fn charge(size: usize) -> (u64, u32) {
    let shift = gate::shift_for(size);
    ((size as u64).saturating_add(OP_CHARGE).saturating_mul(1 << shift), shift)
}

/// Current rate as log2 of "one in N small blocks"; `None` when sampling is off.
pub(crate) fn rate_log2() -> Option<u32> {
    match RATE_LOG2.load(Ordering::Relaxed) {
        OFF => None,
        r => Some(r.min(62) as u32),
    }
}

pub(crate) fn set_rate_log2(r: Option<u32>) {
    RATE_LOG2.store(r.map_or(OFF, u64::from), Ordering::Relaxed);
}

/// Mean charged bytes between samples at rate `2^log2`; 0 samples every block.
pub(crate) fn period(log2: u32) -> u64 {
    if log2 == 0 { 0 } else { OP_CHARGE << log2.min(40) }
}

/// Inverse sampling probability of a block whose operation was charged `charge` with shift `shift`
/// (see [`charge`]), sampled at rate `2^log2`.
pub(crate) fn weight(charge: u64, shift: u32, log2: u32) -> f64 {
    let eligible = (1u64 << shift) as f64;
    let p = period(log2);
    if p == 0 {
        return eligible;
    }
    let x = charge as f64 / p as f64;
    // 1 - exp(-x), computed without cancellation for small x.
    let prob = -(-x).exp_m1();
    if prob > 0.0 { eligible / prob } else { eligible }
}

/// SplitMix64 of the shard's next Weyl value.
fn next_random(shard: &Shard) -> u64 {
    splitmix64(shard.hot.rng.fetch_add(GOLDEN, Ordering::Relaxed))
}

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64: the output for the Weyl state `z` (advanced by one step here).
pub(crate) fn splitmix64(z: u64) -> u64 {
    let mut z = z.wrapping_add(GOLDEN);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Seeds a freshly claimed shard's sequence.
pub(crate) fn seed(rng: &AtomicU64, index: usize, generation: u64) {
    rng.store((index as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93) ^ generation.rotate_left(32), Ordering::Relaxed);
}

/// The next countdown: exponential with mean `period`, capped at 64 periods.
pub(crate) fn draw(shard: &Shard, period: u64) -> i64 {
    if period == 0 {
        return 0;
    }
    // Uniform in (0, 1]: 53 random bits, never zero.
    let u = ((next_random(shard) >> 11) + 1) as f64 / (1u64 << 53) as f64;
    let x = -u.ln() * period as f64;
    x.min(period as f64 * 64.0).min(i64::MAX as f64 / 2.0) as i64
}

/// Takes `charge` off the countdown of `shard`; when it runs out, restarts it (publishing the shard's
/// classes when due) and returns the rate to sample the block at hand at. `None`: no event, or
/// sampling is off.
pub(crate) fn consume<W: Countdown>(shard: &Shard, charge: u64) -> Option<Option<u32>> {
    if !W::consume(shard, charge) {
        return None;
    }
    let rate = rate_log2();
    let interval = match rate {
        Some(r) => draw(shard, period(r)),
        None => UNSAMPLED_INTERVAL as i64,
    };
    W::restart(shard, interval);
    Some(rate)
}

/// How each kind of writer runs a countdown.
pub(crate) trait Countdown: Writer {
    /// Takes `charge` off `counter` and returns what is left.
    fn take(counter: &AtomicI64, charge: u64) -> i64;
    /// Sets `counter` to `value`.
    fn set(counter: &AtomicI64, value: i64);
    /// Takes `charge` off the countdown; `true` when it ran out.
    fn consume(shard: &Shard, charge: u64) -> bool {
        Self::take(&shard.hot.countdown, charge) < 0
    }
    fn restart(shard: &Shard, interval: i64);
}

impl Countdown for Owner {
    fn take(c: &AtomicI64, charge: u64) -> i64 {
        let left = c.load(Ordering::Relaxed).wrapping_sub(charge as i64);
        c.store(left, Ordering::Relaxed);
        left
    }

    fn set(c: &AtomicI64, value: i64) {
        c.store(value, Ordering::Relaxed);
    }

    fn restart(shard: &Shard, interval: i64) {
        let hot = &shard.hot;
        let consumed = hot.drawn.load(Ordering::Relaxed).wrapping_sub(hot.countdown.load(Ordering::Relaxed));
        let unflushed = hot.unflushed.load(Ordering::Relaxed).wrapping_add(consumed.max(0) as u64);
        if unflushed >= FLUSH_CHARGE {
            shard.publish_all();
            hot.unflushed.store(0, Ordering::Relaxed);
        } else {
            hot.unflushed.store(unflushed, Ordering::Relaxed);
        }
        hot.drawn.store(interval, Ordering::Relaxed);
        hot.countdown.store(interval, Ordering::Relaxed);
    }
}

impl Countdown for Anyone {
    fn take(c: &AtomicI64, charge: u64) -> i64 {
        c.fetch_sub(charge as i64, Ordering::Relaxed).wrapping_sub(charge as i64)
    }

    fn set(c: &AtomicI64, value: i64) {
        c.store(value, Ordering::Relaxed);
    }

    /// The overflow shard publishes live bytes on every operation already; only the countdown moves.
    fn restart(shard: &Shard, interval: i64) {
        shard.hot.countdown.store(interval, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `stats::live` and `TrackedStats::peak_allocated_bytes` state this step in MiB.
    #[test]
    fn flush_step_is_as_documented() {
        assert_eq!(FLUSH_CHARGE >> 20, 16);
    }

    #[test]
    fn weights_are_inverse_probabilities() {
        assert_eq!(weight(16 + OP_CHARGE, 0, 0), 1.0);
        // Every block sampled, but only one address in 64 eligible: each stands for 64.
        assert_eq!(weight(16 + OP_CHARGE, 6, 0), 64.0);
        // Small blocks at one in 1024: 1 / (1 - e^-x) = 1/x + 1/2 + O(x) with x = (16 + 8 KiB) / 8 MiB.
        let x = (16.0 + OP_CHARGE as f64) / (OP_CHARGE << 10) as f64;
        let w = weight(16 + OP_CHARGE, 0, 10);
        assert!((w - (1.0 / x + 0.5)).abs() < 0.01, "{w}");
        // The same block, eligible one time in 64 and charged 64 times as much: the same estimate
        // to first order (64 / (64 x) = 1 / x), slightly more weight for the larger x.
        let w64 = weight((16 + OP_CHARGE) << 6, 6, 10);
        assert!((w64 - (1.0 / x + 32.0)).abs() < 0.5, "{w64}");
        // Blocks much larger than the period: always sampled.
        assert!((weight(1 << 40, 0, 10) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn draws_have_the_requested_mean() {
        let shard = Box::new(Shard::new());
        seed(&shard.hot.rng, 3, 1);
        let n = 200_000;
        let mean = (0..n).map(|_| draw(&shard, 1 << 20) as f64).sum::<f64>() / n as f64;
        assert!((mean / (1 << 20) as f64 - 1.0).abs() < 0.02, "{mean}");
    }
}
