//! Which allocations capture their site: a Poisson process over allocated bytes, with a mean of
//! [`SiteSampling::MeanBytes`](super::SiteSampling) between samples (512 KiB by default, the
//! convention of jemalloc's `lg_prof_sample:19`, Go's `MemProfileRate` and tcmalloc).
//!
//! It runs on origin tracking's cold path, so it only sees *eligible* blocks (`origin::gate`: every
//! block above 32 KiB, and small blocks at one address in `2^E`). An eligible small block is charged
//! `2^E` times its size, standing for the `2^E` blocks that were not eligible, as the origin
//! countdown does; a block of `s` bytes is then sampled with probability about `1 - exp(-s / mean)`
//! (exactly that above 32 KiB) and its estimates are weighted by the inverse. The countdown is kept
//! in the thread's shard (`Hot::site_countdown`, which only this module touches) and drawn from the
//! shard's random sequence; 0 means "not drawn yet" (a fresh shard), and a redraw at any point keeps
//! the process Poisson (the exponential distribution has no memory).

use crate::origin::gate;
use crate::origin::sampler::{Countdown, draw};
use crate::stats::shard::Shard;
use crate::sync::{AtomicU64, Ordering};

/// Mean bytes between samples; [`OFF`] when site sampling is off, 0 for every block.
static MEAN: AtomicU64 = AtomicU64::new(DEFAULT_MEAN);

/// The default mean: 512 KiB.
pub(crate) const DEFAULT_MEAN: u64 = 512 << 10;

/// `MEAN` when sampling is off.
pub(crate) const OFF: u64 = u64::MAX;

pub(crate) fn mean() -> u64 {
    MEAN.load(Ordering::Relaxed)
}

pub(crate) fn set_mean(m: u64) {
    MEAN.store(m, Ordering::Relaxed);
}

/// Whether the eligible block of `size` bytes just allocated is sampled for its site, and if so
/// what it weighs (the inverse of its sampling probability).
pub(crate) fn consume<W: Countdown>(shard: &Shard, size: usize) -> Option<f64> {
    consume_at::<W>(shard, size, mean())
}

fn consume_at<W: Countdown>(shard: &Shard, size: usize, mean: u64) -> Option<f64> {
    let shift = gate::shift_for(size);
    let eligible = (1u64 << shift) as f64;
    match mean {
        OFF => None,
        0 => Some(eligible),
        mean => {
            let charge = (size as u64).max(1).saturating_mul(1 << shift);
            let c = &shard.hot.site_countdown;
            if c.load(Ordering::Relaxed) == 0 {
                W::set(c, draw(shard, mean).max(1));
            }
            if W::take(c, charge) >= 0 {
                return None;
            }
            W::set(c, draw(shard, mean).max(1));
            Some(weight(charge, mean, eligible))
        }
    }
}

/// `eligible / (1 - exp(-charge / mean))`: what one sample of that charge stands for.
pub(crate) fn weight(charge: u64, mean: u64, eligible: f64) -> f64 {
    let prob = -(-(charge as f64 / mean as f64)).exp_m1();
    if prob > 0.0 { eligible / prob } else { eligible }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::shard::Owner;

    /// Over many blocks, the weighted count of sampled blocks and bytes estimates the true totals.
    #[test]
    fn weighted_samples_estimate_the_totals() {
        let shard = Box::new(Shard::new());
        crate::origin::sampler::seed(&shard.hot.rng, 5, 2);
        let mean = 64 << 10;
        let (mut est_blocks, mut est_bytes, mut blocks, mut bytes) = (0.0, 0.0, 0.0, 0.0);
        for i in 0..400_000u64 {
            // Sizes from 16 B to 64 KiB; large ones are always eligible (shift 0).
            let size = 16usize << (i % 13);
            blocks += 1.0;
            bytes += size as f64;
            // Only eligible blocks reach the sampler: one small block in 2^E (every 2^E-th here;
            // the sizes cycle with a period prime to it).
            let shift = gate::shift_for(size);
            if i % (1 << shift) != 0 {
                continue;
            }
            let w = consume_at::<Owner>(&shard, size, mean);
            if let Some(w) = w {
                est_blocks += w;
                est_bytes += w * size as f64;
            }
        }
        assert!((est_bytes / bytes - 1.0).abs() < 0.05, "{est_bytes} vs {bytes}");
        assert!((est_blocks / blocks - 1.0).abs() < 0.15, "{est_blocks} vs {blocks}");
    }
}
