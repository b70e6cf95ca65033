//! The fragmentation ratio, `(resident − allocated) / allocated`, from the allocator's figures or the
//! process's, and the floor of live data below which it is not shown.

use core::fmt;

use super::figures::HeapCounts;
use crate::backend::AllocatorStats;
use crate::process::ProcessStats;

/// Fragmentation figures and the inputs they were computed from.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Fragmentation {
    /// `(resident - allocated) / allocated`, from the allocator's own resident and allocated bytes
    /// where it has both, else from process RSS and tracked usable bytes. `None` with less than
    /// 8 MiB of live data, where it would measure the allocator's fixed overhead (the report's
    /// warnings say so).
    pub ratio: Option<f64>,
    /// Which figures `ratio` was computed from.
    pub ratio_inputs: RatioInputs,
    /// `(process RSS - tracked usable bytes) / tracked usable bytes`: the whole process's overhead.
    /// `None` below the same 8 MiB of live data.
    pub process_ratio: Option<f64>,
    /// Internal fragmentation: usable minus requested bytes over live blocks.
    pub internal_bytes: u64,
}

/// The figures [`Fragmentation::ratio`](crate::report::Fragmentation::ratio) was computed from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum RatioInputs {
    /// The allocator's own resident and allocated bytes (jemalloc).
    Allocator,
    /// Process RSS and tracked usable bytes: every backend without both allocator figures.
    Process,
}

impl fmt::Display for RatioInputs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Allocator => "allocator resident vs allocator allocated",
            Self::Process => "process rss_bytes vs tracked usable_bytes",
        })
    }
}

/// Below this much live data a fragmentation ratio mostly measures the allocator's fixed start-up
/// overhead (jemalloc maps several MiB of metadata before the first allocation), not fragmentation.
pub(super) const MEANINGFUL_LIVE_BYTES: u64 = 8 << 20;

fn ratio(resident: u64, allocated: u64) -> Option<f64> {
    (allocated > 0).then(|| (resident as f64 - allocated as f64) / allocated as f64)
}

/// The ratios, `None` below [`MEANINGFUL_LIVE_BYTES`] of live data: over a near-empty heap they
/// measure the allocator's and the process's fixed overhead (a ratio of 30,000 after everything was
/// freed), not fragmentation.
pub(super) fn fragmentation(t: &HeapCounts, a: Option<&AllocatorStats>, p: &ProcessStats) -> Fragmentation {
    let meaningful = t.usable_bytes >= MEANINGFUL_LIVE_BYTES;
    let process_ratio = p.rss_bytes.and_then(|rss| ratio(rss, t.usable_bytes)).filter(|_| meaningful);
    let (ratio, ratio_inputs) = match a.and_then(|a| a.resident.zip(a.allocated)) {
        Some((resident, allocated)) => (ratio(resident, allocated).filter(|_| meaningful), RatioInputs::Allocator),
        None => (process_ratio, RatioInputs::Process),
    };
    Fragmentation {
        ratio,
        ratio_inputs,
        process_ratio,
        internal_bytes: t.usable_bytes.saturating_sub(t.allocated_bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ratio over a near-empty heap is not shown; above the floor it is the plain formula.
    #[test]
    fn ratios_need_a_floor_of_live_data() {
        let p = ProcessStats { rss_bytes: Some(40 << 20), ..ProcessStats::default() };
        let small = HeapCounts { usable_bytes: 1 << 10, allocated_bytes: 1 << 10, ..HeapCounts::default() };
        let f = fragmentation(&small, None, &p);
        assert_eq!((f.ratio, f.process_ratio), (None, None));
        let big = HeapCounts { usable_bytes: 16 << 20, allocated_bytes: 16 << 20, ..HeapCounts::default() };
        let f = fragmentation(&big, None, &p);
        assert_eq!(f.process_ratio, Some(1.5));
        let a = AllocatorStats { resident: Some(20 << 20), allocated: Some(16 << 20), ..AllocatorStats::default() };
        assert_eq!(fragmentation(&big, Some(&a), &p).ratio, Some(0.25));
        assert_eq!(fragmentation(&small, Some(&a), &p).ratio, None);
    }
}
