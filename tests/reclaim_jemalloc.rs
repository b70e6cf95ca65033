//! The reclaimer on jemalloc, against `/proc` and jemalloc's own counters: freed pages stay dirty
//! (resident) until their decay time passes, which jemalloc applies only when something ticks it.
//! Rounds on a clock the test sets (`common::reclaim::Driven`): no action while the heap is busy;
//! once it is quiet, a purge whose release matches the diagnosis's prediction, paced within its CPU
//! share; a gibibyte after a small burst is still purged, at a tiny share and at the default.
#![cfg(feature = "jemalloc")]

mod common;

use std::time::Duration;

use common::pins::{arena_sum, dirty_bytes, hand_purge_releases};
use common::reclaim::{Driven, QUIET, check_pacing, check_release, first_action, reclaimer};
use common::rss_bytes;
use frag::reclaim::{Method, Reclaimer};

#[global_allocator]
static A: frag::Tracked<tikv_jemallocator::Jemalloc> = frag::Tracked::new(tikv_jemallocator::Jemalloc);

const MIB: u64 = 1 << 20;

/// A burst of `bytes` in 16 KiB blocks, touched, then freed: dirty pages jemalloc keeps for 10 s.
fn freed_pages(rounds: &mut Driven, bytes: u64) {
    let mut blocks: Vec<Vec<u8>> = Vec::new();
    rounds.burst(bytes, |n| blocks.extend((0..n / (16 << 10)).map(|i| vec![i as u8 | 1; 16 << 10])));
    drop(blocks);
}

#[test]
fn dirty_pages_are_purged_once_quiet() {
    // The scenario's own unused pages only: what the process left before it (the unwind tables'
    // build before `main` frees its working memory into the main thread's arena, where it stays
    // until it decays) would be a second arena to purge, and the budget may stop between the two.
    hand_purge_releases();
    let mut rounds = Driven::new(reclaimer());
    freed_pages(&mut rounds, 128 * MIB);
    let dirty = dirty_bytes();
    assert!(dirty >= 64 * MIB, "{dirty}");
    rounds.busy(20);
    let rss_quiet = rss_bytes();
    let action = rounds.until_action(QUIET, Duration::from_secs(10));
    assert!(matches!(action.method, Method::Jemalloc { decayed: false, purged: 1.., stopped: false, .. }), "{action}");
    check_release(&action, rss_quiet);
    // jemalloc's own view: the dirty pages are gone.
    assert!(dirty_bytes() < action.predicted_bytes / 4, "{}", dirty_bytes());
    check_pacing(rounds, Reclaimer::DEFAULT_CPU_SHARE);
}

fn a_gibibyte_after_a_small_burst(share: f64) {
    hand_purge_releases();
    common::reclaim::a_gibibyte_after_a_small_burst(share, freed_pages, hand_purge_releases);
}

#[test]
fn a_gibibyte_after_a_small_burst_at_a_tiny_share() {
    a_gibibyte_after_a_small_burst(0.003);
}

#[test]
fn a_gibibyte_after_a_small_burst_at_the_default_share() {
    a_gibibyte_after_a_small_burst(Reclaimer::DEFAULT_CPU_SHARE);
}

/// With bytes to keep, the action decays first and leaves about that much unused.
#[test]
fn keep_leaves_unused_pages_for_reuse() {
    let keep = 48u64 << 20;
    let handle = reclaimer().keep(keep).spawn().expect("starts");
    let blocks: Vec<Vec<u8>> = (0..8 * 1024).map(|i| vec![i as u8 | 1; 16 << 10]).collect();
    drop(blocks);
    let action = first_action(&handle);
    eprintln!("{action}");
    assert!(matches!(action.method, Method::Jemalloc { decayed: true, .. }), "{action}");
    // jemalloc purges whole arenas: with the unused pages in one arena, the purge takes the kept bytes
    // too, so the release exceeds the prediction by up to `keep` (here within the range).
    let ratio = action.release_ratio().expect("a prediction");
    assert!((0.5..=1.6).contains(&ratio), "{action}");
}

/// Blocks in worker threads' caches are out of every arena purge's reach; the workers flush them
/// when they pass `frag::reclaim::idle` after the reclaimer asked (jemalloc's `thread.idle`), and
/// not before. Ground truth: jemalloc's own `tcache_bytes`.
#[test]
fn idle_workers_flush_their_thread_caches_when_asked() {
    const WORKERS: usize = 4;
    let mut rounds = Driven::new(reclaimer());
    let (tell, done) = std::sync::mpsc::channel::<()>();
    let mut orders = Vec::new();
    let mut threads = Vec::new();
    for w in 0..WORKERS {
        let (order, orders_in) = std::sync::mpsc::channel::<()>();
        let tell = tell.clone();
        orders.push(order);
        threads.push(std::thread::spawn(move || {
            // Blocks of every small class up to 14 KiB, freed by this thread: its cache keeps some of
            // each class.
            for round in 0..4 {
                let blocks: Vec<Vec<u8>> =
                    (0..20_000).map(|i| vec![(w + round) as u8; 8 + (i * 56) % (14 << 10)]).collect();
                drop(blocks);
            }
            tell.send(()).unwrap();
            for () in orders_in {
                frag::reclaim::idle();
                tell.send(()).unwrap();
            }
        }));
    }
    (0..WORKERS).for_each(|_| done.recv().unwrap());
    let idle = |orders: &[std::sync::mpsc::Sender<()>]| {
        orders.iter().for_each(|o| o.send(()).unwrap());
        (0..WORKERS).for_each(|_| done.recv().unwrap());
    };
    let cached = arena_sum("tcache_bytes");
    assert!(cached >= WORKERS as u64 * (512 << 10), "{cached} B in thread caches");
    // Not asked: the hook does nothing.
    idle(&orders);
    assert_eq!(frag::reclaim::thread_releases().idle, 0);
    assert!(arena_sum("tcache_bytes") >= cached * 9 / 10, "{} B cached", arena_sum("tcache_bytes"));
    // A round that sees the burst busy, then a quiet one: the reclaimer asks.
    let round = rounds.round();
    assert!(matches!(round, frag::reclaim::Round::Skipped(frag::reclaim::Skip::Busy { .. })), "{round:?}");
    let round = rounds.round();
    assert!(matches!(round, frag::reclaim::Round::Skipped(frag::reclaim::Skip::Settling { .. })), "{round:?}");
    idle(&orders);
    let left = arena_sum("tcache_bytes");
    let releases = frag::reclaim::thread_releases();
    eprintln!("thread caches: {cached} B before, {left} B after; {releases:?}");
    assert_eq!(releases.idle, WORKERS as u64);
    assert!(left <= cached / 8, "{left} B still cached of {cached} B");
    drop(orders);
    threads.into_iter().for_each(|t| t.join().unwrap());
}

/// A child of `fork` starts with no request open, even when its parent was asking idle threads
/// (the child has no reclaimer): its hook releases nothing and returns.
#[test]
fn a_forked_child_is_not_asked() {
    let mut rounds = Driven::new(reclaimer());
    rounds.busy(2);
    let round = rounds.round();
    assert!(matches!(round, frag::reclaim::Round::Skipped(frag::reclaim::Skip::Settling { .. })), "{round:?}");
    let before = frag::reclaim::thread_releases();
    // SAFETY: the child only passes the hook, reads two atomics' worth of figures and leaves with
    // `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        frag::reclaim::idle();
        let served = frag::reclaim::thread_releases() != before;
        // SAFETY: leaves the child at once.
        unsafe { libc::_exit(i32::from(served)) };
    }
    let mut status = 0;
    // SAFETY: waits for the child just forked.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the child served a request: {status:#x}");
    // The parent is still asking.
    std::thread::spawn(frag::reclaim::idle).join().unwrap();
    assert_eq!(frag::reclaim::thread_releases().idle, before.idle + 1);
}
