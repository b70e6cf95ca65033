//! The soft memory limit on glibc (`common::limit`): under a never-quiet load whose live set drops,
//! `malloc_trim` at every round over the target holds RSS under it, where unmanaged glibc keeps the
//! peak.
#![cfg(all(target_os = "linux", target_env = "gnu"))]

mod common;

use common::limit::{check, live_set_drops, scale};

#[global_allocator]
static A: frag::Tracked<std::alloc::System> = frag::Tracked::new(std::alloc::System);

#[test]
fn a_busy_heap_is_held_under_the_limit_after_its_live_set_drops() {
    let d = live_set_drops(|| {});
    check(&d, (16 << 20) / scale());
    drop(d.rounds);
}
