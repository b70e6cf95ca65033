//! Giving memory back on its own: a paced reclaimer that applies the diagnosis's remedy for
//! reclaimable pages when the heap has gone quiet.
//!
//! Each round (every 250 ms by default) it reads how many bytes the heap handed out since the last
//! one. While that rate is above a tenth of the busiest rate seen lately the heap is busy and
//! nothing happens. Once it has been quiet for the quiet window (1 s), at least the minimum interval
//! (5 s) after the last action, the reclaimer reads the diagnosis's breakdown; if the reclaimable
//! part, less the bytes to keep, is at least 16 MiB and 10% of RSS, and its CPU budget (1% of one
//! core) is not in debt, it asks the wrapped backend to return it (an action's cost beyond the
//! credit is repaid before the next one):
//!
//! | backend | action |
//! |---|---|
//! | glibc (`System`) | `malloc_trim(keep)`: the main heap's top and whole free pages in every arena |
//! | jemalloc | with bytes to keep, `arena.<all>.decay` first; then `arena.<i>.purge`, largest arena first, until at most `keep` unused bytes remain or the budget is spent |
//! | mimalloc | `mi_collect(true)` |
//! | snmalloc | none: it has no call that returns memory, so [`Reclaimer::spawn`] refuses it |
//!
//! Every action is measured (process RSS before and after, against the prediction; wall and CPU
//! time) and followed for a refault window (2 s): if at least half of what it released comes back
//! in that time, the quiet window doubles (up to 8×), so that memory the program is about to reuse is
//! not released again and again. The rules in full, with their reasons: `docs/RECLAIM.md`.
//!
//! Some memory only its owning thread can return (mimalloc's pages that other threads freed into,
//! jemalloc's thread caches): when the heap turns quiet after a busy period, the reclaimer asks, and
//! worker threads that call [`idle`] as they go idle (tokio's `on_thread_park`) return it.
//!
//! The reclaimer runs on a thread of its own ([`Reclaimer::spawn`]) or from a task you run
//! ([`Reclaimer::round`], or [`Reclaimer::round_at`] on a clock of your own); never on the allocation path. It only calls the allocator `Tracked`
//! wraps, so it never starts a second one. A child of `fork` starts without it.

mod engine;
mod error;
mod handle;
mod host;
mod limit;
#[cfg(test)]
mod model;
mod outcome;
mod output;
mod pacing;
mod quiet;
mod settings;
mod this_process;
mod threads;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use self::engine::Engine;
pub use self::error::ReclaimError;
pub use self::handle::ReclaimerHandle;
use self::handle::{RUNNING, Shared, read};
use self::limit::follow::{Follow, Setting};
pub use self::limit::{ENV_VAR as LIMIT_ENV_VAR, LimitError, MemoryLimit};
pub use self::outcome::{Action, Held, Refault, Round, Skip, Skips, Totals};
use self::settings::{Settings, check};
use self::this_process::ThisProcess;
pub use self::threads::{ThreadReleases, idle, thread_releases};
pub use crate::backend::tuning::{Method, ThreadMethod};
use crate::publish::names::{self, Series};
use crate::publish::worker::Worker;

/// The most actions kept for [`Reclaimer::actions`].
const KEPT_ACTIONS: usize = 256;

/// A paced reclaimer: a builder, then [`spawn`](Self::spawn) for a thread of its own or
/// [`round`](Self::round) from a task you already run. See the [module docs](self) for what a round
/// does; every setting has a default.
///
/// # Example
///
/// ```no_run
/// #[global_allocator]
/// static A: frag::Tracked<std::alloc::System> = frag::Tracked::new(std::alloc::System);
///
/// let reclaimer = frag::reclaim::Reclaimer::new().spawn().expect("start the reclaimer");
/// // ... the service runs; metrics go to the installed `metrics` recorder.
/// println!("{}", reclaimer.totals());
/// drop(reclaimer); // stops the thread
/// ```
pub struct Reclaimer {
    settings: Settings,
    series: Series,
    engine: Option<Engine>,
    shared: Arc<Mutex<Shared>>,
    output: output::Output,
    /// The limit asked for (`FRAG_MEMORY_LIMIT`'s, or the builder's), as the rounds follow it.
    limit: Follow,
}

impl Default for Reclaimer {
    fn default() -> Self {
        Self::new()
    }
}

impl core::fmt::Debug for Reclaimer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Reclaimer")
            .field("settings", &self.settings)
            .field("series", &self.series)
            .finish_non_exhaustive()
    }
}

/// Builder methods that each set one field of the reclaimer's settings:
/// `/// docs  name(argument: Type) => field;`.
macro_rules! settings {
    ($($(#[$doc:meta])* $name:ident($arg:ident: $ty:ty) => $field:ident;)*) => {
        $(
            $(#[$doc])*
            #[must_use]
            pub fn $name(mut self, $arg: $ty) -> Self {
                self.settings.$field = $arg;
                self
            }
        )*
    };
}

impl Reclaimer {
    /// Default time between rounds.
    pub const DEFAULT_POLL: Duration = Duration::from_millis(250);
    /// Default quiet window: how long the heap must be quiet before an action.
    pub const DEFAULT_QUIET: Duration = Duration::from_secs(1);
    /// Default quiet share: the heap is quiet while it allocates less than this share of the busiest
    /// rate seen lately (bytes per second).
    pub const DEFAULT_QUIET_SHARE: f64 = 0.1;
    /// Default threshold in bytes.
    pub const DEFAULT_MIN_BYTES: u64 = 16 << 20;
    /// Default threshold as a share of RSS.
    pub const DEFAULT_MIN_SHARE: f64 = 0.1;
    /// Default minimum interval between actions.
    pub const DEFAULT_MIN_INTERVAL: Duration = Duration::from_secs(5);
    /// Default CPU budget: a share of one core.
    pub const DEFAULT_CPU_SHARE: f64 = 0.01;
    /// Default refault window.
    pub const DEFAULT_REFAULT_WINDOW: Duration = Duration::from_secs(2);
    /// Default share of the memory limit over which the controller acts.
    pub const DEFAULT_LIMIT_TARGET: f64 = 0.95;
    /// Default CPU share at the memory limit.
    pub const DEFAULT_MAX_CPU_SHARE: f64 = 0.1;
    /// Default horizon of the time-to-limit warning.
    pub const DEFAULT_LIMIT_HORIZON: Duration = Duration::from_secs(300);

    /// A soft memory limit: while RSS is over its target ([`limit_target`](Self::limit_target) of it),
    /// the reclaimer acts whether or not the heap is quiet, at least every round, spending more CPU
    /// the further over RSS is (up to [`max_cpu_share`](Self::max_cpu_share)), and the backend's
    /// purge delay is shortened. Under the target, nothing changes. Replaces what
    /// `FRAG_MEMORY_LIMIT` set. The rules: `docs/RECLAIM.md`.
    ///
    /// ```no_run
    /// # #[global_allocator]
    /// # static A: frag::Tracked<std::alloc::System> = frag::Tracked::new(std::alloc::System);
    /// use frag::reclaim::{MemoryLimit, Reclaimer};
    ///
    /// // 90% of the container's memory cgroup limit.
    /// let reclaimer = Reclaimer::new().limit(MemoryLimit::Cgroup { percent: 90.0 }).spawn()?;
    /// // Later, at run time:
    /// reclaimer.set_limit(Some(MemoryLimit::Bytes(2 << 30)))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn limit(mut self, limit: MemoryLimit) -> Self {
        self.limit.replace(Setting::given(Some(limit)), None);
        self
    }

    /// No memory limit, whatever `FRAG_MEMORY_LIMIT` says.
    #[must_use]
    pub fn no_limit(mut self) -> Self {
        self.limit.replace(Setting::given(None), None);
        self
    }

    settings! {
        /// The share of the limit over which the controller acts (0.5 to 1; default 0.95, as Go's
        /// scavenger aims at 95% of `GOMEMLIMIT`).
        limit_target(share: f64) => target_share;

        /// The most CPU the reclaimer spends over the limit's target, as a share of one core, reached at
        /// the limit (above 0, at most 1; default 0.1). Below `cpu_share`, `cpu_share` is the most.
        max_cpu_share(share: f64) => max_cpu_share;

        /// Warns when RSS, at its rate over the last half minute or so, will reach the limit within this
        /// long (at most 1 day; default 5 min; zero: never).
        limit_horizon(horizon: Duration) => eta_horizon;
    }

    settings! {
        /// Time between rounds of a spawned reclaimer (10 ms to 1 min).
        poll(every: Duration) => poll;

        /// How long the heap must be quiet before an action (at most 10 min).
        quiet(window: Duration) => quiet;

        /// The share of the busiest recent allocation rate below which the heap counts as quiet
        /// (above 0, at most 1). Below 1 MiB/s it is always quiet.
        quiet_share(share: f64) => quiet_share;
    }

    /// Acts only when at least `bytes` and `share` of RSS would be released (share 0 to 1).
    #[must_use]
    pub fn threshold(mut self, bytes: u64, share: f64) -> Self {
        self.settings.min_bytes = bytes;
        self.settings.min_share = share;
        self
    }

    settings! {
        /// Free bytes left resident for reuse: glibc's trim pad (the top of the main heap), jemalloc's
        /// unused pages after the action. Default 0.
        keep(bytes: u64) => keep;

        /// The least time from one action's start to the next's (at most 1 h).
        min_interval(interval: Duration) => min_interval;

        /// The most CPU time the reclaimer spends, as a share of one core (above 0, at most 1).
        cpu_share(share: f64) => cpu_share;

        /// How long after an action RSS is watched for what comes back (at most 10 min).
        refault_window(window: Duration) => refault_window;
    }

    names::series_settings!(", as the publisher's");
}

impl Reclaimer {
    /// Every setting at its default; metrics with the prefix `frag_`.
    #[must_use]
    pub fn new() -> Self {
        Self {
            settings: Settings {
                poll: Self::DEFAULT_POLL,
                quiet: Self::DEFAULT_QUIET,
                quiet_share: Self::DEFAULT_QUIET_SHARE,
                min_bytes: Self::DEFAULT_MIN_BYTES,
                min_share: Self::DEFAULT_MIN_SHARE,
                keep: 0,
                min_interval: Self::DEFAULT_MIN_INTERVAL,
                cpu_share: Self::DEFAULT_CPU_SHARE,
                refault_window: Self::DEFAULT_REFAULT_WINDOW,
                target_share: Self::DEFAULT_LIMIT_TARGET,
                max_cpu_share: Self::DEFAULT_MAX_CPU_SHARE,
                eta_horizon: Self::DEFAULT_LIMIT_HORIZON,
            },
            series: Series::new(crate::publish::Publisher::DEFAULT_PREFIX, names::of_reclaimer),
            engine: None,
            shared: Arc::default(),
            output: output::Output::default(),
            limit: Follow::new(Setting::from_env()),
        }
    }

    /// Sets or removes the limit of a reclaimer run from a task of your own, from its next round.
    ///
    /// # Errors
    ///
    /// [`ReclaimError::Limit`] when it cannot be resolved on this machine; the limit in force then
    /// stays.
    pub fn set_limit(&mut self, limit: Option<MemoryLimit>) -> Result<Option<u64>, ReclaimError> {
        let setting = Setting::given(limit);
        let bytes = setting.resolve()?;
        if let Some(engine) = &mut self.engine {
            engine.set_limit(bytes);
            self.limit.replace(setting, Some(Instant::now()));
        } else {
            self.limit.replace(setting, None);
        }
        Ok(bytes)
    }

    /// Every metric name the reclaimer emits, with its prefix.
    #[must_use]
    pub fn metric_names(&self) -> Vec<String> {
        self.series.metric_names()
    }

    /// Checks the settings and that the wrapped allocator can return memory on request.
    ///
    /// # Errors
    ///
    /// [`ReclaimError::InvalidSetting`]; [`ReclaimError::Limit`] for a limit that cannot be resolved
    /// (`FRAG_MEMORY_LIMIT`'s text included); [`ReclaimError::Backend`] without a `Tracked`
    /// allocator, or on snmalloc or a user's allocator.
    pub fn check(&self) -> Result<(), ReclaimError> {
        check(&self.settings)?;
        self.limit.setting().resolve()?;
        ThisProcess::new().map(drop).map_err(ReclaimError::Backend)
    }

    /// Runs one round now and returns what it did. For a task of your own (it reads `/proc` and
    /// may act for milliseconds: from async code, prefer `spawn_blocking`). The CPU budget still
    /// paces the actions; the time between rounds is yours.
    ///
    /// # Errors
    ///
    /// As [`check`](Self::check), on the first round.
    pub fn round(&mut self) -> Result<Round, ReclaimError> {
        self.round_at(Instant::now())
    }

    /// [`round`](Self::round) at the time `now`, for rounds driven by a clock of your own (a test
    /// that sets the workload's phases, a simulation): the allocation rate, the quiet window, the
    /// minimum interval, the refault window and the credit the CPU budget earns are all measured
    /// on the times given. What the round reads and spends is real: the heap, `/proc`, the
    /// thread's CPU time. A time before the previous round's counts as that time. Use one clock
    /// for all rounds of a reclaimer.
    ///
    /// ```no_run
    /// # #[global_allocator]
    /// # static A: frag::Tracked<std::alloc::System> = frag::Tracked::new(std::alloc::System);
    /// use std::time::Instant;
    ///
    /// let mut reclaimer = frag::reclaim::Reclaimer::new();
    /// let mut clock = Instant::now();
    /// for _ in 0..100 {
    ///     // ... one step of the workload ...
    ///     clock += reclaimer.next_round_in();
    ///     println!("{:?}", reclaimer.round_at(clock).expect("a Tracked allocator that can release"));
    /// }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`check`](Self::check), on the first round.
    pub fn round_at(&mut self, now: Instant) -> Result<Round, ReclaimError> {
        crate::own::run(|| self.round_now(now)).map(crate::own::hand_over)
    }

    /// [`round_at`](Self::round_at), as frag's own work.
    fn round_now(&mut self, now: Instant) -> Result<Round, ReclaimError> {
        let mut process = ThisProcess::new().map_err(ReclaimError::Backend)?;
        let engine = match &mut self.engine {
            Some(engine) => engine,
            None => {
                check(&self.settings)?;
                let mut engine = Engine::new(self.settings.clone(), now);
                engine.set_limit(self.limit.first(now)?);
                self.engine.insert(engine)
            }
        };
        let from_handle = self.shared.lock().unwrap_or_else(PoisonError::into_inner).new_limit.take();
        if let Some(setting) = from_handle {
            self.limit.replace(setting, None);
        }
        engine.set_limit(self.limit.follow(now, engine.limit().map(|(bytes, _)| bytes)));
        let step = engine.round(now, &mut process);
        engine.totals.threads = thread_releases();
        (engine.totals.assists, engine.totals.assist_cpu) = crate::backend::assist::made();
        (engine.totals.limit_bytes, engine.totals.target_bytes) = engine.limit().unzip();
        crate::report::diagnosis::set_limit_in_force(engine.limit());
        let totals = engine.totals;
        self.output.emit(&mut self.series, &step, &totals);
        let mut shared = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        shared.totals = totals;
        if let Some(r) = step.refault {
            if let Some(last) = shared.actions.back_mut() {
                last.refault = Some(r);
            }
        }
        if let Round::Acted(a) = &step.round {
            if shared.actions.len() == KEPT_ACTIONS {
                shared.actions.pop_front();
            }
            shared.actions.push_back(a.clone());
        }
        Ok(step.round)
    }

    /// How long to wait before the next round, as a spawned reclaimer does: the poll interval, or
    /// longer while the CPU budget is in debt or polls would use more than half of it. For rounds
    /// run from a task of your own.
    #[must_use]
    pub fn next_round_in(&self) -> Duration {
        self.engine.as_ref().map_or(self.settings.poll, Engine::wait)
    }

    /// Everything done so far.
    #[must_use]
    pub fn totals(&self) -> Totals {
        read(&self.shared, |s| s.totals)
    }

    /// The latest actions (up to 256), oldest first, each with its refault figures once its window
    /// has passed.
    #[must_use]
    pub fn actions(&self) -> Vec<Action> {
        read(&self.shared, |s| s.actions.iter().cloned().collect())
    }

    /// Runs the reclaimer on a background thread named `frag-reclaimer`. The returned handle stops
    /// and joins the thread when dropped. One per process.
    ///
    /// # Errors
    ///
    /// As [`check`](Self::check); [`ReclaimError::AlreadyRunning`]; [`ReclaimError::Spawn`].
    pub fn spawn(mut self) -> Result<ReclaimerHandle, ReclaimError> {
        self.check()?;
        let pid = std::process::id();
        let other = RUNNING.load(Ordering::Acquire);
        // A parent's reclaimer recorded before `fork` runs in the parent only.
        if other == pid || RUNNING.compare_exchange(other, pid, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return Err(ReclaimError::AlreadyRunning);
        }
        let shared = Arc::clone(&self.shared);
        let worker = Worker::spawn("frag-reclaimer", move || match self.round() {
            Ok(_) => Some(self.next_round_in()),
            Err(e) => {
                tracing::warn!(target: "frag", error = %e, "frag reclaimer stopped");
                None
            }
        });
        match worker {
            Ok(worker) => Ok(ReclaimerHandle::new(worker, shared)),
            Err(e) => {
                RUNNING.store(0, Ordering::Release);
                Err(ReclaimError::Spawn(e))
            }
        }
    }
}
