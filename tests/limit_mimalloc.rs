//! The soft memory limit on mimalloc (`common::limit`): under a never-quiet load whose live set
//! drops, RSS comes under the target; `purge_delay` is shortened while over and restored after, as
//! mimalloc itself reads it. A collection from the reclaimer's thread reaches little of the pages
//! the workers' threads own: their own collections at their samples (assists) do the rest (without
//! them, 397 MiB 2 s after the drop against a target of 304).
#![cfg(feature = "mimalloc")]

mod common;

use common::free_churn::FreeChurn;
use common::limit::{BELOW_LIMIT, check, live_below_the_limit, live_set_drops, live_set_drops_on};

const MIB: u64 = 1 << 20;

#[global_allocator]
static A: frag::Tracked<mimalloc::MiMalloc> = frag::Tracked::new(mimalloc::MiMalloc);

/// mimalloc's `purge_delay` option (number 15 in mimalloc 2 and 3's `mi_option_t`), read without
/// frag.
fn purge_delay_ms() -> libc::c_long {
    // SAFETY: mi_option_get has no preconditions, and 15 is an option of the linked mimalloc.
    unsafe { libmimalloc_sys::mi_option_get(15) }
}

#[test]
fn a_busy_heap_is_held_under_the_limit_after_its_live_set_drops() {
    let before = purge_delay_ms();
    let mut during = Vec::new();
    let d = live_set_drops(|| during.push(purge_delay_ms()));
    check(&d, 16 << 20);
    assert!(during.iter().all(|&ms| ms == 1), "shortened to 1 ms while over: {during:?}");
    assert_eq!(purge_delay_ms(), before, "restored once the limit is gone");
    assert!(d.totals.assists > 0, "the workers helped at their samples: {}", d.totals);
    drop(d.rounds);
}

/// Workers that never park (`common::free_churn`: only their assists at their samples can release
/// what their threads own), hand-offs between them, long-lived small blocks among the churn; the
/// live set drops from about 770 to 150 MiB. Five runs in one process, each held at the target
/// from 2 s after the drop. A run's reclaimer is not charged for the assists of the runs before it
/// (the assists' CPU figure is process-wide): charged, the later runs waited out that debt at the
/// drop, and RSS was 470 MiB 2 s after it. The report's split stays within RSS throughout:
/// mimalloc's commit figure stays at the peak after its purges (989 MiB committed at 275 MiB
/// resident, measured), and read as resident it put 800 MiB in holes.
#[test]
fn workers_that_never_park_are_held_under_the_limit_in_every_run_of_five() {
    for run in 1..=5 {
        let d = live_set_drops_on(FreeChurn::new(720 * MIB, 48 * MIB), 100 * MIB, || {
            let b = frag::report().diagnosis.expect("a diagnosis").breakdown;
            assert!(
                b.holes_bytes <= b.rss_bytes,
                "holes {} MiB of {} MiB resident",
                b.holes_bytes / MIB,
                b.rss_bytes / MIB
            );
            assert!(b.unexplained_bytes > -((b.rss_bytes / 10) as i64), "buckets over RSS: {b:?}");
        });
        eprintln!("run {run}: {}", d.totals);
        check(&d, 16 * MIB);
        assert!(d.totals.assists > 0, "the workers helped at their samples: {}", d.totals);
        drop(d.rounds);
    }
}

/// Live data below the limit at all times: the kernel's peak RSS stays at or under the limit. (The
/// same run without a limit stays under it too on mimalloc, whose own purge delay is 10 ms: 366 MiB
/// against 400 measured; glibc and jemalloc pass it.)
#[test]
fn live_data_below_the_limit_never_takes_rss_over_it() {
    let [limited, unmanaged] = live_below_the_limit();
    eprintln!("without a limit: {} MiB", unmanaged >> 20);
    assert!(limited <= BELOW_LIMIT, "VmHWM {} MiB over the limit", limited >> 20);
}
