//! The reclaimer's CPU budget: a share of one core, earned with wall time and spent with the
//! thread's CPU time (user and system, so the kernel's work of returning pages counts), polls and
//! actions alike.
//!
//! - Credit grows by `share` × the wall time between rounds, up to `share` × [`CREDIT_WINDOW`]: a
//!   reclaimer idle for an hour cannot spend an hour's savings at once.
//! - Every round's CPU time is spent from it. An action runs when there is credit (any at all), and
//!   what it costs beyond the credit is a debt, repaid before the next action: the pace is set by
//!   what the actions really cost, paid after each one. Waiting for an action's whole expected cost
//!   before it runs would not spend less over time, only later: after a release that cost more
//!   than a cycle's credit, the next one would wait for a debt and then a full cost, two cycles.
//!   So an action waits at most for the previous one's debt: its cost ÷ `share`.
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
    /// CPU seconds of a round that did not act, smoothed.
    poll_cost: f64,
}

/// The part of the share that polls may use.
pub(crate) const POLL_SHARE: f64 = 0.5;

impl Budget {
    /// Starts with no credit: the first action waits for the first round's earnings.
    pub(crate) fn new(share: f64) -> Self {
        Self { share, credit: 0.0, poll_cost: 0.0 }
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

    /// Spends CPU time used elsewhere on the budget's behalf (the allocating threads' assists): from
    /// the credit, without counting as a poll's cost.
    pub(crate) fn charge(&mut self, cpu: Duration) {
        self.credit -= cpu.as_secs_f64();
    }

    /// `None` when an action may run now: there is credit. Else what is owed (zero before any credit
    /// was earned).
    pub(crate) fn owed(&self) -> Option<Duration> {
        (self.credit <= 0.0).then(|| Duration::from_secs_f64(-self.credit))
    }

    /// Whether more was spent than earned.
    pub(crate) fn in_debt(&self) -> bool {
        self.credit < 0.0
    }

    /// The credit left now (zero when in debt).
    pub(crate) fn credit(&self) -> Duration {
        Duration::from_secs_f64(self.credit.max(0.0))
    }

    /// The wait before the next round: `poll`, or longer where polls would use more than their part
    /// of the share, or (with `repay`) while in debt, so that the debt is repaid by the time the
    /// round runs. Without `repay` the rounds go on watching while the debt holds actions back.
    pub(crate) fn wait(&self, poll: Duration, repay: bool) -> Duration {
        let window = CREDIT_WINDOW.as_secs_f64();
        let polls = (self.poll_cost / (POLL_SHARE * self.share)).min(window);
        let debt = if repay && self.credit < 0.0 { (-self.credit / self.share).min(window) } else { 0.0 };
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
            let poll = b.wait(Duration::from_millis(250), true);
            wall += poll;
            b.earn(poll);
            let round = Duration::from_micros(50);
            b.spend(round, false);
            cpu += round;
            if wall - last_action >= Duration::from_secs(6) && b.owed().is_none() {
                let action = Duration::from_millis(80);
                b.spend(action, true);
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
    fn a_debt_lengthens_the_wait_and_holds_actions_back() {
        let mut b = Budget::new(0.01);
        assert_eq!(b.owed(), Some(Duration::ZERO), "no credit earned yet");
        b.earn(Duration::from_millis(250));
        assert_eq!(b.owed(), None);
        b.spend(Duration::from_millis(20), true);
        assert!(b.owed().is_some());
        assert_eq!(b.wait(Duration::from_millis(250), true), Duration::from_millis(1750));
        b.earn(Duration::from_millis(1750));
        assert!(b.wait(Duration::from_millis(250), true) <= Duration::from_millis(250));
    }

    /// An action that costs far more than the credit can hold runs on any credit, and its debt then
    /// holds the next one back for its cost ÷ the share.
    #[test]
    fn an_action_above_the_cap_runs_and_is_repaid_after() {
        let mut b = Budget::new(0.01);
        b.earn(Duration::from_secs(1));
        assert_eq!(b.owed(), None);
        b.spend(Duration::from_secs(1), true); // ten times the 100 ms cap
        b.earn(Duration::from_secs(60));
        assert!(b.owed().is_some(), "the debt of 0.99 s takes 99 s to repay");
        b.earn(Duration::from_secs(40));
        assert_eq!(b.owed(), None);
    }

    /// Polls that would use most of the share are spaced out to half of it.
    #[test]
    fn polls_use_at_most_half_the_share() {
        let mut b = Budget::new(0.01);
        for _ in 0..20 {
            b.earn(Duration::from_millis(450));
            b.spend(Duration::from_micros(2250), false); // 0.9% of a core at one poll per 250 ms
        }
        assert_eq!(b.wait(Duration::from_millis(250), true), Duration::from_millis(450));
    }
}
