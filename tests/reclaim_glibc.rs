//! The reclaimer on glibc, against `/proc`: a brk heap held by a live top block, whose interior
//! pages only `malloc_trim` returns. Rounds on a clock the test sets (`common::reclaim::Driven`):
//! no action while the heap is busy; once it is quiet, one trim whose release matches the
//! diagnosis's prediction, paced within its CPU share; a gibibyte after a small burst is still
//! trimmed, at a tiny share and at the default.
#![cfg(all(target_os = "linux", target_env = "gnu"))]

mod common;

use std::time::Duration;

use common::reclaim::{Driven, QUIET, check_pacing, check_release, reclaimer};
use common::rss_bytes;
use frag::reclaim::{Method, Reclaimer, Round};

#[global_allocator]
static A: frag::Tracked<std::alloc::System, frag::Exact> = frag::Tracked::new(std::alloc::System);

const MIB: u64 = 1 << 20;

/// A burst of `bytes` in 1,000 B blocks on the main heap, then one block above them (returned),
/// the rest freed: the heap's top cannot shrink past the live block, and glibc would return a
/// heap's top on free above 128 KiB, so here only a trim returns the pages.
fn pinned_hole(rounds: &mut Driven, bytes: u64) -> Vec<u8> {
    frag::tune::glibc::set(frag::tune::glibc::Mallopt::TrimThreshold(1 << 30)).unwrap();
    let mut blocks: Vec<Vec<u8>> = Vec::new();
    rounds.burst(bytes, |n| blocks.extend((0..n / 1000).map(|i| vec![i as u8 | 1; 1000])));
    let pin = vec![7u8; 1000];
    drop(blocks);
    pin
}

/// What a `malloc_trim(0)` called by hand releases now, by `/proc`.
fn hand_trim_releases() -> u64 {
    let before = rss_bytes();
    // SAFETY: malloc_trim has no preconditions.
    unsafe { libc::malloc_trim(0) };
    before.saturating_sub(rss_bytes())
}

#[test]
fn a_pinned_heap_is_trimmed_once_quiet() {
    let mut rounds = Driven::new(reclaimer());
    let pin = pinned_hole(&mut rounds, 96 * MIB);
    rounds.busy(20);
    let rss_quiet = rss_bytes();
    let action = rounds.until_action(QUIET, Duration::from_secs(10));
    assert!(matches!(action.method, Method::Trim { pad: 0 }), "{action}");
    check_release(&action, rss_quiet);
    // Nothing left to release: no second action.
    for _ in 0..20 {
        let round = rounds.round();
        assert!(!matches!(round, Round::Acted(_)), "{round:?}");
    }
    check_pacing(rounds, Reclaimer::DEFAULT_CPU_SHARE);
    assert!(hand_trim_releases() < 8 * MIB);
    assert_eq!(pin[0], 7);
}

fn a_gibibyte_after_a_small_burst(share: f64) {
    let pins = common::reclaim::a_gibibyte_after_a_small_burst(share, pinned_hole, hand_trim_releases);
    assert!(pins.iter().all(|p| p[0] == 7));
}

#[test]
fn a_gibibyte_after_a_small_burst_at_a_tiny_share() {
    a_gibibyte_after_a_small_burst(0.003);
}

#[test]
fn a_gibibyte_after_a_small_burst_at_the_default_share() {
    a_gibibyte_after_a_small_burst(Reclaimer::DEFAULT_CPU_SHARE);
}

/// glibc has no call that empties a thread's cache: with the reclaimer asking, an idle thread's
/// hook releases nothing (and glibc's holes finding names the tunable that turns the caches off).
#[test]
fn idle_threads_have_nothing_to_release_on_glibc() {
    let mut rounds = Driven::new(reclaimer());
    rounds.busy(2);
    let round = rounds.round();
    assert!(matches!(round, Round::Skipped(frag::reclaim::Skip::Settling { .. })), "{round:?}");
    std::thread::spawn(frag::reclaim::idle).join().unwrap();
    frag::reclaim::idle();
    assert_eq!(frag::reclaim::thread_releases().total(), 0);
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

/// Blocks a thread made.
type Blocks = Vec<Vec<u8>>;

/// Bursts as a service sees them, on the default rules: three bursts of 1 s, each 256 MiB in
/// 1–16 KiB blocks made by four threads (one block in 64 kept until the next burst's end, so that no
/// heap's top can shrink; the rest freed on the next thread over), 5 s of nothing between them, five
/// runs. Four seconds after each burst, RSS is within max(1.15×, +8 MiB) of what a `malloc_trim(0)`
/// called by hand then leaves.
#[test]
fn each_burst_is_trimmed_within_four_seconds() {
    let mut seen = Vec::new();
    for run in 0..5u64 {
        let mut rounds = Driven::new(Reclaimer::new().no_limit());
        let mut pins: Vec<Vec<u8>> = Vec::new();
        for burst in 0..3u64 {
            let mut blocks: Vec<Vec<Vec<u8>>> = vec![Vec::new(); 4];
            let mut kept = Vec::new();
            rounds.burst(256 * MIB, |n| {
                let made: Vec<(Blocks, Blocks)> = std::thread::scope(|s| {
                    let threads: Vec<_> = (0..4u64)
                        .map(|t| {
                            s.spawn(move || {
                                let mut rng = 0x51_7cc1_b727_220a_u64 ^ (run << 40 | burst << 32 | t << 24 | n);
                                let (mut blocks, mut kept) = (Vec::new(), Vec::new());
                                let mut done = 0;
                                while done < n / 4 {
                                    let size = 1024 + (common::xorshift(&mut rng) % (15 << 10)) as usize;
                                    let b = vec![burst as u8 | 1; size];
                                    if rng % 64 == 0 {
                                        kept.push(b)
                                    } else {
                                        blocks.push(b)
                                    }
                                    done += size as u64;
                                }
                                (blocks, kept)
                            })
                        })
                        .collect();
                    threads.into_iter().map(|t| t.join().unwrap()).collect()
                });
                for (t, (b, k)) in made.into_iter().enumerate() {
                    blocks[(t + 1) % 4].extend(b);
                    kept.extend(k);
                }
            });
            std::thread::scope(|s| {
                for b in blocks {
                    s.spawn(move || drop(b));
                }
            });
            pins = kept;
            let end = rounds.now;
            while rounds.now < end + Duration::from_secs(4) {
                rounds.round();
            }
            let at_4s = rss_bytes();
            let by_hand = at_4s - hand_trim_releases();
            seen.push((run, burst, at_4s / MIB, by_hand / MIB));
            let allowed = (by_hand as f64 * 1.15).max((by_hand + 8 * MIB) as f64) as u64;
            assert!(
                at_4s <= allowed,
                "run {run}, burst {burst}: {} MiB 4 s after the burst, {} MiB after a trim by hand: {seen:?}",
                at_4s / MIB,
                by_hand / MIB
            );
            while rounds.now < end + Duration::from_secs(5) {
                rounds.round();
            }
        }
        let (reclaimer, _) = rounds.stop();
        eprintln!("run {run}: {}", reclaimer.totals());
        drop(pins);
    }
    eprintln!("(run, burst, RSS 4 s after in MiB, after a trim by hand): {seen:?}");
}
