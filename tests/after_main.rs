//! Allocations after `main` returns: an `atexit` handler allocates, frees and takes a full report
//! while the process is exiting (after the main thread's thread-local destructors ran) and with a
//! detached thread still alive. Everything is counted exactly against an independent counter of what
//! the backend served, and the process exits with status 0: no panic, no abort.
//!
//! The test re-runs itself in a child process; the child registers the handler and returns, so the
//! handler runs when the test harness's `main` returns.

mod common;

use std::alloc::System;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{Counting, is_child, quiescent_totals, run_child};

#[global_allocator]
// Unsampled: `Counting` counts the bytes it serves, and a sampled small block's mark is 8 bytes larger
// than its request (`src/sampler/mark.rs`), so byte-exact conservation holds only without samples.
static A: frag::Tracked<Counting<System>, frag::Exact> =
    frag::Tracked::with_sampling(Counting(System), frag::Sampling::Off);

static STOP: AtomicBool = AtomicBool::new(false);
static STOPPED: AtomicBool = AtomicBool::new(false);

fn say(line: &str) {
    // Raw write(2): no std stream state is assumed to be intact this late.
    // SAFETY: the buffer is valid for its length.
    unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
}

extern "C" fn at_exit() {
    // The detached thread stops allocating (and stays alive) so that the counts below are exact.
    STOP.store(true, Ordering::Relaxed);
    while !STOPPED.load(Ordering::Acquire) {
        std::thread::yield_now();
    }
    let before = quiescent_totals();
    let mut kept: Vec<String> = (0..100).map(|i| format!("allocated after main returned, #{i}")).collect();
    kept.truncate(10);
    let report = frag::report();
    let text = report.to_string();
    drop(kept);
    drop(report);
    let counted = match common::counted_between(before, quiescent_totals()) {
        Ok(c) if c.0 >= 100 && !text.is_empty() => c,
        outcome => {
            say(&format!("after-main: MISMATCH {outcome:?}\n"));
            // SAFETY: leaves at once with a failure status.
            unsafe { libc::_exit(3) };
        }
    };
    say(&format!("after-main: ok, {} allocations and {} frees counted\n", counted.0, counted.1));
}

fn child() {
    std::thread::spawn(|| {
        let mut v: Vec<Box<[u8]>> = Vec::new();
        let mut n = 0usize;
        while !STOP.load(Ordering::Relaxed) {
            v.push(vec![0u8; 16 + n % 3000].into_boxed_slice());
            if v.len() > 64 {
                v.clear();
            }
            n += 1;
        }
        STOPPED.store(true, Ordering::Release);
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    });
    // SAFETY: `at_exit` has the C ABI and lives for the whole process.
    assert_eq!(unsafe { libc::atexit(at_exit) }, 0);
    std::thread::sleep(Duration::from_millis(50));
}

#[test]
fn allocations_after_main_returns_are_counted() {
    if is_child() {
        child();
        return;
    }
    let output = run_child("allocations_after_main_returns_are_counted", &[]);
    assert!(output.contains("after-main: ok"), "the exit handler did not run to its end:\n{output}");
}
