//! When a bucket is worth a finding: each kind's thresholds, as shares of RSS (or of live usable bytes
//! for rounding), and the floor of bytes below which nothing is raised, so a small process gets no
//! findings from start-up noise. `docs/DIAGNOSIS.md` lists them with the evidence each backend gives.

use super::kinds::Severity;

/// No finding (other than a configuration trap) explains fewer bytes than this.
pub const MIN_BYTES: u64 = 4 << 20;

/// A share of RSS at which a bucket is worth a finding (`info`) and at which it is a problem to act
/// on (`warn`), per kind.
pub(super) struct Thresholds {
    pub(super) info: f64,
    pub(super) warn: f64,
}

pub(super) const LIVE_DATA: Thresholds = Thresholds { info: 0.5, warn: f64::INFINITY };
/// Rounding is measured against live usable bytes, not RSS.
pub(super) const ROUNDING: Thresholds = Thresholds { info: 0.10, warn: 0.25 };
pub(super) const HOLES: Thresholds = Thresholds { info: 0.10, warn: 0.20 };
pub(super) const RECLAIMABLE: Thresholds = Thresholds { info: 0.05, warn: 0.10 };
pub(super) const METADATA: Thresholds = Thresholds { info: 0.10, warn: f64::INFINITY };
pub(super) const OUTSIDE_HEAP: Thresholds = Thresholds { info: 0.25, warn: 0.50 };
/// Share of freed bytes (estimated) that crossed threads; the finding's bytes are the free space it
/// can pin (holes and reclaimable pages, in proportion to that share).
pub(super) const CROSS_THREAD: Thresholds = Thresholds { info: 0.10, warn: 0.30 };

/// Severity of `share` under `t`, or `None` below its info threshold or [`MIN_BYTES`].
pub(super) fn grade(share: f64, bytes: u64, t: &Thresholds) -> Option<Severity> {
    if bytes < MIN_BYTES || share.is_nan() || share < t.info {
        None
    } else if share >= t.warn {
        Some(Severity::Warn)
    } else {
        Some(Severity::Info)
    }
}
