//! The reclaimer's CPU budget: a share of one core, earned with wall time and spent with the
//! thread's CPU time (user and system, so the kernel's work of returning pages counts), polls and
//! actions alike.
//!
//! - Credit grows by `share` × the wall time between rounds, up to `share` × [`CREDIT_WINDOW`]: a
//!   reclaimer idle for an hour cannot spend an hour's savings at once.
//! - Every round's CPU time is spent from it. An action needs credit for its expected cost (the cost
//!   per byte of earlier actions, times the bytes predicted), or, when that is more than the credit
//!   can ever hold, a full credit: then it runs anyway (partly, where the backend can stop between
//!   steps, as jemalloc does between arenas), and what it costs beyond the credit is a debt. No
//!   action runs until a debt is repaid. So an action is never put off for good, however large the
//!   heap or the cost learned from an earlier one: it waits at most [`CREDIT_WINDOW`] for the
//!   credit, or its own cost ÷ `share` for an earlier action's debt.
//! - Polls (rounds that do not act) may use at most half the share: when they would use more, the
//!   time between them grows to fit, so that they can never leave actions without credit.
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
    /// CPU seconds of a round that did not act, smoothed.
    poll_cost: f64,
}

/// The part of the share that polls may use.
pub(crate) const POLL_SHARE: f64 = 0.5;

impl Budget {
    /// Starts with no credit: the first action waits for `share` of its cost in wall time.
    pub(crate) fn new(share: f64) -> Self {
        Self { share, credit: 0.0, per_byte: None, poll_cost: 0.0 }
    }

    /// Changes the share (the soft limit's controller raises it while RSS is over the target): credit
    /// is earned at the new rate from now on, and the cap follows it.
    pub(crate) fn set_share(&mut self, share: f64) {
        self.share = share;
        self.credit = self.credit.min(self.cap());
    }

    /// The most credit kept, in seconds.
    fn cap(&self) -> f64 {
        self.share * CREDIT_WINDOW.as_secs_f64()
    }

    /// Earns `wall` time's share.
    pub(crate) fn earn(&mut self, wall: Duration) {
        self.credit = (self.credit + self.share * wall.as_secs_f64()).min(self.cap());
    }

    /// Spends `cpu`, a round's CPU time; `acted`: whether the round ran an action (else it was a
    /// poll, whose cost sets how often polls may run).
    pub(crate) fn spend(&mut self, cpu: Duration, acted: bool) {
        self.credit -= cpu.as_secs_f64();
        if !acted {
            let c = cpu.as_secs_f64();
            self.poll_cost = if self.poll_cost == 0.0 { c } else { 0.8 * self.poll_cost + 0.2 * c };
        }
    }

    /// What an action releasing about `bytes` is expected to cost.
    pub(crate) fn expected(&self, bytes: u64) -> Duration {
        Duration::from_secs_f64(self.per_byte.map_or(0.0, |p| p * bytes as f64))
    }

    /// `None` when the credit covers an action of `expected` cost, or is full while the action would
    /// cost more than a full credit; else how much is missing.
    pub(crate) fn short_for(&self, expected: Duration) -> Option<Duration> {
        let need = expected.as_secs_f64().max(f64::MIN_POSITIVE).min(self.cap());
        (self.credit < need).then(|| Duration::from_secs_f64(need - self.credit.min(need)))
    }

    /// Whether more was spent than earned.
    pub(crate) fn in_debt(&self) -> bool {
        self.credit < 0.0
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

    /// The wait before the next round: `poll`, or longer where polls would use more than their part
    /// of the share, or while in debt, so that the debt is repaid by the time the round runs.
    pub(crate) fn wait(&self, poll: Duration) -> Duration {
        let window = CREDIT_WINDOW.as_secs_f64();
        let polls = (self.poll_cost / (POLL_SHARE * self.share)).min(window);
        let debt = if self.credit < 0.0 { (-self.credit / self.share).min(window) } else { 0.0 };
        poll.max(Duration::from_secs_f64(polls.max(debt)))
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
            b.spend(round, false);
            cpu += round;
            if wall - last_action >= Duration::from_secs(6) && b.short_for(b.expected(100 << 20)).is_none() {
                let action = Duration::from_millis(80);
                b.spend(action, true);
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
        b.spend(Duration::from_millis(20), true);
        assert_eq!(b.wait(Duration::from_millis(250)), Duration::from_secs(2));
        assert!(b.short_for(Duration::ZERO).is_some());
        b.earn(Duration::from_secs(2));
        assert!(b.wait(Duration::from_millis(250)) <= Duration::from_millis(250));
    }

    /// An action that costs more than the credit can hold runs once the credit is full, and its
    /// debt then holds the next one back: the stall of a learned cost above the cap is gone.
    #[test]
    fn an_action_above_the_cap_runs_on_a_full_credit() {
        let mut b = Budget::new(0.01);
        b.learn(Duration::from_millis(10), 10 << 20); // 1 ms per MiB
        let expected = b.expected(1 << 30); // 1 s: ten times the 100 ms cap
        b.earn(Duration::from_secs(5));
        assert!(b.short_for(expected).is_some(), "half a credit is not enough");
        b.earn(Duration::from_secs(5));
        assert_eq!(b.short_for(expected), None, "a full credit is");
        b.spend(expected, true);
        b.earn(Duration::from_secs(60));
        assert!(b.short_for(expected).is_some(), "the debt of 0.92 s takes 92 s to repay, then the cap 10 s");
        b.earn(Duration::from_secs(45));
        assert_eq!(b.short_for(expected), None);
    }

    /// Polls that would use most of the share are spaced out to half of it.
    #[test]
    fn polls_use_at_most_half_the_share() {
        let mut b = Budget::new(0.01);
        for _ in 0..20 {
            b.earn(Duration::from_millis(450));
            b.spend(Duration::from_micros(2250), false); // 0.9% of a core at one poll per 250 ms
        }
        assert_eq!(b.wait(Duration::from_millis(250)), Duration::from_millis(450));
    }
}
