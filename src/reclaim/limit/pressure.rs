//! The soft memory limit's controller state: whether RSS is over the target, how much CPU the
//! reclaimer may spend because of it, whether anything it can release would help, the purge delay
//! shortened near it, and how long until RSS reaches the limit at its present rate. The rules, with
//! their reasons: `docs/RECLAIM.md`.

use std::time::{Duration, Instant};

use crate::backend::tuning::Decay;
use crate::reclaim::host::Host;

/// Over the target, an action runs only when at least this much is predicted to be released.
pub(crate) const OVER_MIN_BYTES: u64 = 1 << 20;

/// The RSS trend is smoothed over about this long.
const TREND_WINDOW: Duration = Duration::from_secs(30);

/// Warnings of the same kind are at most this often.
const WARN_EVERY: Duration = Duration::from_secs(600);

/// The purge delay shortened near the limit's target is restored once RSS has stayed below that this
/// long: a heap held at the target by the controller crosses it at every round.
pub(crate) const RESTORE_AFTER: Duration = Duration::from_secs(30);

/// A limit in force, resolved to bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limit {
    pub(crate) bytes: u64,
    pub(crate) target: u64,
}

impl Limit {
    /// `bytes` with its target at `share` of it.
    pub(crate) fn new(bytes: u64, share: f64) -> Self {
        Self { bytes, target: (bytes as f64 * share) as u64 }
    }

    /// Where RSS comes near the target: as far below it as the limit is above it (90% of the limit
    /// at the default 95% target). From here the CPU share rises, the purge delay is shortened and
    /// allocating threads help; over the target, the reclaimer acts.
    pub(crate) fn near(&self) -> u64 {
        self.target.saturating_sub(self.bytes.saturating_sub(self.target))
    }
}

/// Where RSS stands against the limit, as one round sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Standing {
    /// No limit, or RSS at or under the target: the quiet rules, at `cpu_share`.
    Under,
    /// Over the target, and releasing what the heap holds free would help: act while busy, at
    /// `share`.
    Over { share: f64 },
    /// Over the target, and even releasing everything free would leave RSS over it: live data and
    /// the allocator's floor exceed the limit. The quiet rules, at `cpu_share`.
    Exhausted,
}

/// The backend's purge delay, as the controller left it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
enum Delay {
    /// As it was set: RSS is not near the target, or has been below it long enough.
    #[default]
    AsSet,
    /// Shortened near the target, in place of this delay, which comes back on the way down.
    Shortened(Decay),
    /// Near the target, and nothing shortened: the backend has no purge delay, or it is as short
    /// as the controller's already.
    Unchanged,
}

/// What the controller says to the operator: the engine returns it with the round, and the
/// reclaimer emits it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Warning {
    /// Live data and the allocator's floor exceed the limit (once per stretch over the target).
    Exhausted(Exhausted),
    /// RSS will reach the limit in `eta` at `slope` bytes per second.
    Eta { eta: Duration, slope: f64, limit: u64 },
}

/// The controller's state across rounds.
#[derive(Debug, Default)]
pub(crate) struct Pressure {
    pub(crate) limit: Option<Limit>,
    delay: Delay,
    /// Since when RSS has been below [`Limit::near`].
    under_since: Option<Instant>,
    /// Whether the live-data warning was given in this stretch over the target.
    exhausted_warned: bool,
    /// The previous RSS reading, and the smoothed RSS slope in bytes per second.
    last: Option<(Instant, u64)>,
    slope: f64,
    last_eta_warning: Option<Instant>,
}

/// What the live-data warning says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Exhausted {
    pub(crate) rss: u64,
    pub(crate) live: u64,
    pub(crate) releasable: u64,
    /// Holes, where the backend splits them from what it can release (0 where it does not).
    pub(crate) pinned: u64,
    pub(crate) limit: Limit,
}

impl Exhausted {
    /// Whether the holes, not live data, keep RSS over the target: without them it would be under.
    pub(crate) fn by_holes(&self) -> bool {
        self.pinned > 0 && self.rss.saturating_sub(self.releasable).saturating_sub(self.pinned) <= self.limit.target
    }
}

impl Pressure {
    /// The share of a core the reclaimer may spend at `rss`: `cpu_share` up to as far below the
    /// target as the limit is above it (90% of the limit at the default 95% target), rising in
    /// proportion to RSS from there to `max_share` at the limit and above: half-way at the target.
    /// Credit is earned at the raised share while RSS nears the target, so that the first action
    /// over it need not wait for the base share to pay for it.
    pub(crate) fn share(limit: Limit, rss: u64, cpu_share: f64, max_share: f64) -> f64 {
        let from = limit.near();
        let span = (limit.bytes - from).max(1) as f64;
        let over = (rss.saturating_sub(from) as f64 / span).min(1.0);
        cpu_share + (max_share - cpu_share).max(0.0) * over
    }

    /// Follows RSS at `now`: whether it is over the target (the stretch over it, and the warning
    /// given in it, end when it is not) and near it ([`Limit::near`]), and the trend.
    fn observe(&mut self, now: Instant, rss: u64) -> (bool, bool) {
        if let Some((then, before)) = self.last.replace((now, rss)) {
            let dt = now.saturating_duration_since(then).as_secs_f64();
            if dt > 0.0 {
                let rate = (rss as f64 - before as f64) / dt;
                let w = (dt / TREND_WINDOW.as_secs_f64()).min(1.0);
                self.slope = (1.0 - w) * self.slope + w * rate;
            }
        }
        let over = self.limit.is_some_and(|l| rss > l.target);
        if !over {
            self.exhausted_warned = false;
        }
        (over, self.limit.is_some_and(|l| rss > l.near()))
    }

    /// Follows RSS at `now` ([`observe`](Self::observe)): shortens the purge delay on the way near
    /// the target and restores it once RSS has stayed below [`Limit::near`] for [`RESTORE_AFTER`].
    /// Returns whether RSS is over the target, and the time-to-limit warning when the limit is
    /// within `horizon` ([`warn_eta`](Self::warn_eta)).
    pub(crate) fn watch(
        &mut self,
        now: Instant,
        rss: u64,
        horizon: Duration,
        host: &mut impl Host,
    ) -> (bool, Option<Warning>) {
        let (over, near) = self.observe(now, rss);
        if near {
            self.under_since = None;
            if self.delay == Delay::AsSet {
                self.delay = host.shorten_decay().map_or(Delay::Unchanged, Delay::Shortened);
            }
        } else if now.saturating_duration_since(*self.under_since.get_or_insert(now)) >= RESTORE_AFTER {
            self.restore(host);
        }
        let slope = self.slope;
        let warning =
            self.warn_eta(now, horizon).zip(self.limit).map(|(eta, l)| Warning::Eta { eta, slope, limit: l.bytes });
        (over, warning)
    }

    /// Sets a purge delay it shortened back (RSS well below the target for long enough, or no limit
    /// any more).
    pub(crate) fn restore(&mut self, host: &mut impl Host) {
        if let Delay::Shortened(previous) = core::mem::take(&mut self.delay) {
            host.restore_decay(previous);
        }
    }

    /// The standing at `rss`, where releasing everything free would release `releasable`.
    pub(crate) fn standing(&self, rss: u64, releasable: u64, cpu_share: f64, max_share: f64) -> Standing {
        match self.limit {
            Some(limit) if rss > limit.target => {
                if rss.saturating_sub(releasable) > limit.target {
                    Standing::Exhausted
                } else {
                    Standing::Over { share: Self::share(limit, rss, cpu_share, max_share) }
                }
            }
            _ => Standing::Under,
        }
    }

    /// Whether to warn that live data exceeds the limit: once per stretch over the target.
    pub(crate) fn warn_exhausted(&mut self) -> bool {
        !core::mem::replace(&mut self.exhausted_warned, true)
    }

    /// How long until RSS reaches the limit at its smoothed rate, if it is rising and under it.
    pub(crate) fn eta(&self) -> Option<Duration> {
        let limit = self.limit?;
        let (_, rss) = self.last?;
        (self.slope > 0.0 && rss < limit.bytes)
            .then(|| Duration::from_secs_f64((limit.bytes - rss) as f64 / self.slope))
    }

    /// Whether to warn that the limit is `eta` away, within `horizon`: at most once per ten minutes.
    fn warn_eta(&mut self, now: Instant, horizon: Duration) -> Option<Duration> {
        let eta = self.eta().filter(|&e| e <= horizon)?;
        if self.last_eta_warning.is_some_and(|t| now.saturating_duration_since(t) < WARN_EVERY) {
            return None;
        }
        self.last_eta_warning = Some(now);
        Some(eta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reclaim::engine::Engine;
    use crate::reclaim::model::{MIB, Model, settings};
    use crate::reclaim::outcome::{Round, Skip};
    use crate::reclaim::settings::Settings;

    /// The workload the limit is for, on the model: never quiet (512 MiB allocated per 250 ms round),
    /// each round leaving 40 MiB more free in the heap over 150 MiB live, so that RSS climbs without
    /// end where nothing returns it. Releasing costs 100 us of CPU per MiB (about what `madvise`
    /// costs here). Rounds at the engine's own pace for `secs`; returns the highest RSS after the
    /// first `settle` seconds, the rounds and what the controller said.
    fn steady(e: &mut Engine, m: &mut Model, t0: Instant, secs: u64, settle: u64) -> (u64, u64, Vec<Warning>) {
        let (mut at, mut highest, mut rounds, mut said) = (Duration::ZERO, 0, 0, Vec::new());
        while at < Duration::from_secs(secs) {
            let wait = e.wait();
            let growth = (40 * MIB) * wait.as_millis() as u64 / 250;
            m.allocated += 512 * MIB * wait.as_millis() as u64 / 250;
            m.rss += growth;
            m.reclaimable += growth;
            at += wait;
            said.extend(e.round(t0 + at, m).warnings);
            rounds += 1;
            if at >= Duration::from_secs(settle) {
                highest = highest.max(m.rss);
            }
        }
        (highest, rounds, said)
    }

    fn busy_model() -> Model {
        Model { rss: 150 * MIB, action_ns_per_mib: 100_000, ..Model::default() }
    }

    /// Never quiet: without a limit the reclaimer never acts and RSS climbs; with one between the
    /// live bytes and that climb, RSS stays within one round's growth of the target, the purge
    /// delay is shortened, allocating threads are asked to help, and CPU stays within the most the
    /// controller may spend.
    #[test]
    fn a_busy_heap_is_held_under_the_limit() {
        let t0 = Instant::now();
        let (mut e, mut m) = (Engine::new(settings(), t0), busy_model());
        let (highest, ..) = steady(&mut e, &mut m, t0, 60, 0);
        assert_eq!(m.actions, 0, "no limit: never quiet, never acts");
        assert!(highest > 9000 * MIB, "{highest}");

        let (mut e, mut m) = (Engine::new(settings(), t0), busy_model());
        e.set_limit(Some(400 * MIB));
        let (highest, _, said) = steady(&mut e, &mut m, t0, 120, 2);
        assert!(highest <= 380 * MIB + 40 * MIB, "highest RSS {} MiB", highest / MIB);
        assert!(m.actions > 10, "{}", m.actions);
        assert_eq!(m.decay_changes, [true], "shortened once, not yet restored");
        assert_eq!(m.assists_wanted.first(), Some(&true), "allocating threads asked to help");
        let s = settings();
        let slack = s.max_cpu_share * crate::reclaim::pacing::CREDIT_WINDOW.as_secs_f64();
        assert!(m.cpu.as_secs_f64() <= s.max_cpu_share * 120.0 + slack, "{:?}", m.cpu);
        assert!(e.totals.over_target > Duration::ZERO && e.totals.over_target < Duration::from_secs(120));
        assert!(!said.iter().any(|w| matches!(w, Warning::Exhausted(_))), "{said:?}");
    }

    /// A limit below live data: nothing the reclaimer can release brings RSS under it. It says so
    /// once, names the live bytes, spends no more than its base share, and acts no more than
    /// without a limit (never, on a busy heap: no thrash).
    #[test]
    fn a_limit_below_live_data_is_said_once_and_does_not_thrash() {
        let t0 = Instant::now();
        let (mut e, mut m) = (Engine::new(settings(), t0), busy_model());
        e.set_limit(Some(100 * MIB));
        let (mut at, mut busy, mut exhausted) = (Duration::ZERO, 0, Vec::new());
        while at < Duration::from_secs(60) {
            at += e.wait();
            m.allocated += 512 * MIB;
            let step = e.round(t0 + at, &mut m);
            if let Round::Skipped(Skip::Busy { .. }) = step.round {
                busy += 1;
            }
            exhausted.extend(step.warnings.into_iter().filter_map(|w| match w {
                Warning::Exhausted(x) => Some(x),
                Warning::Eta { .. } => None,
            }));
            assert!(e.totals.share <= settings().cpu_share, "{}", e.totals.share);
        }
        assert_eq!(m.actions, 0);
        assert!(m.assists_wanted.is_empty(), "no help asked where none can help: {:?}", m.assists_wanted);
        assert!(busy > 100, "{busy}");
        assert_eq!(exhausted.len(), 1, "{exhausted:?}");
        assert_eq!(exhausted[0].live, 150 * MIB);
        assert!(!exhausted[0].by_holes(), "the model's heap has no holes: {:?}", exhausted[0]);
        assert!(e.totals.exhausted_rounds > 100);
        let held = e.totals.held.expect("over the target: what holds RSS there");
        assert_eq!((held.rss, held.live, held.holes, held.reclaimable), (150 * MIB, 150 * MIB, 0, 0));
    }

    /// Holes, where the backend tells them from what it can release, are what keeps RSS over the
    /// target when RSS without them would be under it.
    #[test]
    fn exhausted_tells_holes_from_live_data() {
        let limit = Limit::new(400 * MIB, 0.95);
        let at = |rss, releasable, pinned| Exhausted { rss, live: 100 * MIB, releasable, pinned, limit };
        assert!(at(500 * MIB, 50 * MIB, 200 * MIB).by_holes(), "250 MiB without the holes");
        assert!(!at(500 * MIB, 50 * MIB, 20 * MIB).by_holes(), "430 MiB without them");
        assert!(!at(500 * MIB, 50 * MIB, 0).by_holes(), "holes not split");
    }

    /// A limit set, changed and removed at run time: each takes effect at the next round, and the
    /// purge delay comes back when RSS is under the target again.
    #[test]
    fn a_limit_changed_at_run_time_takes_effect() {
        let t0 = Instant::now();
        let (mut e, mut m) = (Engine::new(settings(), t0), busy_model());
        steady(&mut e, &mut m, t0, 10, 0);
        assert_eq!(m.actions, 0);
        e.set_limit(Some(300 * MIB));
        let (highest, ..) = steady(&mut e, &mut m, t0 + Duration::from_secs(10), 20, 2);
        assert!(highest <= 285 * MIB + 40 * MIB, "{}", highest / MIB);
        let acted = m.actions;
        assert!(acted > 0);
        // Raised well above: under the target again, nothing acts, and the delay is restored once
        // RSS has stayed under for the hold time.
        e.set_limit(Some(100_000 * MIB));
        m.rss = 150 * MIB;
        m.reclaimable = 0;
        steady(&mut e, &mut m, t0 + Duration::from_secs(30), 20, 0);
        assert_eq!(m.decay_changes, [true], "held while under for less than {RESTORE_AFTER:?}");
        steady(&mut e, &mut m, t0 + Duration::from_secs(50), 20, 0);
        assert_eq!(m.actions, acted);
        assert_eq!(m.decay_changes, [true, false]);
        assert_eq!(m.assists_wanted.last(), Some(&false), "help no longer asked: {:?}", m.assists_wanted);
        e.set_limit(None);
        assert_eq!(e.limit(), None);
    }

    /// The base settings' CPU share is the floor of the controller's, and its ceiling is reached
    /// only at the limit.
    #[test]
    fn the_share_is_published_in_the_totals() {
        let t0 = Instant::now();
        let (mut e, mut m) = (Engine::new(Settings { max_cpu_share: 0.2, ..settings() }, t0), busy_model());
        e.set_limit(Some(1000 * MIB));
        m.rss = 1000 * MIB;
        m.reclaimable = 850 * MIB;
        e.round(t0, &mut m);
        e.round(t0 + Duration::from_millis(250), &mut m);
        assert!((e.totals.share - 0.2).abs() < 1e-9, "{}", e.totals.share);
    }

    /// Assists made before an engine began (another reclaimer's: the figure is process-wide) are
    /// not its debt: over the target, it acts at once. What threads spend after it began is.
    #[test]
    fn assists_before_the_engine_are_not_its_debt() {
        let t0 = Instant::now();
        let (mut e, mut m) = (Engine::new(settings(), t0), busy_model());
        m.assist_cpu = Duration::from_secs(5);
        e.set_limit(Some(400 * MIB));
        let mut at = Duration::ZERO;
        let mut round = |e: &mut Engine, m: &mut Model| {
            (m.rss, m.reclaimable) = (600 * MIB, 300 * MIB);
            m.allocated += 512 * MIB;
            let r = e.round(t0 + at, m).round;
            at += e.wait();
            r
        };
        let first: Vec<Round> = (0..4).map(|_| round(&mut e, &mut m)).collect();
        assert!(first.iter().any(|r| matches!(r, Round::Acted(_))), "{first:?}");
        // Charged at the end of the round that reads them: the rounds after it wait.
        m.assist_cpu += Duration::from_secs(5);
        let after: Vec<Round> = (0..4).map(|_| round(&mut e, &mut m)).collect();
        assert!(after[1..].iter().all(|r| matches!(r, Round::Skipped(Skip::Budget { .. }))), "{after:?}");
    }

    #[test]
    fn the_share_rises_from_below_the_target_to_the_limit() {
        let l = Limit::new(1000 * MIB, 0.95);
        assert_eq!(l.target, 950 * MIB);
        assert!((Pressure::share(l, 500 * MIB, 0.01, 0.1) - 0.01).abs() < 1e-12);
        assert!((Pressure::share(l, 900 * MIB, 0.01, 0.1) - 0.01).abs() < 1e-12);
        assert!((Pressure::share(l, 950 * MIB, 0.01, 0.1) - 0.055).abs() < 1e-12);
        assert!((Pressure::share(l, 2000 * MIB, 0.01, 0.1) - 0.1).abs() < 1e-12);
    }

    #[test]
    fn standing_tells_help_from_live_data() {
        let p = Pressure { limit: Some(Limit::new(1000 * MIB, 0.95)), ..Pressure::default() };
        assert_eq!(p.standing(900 * MIB, 0, 0.01, 0.1), Standing::Under);
        assert!(matches!(p.standing(990 * MIB, 500 * MIB, 0.01, 0.1), Standing::Over { .. }));
        assert_eq!(p.standing(990 * MIB, 10 * MIB, 0.01, 0.1), Standing::Exhausted);
        assert_eq!(Pressure::default().standing(u64::MAX, 0, 0.01, 0.1), Standing::Under);
    }

    #[test]
    fn the_eta_follows_the_trend() {
        let t0 = Instant::now();
        let mut p = Pressure { limit: Some(Limit::new(1000 * MIB, 0.95)), ..Pressure::default() };
        // +12 MiB/s from 100 MiB, for two minutes.
        for s in 0..=120u64 {
            p.observe(t0 + Duration::from_secs(s), 100 * MIB + s * 12 * MIB);
        }
        // At 120 s RSS is 1540 MiB: over the limit, no time to it.
        assert_eq!(p.eta(), None);
        let mut p = Pressure { limit: Some(Limit::new(1000 * MIB, 0.95)), ..Pressure::default() };
        for s in 0..=30u64 {
            p.observe(t0 + Duration::from_secs(s), 100 * MIB + s * 12 * MIB);
        }
        // 460 MiB at 30 s; the smoothed slope lags the true 12 MiB/s, so the time is longer than the
        // true 45 s, within the window.
        let eta = p.eta().unwrap().as_secs_f64();
        assert!((45.0..45.0 + TREND_WINDOW.as_secs_f64()).contains(&eta), "{eta}");
        assert_eq!(p.warn_eta(t0, Duration::from_secs(60)), None, "beyond the horizon");
        assert!(p.warn_eta(t0, Duration::from_secs(600)).is_some());
        assert_eq!(p.warn_eta(t0 + Duration::from_secs(60), Duration::from_secs(600)), None, "once per ten minutes");
        // Falling RSS: no time to the limit.
        for s in 31..=120u64 {
            p.observe(t0 + Duration::from_secs(s), 460 * MIB - (s - 30) * MIB);
        }
        assert_eq!(p.eta(), None);
    }
}
