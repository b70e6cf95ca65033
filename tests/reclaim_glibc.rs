//! The reclaimer on glibc, against `/proc`: a brk heap held by a live top block, whose interior
//! pages only `malloc_trim` returns. No action while the heap is busy; once it is quiet, one trim
//! whose release matches the diagnosis's prediction, paced within its CPU share.
#![cfg(all(target_os = "linux", target_env = "gnu"))]

mod common;

use std::time::{Duration, Instant};

use common::reclaim::{check_action, first_action, reclaimer, stay_busy};
use frag::reclaim::Method;

#[global_allocator]
static A: frag::Tracked<std::alloc::System, frag::Exact> = frag::Tracked::new(std::alloc::System);

#[test]
fn a_pinned_heap_is_trimmed_once_quiet() {
    // glibc would return a heap's top on free above 128 KiB; here only the reclaimer returns memory.
    frag::tune::glibc::set(frag::tune::glibc::Mallopt::TrimThreshold(1 << 30)).unwrap();
    let started = Instant::now();
    let handle = reclaimer().spawn().expect("the reclaimer starts on glibc");
    // 96 MiB of 1,000 B blocks on the main heap, then one block above them, the rest freed: the
    // heap's top cannot shrink past the live block.
    let blocks: Vec<Vec<u8>> = (0..96 * 1024).map(|i| vec![i as u8 | 1; 1000]).collect();
    let pin = vec![7u8; 1000];
    drop(blocks);
    stay_busy(&handle, Duration::from_millis(1500));
    let rss_quiet = common::rss_bytes();
    let action = first_action(&handle);
    assert!(matches!(action.method, Method::Trim { pad: 0 }), "{action}");
    check_action(&handle, &action, rss_quiet, started);
    assert_eq!(pin[0], 7);
}

/// A second reclaimer in the same process is refused with a typed error.
#[test]
fn one_reclaimer_per_process() {
    let first = reclaimer().spawn().expect("the first starts");
    let second = reclaimer().spawn();
    assert!(matches!(second, Err(frag::reclaim::ReclaimError::AlreadyRunning)), "{second:?}");
    drop(first);
    reclaimer().spawn().expect("once the first stopped, another starts");
}

/// A child of `fork` starts without the parent's reclaimer: no such thread, its copy of the handle
/// drops without waiting for a thread that does not exist, and it may start its own. The publisher's
/// handle drops the same way.
#[test]
fn a_forked_child_starts_without_the_reclaimer() {
    let handle = reclaimer().spawn().expect("starts");
    let publisher = frag::Publisher::new().spawn().expect("the publisher starts");
    // The thread names itself once it runs.
    let named = std::time::Instant::now() + Duration::from_secs(5);
    while common::reclaim::thread_cpu("frag-reclaimer").is_none() {
        assert!(std::time::Instant::now() < named, "no thread named frag-reclaimer");
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: the child only reads /proc, drops the handle, starts and stops a reclaimer, and exits
    // with `_exit`; glibc's malloc and frag's shards are reset for it by their fork handlers.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let none = common::reclaim::thread_cpu("frag-reclaimer").is_none();
        drop(handle);
        drop(publisher);
        let own = reclaimer().spawn().map(|h| h.stop()).is_ok();
        // SAFETY: ends the child without running the parent's exit handlers or test harness.
        unsafe { libc::_exit(if none && own { 0 } else { 1 + i32::from(none) }) };
    }
    let mut status = 0;
    // SAFETY: waits for the child just forked.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status), "child killed: {status}");
    assert_eq!(libc::WEXITSTATUS(status), 0, "1: the parent's thread is in the child; 2: a new one would not start");
    // The parent's reclaimer still runs.
    assert!(common::reclaim::thread_cpu("frag-reclaimer").is_some());
    drop(handle);
    drop(publisher);
}
