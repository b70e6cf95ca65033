//! Hostile stacks, sampled tier (the README's allocator, `Tracked<Jemalloc>`, at a 64 KiB mean so
//! that every run samples on every stack): allocations on `stacker` segments, ucontext fibers and
//! coroutines with guard pages directly around their stacks, a signal handler on an alternate
//! stack, the smallest thread stack glibc makes and one the program gave. Each case in child
//! processes, many runs each: a walk that reads one word past a stack's end crashes there. And the
//! bytes add up: samples taken on a switched stack are estimated as any others.

mod common;

use common::{BACKEND, Backend};

#[global_allocator]
static A: frag::Tracked<Backend> = frag::Tracked::with_sampling(BACKEND, frag::Sampling::MeanBytes(64 << 10));

include!("common/stack_cases.rs");

/// The blocks allocated at one site on `stacker` segments, estimated from their samples, against
/// what the test holds: the estimate's 95% interval, widened to four standard errors, contains
/// it, and the samples were counted as taken on switched stacks.
#[test]
fn samples_on_switched_stacks_add_up() {
    assert_ne!(frag::sites::unwinder(), frag::sites::Unwinder::None, "no stacks on this target");
    // Room for every block kept, so that only the blocks themselves are allocated at `allocate_here`.
    let (mut kept, mut seed) = (Vec::with_capacity(100_000), 29);
    let mut truth = 0;
    for _ in 0..common::scaled(60) {
        truth += stacks::on_stacker(1 << 20, || deep(30, &mut kept, 400, &mut seed));
    }
    let report = common::symbolized_report();
    let sites = report.sites.as_ref().expect("a sites section");
    assert!(sites.switched_stacks > 0, "{report}");
    let rows: Vec<_> =
        sites.top.iter().filter(|r| r.frames.first().is_some_and(|f| common::frame_is(f, "allocate_here"))).collect();
    assert!(!rows.is_empty(), "no site at allocate_here:\n{report}");
    let estimate: u64 = rows.iter().map(|r| r.inuse_bytes).sum();
    let half: u64 = rows.iter().map(|r| r.inuse_bytes_interval.1 - r.inuse_bytes_interval.0).sum::<u64>() / 2;
    let allowed = half as f64 / 1.96 * 4.0;
    assert!(
        (estimate as f64 - truth as f64).abs() <= allowed,
        "estimated {estimate} B in use at allocate_here, truth {truth} B (four standard errors: {allowed:.0})\n{report}"
    );
    drop(kept);
}
