//! `jemalloc_conf!` emits a `malloc_conf` symbol jemalloc really reads at start-up.
#![cfg(feature = "jemalloc")]

mod common;

use std::time::Duration;

use frag::tune::Decay;
use frag::tune::jemalloc::{JemallocConfig, PercpuArena};
use tikv_jemalloc_ctl::raw;

const CONF: JemallocConfig = JemallocConfig::new()
    .dirty_decay(Decay::After(Duration::from_secs(3)))
    .muzzy_decay(Decay::Disabled)
    .narenas(3)
    .tcache_max(5000)
    .percpu_arena(PercpuArena::Disabled);

frag::jemalloc_conf!(CONF);

#[global_allocator]
static A: frag::Tracked<tikv_jemallocator::Jemalloc> = frag::Tracked::new(tikv_jemallocator::Jemalloc);

/// In a child without `_RJEM_MALLOC_CONF`, which would override the compiled-in options.
#[test]
fn jemalloc_uses_the_compiled_in_options() {
    common::run_child_in("compiled_in_options_child", &[], &["_RJEM_MALLOC_CONF"]);
}

#[test]
#[ignore = "child process helper"]
fn compiled_in_options_child() {
    common::child_only("jemalloc_uses_the_compiled_in_options");
    assert!(std::env::var_os("_RJEM_MALLOC_CONF").is_none());
    // SAFETY: decay options are `ssize_t`.
    assert_eq!(unsafe { raw::read::<isize>(b"opt.dirty_decay_ms\0") }.unwrap(), 3000);
    // SAFETY: as above.
    assert_eq!(unsafe { raw::read::<isize>(b"opt.muzzy_decay_ms\0") }.unwrap(), -1);
    assert_eq!(tikv_jemalloc_ctl::opt::narenas::read().unwrap(), 3);
    assert_eq!(tikv_jemalloc_ctl::opt::tcache_max::read().unwrap(), 5000);
    // SAFETY: `thread.tcache.max` is a size_t key.
    let thread = unsafe { raw::read::<usize>(b"thread.tcache.max\0") }.unwrap();
    assert_eq!(thread, 5120, "each thread cache rounds up to a size class");

    let used = frag::tune::jemalloc::effective().unwrap();
    assert_eq!(used.opt.dirty_decay, CONF.dirty_decay);
    assert_eq!(used.opt.percpu_arena, Some(PercpuArena::Disabled));
    assert!(used.arenas.iter().all(|a| a.dirty == Decay::After(Duration::from_secs(3))));
    assert_eq!(used.thread_tcache_max, 5120);
}
