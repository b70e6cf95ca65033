//! The reclaimer against the kernel's view: scenarios both backends' tests run, with `/proc` as the
//! ground truth for RSS and for the CPU time of the thread that runs the rounds.
//!
//! The rounds run on a clock the test sets ([`Driven`], `Reclaimer::round_at`), on a thread of their
//! own: what the reclaimer decides depends on the workload's phases (how many bytes the test
//! allocated between two rounds, how long the clock says has passed), never on how a loaded machine
//! schedules threads. What it spends and releases is real.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use frag::reclaim::{Action, MemoryLimit, Reclaimer, ReclaimerHandle, Round, Skip};

use super::rss_bytes;

const MIB: u64 = 1 << 20;

/// The quiet window of [`reclaimer`].
pub const QUIET: Duration = Duration::from_millis(300);

/// Short windows so the test runs in seconds; the rules are the defaults'.
pub fn reclaimer() -> Reclaimer {
    Reclaimer::new()
        .poll(Duration::from_millis(50))
        .quiet(QUIET)
        .min_interval(Duration::from_secs(1))
        .refault_window(Duration::from_millis(500))
}

/// CPU time (user + system) of this process's thread named `name`, from `/proc/self/task/*/stat`
/// (clock ticks, 10 ms each).
pub fn thread_cpu(name: &str) -> Option<Duration> {
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
        // Fields after the command (which may hold spaces), from field 3 on: utime is 14, stime 15.
        let rest = &stat[stat.rfind(')')? + 2..];
        let f: Vec<u64> = rest.split_whitespace().map(|x| x.parse().unwrap_or(0)).collect();
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
        return Some(Duration::from_millis((f[11] + f[12]) * 1000 / hz));
    }
    None
}

/// Waits (up to 10 s, for a loaded machine) for the first action.
pub fn first_action(handle: &ReclaimerHandle) -> Action {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(a) = handle.actions().into_iter().next() {
            return a;
        }
        assert!(Instant::now() < end, "no action within 10 s: {}", handle.totals());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A reclaimer whose rounds run on a thread named `frag-rounds`, at the times of a clock the test
/// advances: each round comes `next_round_in()` after the previous one, as a spawned reclaimer's
/// would, but without waiting for it.
pub struct Driven {
    ask: Option<mpsc::Sender<Ask>>,
    answer: mpsc::Receiver<(Duration, Round, Duration)>,
    thread: Option<std::thread::JoinHandle<Reclaimer>>,
    /// The clock's time at the last round, from the first round.
    pub now: Duration,
    /// The clock's time at the end of the last busy round.
    pub last_busy: Duration,
    /// How long after the last round the next one comes, on the clock.
    pub next_in: Duration,
}

/// What the rounds' thread is asked to do.
enum Ask {
    /// A round, at the clock's next time.
    Round,
    /// `Reclaimer::set_limit`, between rounds.
    Limit(Option<MemoryLimit>),
}

/// The rate at which every burst allocates, in bytes per second of the clock: none is quiet against
/// the busiest.
pub const BUSY_RATE: u64 = 256 * MIB;

/// The name of the thread the rounds run on (its CPU time is read from `/proc`).
pub const ROUNDS_THREAD: &str = "frag-rounds";

impl Driven {
    /// Starts the thread; the first round runs at once, and has no rate yet.
    pub fn new(reclaimer: Reclaimer) -> Self {
        let (ask, asked) = mpsc::channel::<Ask>();
        let (tell, answer) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(ROUNDS_THREAD.into())
            .spawn(move || {
                let mut reclaimer = reclaimer;
                let start = Instant::now();
                let mut clock = start;
                let mut first = true;
                while let Ok(ask) = asked.recv() {
                    if let Ask::Limit(limit) = ask {
                        reclaimer.set_limit(limit).expect("a limit this machine can have");
                        continue;
                    }
                    if !first {
                        clock += reclaimer.next_round_in();
                    }
                    first = false;
                    let round = reclaimer.round_at(clock).expect("a backend that can release");
                    if tell.send((clock - start, round, reclaimer.next_round_in())).is_err() {
                        break;
                    }
                }
                reclaimer
            })
            .expect("spawn the rounds' thread");
        let mut driven = Self {
            ask: Some(ask),
            answer,
            thread: Some(thread),
            now: Duration::ZERO,
            last_busy: Duration::ZERO,
            next_in: Duration::ZERO,
        };
        let first = driven.round();
        assert!(matches!(first, Round::Skipped(Skip::FirstRound)), "{first:?}");
        driven
    }

    /// Sets or removes the reclaimer's memory limit, from the next round.
    pub fn set_limit(&mut self, limit: Option<MemoryLimit>) {
        self.ask.as_ref().expect("running").send(Ask::Limit(limit)).expect("the rounds' thread runs");
    }

    /// One round, at the next time of the clock.
    pub fn round(&mut self) -> Round {
        self.ask.as_ref().expect("running").send(Ask::Round).expect("the rounds' thread runs");
        let (now, round, next_in) = self.answer.recv().expect("the rounds' thread answers");
        (self.now, self.next_in) = (now, next_in);
        round
    }

    /// A burst of `bytes`: `step(n)` allocates the next `n` of them, about [`BUSY_RATE`] times the
    /// clock's time to the next round; each step ends with a round, which must find the heap busy.
    pub fn burst(&mut self, bytes: u64, mut step: impl FnMut(u64)) {
        let mut done = 0;
        while done < bytes {
            let full = (BUSY_RATE as f64 * self.next_in.as_secs_f64()).max(1.0) as u64;
            let n = full.min(bytes - done);
            step(n);
            done += n;
            // The last step's shortfall, allocated and freed: that round is as busy as the others.
            drop(std::hint::black_box(vec![1u8; (full - n) as usize]));
            let round = self.round();
            assert!(matches!(round, Round::Skipped(Skip::Busy { .. })), "at {:?}: {round:?}", self.now);
            self.last_busy = self.now;
        }
    }

    /// `rounds` busy rounds, each after allocating and freeing [`BUSY_RATE`] times the clock's time
    /// to it in 4–64 KiB blocks (a few live at a time).
    pub fn busy(&mut self, rounds: usize) {
        let mut rng = 0x9e37_79b9_u64;
        let mut ring: Vec<Vec<u8>> = (0..8).map(|_| Vec::new()).collect();
        for _ in 0..rounds {
            let bytes = (BUSY_RATE as f64 * self.next_in.as_secs_f64()) as u64;
            self.burst(bytes, |n| {
                let mut done = 0u64;
                while done < n {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let size = 4096 + (rng % (60 << 10)) as usize;
                    ring[(rng % 8) as usize] = vec![1u8; size];
                    done += size as u64;
                }
            });
        }
    }

    /// Rounds with nothing allocated by the test, until an action (at most `limit` on the clock):
    /// none may come before the quiet window has passed since the last busy round.
    pub fn until_action(&mut self, quiet: Duration, limit: Duration) -> Action {
        let start = self.now;
        let mut skipped = Vec::new();
        loop {
            let round = self.round();
            if let Round::Skipped(s) = &round {
                skipped.push(format!("{:?}: {s}", self.now));
            }
            match round {
                Round::Acted(a) => {
                    assert!(
                        self.now >= self.last_busy + quiet,
                        "acted {:?} after the last busy round",
                        self.now - self.last_busy
                    );
                    return a;
                }
                Round::Skipped(s @ (Skip::Busy { .. } | Skip::Failed(_) | Skip::NotSplit)) => {
                    panic!("at {:?}, quiet since {:?}: {s}", self.now, self.last_busy)
                }
                Round::Skipped(_) => {}
                other => panic!("{other:?}"),
            }
            assert!(self.now - start <= limit, "no action within {limit:?} on the clock: {skipped:#?}");
        }
    }

    /// Stops the thread; returns the reclaimer (its totals, its actions) and the thread's CPU time
    /// as `/proc` counted it.
    pub fn stop(mut self) -> (Reclaimer, Duration) {
        let cpu = thread_cpu(ROUNDS_THREAD).expect("the rounds' thread");
        self.ask.take();
        (self.thread.take().expect("running").join().expect("the rounds' thread"), cpu)
    }
}

/// The first checks of an action: the release against the prediction (as the reclaimer measured
/// it, and as `/proc` shows it now against `rss_quiet`, the RSS the test read before the rounds
/// went quiet).
pub fn check_release(action: &Action, rss_quiet: u64) {
    eprintln!("{action}");
    let ratio = action.release_ratio().expect("a prediction");
    assert!((0.5..=1.6).contains(&ratio), "released/predicted {ratio:.2}: {action}");
    assert!(action.predicted_bytes >= 32 * MIB, "{action}");
    let now = rss_bytes();
    assert!(
        now + action.predicted_bytes / 2 <= rss_quiet,
        "RSS {} MiB now, {} MiB before, {} MiB predicted",
        now / MIB,
        rss_quiet / MIB,
        action.predicted_bytes / MIB
    );
}

/// The pacing guarantee of `docs/RECLAIM.md` against `/proc`: the rounds' thread used at most
/// `share` of the clock's time, plus a full credit (`share` × 10 s), plus the largest action, plus
/// `/proc`'s 10 ms ticks. Ends the rounds.
pub fn check_pacing(driven: Driven, share: f64) -> Reclaimer {
    let clock = driven.now;
    let (reclaimer, proc_cpu) = driven.stop();
    let t = reclaimer.totals();
    let largest = reclaimer.actions().iter().map(|a| a.cpu).max().unwrap_or_default();
    let allowed = clock.mul_f64(share) + Duration::from_secs(10).mul_f64(share) + largest + Duration::from_millis(20);
    eprintln!("{t}; /proc: {proc_cpu:?} CPU over {clock:?} on the clock, allowed {allowed:?}");
    assert!(proc_cpu <= allowed, "{proc_cpu:?} > {allowed:?}: {t}");
    assert!(t.cpu <= allowed, "{t}");
    let actions = reclaimer.actions();
    for w in actions.windows(2) {
        assert!(w[1].at - w[0].at >= Duration::from_secs(1), "{actions:?}");
    }
    reclaimer
}

/// A small burst first (its release sets the cost per byte), then a gibibyte, both made by `burst`
/// (which returns what must stay live): the release the gibibyte needs is expected to cost more than
/// the credit can hold at a small share, and still runs, within the pacing's promise
/// (docs/RECLAIM.md: the quiet window, doubled up to 8 times after refaults, then at most a credit
/// window of earnings, two with polls taking up to half the share, after the first action's debt).
/// Afterwards the backend's own call made by hand (`by_hand`, returning what `/proc` saw it release)
/// finds next to nothing.
pub fn a_gibibyte_after_a_small_burst<K>(
    share: f64,
    mut burst: impl FnMut(&mut Driven, u64) -> K,
    by_hand: fn() -> u64,
) -> [K; 2] {
    let mut rounds = Driven::new(reclaimer().cpu_share(share));
    let small = burst(&mut rounds, 40 * MIB);
    rounds.busy(4);
    let first = rounds.until_action(QUIET, Duration::from_secs(20));
    let big = burst(&mut rounds, 1 << 30);
    rounds.busy(4);
    let rss_quiet = rss_bytes();
    let action = rounds.until_action(QUIET, Duration::from_secs(60));
    let delay = rounds.now - rounds.last_busy;
    let bound = QUIET * 8 + Duration::from_secs(20) + first.cpu.div_f64(share) + Duration::from_secs(1);
    eprintln!(
        "acted {delay:?} after the burst on the clock (bound {bound:?}), {:?} of CPU at a share of {share}",
        action.cpu
    );
    assert!(delay <= bound, "{delay:?} > {bound:?}");
    check_release(&action, rss_quiet);
    let left = by_hand();
    assert!(left < 32 * MIB, "the backend's own call by hand still released {} MiB", left / MIB);
    check_pacing(rounds, share);
    [small, big]
}
