//! `fork()` from a multi-threaded process: while other threads allocate, free and take reports, the
//! main thread forks again and again; each child allocates, reports and exits cleanly. The child sees
//! itself as the one live thread (its own thread id), the parent's other threads as gone, and its own
//! counts exact against an independent counter of what the backend served.

mod common;

use std::alloc::System;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Counting, quiescent_totals};

#[global_allocator]
// Unsampled: `Counting` counts the bytes it serves, and a sampled small block's mark is 8 bytes larger
// than its request (`src/sampler/mark.rs`), so byte-exact conservation holds only without samples.
static A: frag::Tracked<Counting<System>, frag::Exact> =
    frag::Tracked::with_sampling(Counting(System), frag::Sampling::Off);

const FORKS: usize = 40;

/// Runs in the child: returns what went wrong, if anything.
fn child() -> Result<(), String> {
    let before = quiescent_totals();
    let blocks: Vec<Vec<u8>> = (0..1000).map(|i| vec![7u8; 16 + i]).collect();
    let report = frag::report();
    let text = report.to_string();
    drop(blocks);
    common::counted_between(before, quiescent_totals()).map_err(|e| format!("child: {e}"))?;
    // SAFETY: getpid cannot fail.
    let pid = u64::try_from(unsafe { libc::getpid() }).unwrap_or(0);
    let alive: Vec<_> = report.threads.iter().filter(|t| t.alive).map(|t| (t.tid, t.name.clone())).collect();
    if alive.len() != 1 || alive[0].0 != Some(pid) {
        return Err(format!("child {pid} should be the one live thread, report says {alive:?}\n{text}"));
    }
    if report.shards.live != 1 {
        return Err(format!("child holds {} live shards, expected 1: {:?}", report.shards.live, report.shards));
    }
    Ok(())
}

fn wait_for(pid: libc::pid_t, limit: Duration) -> Option<i32> {
    let start = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: `pid` is our child; `status` is a valid out-pointer.
        let rc = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if rc == pid {
            return Some(status);
        }
        if start.elapsed() > limit {
            // SAFETY: `pid` is our child, still running.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn children_of_a_busy_process_allocate_report_and_exit() {
    let stop = Arc::new(AtomicBool::new(false));
    let busy: Vec<_> = (0..3)
        .map(|i| {
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name(format!("busy-{i}"))
                .spawn(move || {
                    let mut kept = Vec::new();
                    let mut n = 0usize;
                    while !stop.load(Ordering::Relaxed) {
                        kept.push(vec![1u8; 32 + n % 5000]);
                        if kept.len() > 200 {
                            kept.drain(..100);
                        }
                        if i == 0 && n % 50 == 0 {
                            // Reports (and their traps check) run in the parent while it forks.
                            std::hint::black_box(frag::report().to_string());
                        }
                        n += 1;
                    }
                })
                .expect("spawn")
        })
        .collect();

    let mut failures = Vec::new();
    for round in 0..FORKS {
        std::thread::sleep(Duration::from_millis(3));
        // SAFETY: the child only runs `child()` and then leaves with `_exit`, never returning into the
        // test harness.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let code = match std::panic::catch_unwind(child) {
                Ok(Ok(())) => 0,
                Ok(Err(why)) => {
                    eprintln!("fork child: {why}");
                    1
                }
                Err(_) => 2,
            };
            // SAFETY: leaves the child at once, without running the parent's exit handlers.
            unsafe { libc::_exit(code) };
        }
        match wait_for(pid, Duration::from_secs(60)) {
            None => failures.push(format!("round {round}: child hung (deadlock?)")),
            Some(s) if libc::WIFEXITED(s) && libc::WEXITSTATUS(s) == 0 => {}
            Some(s) => failures.push(format!("round {round}: child ended with status {s:#x}")),
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in busy {
        t.join().expect("busy thread");
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// glibc holds the loader's lock through a `dl_iterate_phdr` and does not reset it in a child: a fork
/// while one of frag's walks of the loader's list is under way (the unwind tables' refresh, which
/// `report()` runs) would leave the child's first walk waiting forever. Two threads walk it without
/// pause while the main thread forks; each child walks it too, and must exit.
#[test]
fn children_of_a_process_walking_the_loaders_list_do_not_hang() {
    let stop = Arc::new(AtomicBool::new(false));
    let walkers: Vec<_> = (0..2)
        .map(|_| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    frag::sites::refresh_unwind_tables();
                }
            })
        })
        .collect();
    let (mut hung, mut lost) = (Vec::new(), Vec::new());
    for round in 0..common::scaled(200) {
        // SAFETY: the child only walks the loader's list and leaves with `_exit`.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            frag::sites::refresh_unwind_tables();
            // Whatever it could list, the child keeps unwind tables (those it inherited at least).
            let kept = frag::sites::unwind_tables().is_none_or(|t| t.modules > 0);
            // SAFETY: leaves the child at once.
            unsafe { libc::_exit(if kept { 0 } else { 1 }) };
        }
        match wait_for(pid, Duration::from_secs(20)) {
            None => hung.push(round),
            Some(s) if libc::WIFEXITED(s) && libc::WEXITSTATUS(s) == 0 => {}
            Some(_) => lost.push(round),
        }
    }
    stop.store(true, Ordering::Relaxed);
    walkers.into_iter().for_each(|w| w.join().unwrap());
    assert!(hung.is_empty(), "children that hung in the loader's walk: rounds {hung:?}");
    assert!(lost.is_empty(), "children left without unwind tables: rounds {lost:?}");
}
