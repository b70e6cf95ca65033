//! When the heap counts as quiet: the bytes it hands out per second, against the busiest rate seen
//! lately. A service that keeps its load never turns quiet, however much is reclaimable, because
//! what it frees it reuses; one whose load drops does.

use std::time::{Duration, Instant};

/// Below this rate (bytes allocated per second) the heap is always quiet.
pub(crate) const QUIET_FLOOR: f64 = 1024.0 * 1024.0;

/// The busiest rate is forgotten by half every this long: a load that dropped long ago stops
/// defining "busy".
const PEAK_HALF_LIFE: Duration = Duration::from_secs(300);

/// The heap's activity across rounds.
#[derive(Debug, Default)]
pub(crate) struct Quiet {
    /// The previous round's time and cumulative allocated bytes.
    last: Option<(Instant, u64)>,
    /// The busiest rate seen, decayed.
    peak: f64,
    /// Since when every round has been quiet.
    since: Option<Instant>,
}

/// What the rate says now.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Activity {
    /// The first observation: no rate yet.
    First,
    /// Above the quiet rate.
    Busy { bytes_per_sec: f64, quiet_below: f64 },
    /// Quiet for this long (zero at the first quiet round).
    Quiet(Duration),
}

impl Quiet {
    /// Takes the cumulative allocated bytes `total` at `now`; `share` is the share of the busiest
    /// rate below which the heap is quiet. The first call has no rate: [`Activity::First`].
    pub(crate) fn observe(&mut self, now: Instant, total: u64, share: f64) -> Activity {
        let Some((then, before)) = self.last.replace((now, total)) else {
            return Activity::First;
        };
        let dt = now.saturating_duration_since(then).as_secs_f64();
        // A slot reused by a new thread may restart its count: no activity rather than a negative one.
        let rate = if dt > 0.0 { total.saturating_sub(before) as f64 / dt } else { 0.0 };
        self.peak = (self.peak * 0.5f64.powf(dt / PEAK_HALF_LIFE.as_secs_f64())).max(rate);
        let quiet_below = (share * self.peak).max(QUIET_FLOOR);
        if rate > quiet_below {
            self.since = None;
            return Activity::Busy { bytes_per_sec: rate, quiet_below };
        }
        let since = *self.since.get_or_insert(then);
        Activity::Quiet(now.saturating_duration_since(since))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// A burst at 1 GiB/s, then light activity at 20 MiB/s: busy through the burst, quiet from the
    /// first light round on, the quiet time counted from the end of the last busy round.
    #[test]
    fn a_drop_in_load_is_quiet_steady_load_is_not() {
        let t0 = Instant::now();
        let mut q = Quiet::default();
        let mut total = 0;
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert_eq!(q.observe(at(0), total, 0.1), Activity::First);
        for ms in (250..=2000).step_by(250) {
            total += 256 * MIB;
            assert!(matches!(q.observe(at(ms), total, 0.1), Activity::Busy { .. }), "{ms}");
        }
        total += 5 * MIB;
        assert_eq!(q.observe(at(2250), total, 0.1), Activity::Quiet(Duration::from_millis(250)));
        total += 5 * MIB;
        assert_eq!(q.observe(at(2500), total, 0.1), Activity::Quiet(Duration::from_millis(500)));
        // Load back: busy again, and the quiet time starts over.
        total += 256 * MIB;
        assert!(matches!(q.observe(at(2750), total, 0.1), Activity::Busy { .. }));
        assert_eq!(q.observe(at(3000), total, 0.1), Activity::Quiet(Duration::from_millis(250)));
    }

    #[test]
    fn a_steady_load_never_turns_quiet_and_a_restarted_count_is_no_activity() {
        let t0 = Instant::now();
        let mut q = Quiet::default();
        assert_eq!(q.observe(t0, 0, 0.1), Activity::First);
        for i in 1..=40u64 {
            let a = q.observe(t0 + Duration::from_millis(250 * i), i * 64 * MIB, 0.1);
            assert!(matches!(a, Activity::Busy { .. }), "{i}: {a:?}");
        }
        assert!(matches!(q.observe(t0 + Duration::from_millis(250 * 41), 0, 0.1), Activity::Quiet(_)));
    }
}
