//! Reading the site table: one figure set per distinct stack, as estimates (report side: allocates).

use std::collections::HashMap;

use super::SITES;
use super::table::{LIFETIME_OCTAVES, Tallies, lifetime_lower_ns};
use crate::estimate::MIN_SAMPLES_SHARE;
use crate::sampler::W_ONE;
use crate::sync::Ordering;

/// One site's figures: estimates weighted by the inverse sampling probability, in blocks and bytes.
#[derive(Clone, Debug, Default)]
pub(crate) struct SiteFigures {
    /// Return addresses, leaf first; empty for the "no stack" site.
    pub(crate) stack: Vec<usize>,
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
    /// Estimated free bytes in slabs that the site's live blocks keep resident (`report::pins`).
    pub(crate) pinned_bytes: f64,
    lifetimes: [f64; LIFETIME_OCTAVES],
}

impl SiteFigures {
    fn add(&mut self, t: &Tallies) {
        let f = |a: &crate::sync::AtomicU64| a.load(Ordering::Relaxed) as f64 / W_ONE as f64;
        self.alloc_blocks += f(&t.allocs);
        self.alloc_bytes += f(&t.alloc_bytes);
        self.inuse_blocks += (f(&t.live_in[0]) - f(&t.live_out[0])).max(0.0);
        self.inuse_bytes += (f(&t.live_in[1]) - f(&t.live_out[1])).max(0.0);
        self.frees += f(&t.frees);
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

    /// The share of sampled frees (weighted) made on another thread; `None` under
    /// [`MIN_SAMPLES_SHARE`].
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

/// Every site with a sample, merged by stack (two racing threads may have interned one stack
/// twice), the "no stack" site first if it has any; `pinned` holds each site id's pinned bytes.
pub(crate) fn snapshot(pinned: &HashMap<u32, f64>) -> Vec<SiteFigures> {
    let mut by_stack: HashMap<Vec<usize>, SiteFigures> = HashMap::new();
    for (id, stack) in SITES.stacks() {
        let t = SITES.tallies(id);
        if t.samples.load(Ordering::Relaxed) == 0 {
            continue;
        }
        let e = by_stack.entry(stack.clone()).or_insert_with(|| SiteFigures { stack, ..SiteFigures::default() });
        e.add(t);
        e.pinned_bytes += pinned.get(&id).copied().unwrap_or(0.0);
    }
    let mut out: Vec<SiteFigures> = by_stack.into_values().collect();
    out.sort_by(|a, b| {
        a.stack.is_empty().cmp(&b.stack.is_empty()).reverse().then(b.inuse_bytes.total_cmp(&a.inuse_bytes))
    });
    out
}

/// Stacks the site table had no room for.
pub(crate) fn dropped() -> u64 {
    SITES.dropped()
}
