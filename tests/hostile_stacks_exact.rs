//! Hostile stacks, exact tier with every block sampled (so that every allocation walks its stack):
//! the cases of `tests/hostile_stacks.rs`, and the bytes each site holds, exact, where the blocks
//! were allocated on switched stacks.

mod common;

use common::{BACKEND, Backend};

#[global_allocator]
static A: frag::Tracked<Backend, frag::Exact> = frag::Tracked::with_sampling(BACKEND, frag::Sampling::EveryBlock);

include!("common/stack_cases.rs");

/// The bytes in use at `allocate_here`, summed over its sites.
fn at_allocate_here(report: &frag::Report) -> u64 {
    let sites = report.sites.as_ref().expect("a sites section");
    sites
        .top
        .iter()
        .filter(|r| r.frames.first().is_some_and(|f| common::frame_is(f, "allocate_here")))
        .map(|r| r.inuse_bytes)
        .sum()
}

/// Every block allocated on a switched stack (a `stacker` segment, a fiber, a coroutine) is at its
/// own site, to the byte: the walk found the allocating function there, and no sample went missing.
#[test]
fn every_block_on_switched_stacks_is_at_its_site() {
    assert_ne!(frag::sites::unwinder(), frag::sites::Unwinder::None, "no stacks on this target");
    // Room for every block kept, so that only the blocks themselves are allocated at `allocate_here`.
    let (mut kept, mut seed) = (Vec::with_capacity(10_000), 31);
    let mut truth = 0;
    for _ in 0..3 {
        truth += stacks::on_stacker(1 << 20, || deep(30, &mut kept, 100, &mut seed));
    }
    stacks::on_fiber(128 * 1024, || truth += deep(5, &mut kept, 100, &mut seed));
    stacks::on_coroutine(2, || truth += deep(5, &mut kept, 100, &mut seed));
    let report = common::symbolized_report();
    let sites = report.sites.as_ref().unwrap();
    assert!(sites.switched_stacks > 0, "{report}");
    assert_eq!(at_allocate_here(&report), truth, "{report}");
    // Every block allocated there counted as allocated on a switched stack: those kept, those freed
    // at once (as many again, about), and the rest of each round's work.
    assert!(
        sites.switched_stacks_bytes >= truth,
        "{} B counted on switched stacks, {truth} B kept there\n{report}",
        sites.switched_stacks_bytes
    );
    drop(kept);
}
