//! One reclaimer round, over a [`Host`] it reads and acts on (the live process, or a model in the
//! tests): the pacing rules of `docs/RECLAIM.md`, in the order they are checked.

use std::time::{Duration, Instant};

use super::host::{Host, Reading};
use super::limit::pressure::{Exhausted, Limit, OVER_MIN_BYTES, Pressure, Standing, Warning};
use super::outcome::{Action, Held, Refault, Round, Skip, Totals};
use super::pacing::Budget;
use super::quiet::{Activity, Quiet};
use super::settings::Settings;
use crate::report::diagnosis::{Breakdown, Part, Source};

/// The quiet window grows at most to this multiple of the configured one after refaults.
pub(crate) const MAX_BACKOFF: u32 = 8;

/// An action whose refault window is open.
#[derive(Debug)]
struct Pending {
    end: Instant,
    rss_after: u64,
    released: u64,
    faults: u64,
    max_rss: u64,
}

/// A round's outcome, the refault figures of the last action if its window closed in it, and what
/// the controller has to say.
#[derive(Debug)]
pub(crate) struct Step {
    pub(crate) round: Round,
    pub(crate) refault: Option<Refault>,
    pub(crate) warnings: Vec<Warning>,
}

/// The reclaimer's state across rounds.
#[derive(Debug)]
pub(crate) struct Engine {
    settings: Settings,
    started: Instant,
    quiet: Quiet,
    budget: Budget,
    last_round: Option<Instant>,
    last_action: Option<Instant>,
    pending: Option<Pending>,
    /// Whether idle threads are being asked now, and whether the heap was busy since they were
    /// last asked.
    asking: bool,
    busy_since_asked: bool,
    pressure: Pressure,
    /// The assists' CPU time (process-wide) as of the last round, `None` before the first: what
    /// threads spent before this engine began is not its to pay. And whether they are asked for now.
    assist_cpu: Option<Duration>,
    assisting: bool,
    pub(crate) totals: Totals,
}

impl Engine {
    pub(crate) fn new(settings: Settings, now: Instant) -> Self {
        Self {
            budget: Budget::new(settings.cpu_share),
            totals: Totals { backoff: 1, share: settings.cpu_share, ..Totals::default() },
            settings,
            started: now,
            quiet: Quiet::default(),
            last_round: None,
            last_action: None,
            pending: None,
            asking: false,
            busy_since_asked: false,
            pressure: Pressure::default(),
            assist_cpu: None,
            assisting: false,
        }
    }

    /// Sets the limit in force (`None`: none), in bytes; its target follows from the settings.
    pub(crate) fn set_limit(&mut self, bytes: Option<u64>) {
        self.pressure.limit = bytes.map(|b| Limit::new(b, self.settings.target_share));
    }

    /// The limit in force and its target, in bytes.
    pub(crate) fn limit(&self) -> Option<(u64, u64)> {
        self.pressure.limit.map(|l| (l.bytes, l.target))
    }

    /// How long to wait before the next round: the poll, or longer while polls would use more than
    /// their part of the budget, or while it is in debt (without a limit in force).
    pub(crate) fn wait(&self) -> Duration {
        // With a limit in force RSS is watched at every poll, a debt or not: the debt holds actions
        // back, and RSS may cross the target meanwhile.
        self.budget.wait(self.settings.poll, self.pressure.limit.is_none())
    }

    /// One round at `now`.
    pub(crate) fn round(&mut self, now: Instant, host: &mut impl Host) -> Step {
        // Time never goes back: an earlier `now` (a caller's clock) is the previous round's time.
        let now = self.last_round.map_or(now, |last| now.max(last));
        let cpu = host.cpu();
        // One reading of the process for the round's decisions, taken when first needed: RSS for
        // the limit's watch, the refault window and the target (none when neither a limit nor a
        // window needs it), the breakdown from the same reading.
        let reading = Reading::default();
        let rss = if self.pressure.limit.is_some() || self.pending.is_some() { reading.rss(host) } else { None };
        let since_last = self.last_round.replace(now).map(|then| now.saturating_duration_since(then));
        if let Some(dt) = since_last {
            self.budget.earn(dt);
        }
        let mut warnings = Vec::new();
        match (self.pressure.limit, rss) {
            (Some(_), Some(rss)) => {
                let (over, eta) = self.pressure.watch(now, rss, self.settings.eta_horizon, host);
                if over {
                    self.totals.over_target += since_last.unwrap_or_default();
                }
                warnings.extend(eta);
            }
            (Some(_), None) => {}
            (None, _) => {
                self.pressure.restore(host);
                self.pace(self.settings.cpu_share, false, host);
            }
        }
        let refault = self.follow(now, rss, host);
        let round = self.decide(now, &reading, &mut warnings, host);
        let spent = host.cpu().saturating_sub(cpu);
        self.budget.spend(spent, matches!(round, Round::Acted(_)));
        // The allocating threads' assists are spent from the same budget, not as the round's own
        // cost (which paces the polls).
        let assists = host.assist_cpu();
        if let Some(before) = self.assist_cpu.replace(assists) {
            self.budget.charge(assists.saturating_sub(before));
        }
        let t = &mut self.totals;
        t.elapsed = now.saturating_duration_since(self.started);
        t.rounds += 1;
        t.cpu += spent;
        match &round {
            Round::Acted(a) => {
                t.actions += 1;
                t.released_bytes += a.released_bytes();
                t.predicted_bytes += a.predicted_bytes;
                t.action_cpu += a.cpu;
            }
            Round::Skipped(s) => t.skipped.count(s),
        }
        Step { round, refault, warnings }
    }

    /// Follows the open refault window: RSS at every round, the verdict when it closes. A release
    /// that at least half came back within the window doubles the quiet window (up to
    /// [`MAX_BACKOFF`] times); one that did not halves it back.
    fn follow(&mut self, now: Instant, rss: Option<u64>, host: &mut impl Host) -> Option<Refault> {
        let p = self.pending.as_mut()?;
        if let Some(rss) = rss {
            p.max_rss = p.max_rss.max(rss);
        }
        if now < p.end {
            return None;
        }
        let p = self.pending.take()?;
        let regained = p.max_rss.saturating_sub(p.rss_after).min(p.released);
        let minor_faults = host.minor_faults().saturating_sub(p.faults);
        let backoff = &mut self.totals.backoff;
        *backoff = if p.released > 0 && regained.saturating_mul(2) >= p.released {
            (*backoff * 2).min(MAX_BACKOFF)
        } else {
            (*backoff / 2).max(1)
        };
        self.totals.refault_bytes += regained;
        self.totals.refault_minor_faults += minor_faults;
        Some(Refault { window: self.settings.refault_window, regained_bytes: regained, minor_faults })
    }

    fn decide(&mut self, now: Instant, reading: &Reading, warnings: &mut Vec<Warning>, host: &mut impl Host) -> Round {
        let s = &self.settings;
        let window = s.quiet * self.totals.backoff;
        let activity = self.quiet.observe(now, host.allocated_total(), s.quiet_share);
        // Idle threads are asked from the first quiet round after a busy one (they go idle as the
        // burst ends, before the quiet window has passed) until the heap is busy again.
        match activity {
            Activity::Busy { .. } => {
                self.busy_since_asked = true;
                if core::mem::take(&mut self.asking) {
                    host.ask_threads(false);
                }
            }
            Activity::Quiet(_) if self.busy_since_asked && !self.asking => {
                (self.asking, self.busy_since_asked) = (true, false);
                host.ask_threads(true);
            }
            _ => {}
        }
        if self.pressure.limit.is_some() {
            if let Some(round) = self.over_target(now, reading, warnings, host) {
                return round;
            }
        }
        let s = &self.settings;
        match activity {
            Activity::First => return Round::Skipped(Skip::FirstRound),
            Activity::Busy { bytes_per_sec, quiet_below } => {
                return Round::Skipped(Skip::Busy { bytes_per_sec, quiet_below });
            }
            Activity::Quiet(quiet_for) if quiet_for < window => {
                return Round::Skipped(Skip::Settling { quiet_for, window });
            }
            Activity::Quiet(_) => {}
        }
        if let Some(last) = self.last_action {
            let since = now.saturating_duration_since(last);
            if since < s.min_interval {
                return Round::Skipped(Skip::Interval { since, min: s.min_interval });
            }
        }
        let Some((available, from, rss)) = reading.breakdown(host).and_then(reclaimable) else {
            return Round::Skipped(Skip::NotSplit);
        };
        let predicted = available.saturating_sub(s.keep);
        let threshold = s.min_bytes.max((s.min_share * rss as f64) as u64);
        if predicted < threshold {
            return Round::Skipped(Skip::Small { predicted, threshold });
        }
        if let Some(short_by) = self.budget.owed() {
            return Round::Skipped(Skip::Budget { short_by });
        }
        self.act(now, host, predicted, from, rss)
    }

    /// The round over the limit's target: `None` under it, or where nothing the reclaimer can release
    /// would bring RSS under it (live data exceeds the limit: said once, then the quiet rules at
    /// `cpu_share` go on). Over it, the heap need not be quiet, the minimum interval is one round,
    /// the threshold is [`OVER_MIN_BYTES`], and allocating threads are asked to help. The CPU share
    /// rises with RSS from below the target (see [`Pressure::share`]), so that credit is earned for
    /// the first action over it.
    fn over_target(
        &mut self,
        now: Instant,
        reading: &Reading,
        warnings: &mut Vec<Warning>,
        host: &mut impl Host,
    ) -> Option<Round> {
        let s = &self.settings;
        let (cpu_share, max_share) = (s.cpu_share, s.max_cpu_share);
        let limit = self.pressure.limit?;
        let rss = reading.rss(host)?;
        if rss <= limit.target {
            self.totals.held = None;
            // Near the target, threads help already: what only they can release takes rounds.
            self.pace(Pressure::share(limit, rss, cpu_share, max_share), rss > limit.near(), host);
            return None;
        }
        let breakdown = reading.breakdown(host);
        self.totals.held = breakdown.map(Held::from);
        let Some((available, from, rss)) = breakdown.and_then(reclaimable) else {
            self.pace(cpu_share, false, host);
            return Some(Round::Skipped(Skip::NotSplit));
        };
        let predicted = available.saturating_sub(s.keep);
        match self.pressure.standing(rss, predicted, cpu_share, max_share) {
            Standing::Under => {
                self.pace(cpu_share, false, host);
                None
            }
            Standing::Exhausted => {
                self.pace(cpu_share, false, host);
                if self.pressure.warn_exhausted() {
                    let live = breakdown.map_or(0, |b| b.live_bytes);
                    let pinned = breakdown.filter(|_| from == Part::Reclaimable).map_or(0, |b| b.holes_bytes);
                    warnings.push(Warning::Exhausted(Exhausted { rss, live, releasable: predicted, pinned, limit }));
                }
                self.totals.exhausted_rounds += 1;
                None
            }
            Standing::Over { share } => {
                self.pace(share, true, host);
                if predicted < OVER_MIN_BYTES {
                    return Some(Round::Skipped(Skip::Small { predicted, threshold: OVER_MIN_BYTES }));
                }
                if let Some(short_by) = self.budget.owed() {
                    return Some(Round::Skipped(Skip::Budget { short_by }));
                }
                Some(self.act(now, host, predicted, from, rss))
            }
        }
    }

    /// Sets the CPU share, and asks allocating threads for help (`help`: RSS over the target, and
    /// releasing would help) while the budget is not in debt.
    fn pace(&mut self, share: f64, help: bool, host: &mut impl Host) {
        self.budget.set_share(share);
        let help = help && !self.budget.in_debt();
        // A new request every round while help is wanted: each thread helps once per round.
        if help || self.assisting {
            self.assisting = help;
            host.want_assists(help);
        }
        self.totals.share = share;
    }

    /// The action, predicted to release `predicted` bytes of `from` at the round's RSS `rss_before`.
    fn act(&mut self, now: Instant, host: &mut impl Host, predicted: u64, from: Part, rss_before: u64) -> Round {
        let faults = host.minor_faults();
        let (wall, cpu) = (Instant::now(), host.cpu());
        let method = host.reclaim(self.settings.keep, self.budget.credit());
        let (wall, cpu) = (wall.elapsed(), host.cpu().saturating_sub(cpu));
        let rss_after = host.statm().map_or(rss_before, |s| s.rss);
        self.last_action = Some(now);
        let method = match method {
            Ok(m) => m,
            Err(e) => return Round::Skipped(Skip::Failed(e)),
        };
        let action = Action {
            at: now.saturating_duration_since(self.started),
            method,
            predicted_bytes: predicted,
            predicted_from: from,
            rss_before,
            rss_after,
            wall,
            cpu,
            refault: None,
        };
        self.pending = Some(Pending {
            end: now + self.settings.refault_window,
            rss_after,
            released: action.released_bytes(),
            faults,
            max_rss: rss_after,
        });
        Round::Acted(action)
    }
}

/// The bytes an action could release, the part they come from, and RSS: the reclaimable part, or
/// holes (an upper bound) where the backend leaves free pages in them. `None` when neither is split.
fn reclaimable(b: &Breakdown) -> Option<(u64, Part, u64)> {
    if b.sources.reclaimable != Source::NotSplit {
        Some((b.reclaimable_bytes, Part::Reclaimable, b.rss_bytes))
    } else if b.sources.holes != Source::NotSplit {
        Some((b.holes_bytes, Part::Holes, b.rss_bytes))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reclaim::model::{MIB, Model, settings};
    use crate::reclaim::pacing;

    /// Rounds every 250 ms from `from` ms to `to` ms; `busy` says whether the program allocates
    /// heavily in each; each busy round leaves 50 MiB reclaimable. Returns the times of the actions.
    fn run(e: &mut Engine, m: &mut Model, t0: Instant, from: u64, to: u64, busy: bool) -> Vec<u64> {
        let mut acted = Vec::new();
        for ms in (from..to).step_by(250) {
            if busy {
                m.allocated += 512 * MIB;
                m.rss += 50 * MIB;
                m.reclaimable += 50 * MIB;
            } else {
                m.allocated += MIB / 8;
            }
            if let Round::Acted(a) = e.round(t0 + Duration::from_millis(ms), m).round {
                assert_eq!(a.predicted_bytes, a.released_bytes());
                acted.push(ms);
            }
        }
        acted
    }

    /// Bursts of 2 s with 4 s gaps: never an action while busy, one per gap once the heap has been
    /// quiet for the window, none inside the minimum interval.
    #[test]
    fn acts_once_per_gap_after_the_quiet_window_and_never_while_busy() {
        let t0 = Instant::now();
        let mut m = Model { rss: 20 * MIB, ..Model::default() };
        let mut e = Engine::new(settings(), t0);
        let mut actions = Vec::new();
        for cycle in 0..5u64 {
            let start = cycle * 6000;
            assert!(run(&mut e, &mut m, t0, start, start + 2000, true).is_empty());
            actions.extend(run(&mut e, &mut m, t0, start + 2000, start + 6000, false));
        }
        // The last busy round ends at +1750 ms; quiet counts from there, so the action is at the
        // first round at least 1 s later.
        assert_eq!(actions, [2750, 8750, 14750, 20750, 26750]);
        // Eight busy rounds per burst, but the very first round has no rate yet.
        assert_eq!((e.totals.skipped.first_round, e.totals.skipped.busy), (1, 5 * 8 - 1));
        assert_eq!(e.totals.actions, 5);
    }

    /// Idle threads are asked from the first quiet round after each burst (before the action, which
    /// waits for the quiet window) to the first busy round of the next: once per gap, never during a
    /// burst, never before the first burst.
    #[test]
    fn idle_threads_are_asked_once_per_gap() {
        let t0 = Instant::now();
        let mut m = Model { rss: 20 * MIB, ..Model::default() };
        let mut e = Engine::new(settings(), t0);
        assert!(run(&mut e, &mut m, t0, 0, 2000, false).is_empty());
        assert!(m.asked.is_empty(), "no burst yet: {:?}", m.asked);
        let mut expected = Vec::new();
        for cycle in 0..3u64 {
            let start = 2000 + cycle * 6000;
            assert!(run(&mut e, &mut m, t0, start, start + 2000, true).is_empty());
            if cycle > 0 {
                // Closed at the burst's first round.
                expected.push((false, m.allocated - 7 * 512 * MIB));
            }
            let before = m.allocated;
            let acted = run(&mut e, &mut m, t0, start + 2000, start + 6000, false);
            assert_eq!(acted, [start + 2750]);
            // Opened at the gap's first round, 750 ms before the action.
            expected.push((true, before + MIB / 8));
        }
        assert_eq!(m.asked, expected);
    }

    /// Bursts of 1 s every 4 s: each gap's heap is quiet enough 1.75 s into the cycle, but the 5 s
    /// interval holds the next actions back to 5 s after the previous one.
    #[test]
    fn no_action_inside_the_minimum_interval() {
        let t0 = Instant::now();
        let mut m = Model { rss: 20 * MIB, ..Model::default() };
        let mut e = Engine::new(settings(), t0);
        let mut actions = Vec::new();
        for cycle in 0..3u64 {
            let start = cycle * 4000;
            run(&mut e, &mut m, t0, start, start + 1000, true);
            actions.extend(run(&mut e, &mut m, t0, start + 1000, start + 4000, false));
        }
        assert_eq!(actions, [1750, 6750, 11750]);
        assert!(e.totals.skipped.interval > 0);
        for w in actions.windows(2) {
            assert!(w[1] - w[0] >= 5000);
        }
    }

    /// A release that comes back within the refault window doubles the quiet window; a clean one
    /// halves it back.
    #[test]
    fn refaults_lengthen_the_quiet_window() {
        let t0 = Instant::now();
        let mut m = Model { rss: 20 * MIB, ..Model::default() };
        let mut e = Engine::new(settings(), t0);
        run(&mut e, &mut m, t0, 0, 1000, true);
        assert_eq!(run(&mut e, &mut m, t0, 1000, 2000, false), [1750]);
        // Busy again 250 ms later: the release comes back.
        run(&mut e, &mut m, t0, 2000, 6000, true);
        assert_eq!(e.totals.backoff, 2);
        assert!(e.totals.refault_bytes > 0);
        // Now the quiet window is 2 s: an action 2 s after the burst, not 1 s.
        assert_eq!(run(&mut e, &mut m, t0, 6000, 10_000, false), [7750]);
        // Quiet after it: the window halves back.
        run(&mut e, &mut m, t0, 10_000, 12_000, false);
        assert_eq!(e.totals.backoff, 1);
    }

    /// A round reads the process once, whatever its rules ask of it (the limit's watch, the
    /// refault window, the target, the quiet rules' breakdown), and once more after an action: over
    /// the target, under it, with nothing to release and with a release, busy and quiet.
    #[test]
    fn a_round_reads_the_process_once() {
        let t0 = Instant::now();
        for (limit, reclaimable, busy) in [
            (None, 0, false),
            (None, 400 * MIB, false),
            (Some(500 * MIB), 0, true),
            (Some(500 * MIB), 400 * MIB, true),
            (Some(500 * MIB), 400 * MIB, false),
            (Some(2000 * MIB), 400 * MIB, false),
            (Some(100 * MIB), 0, false),
        ] {
            let mut e = Engine::new(settings(), t0);
            e.set_limit(limit);
            let mut m = Model::default();
            for round in 0..40u64 {
                (m.rss, m.reclaimable) = (800 * MIB, reclaimable);
                m.allocated += if busy { 512 * MIB } else { MIB / 8 };
                let (statm, breakdowns) = (m.statm_reads, m.breakdowns);
                let acted = matches!(e.round(t0 + Duration::from_millis(250 * round), &mut m).round, Round::Acted(_));
                let case = format!("limit {limit:?}, reclaimable {reclaimable}, busy {busy}, round {round}");
                assert!(m.statm_reads - statm <= 1 + u32::from(acted), "{case}: {} reads", m.statm_reads - statm);
                assert!(m.breakdowns - breakdowns <= 1, "{case}: {} breakdowns", m.breakdowns - breakdowns);
            }
        }
    }

    #[test]
    fn below_the_threshold_nothing_happens() {
        let t0 = Instant::now();
        let mut m = Model { rss: 400 * MIB, reclaimable: 30 * MIB, ..Model::default() };
        let mut e = Engine::new(settings(), t0);
        assert!(run(&mut e, &mut m, t0, 0, 5000, false).is_empty());
        assert!(e.totals.skipped.small > 0);
        assert_eq!(m.actions, 0);
    }

    /// Rounds at the engine's own pace (its `wait`) from `from` until `to`, the program quiet;
    /// returns the time of the first action, if any.
    fn paced(e: &mut Engine, m: &mut Model, t0: Instant, from: Duration, to: Duration) -> Option<Duration> {
        let (mut at, mut first) = (from, None);
        while at < to {
            m.allocated += MIB / 8;
            if let Round::Acted(_) = e.round(t0 + at, m).round {
                first = first.or(Some(at));
            }
            at += e.wait();
        }
        first
    }

    /// No stall: a small burst's release (0.2 s of CPU at 1 ms per MiB) leaves a debt; then a heap of
    /// 1 GiB needs an action ten times what the credit can hold. It runs once the debt is repaid
    /// (within the quiet window plus the first action's cost ÷ the share), at 1% and at 0.3%, and
    /// CPU stays within the share plus the stated slack. Polls that cost most of the share (0.9% of
    /// a core at one per 250 ms) do not hold it back either.
    #[test]
    fn a_huge_heap_after_a_small_burst_is_still_reclaimed() {
        for (share, poll_cpu) in [(0.01, Duration::ZERO), (0.003, Duration::ZERO), (0.01, Duration::from_micros(2250))]
        {
            let t0 = Instant::now();
            // 1 ms of CPU per MiB released: 1 GiB costs 1 s, ten times the cap at 1%.
            let mut m = Model { rss: 20 * MIB, action_ns_per_mib: 1_000_000, poll_cpu, ..Model::default() };
            let mut e = Engine::new(Settings { cpu_share: share, ..settings() }, t0);
            // A burst of 200 MiB, then quiet: the first action.
            run(&mut e, &mut m, t0, 0, 1000, true);
            let first = paced(&mut e, &mut m, t0, Duration::from_secs(1), Duration::from_secs(600));
            assert!(first.is_some(), "share {share}: the first action never ran");
            // A burst of 1 GiB at 600 s, then quiet.
            let start = 600_000;
            run(&mut e, &mut m, t0, start, start + 5250, true);
            assert!(m.reclaimable >= 1 << 30);
            let quiet_from = Duration::from_millis(start + 5250);
            let acted = paced(&mut e, &mut m, t0, quiet_from, quiet_from + Duration::from_secs(600));
            let Some(acted) = acted else { panic!("share {share}, polls {poll_cpu:?}: stalled: {:?}", e.totals) };
            let cost = Duration::from_secs(1);
            let bound = settings().quiet + cost.div_f64(share);
            assert!(acted - quiet_from <= bound, "share {share}: acted {:?} after the burst", acted - quiet_from);
            assert_eq!(m.reclaimable, 0);
            let wall = acted.as_secs_f64();
            let slack = share * pacing::CREDIT_WINDOW.as_secs_f64() + cost.as_secs_f64();
            assert!(m.cpu.as_secs_f64() <= share * wall + slack, "share {share}: {:?} of CPU in {wall} s", m.cpu);
        }
    }
    /// Bursts of 1 s with 5 s gaps, each leaving 200 MiB whose release costs 60 ms of CPU (0.3 ms per
    /// MiB, a glibc trim of a fragmented heap on a loaded machine): 10 ms of credit per second at 1%
    /// pays for one release per 6 s cycle. Each burst's memory goes back within 2 s of its end, the
    /// burst after the first included: an action runs once the budget is out of debt, and its cost
    /// is repaid after it (waiting for its whole expected cost first released the second burst 4 s
    /// after its end).
    #[test]
    fn each_burst_of_a_cycle_the_budget_pays_for_is_released() {
        let t0 = Instant::now();
        let mut m = Model { rss: 20 * MIB, action_ns_per_mib: 300_000, ..Model::default() };
        let mut e = Engine::new(settings(), t0);
        run(&mut e, &mut m, t0, 0, 1000, false);
        for cycle in 0..6u64 {
            let start = 1000 + cycle * 6000;
            run(&mut e, &mut m, t0, start, start + 1000, true);
            let end = start + 1000;
            let acted = run(&mut e, &mut m, t0, end, end + 5000, false);
            assert_eq!(acted.len(), 1, "cycle {cycle}: {acted:?}, {:?}", e.totals);
            assert!(acted[0] <= end + 2000, "cycle {cycle}: released {} ms after the burst", acted[0] - end);
        }
        let wall = 37.0;
        assert!(m.cpu.as_secs_f64() <= 0.01 * wall + 0.01 * pacing::CREDIT_WINDOW.as_secs_f64() + 0.06, "{:?}", m.cpu);
    }
}
