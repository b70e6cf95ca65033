//! Reading the scope table: one figure set per scope with a sample (report side: allocates).

use super::scope_table::{CAPACITY, NONE, OTHER, OTHER_SCOPES, SCOPES};
use crate::estimate::live_bytes_interval;
use crate::sampler;
use crate::tally::Figures;

/// One scope's figures.
#[derive(Clone, Debug, Default)]
pub(crate) struct ScopeFigures {
    /// The scope's slot.
    pub(crate) id: u16,
    /// The scope's name; `None` for the samples taken outside every scope.
    pub(crate) name: Option<&'static str>,
    /// Published under its own name.
    pub(crate) published: bool,
    pub(crate) tally: Figures,
}

/// Every scope with a sample, by live bytes, largest first; the samples outside every scope as one
/// more row (`name: None`).
pub(crate) fn snapshot() -> Vec<ScopeFigures> {
    let mut out = Vec::new();
    for id in 0..SCOPES.used().min(CAPACITY) as u16 {
        let t = SCOPES.tallies(id);
        let mut tally = Figures::default();
        tally.add(t);
        if tally.samples == 0 {
            continue;
        }
        out.push(ScopeFigures { id, name: name(id), published: SCOPES.published(id), tally });
    }
    out.sort_by(|a, b| b.tally.inuse_bytes.total_cmp(&a.tally.inuse_bytes));
    out
}

/// A scope's live bytes from its figures: the estimate, its 95% interval
/// ([`live_bytes_interval`], at the current sampling mean) and the live samples behind it.
pub(crate) fn live_bytes(f: &Figures) -> (u64, (u64, u64), u64) {
    let estimate = f.inuse_bytes.round() as u64;
    let samples = f.samples.saturating_sub(f.free_samples);
    let mean = (sampler::mean() != 0).then(sampler::interval_mean);
    (estimate, live_bytes_interval(estimate, f.inuse_bytes_var, samples, mean), samples)
}

/// The name of slot `id` as profiles label it: `None` outside every scope.
pub(crate) fn name(id: u16) -> Option<&'static str> {
    match id {
        NONE => None,
        OTHER => Some(OTHER_SCOPES),
        _ => SCOPES.name(id),
    }
}

/// Named scopes in use, the table's room for them, and the names refused for want of room.
pub(crate) fn occupancy() -> (usize, usize, u64) {
    (SCOPES.used() - 2, CAPACITY - 2, SCOPES.refused())
}
