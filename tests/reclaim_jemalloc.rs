//! The reclaimer on jemalloc, against `/proc` and jemalloc's own counters: freed pages stay dirty
//! (resident) until their decay time passes, which jemalloc applies only when something ticks it.
//! No action while the heap is busy; once it is quiet, a purge whose release matches the
//! diagnosis's prediction, paced within its CPU share.
#![cfg(feature = "jemalloc")]

mod common;

use std::time::{Duration, Instant};

use common::reclaim::{check_action, first_action, reclaimer, stay_busy};
use frag::reclaim::Method;

#[global_allocator]
static A: frag::Tracked<tikv_jemallocator::Jemalloc> = frag::Tracked::new(tikv_jemallocator::Jemalloc);

fn dirty_bytes() -> u64 {
    tikv_jemalloc_ctl::epoch::advance().unwrap();
    let a = frag::report().allocator.unwrap();
    a.dirty.unwrap()
}

#[test]
fn dirty_pages_are_purged_once_quiet() {
    // The scenario's own unused pages only: what the process left before it (the unwind tables'
    // build before `main` frees its working memory into the main thread's arena, where it stays
    // until it decays) would be a second arena to purge, and the budget may stop between the two.
    frag::tune::jemalloc::purge_all().unwrap();
    let started = Instant::now();
    let handle = reclaimer().spawn().expect("the reclaimer starts on jemalloc");
    // 128 MiB of 16 KiB blocks, touched, freed: dirty pages jemalloc keeps for 10 s.
    let blocks: Vec<Vec<u8>> = (0..8 * 1024).map(|i| vec![i as u8 | 1; 16 << 10]).collect();
    drop(blocks);
    let dirty = dirty_bytes();
    assert!(dirty >= 64 << 20, "{dirty}");
    stay_busy(&handle, Duration::from_millis(1500));
    let rss_quiet = common::rss_bytes();
    let action = first_action(&handle);
    assert!(matches!(action.method, Method::Jemalloc { decayed: false, purged: 1.., stopped: false, .. }), "{action}");
    check_action(&handle, &action, rss_quiet, started);
    // jemalloc's own view: the dirty pages are gone.
    assert!(dirty_bytes() < action.predicted_bytes / 4, "{}", dirty_bytes());
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
