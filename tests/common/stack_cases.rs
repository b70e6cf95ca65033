// The hostile-stack cases, shared by `tests/hostile_stacks.rs` (the sampled tier) and
// `tests/hostile_stacks_exact.rs` (the exact tier, every block sampled): `include!`d after the file's
// own global allocator, so that each tier runs every case. Each case runs in child processes, again
// and again: a walk that reads past the end of a stack crashes its child, never the test runner.

use common::stacks;
use std::hint::black_box;

/// Child runs per case (a crash in some runs of today's code: the issue saw 3 of 20).
fn runs() -> usize {
    common::scaled(20).max(2)
}

/// Blocks of 16 B to 4 KiB allocated here (a site of its own), half freed at once, half kept in
/// `kept`; returns the bytes kept.
#[inline(never)]
fn allocate_here(kept: &mut Vec<Vec<u8>>, blocks: usize, seed: &mut u64) -> u64 {
    let mut bytes = 0;
    for i in 0..blocks {
        let size = 16 + (common::xorshift(seed) % 4080) as usize;
        let block = vec![i as u8; size];
        if i % 2 == 0 {
            bytes += size as u64;
            kept.push(block);
        } else {
            drop(black_box(block));
        }
    }
    bytes
}

/// `allocate_here` under `depth` frames of recursion, each with a few words of its own.
#[inline(never)]
fn deep(depth: usize, kept: &mut Vec<Vec<u8>>, blocks: usize, seed: &mut u64) -> u64 {
    if depth == 0 {
        return allocate_here(kept, blocks, seed);
    }
    let pad = black_box([depth as u64; 6]);
    deep(depth - 1, kept, blocks, seed) + pad[5] - depth as u64
}

/// Memory written through to push the walk's words out of every cache (twice the last level's
/// size on this machine), so that the next sample's walk starts cold and scans the stack above it
/// first, as a service's rare samples do.
const EVICT: usize = 64 << 20;

/// Writes `buffer` through (see [`EVICT`]).
fn evict(buffer: &mut [u8]) {
    for (i, line) in buffer.chunks_mut(64).enumerate() {
        line[0] = i as u8;
    }
    black_box(buffer);
}

/// One round of the workload: a large block (sampled in either tier) allocated near the top of the
/// stack after the caches were emptied, recursion, allocation, a vector grown by pushes
/// (reallocations that move), kept blocks; returns the bytes kept.
fn workload(kept: &mut Vec<Vec<u8>>, seed: &mut u64, cold: &mut [u8]) -> u64 {
    evict(cold);
    drop(black_box(vec![1u8; 4 << 20]));
    let mut grown = Vec::new();
    for i in 0..2000u32 {
        grown.push(i);
    }
    drop(black_box(grown));
    deep(40, kept, 200, seed)
}

/// Whether a report's sites section counts samples on switched stacks.
fn switched(report: &frag::Report) -> u64 {
    report.sites.as_ref().map_or(0, |s| s.switched_stacks)
}

/// Runs the child helper `name` [`runs`] times; each must exit cleanly.
fn run_often(name: &str) {
    for run in 0..runs() {
        let out = common::run_child(name, &[]);
        assert!(out.contains("stack case done"), "run {run}: {out}");
    }
}

/// Ends a child's case: a report (which reads every site), and the line its parent looks for.
fn done(kept: Vec<Vec<u8>>, on_switched: bool) {
    let report = frag::report();
    if let Some(sites) = report.sites.as_ref().filter(|_| on_switched && frag::sites::unwinder() != frag::sites::Unwinder::None) {
        // Every sample was walked, and some on the switched stack (each case samples a 4 MiB block
        // there, always sampled).
        assert_eq!(sites.unproven_stacks, 0, "{report}");
        assert!(sites.switched_stacks > 0, "no sample on the switched stack:\n{report}");
    }
    drop(kept);
    println!("stack case done: {} samples on switched stacks", switched(&report));
}

#[test]
#[ignore = "child of stacker_segments"]
fn stacker_child() {
    common::child_only("stacker_segments");
    let (mut kept, mut seed, mut cold) = (Vec::new(), 7, vec![0u8; EVICT]);
    for _ in 0..20 {
        stacks::on_stacker(1 << 20, || workload(&mut kept, &mut seed, &mut cold));
    }
    done(kept, true);
}

/// `stacker::grow` segments (a fresh mapping each, its guard page below), allocating inside.
#[test]
fn stacker_segments() {
    run_often("stacker_child");
}

#[test]
#[ignore = "child of ucontext_fiber"]
fn fiber_child() {
    common::child_only("ucontext_fiber");
    let (mut kept, mut seed, mut cold) = (Vec::new(), 11, vec![0u8; EVICT]);
    for _ in 0..10 {
        stacks::on_fiber(256 * 1024, || {
            workload(&mut kept, &mut seed, &mut cold);
        });
    }
    done(kept, true);
}

/// A ucontext fiber whose stack has inaccessible pages directly below and above it.
#[test]
fn ucontext_fiber() {
    run_often("fiber_child");
}

#[test]
#[ignore = "child of corosensei_coroutine"]
fn coroutine_child() {
    common::child_only("corosensei_coroutine");
    let (mut kept, mut seed, mut cold) = (Vec::new(), 13, vec![0u8; EVICT]);
    stacks::on_coroutine(10, || {
        workload(&mut kept, &mut seed, &mut cold);
    });
    done(kept, true);
}

/// A real coroutine crate's stacks.
#[test]
fn corosensei_coroutine() {
    run_often("coroutine_child");
}

#[test]
#[ignore = "child of signal_handler_on_altstack"]
fn altstack_child() {
    common::child_only("signal_handler_on_altstack");
    let (mut kept, mut seed) = (Vec::new(), 17);
    let mut cold = vec![0u8; EVICT];
    stacks::in_handler_on_altstack(64 * 1024, 20, || {
        evict(&mut cold);
        drop(black_box(vec![1u8; 4 << 20]));
        kept.reserve(8);
        allocate_here(&mut kept, 8, &mut seed);
    });
    done(kept, true);
}

/// A signal handler that allocates, on a `sigaltstack` stack with guard pages around it.
#[test]
fn signal_handler_on_altstack() {
    run_often("altstack_child");
}

/// Unoptimised builds' frames: frag's allocation path takes about 20 KiB of stack there (the
/// given-stack case prints it), against about 3 KiB, the backend's and a sample's walk included, in a
/// release build, which CI also runs these cases in.
const UNOPTIMISED_EXTRA: usize = if cfg!(debug_assertions) { 48 * 1024 } else { 0 };

#[test]
#[ignore = "child of thread_with_the_smallest_stack"]
fn smallest_child() {
    common::child_only("thread_with_the_smallest_stack");
    let mut bytes = 0;
    let size = stacks::on_smallest_stack(UNOPTIMISED_EXTRA, || {
        let (mut kept, mut seed) = (Vec::new(), 19);
        bytes = deep(4, &mut kept, 400, &mut seed);
        drop(kept);
    });
    assert!(bytes > 0);
    println!("a thread of {size} bytes of stack allocated {bytes} bytes");
    done(Vec::new(), false);
}

/// A thread with glibc's smallest stack (`PTHREAD_STACK_MIN`, in a release build): frag's own
/// frames, a sample's walk included, fit in what is left of it.
#[test]
fn thread_with_the_smallest_stack() {
    run_often("smallest_child");
}

#[test]
#[ignore = "child of thread_on_a_given_stack"]
fn given_child() {
    common::child_only("thread_on_a_given_stack");
    let size = 256 * 1024;
    let on_given = |blocks| {
        stacks::on_given_stack(size, || {
            let (mut kept, mut seed) = (Vec::with_capacity(blocks), 23);
            deep(10, &mut kept, blocks, &mut seed);
        })
    };
    let (bare, allocating) = (on_given(0), on_given(400));
    assert!(bare > 0 && allocating < size, "{bare} {allocating}");
    println!(
        "stack used on a given stack: {bare} B without allocating, {allocating} B allocating \
         (the allocation path's part, the backend's and a sample's walk included: {} B)",
        allocating.saturating_sub(bare)
    );
    done(Vec::new(), false);
}

/// A thread on a stack the program gave it (`pthread_attr_setstack`), guard pages around it.
#[test]
fn thread_on_a_given_stack() {
    run_often("given_child");
}
