//! The reclaimer's CPU budget: a share of one core, earned with wall time and spent with the
//! thread's CPU time (user and system, so the kernel's work of returning pages counts), polls and
//! actions alike.
//!
//! - Credit grows by `share` × the wall time between rounds, up to `share` × [`CREDIT_WINDOW`]: a
//!   reclaimer idle for an hour cannot spend an hour's savings at once.
//! - Every round's CPU time is spent from it. An action needs credit for its expected cost (the cost
//!   per byte of earlier actions, times the bytes predicted); one that costs more (glibc's trim is one
//!   call) leaves a debt, and no action runs until the debt is repaid.
//! - When polls alone would cost more than the share, the time between them grows to fit.
//!
//! So over any run, CPU time ≤ `share` × wall time + `share` × [`CREDIT_WINDOW`] + one action.

use std::time::Duration;

/// The most credit kept: this much wall time's worth.
pub(crate) const CREDIT_WINDOW: Duration = Duration::from_secs(10);

/// Credit, in seconds of CPU time (negative: a debt).
#[derive(Debug)]
pub(crate) struct Budget {
    share: f64,
    credit: f64,
    /// CPU seconds per byte released by earlier actions, smoothed.
    per_byte: Option<f64>,
}

impl Budget {
    /// Starts with no credit: the first action waits for `share` of its cost in wall time.
    pub(crate) fn new(share: f64) -> Self {
        Self { share, credit: 0.0, per_byte: None }
    }

    /// Earns `wall` time's share.
    pub(crate) fn earn(&mut self, wall: Duration) {
        let cap = self.share * CREDIT_WINDOW.as_secs_f64();
        self.credit = (self.credit + self.share * wall.as_secs_f64()).min(cap);
    }

    /// Spends `cpu`.
    pub(crate) fn spend(&mut self, cpu: Duration) {
        self.credit -= cpu.as_secs_f64();
    }

    /// What an action releasing about `bytes` is expected to cost.
    pub(crate) fn expected(&self, bytes: u64) -> Duration {
        Duration::from_secs_f64(self.per_byte.map_or(0.0, |p| p * bytes as f64))
    }

    /// `None` when the credit covers an action of `expected` cost, else how much is missing.
    pub(crate) fn short_for(&self, expected: Duration) -> Option<Duration> {
        let need = expected.as_secs_f64().max(f64::MIN_POSITIVE);
        (self.credit < need).then(|| Duration::from_secs_f64(need - self.credit.min(need)))
    }

    /// The credit left now (zero when in debt).
    pub(crate) fn credit(&self) -> Duration {
        Duration::from_secs_f64(self.credit.max(0.0))
    }

    /// Learns an action's cost per byte released.
    pub(crate) fn learn(&mut self, cpu: Duration, released: u64) {
        if released < 1 << 20 {
            return;
        }
        let p = cpu.as_secs_f64() / released as f64;
        self.per_byte = Some(self.per_byte.map_or(p, |old| 0.5 * old + 0.5 * p));
    }

    /// The wait before the next round: `poll`, or longer while in debt, so that the debt is repaid
    /// by the time the round runs.
    pub(crate) fn wait(&self, poll: Duration) -> Duration {
        if self.credit >= 0.0 {
            return poll;
        }
        poll.max(Duration::from_secs_f64((-self.credit / self.share).min(CREDIT_WINDOW.as_secs_f64())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The model: rounds every 250 ms costing 50 µs, and actions of 80 ms at most every 6 s, over
    /// ten minutes at 1%: CPU stays within the share plus the stated slack, and the budget, not the
    /// interval, sets the pace (80 ms at 1% takes 8 s to earn).
    #[test]
    fn spending_stays_within_the_share() {
        let share = 0.01;
        let mut b = Budget::new(share);
        let (mut wall, mut cpu) = (Duration::ZERO, Duration::ZERO);
        let mut last_action = Duration::ZERO;
        let mut actions = 0;
        while wall < Duration::from_secs(600) {
            let poll = b.wait(Duration::from_millis(250));
            wall += poll;
            b.earn(poll);
            let round = Duration::from_micros(50);
            b.spend(round);
            cpu += round;
            if wall - last_action >= Duration::from_secs(6) && b.short_for(b.expected(100 << 20)).is_none() {
                let action = Duration::from_millis(80);
                b.spend(action);
                b.learn(action, 100 << 20);
                cpu += action;
                last_action = wall;
                actions += 1;
            }
        }
        let slack = share * CREDIT_WINDOW.as_secs_f64() + 0.080;
        assert!(cpu.as_secs_f64() <= share * wall.as_secs_f64() + slack, "{cpu:?} over {wall:?}");
        assert!((60..=80).contains(&actions), "{actions}");
    }

    #[test]
    fn a_debt_lengthens_the_wait() {
        let mut b = Budget::new(0.01);
        b.spend(Duration::from_millis(20));
        assert_eq!(b.wait(Duration::from_millis(250)), Duration::from_secs(2));
        assert!(b.short_for(Duration::ZERO).is_some());
        b.earn(Duration::from_secs(2));
        assert!(b.wait(Duration::from_millis(250)) <= Duration::from_millis(250));
    }
}
