//! A group of samples' tallies (a site's, a scope's): what its samples add up to while the process
//! runs ([`Tallies`], written on the sampled path), and the estimates read from them ([`Figures`],
//! report side).

use crate::estimate::{MIN_SAMPLES_SHARE, SampleSums, W_ONE};
use crate::sync::{AtomicU64, Ordering};

/// Lifetime buckets: bucket `i` holds lifetimes in `[2^(i+6), 2^(i+7))` ns, the first everything
/// below 128 ns and the last everything from 2^37 ns (2.3 minutes) on.
pub(crate) const LIFETIME_OCTAVES: usize = 32;

/// One group's tallies (a site's, a scope's), weighted fixed point (`W_ONE` = one block) unless said
/// otherwise. Written on the sampled path: atomic adds, no allocation.
pub(crate) struct Tallies {
    /// Sampled allocations and their bytes.
    pub(crate) allocs: AtomicU64,
    pub(crate) alloc_bytes: AtomicU64,
    /// The bytes of the sampled blocks freed (a reallocation frees its old block): in use is
    /// `alloc_bytes - freed_bytes` bytes. The blocks freed are the sum of [`Tallies::lifetimes`].
    pub(crate) freed_bytes: AtomicU64,
    /// The freed blocks that crossed the group's boundary (see [`Tallies::freed`]).
    pub(crate) cross: AtomicU64,
    /// Raw counts: samples taken, sampled frees seen.
    pub(crate) samples: AtomicU64,
    pub(crate) free_samples: AtomicU64,
    /// Weighted frees per lifetime bucket; their sum is every free.
    pub(crate) lifetimes: [AtomicU64; LIFETIME_OCTAVES],
    /// Byte variances (`estimate::SampleSums::bytes_var`) of the samples taken, and of those that
    /// stopped being in use: the intervals of `alloc_bytes` and of the bytes in use.
    pub(crate) bytes_var: AtomicU64,
    pub(crate) bytes_var_out: AtomicU64,
}

impl Tallies {
    pub(crate) const fn new() -> Self {
        Self {
            allocs: AtomicU64::new(0),
            alloc_bytes: AtomicU64::new(0),
            freed_bytes: AtomicU64::new(0),
            cross: AtomicU64::new(0),
            samples: AtomicU64::new(0),
            free_samples: AtomicU64::new(0),
            lifetimes: [const { AtomicU64::new(0) }; LIFETIME_OCTAVES],
            bytes_var: AtomicU64::new(0),
            bytes_var_out: AtomicU64::new(0),
        }
    }

    /// A block adding `sums` to the estimates was sampled in the group.
    pub(crate) fn sampled(&self, sums: SampleSums) {
        let SampleSums { w, wb, bytes_var, .. } = sums;
        self.bytes_var.fetch_add(bytes_var, Ordering::Relaxed);
        self.allocs.fetch_add(w, Ordering::Relaxed);
        self.alloc_bytes.fetch_add(wb, Ordering::Relaxed);
        self.samples.fetch_add(1, Ordering::Relaxed);
    }

    /// A sampled block of the group was freed after `lifetime_ns`; `cross` when it crossed the
    /// group's boundary on the way: freed by another thread than the allocating one (a site), under
    /// another scope (a scope).
    pub(crate) fn freed(&self, sums: SampleSums, cross: bool, lifetime_ns: u64) {
        let SampleSums { w, wb, bytes_var, .. } = sums;
        self.freed_bytes.fetch_add(wb, Ordering::Relaxed);
        self.bytes_var_out.fetch_add(bytes_var, Ordering::Relaxed);
        if cross {
            self.cross.fetch_add(w, Ordering::Relaxed);
        }
        self.free_samples.fetch_add(1, Ordering::Relaxed);
        if let Some(b) = self.lifetimes.get(lifetime_bucket(lifetime_ns)) {
            b.fetch_add(w, Ordering::Relaxed);
        }
    }
}

/// Lifetime bucket of `ns` (see [`LIFETIME_OCTAVES`]).
pub(crate) fn lifetime_bucket(ns: u64) -> usize {
    let log2 = 63 - (ns | 1).leading_zeros() as usize;
    log2.saturating_sub(6).min(LIFETIME_OCTAVES - 1)
}

/// Lower bound of lifetime bucket `i`, in nanoseconds (0 for the first).
pub(crate) fn lifetime_lower_ns(i: usize) -> u64 {
    if i == 0 { 0 } else { 1 << (i + 6) }
}

/// One group's figures, read from its [`Tallies`]: estimates weighted by the inverse sampling
/// probability, in blocks and bytes (report side).
#[derive(Clone, Debug, Default)]
pub(crate) struct Figures {
    pub(crate) alloc_blocks: f64,
    pub(crate) alloc_bytes: f64,
    pub(crate) inuse_blocks: f64,
    pub(crate) inuse_bytes: f64,
    pub(crate) frees: f64,
    pub(crate) cross: f64,
    pub(crate) samples: u64,
    pub(crate) free_samples: u64,
    /// Byte variances (`estimate::SampleSums::bytes_var`) behind `alloc_bytes` and `inuse_bytes`.
    pub(crate) alloc_bytes_var: u64,
    pub(crate) inuse_bytes_var: u64,
    pub(crate) lifetimes: [f64; LIFETIME_OCTAVES],
}

impl Figures {
    /// Adds the tallies `t` (of one more slot of the group: a stack interned twice).
    pub(crate) fn add(&mut self, t: &Tallies) {
        let f = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64 / W_ONE as f64;
        self.alloc_blocks += f(&t.allocs);
        self.alloc_bytes += f(&t.alloc_bytes);
        let frees = t.lifetimes.iter().map(|b| b.load(Ordering::Relaxed)).fold(0u64, u64::wrapping_add);
        let frees = frees as f64 / W_ONE as f64;
        self.inuse_blocks += (f(&t.allocs) - frees).max(0.0);
        self.inuse_bytes += (f(&t.alloc_bytes) - f(&t.freed_bytes)).max(0.0);
        self.frees += frees;
        self.cross += f(&t.cross);
        self.samples += t.samples.load(Ordering::Relaxed);
        self.free_samples += t.free_samples.load(Ordering::Relaxed);
        let (var, var_out) = (t.bytes_var.load(Ordering::Relaxed), t.bytes_var_out.load(Ordering::Relaxed));
        self.alloc_bytes_var = self.alloc_bytes_var.saturating_add(var);
        self.inuse_bytes_var = self.inuse_bytes_var.saturating_add(var.saturating_sub(var_out));
        for (to, from) in self.lifetimes.iter_mut().zip(&t.lifetimes) {
            *to += f(from);
        }
    }

    /// The share of sampled frees (weighted) that crossed the group's boundary ([`Tallies::freed`]);
    /// `None` under [`MIN_SAMPLES_SHARE`].
    pub(crate) fn cross_share(&self) -> Option<f64> {
        (self.free_samples >= MIN_SAMPLES_SHARE && self.frees > 0.0).then(|| (self.cross / self.frees).clamp(0.0, 1.0))
    }

    /// The median lifetime of freed blocks, in nanoseconds: the geometric middle of the power-of-two
    /// bucket that holds the weighted median; `None` under [`MIN_SAMPLES_SHARE`].
    pub(crate) fn median_lifetime_ns(&self) -> Option<u64> {
        if self.free_samples < MIN_SAMPLES_SHARE {
            return None;
        }
        let total: f64 = self.lifetimes.iter().sum();
        let mut seen = 0.0;
        for (i, w) in self.lifetimes.iter().enumerate() {
            seen += w;
            if seen >= total / 2.0 && total > 0.0 {
                let lo = lifetime_lower_ns(i).max(64) as f64;
                return Some((lo * core::f64::consts::SQRT_2) as u64);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifetime_buckets_are_powers_of_two() {
        assert_eq!(lifetime_bucket(0), 0);
        assert_eq!(lifetime_bucket(127), 0);
        assert_eq!(lifetime_bucket(128), 1);
        assert_eq!(lifetime_bucket(255), 1);
        assert_eq!(lifetime_bucket(256), 2);
        assert_eq!(lifetime_lower_ns(2), 256);
        assert_eq!(lifetime_bucket(u64::MAX), LIFETIME_OCTAVES - 1);
        assert_eq!(lifetime_lower_ns(LIFETIME_OCTAVES - 1), 1 << 37);
    }
}
