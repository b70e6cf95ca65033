//! The reclaimer against the kernel's view: a scenario both backends' tests run, with `/proc` as
//! the ground truth for RSS and for the reclaimer thread's CPU time.

use std::time::{Duration, Instant};

use frag::reclaim::{Action, Reclaimer, ReclaimerHandle};

use super::rss_bytes;

const MIB: u64 = 1 << 20;

/// Short windows so the test runs in seconds; the rules are the defaults'.
pub fn reclaimer() -> Reclaimer {
    Reclaimer::new()
        .poll(Duration::from_millis(50))
        .quiet(Duration::from_millis(300))
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

/// Allocates and frees heavily for `busy` (about a GiB per second of 4–64 KiB blocks, a few live at
/// a time), checking every 50 ms that the reclaimer has not acted.
pub fn stay_busy(handle: &ReclaimerHandle, busy: Duration) {
    let end = Instant::now() + busy;
    let mut rng = 0x9e37_79b9_u64;
    let mut ring: Vec<Vec<u8>> = (0..8).map(|_| Vec::new()).collect();
    let mut checked = Instant::now();
    while Instant::now() < end {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let size = 4096 + (rng % (60 << 10)) as usize;
        ring[(rng % 8) as usize] = vec![1u8; size];
        if checked.elapsed() >= Duration::from_millis(50) {
            checked = Instant::now();
            let t = handle.totals();
            assert_eq!(t.actions, 0, "acted while the heap was busy: {t}, {:?}", handle.actions());
        }
    }
    assert!(handle.totals().skipped.busy >= 5, "{}", handle.totals());
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

/// The checks every backend's scenario ends with, given the RSS the test itself read before the
/// heap went quiet (`rss_quiet`) and the action: the prediction against the release (both as the
/// reclaimer measured it and as `/proc` shows it now), and the pacing against `/proc`'s CPU time.
pub fn check_action(handle: &ReclaimerHandle, action: &Action, rss_quiet: u64, started: Instant) {
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
    // Pacing: no second action inside the minimum interval (nothing is left to release anyway),
    // and CPU time within the share: 1% of the elapsed time plus the credit window's 100 ms, the
    // action itself, and /proc's 10 ms ticks.
    std::thread::sleep(Duration::from_millis(600));
    let actions = handle.actions();
    for w in actions.windows(2) {
        assert!(w[1].at - w[0].at >= Duration::from_secs(1), "{actions:?}");
    }
    let t = handle.totals();
    let proc_cpu = thread_cpu("frag-reclaimer").expect("the reclaimer thread");
    let allowed = started.elapsed().mul_f64(0.01) + Duration::from_millis(100) + action.cpu + Duration::from_millis(20);
    eprintln!("{t}; /proc: {proc_cpu:?} CPU, allowed {allowed:?}");
    assert!(proc_cpu <= allowed, "{proc_cpu:?} > {allowed:?}: {t}");
    assert!(t.cpu <= allowed, "{t}");
}
