//! The soft memory limit on jemalloc (`common::limit`): under a never-quiet load whose live set
//! drops, purges over the target hold RSS under it, where unmanaged jemalloc waits for its 10 s
//! decay; `dirty_decay_ms` is shortened while over and restored after, as jemalloc itself reads it.
#![cfg(feature = "jemalloc")]

mod common;

use common::limit::{BELOW_LIMIT, check, live_below_the_limit, live_set_drops};

#[global_allocator]
static A: frag::Tracked<tikv_jemallocator::Jemalloc> = frag::Tracked::new(tikv_jemallocator::Jemalloc);

/// jemalloc's `arenas.dirty_decay_ms`, read without frag.
fn dirty_decay_ms() -> isize {
    // SAFETY: the key names an `ssize_t`.
    unsafe { tikv_jemalloc_ctl::raw::read::<isize>(b"arenas.dirty_decay_ms\0") }.unwrap()
}

#[test]
fn a_busy_heap_is_held_under_the_limit_after_its_live_set_drops() {
    let before = dirty_decay_ms();
    let mut during = Vec::new();
    let d = live_set_drops(|| during.push(dirty_decay_ms()));
    check(&d, 16 << 20);
    assert!(during.iter().all(|&ms| ms == 1000), "shortened to 1 s while over: {during:?}");
    assert_eq!(dirty_decay_ms(), before, "restored once the limit is gone");
    assert!(d.totals.assists > 0, "the workers flushed their caches at their samples: {}", d.totals);
    drop(d.rounds);
}

/// Live data below the limit at all times: the kernel's peak RSS stays at or under the limit, where
/// the same run without one goes past it.
#[test]
fn live_data_below_the_limit_never_takes_rss_over_it() {
    let [limited, unmanaged] = live_below_the_limit();
    assert!(unmanaged > BELOW_LIMIT, "without a limit the run must pass it: {} MiB", unmanaged >> 20);
    assert!(limited <= BELOW_LIMIT, "VmHWM {} MiB over the limit", limited >> 20);
}
