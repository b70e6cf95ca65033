//! The soft memory limit on glibc, against `/proc`: a workload that never pauses (four workers
//! replacing blocks of 32 B – 48 KiB, half of them freed by another worker) whose live set drops.
//! Without a limit the reclaimer never acts (the heap is never quiet) and RSS stays at the peak;
//! with a limit between the low live set and that peak, RSS comes under the limit's target within
//! 2 s on the clock and stays there. Rounds on a clock the test sets (`common::reclaim::Driven`).
#![cfg(all(target_os = "linux", target_env = "gnu"))]

mod common;

use std::time::Duration;

use common::churn::Churn;
use common::reclaim::{BUSY_RATE, Driven, reclaimer};
use common::rss_bytes;
use frag::reclaim::{MemoryLimit, Round};

#[global_allocator]
static A: frag::Tracked<std::alloc::System> = frag::Tracked::new(std::alloc::System);

const MIB: u64 = 1 << 20;

/// The test's scale: 1 natively, 100 under valgrind (`FRAG_TEST_SCALE`).
fn scale() -> u64 {
    std::env::var("FRAG_TEST_SCALE").ok().and_then(|s| s.parse().ok()).unwrap_or(1)
}

/// Steps of the churn, each followed by a round, for `clock` on the clock; returns the highest RSS
/// seen after a round.
fn run(rounds: &mut Driven, churn: &mut Churn, clock: Duration) -> u64 {
    let end = rounds.now + clock;
    let mut highest = 0;
    while rounds.now < end {
        churn.step((BUSY_RATE as f64 * rounds.next_in.as_secs_f64()) as u64 / scale());
        let round = rounds.round();
        assert!(!matches!(round, Round::Skipped(frag::reclaim::Skip::Failed(_))), "{round:?}");
        highest = highest.max(rss_bytes());
    }
    highest
}

#[test]
fn a_busy_heap_is_held_under_the_limit_after_its_live_set_drops() {
    let (high, low) = (480 * MIB / scale(), 96 * MIB / scale());
    let limit = 320 * MIB / scale();
    let target = (limit as f64 * 0.95) as u64;
    // The live set first: made between two rounds, it would set a busiest rate that the churn never
    // comes near, and the heap would count as quiet.
    let mut churn = Churn::new(high);
    let mut rounds = Driven::new(reclaimer().limit(MemoryLimit::Bytes(limit)));
    let peak = run(&mut rounds, &mut churn, Duration::from_secs(4));
    churn.shrink_to(low);
    let dropped = rounds.now;
    let mut after = Vec::new();
    while rounds.now < dropped + Duration::from_secs(12) {
        let highest = run(&mut rounds, &mut churn, Duration::from_millis(500));
        after.push(((rounds.now - dropped).as_secs_f64(), highest / MIB));
    }
    let (reclaimer, _) = rounds.stop();
    let t = reclaimer.totals();
    eprintln!(
        "peak {} MiB, live after the drop {} MiB, limit {} MiB (target {} MiB); RSS after the drop (s, MiB): {after:?}; {t}",
        peak / MIB,
        churn.live() / MIB,
        limit / MIB,
        target / MIB
    );
    assert!(peak > limit, "the workload must reach past the limit unmanaged: {} MiB", peak / MIB);
    // The heap was never quiet: every action came from the limit.
    assert_eq!(t.skipped.settling, 0, "{t}");
    assert!(t.actions > 0, "{t}");
    for &(at, mib) in after.iter().filter(|(at, _)| *at >= 2.0) {
        assert!(mib * MIB <= target + 16 * MIB / scale(), "{mib} MiB at {at} s after the drop: over the target");
    }
    assert!(t.exhausted_rounds > 0, "the high phase's live set alone exceeds the limit: {t}");
}
