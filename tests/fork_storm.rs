//! A fork storm while every thread and lock of frag's is busy: scopes made and published, reports
//! taken and symbolized, heap profiles written, a reclaimer acting every round, a publisher every
//! millisecond, workers sampling inside scopes. The main thread forks again and again; every child,
//! whatever the parent's threads held at that moment, reports, writes a profile, allocates, starts a
//! publisher and a reclaimer of its own, and exits within 5 s; every 25th symbolizes its report too
//! (within a minute: reading the debug information takes seconds in a debug build).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{BACKEND, Backend};

#[global_allocator]
static A: frag::Tracked<Backend> = frag::Tracked::with_sampling(BACKEND, frag::Sampling::MeanBytes(64 << 10));

/// Every this many children symbolize too.
const SYMBOLIZING: usize = 25;

/// What a child does; `Err` says what went wrong.
fn child(round: usize) -> Result<(), String> {
    let scope = frag::Scope::new(format!("child-{}", round % 7)).map_err(|e| e.to_string())?;
    let blocks: Vec<Vec<u8>> = {
        let _in = scope.enter();
        (0..2000).map(|i| vec![3u8; 16 + i * 7]).collect()
    };
    let mut report = frag::report();
    // Symbolizing reads the binary's debug information (seconds in a debug build with full debug
    // information): every 25th child, given longer to exit.
    if round % SYMBOLIZING == 0 {
        if let Some(sites) = report.sites.as_mut() {
            sites.symbolize();
            // The fork waited for the parent's symbolizer at work, if any: the child names its sites.
            if !sites.symbolized {
                return Err("the child could not symbolize".into());
            }
        }
    }
    let text = report.to_string();
    if !text.contains("frag report") {
        return Err(format!("a report without its header:\n{text}"));
    }
    let profile = frag::profile::heap_pprof_unsymbolized();
    if profile.is_empty() {
        return Err("an empty heap profile".into());
    }
    // Refused when the parent had published as many scopes as the label may hold: not the child's failure.
    let _ = scope.publish();
    let publisher = frag::Publisher::new().interval(Duration::from_millis(1)).spawn().map_err(|e| e.to_string())?;
    let reclaimer = frag::reclaim::Reclaimer::new()
        .limit(frag::reclaim::MemoryLimit::Bytes(1 << 20))
        .poll(Duration::from_millis(10))
        .spawn()
        .map_err(|e| e.to_string())?;
    std::thread::sleep(Duration::from_millis(20));
    publisher.stop();
    reclaimer.stop();
    drop(blocks);
    Ok(())
}

/// The stacks of every thread of `pid`, from gdb where it is installed (CI installs it).
fn stacks_of(pid: libc::pid_t) -> String {
    let out = std::process::Command::new("gdb")
        .args(["-p", &pid.to_string(), "-batch", "-ex", "thread apply all bt 12"])
        .output();
    match out {
        Ok(out) => String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with('#') || l.starts_with("Thread"))
            .collect::<Vec<_>>()
            .join("\n"),
        Err(e) => format!("(no gdb: {e})"),
    }
}

/// Waits up to `limit` for child `pid`: its status, or `Err` with its threads' stacks (then it
/// was killed) when it hung.
fn wait_for(pid: libc::pid_t, limit: Duration) -> Result<i32, String> {
    let start = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: `pid` is our child; `status` is a valid out-pointer.
        if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
            return Ok(status);
        }
        if start.elapsed() > limit {
            let stacks = stacks_of(pid);
            // SAFETY: `pid` is our child, still running.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return Err(stacks);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Spawns a thread that runs `step` until `stop`.
fn busy(
    name: &str,
    stop: &Arc<AtomicBool>,
    mut step: impl FnMut(usize) + Send + 'static,
) -> std::thread::JoinHandle<()> {
    let stop = Arc::clone(stop);
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                step(n);
                n += 1;
            }
        })
        .expect("spawn")
}

#[test]
fn every_child_of_a_busy_process_reports_allocates_and_exits() {
    // The debug information kept once read: a symbolization of sites not seen before takes seconds
    // in a debug build (more than a fork waits for one at work, 2 s), milliseconds once the cache
    // holds their code's. The forks start once the reporter's symbolizations are of that kind.
    frag::sites::keep_symbol_cache(true);
    static SYMBOLIZED: AtomicUsize = AtomicUsize::new(0);
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = vec![
        busy("scopes", &stop, |n| {
            let scope = frag::Scope::new(format!("tenant-{}", n % 300)).expect("scope");
            let _ = scope.publish();
            if n % 3 == 0 {
                scope.unpublish();
            }
        }),
        busy("reports", &stop, |n| {
            let mut report = frag::report();
            if n % 4 == 0 {
                if let Some(sites) = report.sites.as_mut() {
                    sites.symbolize();
                    SYMBOLIZED.fetch_add(1, Ordering::Relaxed);
                }
            }
            std::hint::black_box(report.to_string());
            std::hint::black_box(frag::profile::heap_pprof_unsymbolized());
        }),
    ];
    for w in 0..2 {
        threads.push(busy(&format!("worker-{w}"), &stop, move |n| {
            let scope = frag::Scope::new(format!("work-{}", (n + w) % 50)).expect("scope");
            let _in = scope.enter();
            let kept: Vec<Vec<u8>> = (0..64).map(|i| vec![1u8; 32 + (i * 997 + n) % 8000]).collect();
            std::hint::black_box(kept);
        }));
    }
    let publisher = frag::Publisher::new().interval(Duration::from_millis(1)).spawn().expect("publisher");
    let reclaimer = frag::reclaim::Reclaimer::new()
        .limit(frag::reclaim::MemoryLimit::Bytes(1 << 20))
        .poll(Duration::from_millis(10))
        .spawn()
        .expect("reclaimer");
    // The threads at work, and the reporter's sites read, before the first fork.
    let warming = Instant::now();
    while SYMBOLIZED.load(Ordering::Relaxed) < 3 {
        assert!(warming.elapsed() < Duration::from_secs(300), "the reporter never symbolized");
        std::thread::sleep(Duration::from_millis(10));
    }

    let mut failures = Vec::new();
    let mut slowest = Duration::ZERO;
    for round in 0..common::scaled(200) {
        std::thread::sleep(Duration::from_millis(1 + (round % 4) as u64));
        // SAFETY: the child runs `child` and leaves with `_exit`, never returning into the harness.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let code = match std::panic::catch_unwind(|| child(round)) {
                Ok(Ok(())) => 0,
                Ok(Err(why)) => {
                    // Straight to fd 2: the harness's capture of this thread's output ends with the child.
                    let line = format!("fork child {round}: {why}\n");
                    // SAFETY: writes the bytes of a live buffer to standard error.
                    unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
                    1
                }
                Err(_) => 2,
            };
            // SAFETY: leaves the child at once, without the parent's exit handlers.
            unsafe { libc::_exit(code) };
        }
        let forked = Instant::now();
        let limit = Duration::from_secs(if round % SYMBOLIZING == 0 { 60 } else { 5 });
        let status = wait_for(pid, limit);
        if round % SYMBOLIZING != 0 {
            slowest = slowest.max(forked.elapsed());
        }
        match status {
            // The stacks of the first child that hung; the others' rounds.
            Err(stacks) if failures.is_empty() => {
                failures.push(format!("round {round}: the child did not exit within {limit:?}:\n{stacks}"))
            }
            Err(_) => failures.push(format!("round {round}: the child did not exit within {limit:?}")),
            Ok(s) if libc::WIFEXITED(s) && libc::WEXITSTATUS(s) == 0 => {}
            Ok(s) => failures.push(format!("round {round}: the child ended with status {s:#x}")),
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("busy thread");
    }
    publisher.stop();
    reclaimer.stop();
    println!("the slowest child that did not symbolize took {slowest:?}");
    assert!(
        failures.is_empty(),
        "{} of {} children failed:\n{}",
        failures.len(),
        common::scaled(200),
        failures.join("\n")
    );
}
