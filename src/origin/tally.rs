//! Process-wide tallies of sampled frees that are not per thread: per size class, lifetimes, the
//! origin matrix. Written on the cold path only (sampled frees), with atomic adds.

use crate::estimate::SampleSums;
use crate::stats::class::NUM_CLASSES;
use crate::sync::{AtomicU64, Ordering};

/// Lifetime buckets: below 1 µs, then one per decade up to 1000 s and above.
pub(crate) const LIFETIME_DECADES: usize = 11;

/// Upper bound (exclusive) of lifetime bucket `i`, in nanoseconds; `None` for the last.
pub(crate) fn lifetime_upper_ns(i: usize) -> Option<u64> {
    (i + 1 < LIFETIME_DECADES).then(|| 1_000 * 10u64.pow(i as u32))
}

/// The bucket of a lifetime of `ns` nanoseconds: the first whose upper bound is above it. With a
/// decimal logarithm, not a search that computes each bound (about 60 instructions a sampled free).
fn lifetime_bucket(ns: u64) -> usize {
    (ns / 1_000).checked_ilog10().map_or(0, |d| d as usize + 1).min(LIFETIME_DECADES - 1)
}

/// Origin matrix cells kept (allocating thread, freeing thread); more distinct pairs are counted as
/// dropped.
pub(crate) const PAIR_CAPACITY: usize = 1024;
const PAIR_PROBE: usize = 16;

struct Pair {
    /// `alloc_tid << 32 | free_tid`, or 0 for an empty cell (no thread has id 0).
    key: AtomicU64,
    /// `SampleSums` of the pair's frees: `[w, wb, w2, bytes_var]`.
    sums: [AtomicU64; 4],
}

/// A snapshot of one origin-matrix cell: the sums of its sampled frees.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PairSums {
    pub(crate) alloc_tid: u32,
    pub(crate) free_tid: u32,
    pub(crate) sums: SampleSums,
}

/// The variance of a class's sampled blocks: `[count (Σw²), bytes]`, `[entered, left]`.
type ClassVariance = [[AtomicU64; 2]; 2];

/// One sampled free, as the tallies need it.
pub(crate) struct SampledFree {
    pub(crate) class: usize,
    pub(crate) cross: bool,
    pub(crate) lifetime_ns: u64,
    pub(crate) alloc_tid: u32,
    pub(crate) free_tid: u32,
    /// What the sample adds to the estimates.
    pub(crate) sums: SampleSums,
}

pub(crate) struct Tally {
    /// Sampled allocations that made it into the table.
    pub(crate) sampled: AtomicU64,
    /// Weighted frees and cross-thread frees per size class.
    class_frees: [AtomicU64; NUM_CLASSES],
    class_cross: [AtomicU64; NUM_CLASSES],
    /// Sampled frees per size class (raw count): what the class's estimates rest on. Their sum is
    /// every sampled free ([`Tally::sampled_frees`]).
    class_samples: [AtomicU64; NUM_CLASSES],
    /// Per size class, the variance the sampled blocks that entered and left it add to the sampled
    /// tier's estimates of its live blocks and bytes. What left is also the squared weights of the
    /// class's sampled frees, from which the cross-thread share's effective samples come.
    class_variance: [ClassVariance; NUM_CLASSES],
    /// Weighted frees per lifetime bucket: `[local, cross]`.
    lifetimes: [[AtomicU64; LIFETIME_DECADES]; 2],
    pairs: [Pair; PAIR_CAPACITY],
    pair_drops: AtomicU64,
    /// "Freed elsewhere" credit for allocating threads whose slot has changed hands since:
    /// `[count, bytes]`, shown in the retired row.
    pub(crate) retired_elsewhere: [AtomicU64; 2],
}

impl Tally {
    pub(crate) const fn new() -> Self {
        Self {
            sampled: AtomicU64::new(0),
            class_frees: [const { AtomicU64::new(0) }; NUM_CLASSES],
            class_cross: [const { AtomicU64::new(0) }; NUM_CLASSES],
            class_samples: [const { AtomicU64::new(0) }; NUM_CLASSES],
            class_variance: [const { [const { [const { AtomicU64::new(0) }; 2] }; 2] }; NUM_CLASSES],
            lifetimes: [const { [const { AtomicU64::new(0) }; LIFETIME_DECADES] }; 2],
            pairs: [const { Pair { key: AtomicU64::new(0), sums: [const { AtomicU64::new(0) }; 4] } }; PAIR_CAPACITY],
            pair_drops: AtomicU64::new(0),
            retired_elsewhere: [const { AtomicU64::new(0) }; 2],
        }
    }

    /// Records one sampled block entering the side table, in size class `class`.
    pub(crate) fn arrived(&self, class: usize, sums: SampleSums) {
        self.sampled.fetch_add(1, Ordering::Relaxed);
        self.class_variance_add(class, 0, sums);
    }

    /// Records one sampled free.
    pub(crate) fn freed(&self, f: &SampledFree) {
        let w = f.sums.w;
        add(self.class_frees.get(f.class), w);
        add(self.class_samples.get(f.class), 1);
        if f.cross {
            add(self.class_cross.get(f.class), w);
        }
        self.class_variance_add(f.class, 1, f.sums);
        add(self.lifetimes.get(usize::from(f.cross)).and_then(|l| l.get(lifetime_bucket(f.lifetime_ns))), w);
        self.pair(f.alloc_tid, f.free_tid, f.sums);
    }

    fn class_variance_add(&self, class: usize, side: usize, sums: SampleSums) {
        if let Some(v) = self.class_variance.get(class) {
            add(v[0].get(side), sums.w2);
            add(v[1].get(side), sums.bytes_var);
        }
    }

    fn pair(&self, alloc_tid: u32, free_tid: u32, sums: SampleSums) {
        let key = (u64::from(alloc_tid) << 32) | u64::from(free_tid);
        if key == 0 {
            return;
        }
        let h = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 54) as usize;
        for i in 0..PAIR_PROBE {
            let Some(cell) = self.pairs.get((h + i) % PAIR_CAPACITY) else { break };
            let k = cell.key.load(Ordering::Acquire);
            let mine = k == key
                || (k == 0
                    && match cell.key.compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire) {
                        Ok(_) => true,
                        Err(now) => now == key,
                    });
            if mine {
                for (c, v) in cell.sums.iter().zip([sums.w, sums.wb, sums.w2, sums.bytes_var]) {
                    c.fetch_add(v, Ordering::Relaxed);
                }
                return;
            }
        }
        self.pair_drops.fetch_add(1, Ordering::Relaxed);
    }

    /// Sampled blocks freed (raw count), in every class.
    pub(crate) fn sampled_frees(&self) -> u64 {
        self.class_samples.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// Weighted `(frees, cross-thread frees)` of class `class`, its sampled frees and their squared
    /// weights.
    pub(crate) fn class(&self, class: usize) -> ClassFrees {
        let read = |a: &[AtomicU64; NUM_CLASSES]| a.get(class).map_or(0, |c| c.load(Ordering::Relaxed));
        ClassFrees {
            frees: read(&self.class_frees),
            cross: read(&self.class_cross),
            samples: read(&self.class_samples),
            // Σw² of the blocks that left the class: every sampled free's.
            w2: self.class_variance.get(class).map_or(0, |v| v[0][1].load(Ordering::Relaxed)),
        }
    }

    /// `(Σw², bytes variance)` of the sampled blocks of class `class` that entered it
    /// (`live == false`: every sampled allocation) or that are still in it (`live == true`).
    pub(crate) fn class_variance(&self, class: usize, live: bool) -> (u64, u64) {
        let Some(v) = self.class_variance.get(class) else { return (0, 0) };
        let read = |k: usize| {
            let [entered, left] = &v[k];
            let entered = entered.load(Ordering::Relaxed);
            if live { entered.saturating_sub(left.load(Ordering::Relaxed)) } else { entered }
        };
        (read(0), read(1))
    }

    /// Weighted `(local, cross)` frees of lifetime bucket `i`.
    pub(crate) fn lifetime(&self, i: usize) -> (u64, u64) {
        let read = |k: usize| self.lifetimes.get(k).and_then(|l| l.get(i)).map_or(0, |c| c.load(Ordering::Relaxed));
        (read(0), read(1))
    }

    /// Every origin-matrix cell in use (allocates: report side only).
    pub(crate) fn pairs(&self) -> Vec<PairSums> {
        self.pairs
            .iter()
            .filter_map(|c| {
                let key = c.key.load(Ordering::Acquire);
                let [w, wb, w2, bytes_var] = c.sums.each_ref().map(|a| a.load(Ordering::Relaxed));
                (key != 0).then_some(PairSums {
                    alloc_tid: (key >> 32) as u32,
                    free_tid: key as u32,
                    sums: SampleSums { w, wb, w2, bytes_var },
                })
            })
            .collect()
    }

    pub(crate) fn pair_drops(&self) -> u64 {
        self.pair_drops.load(Ordering::Relaxed)
    }
}

/// A size class's sampled frees (see [`Tally::class`]).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ClassFrees {
    /// Weighted frees and cross-thread frees, fixed point.
    pub(crate) frees: u64,
    pub(crate) cross: u64,
    /// Sampled frees (raw count) and their squared weights.
    pub(crate) samples: u64,
    pub(crate) w2: u64,
}

fn add(c: Option<&AtomicU64>, v: u64) {
    if let Some(c) = c {
        c.fetch_add(v, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifetime_buckets_are_decades() {
        assert_eq!(lifetime_bucket(0), 0);
        assert_eq!(lifetime_bucket(999), 0);
        assert_eq!(lifetime_bucket(1_000), 1);
        assert_eq!(lifetime_bucket(9_999), 1);
        assert_eq!(lifetime_bucket(1_000_000_000), 7);
        assert_eq!(lifetime_bucket(u64::MAX), LIFETIME_DECADES - 1);
        assert_eq!(lifetime_upper_ns(LIFETIME_DECADES - 2), Some(1_000_000_000_000));
        // The bucket is the first whose upper bound is above the lifetime, on either side of every bound.
        let first_above =
            |ns: u64| (0..LIFETIME_DECADES).find(|&i| lifetime_upper_ns(i).is_none_or(|u| ns < u)).unwrap();
        for u in (0..LIFETIME_DECADES).filter_map(lifetime_upper_ns) {
            for ns in [u - 1, u, u + 1, u * 3, u * 10 - 1] {
                assert_eq!(lifetime_bucket(ns), first_above(ns), "{ns} ns");
            }
        }
    }

    /// A class's frees and their squared weights are those of the sampled frees recorded in it, and
    /// of no other class; blocks that arrive add to neither.
    #[test]
    fn a_class_sums_its_own_frees() {
        let t = Box::new(Tally::new());
        let free = |class, w: u64, cross| SampledFree {
            class,
            cross,
            lifetime_ns: 0,
            alloc_tid: 1,
            free_tid: if cross { 2 } else { 1 },
            sums: SampleSums { w, wb: w * 100, w2: w * w, bytes_var: 7 },
        };
        t.arrived(3, SampleSums { w: 5, wb: 500, w2: 25, bytes_var: 7 });
        for (w, cross) in [(2, false), (3, true), (4, true)] {
            t.freed(&free(3, w, cross));
        }
        t.freed(&free(4, 10, true));
        let c = t.class(3);
        assert_eq!((c.frees, c.cross, c.samples, c.w2), (2 + 3 + 4, 3 + 4, 3, 4 + 9 + 16));
        assert_eq!(t.class(4).w2, 100);
        assert_eq!(t.sampled_frees(), 4);
    }

    #[test]
    fn pairs_accumulate_per_key() {
        let t = Box::new(Tally::new());
        let sums = |w, wb| SampleSums { w, wb, w2: w * w, bytes_var: wb };
        t.pair(1, 2, sums(3, 30));
        t.pair(1, 2, sums(4, 40));
        t.pair(2, 1, sums(1, 10));
        let mut p = t.pairs();
        p.sort_by_key(|p| p.alloc_tid);
        assert_eq!((p[0].alloc_tid, p[0].free_tid), (1, 2));
        assert_eq!(p[0].sums, SampleSums { w: 7, wb: 70, w2: 9 + 16, bytes_var: 70 });
        assert_eq!((p[1].alloc_tid, p[1].free_tid, p[1].sums.w), (2, 1, 1));
    }
}
