//! Model-based property test: random sequences of `alloc`, `alloc_zeroed`, `realloc` and `dealloc`
//! (sizes up to 4 KiB, alignments up to 2 MiB) run on two or three threads that hand blocks to each
//! other; afterwards every figure the crate reports equals what a plain model of the sequence says:
//! totals, each size class (allocations, deallocations, live blocks, live bytes), each thread's row,
//! and, with every block sampled, each thread's local, remote and freed-elsewhere counts.
//!
//! The threads take turns in the order the sequence gives (a turn counter, no allocation), so the
//! model is exact while blocks still cross threads for real. The main thread reads the counters with
//! the allocation-free `totals()` / `size_classes()` and does nothing between its two readings but wait
//! on barriers; per-thread rows come from reports taken outside that window.

use std::alloc::{Layout, System, alloc, alloc_zeroed, dealloc, realloc};
use std::collections::HashMap;
use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use proptest::prelude::*;

#[global_allocator]
static A: frag::Tracked<System, frag::Exact> = frag::Tracked::with_sampling(System, frag::Sampling::EveryBlock);

/// One generated operation. Indices pick among the blocks live at that point (modulo their count).
#[derive(Clone, Debug)]
enum Op {
    Alloc { thread: usize, size: usize, align_log2: u32, zeroed: bool },
    Realloc { thread: usize, pick: usize, new_size: usize },
    Free { thread: usize, pick: usize },
}

/// A planned step on a concrete block.
#[derive(Clone, Copy, Debug)]
enum Step {
    Alloc { id: usize, layout: Layout, zeroed: bool },
    Realloc { id: usize, old: Layout, new_size: usize },
    Free { id: usize, layout: Layout },
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct ThreadModel {
    allocations: u64,
    deallocations: u64,
    reallocations: u64,
    allocated_bytes: u64,
    freed_bytes: u64,
    local_frees: u64,
    remote_frees: u64,
    freed_elsewhere: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct ClassModel {
    allocations: u64,
    deallocations: u64,
    live_blocks: i64,
    live_bytes: i64,
}

struct Plan {
    steps: Vec<(usize, Step)>,
    threads: Vec<ThreadModel>,
    classes: HashMap<usize, ClassModel>,
    blocks: usize,
}

/// The class of a request by the documented rule, computed here rather than asked of the crate:
/// one class up to 8 B, 8-byte steps up to 32 B, then four equal steps per power of two
/// `(2^k, 2^(k+1)]`, and one last class above 64 MiB.
fn class_index(size: usize) -> usize {
    let index = match size {
        0..=8 => 0,
        9..=32 => size.div_ceil(8) - 1,
        _ if size > 64 << 20 => 4 + 4 * (26 - 5),
        _ => {
            let k = (size - 1).ilog2() as usize; // size in (2^k, 2^(k+1)]
            let step = (1 << k) / 4;
            4 + 4 * (k - 5) + (size - (1 << k)).div_ceil(step) - 1
        }
    };
    assert_eq!(frag::report::NUM_CLASSES, 4 + 4 * (26 - 5) + 1, "the rule's class count");
    index
}

#[test]
fn the_class_rule_matches_the_documented_bounds() {
    let classes = frag::report::size_classes();
    for size in [0, 1, 8, 9, 16, 17, 32, 33, 40, 41, 64, 65, 80, 81, 1000, 1024, 1025, 4096, 32 << 10, (32 << 10) + 1]
        .into_iter()
        .chain([(64 << 20) - 1, 64 << 20, (64 << 20) + 1, usize::MAX])
    {
        let row = &classes[class_index(size)];
        assert!(row.contains(size as u64), "{size} B: the rule says {}..={:?}", row.min_size, row.max_size);
    }
}

fn enter(classes: &mut HashMap<usize, ClassModel>, size: usize) {
    let c = classes.entry(class_index(size)).or_default();
    c.allocations += 1;
    c.live_blocks += 1;
    c.live_bytes += size as i64;
}

fn leave(classes: &mut HashMap<usize, ClassModel>, size: usize) {
    let c = classes.entry(class_index(size)).or_default();
    c.deallocations += 1;
    c.live_blocks -= 1;
    c.live_bytes -= size as i64;
}

/// Turns generated operations into steps on concrete blocks and computes what the crate must report.
fn plan(ops: &[Op], thread_count: usize) -> Plan {
    // Live blocks: (id, layout, allocating thread).
    let mut live: Vec<(usize, Layout, usize)> = Vec::new();
    let mut steps = Vec::new();
    let mut threads = vec![ThreadModel::default(); thread_count];
    let mut classes: HashMap<usize, ClassModel> = HashMap::new();
    let mut next_id = 0;
    for op in ops {
        match *op {
            Op::Alloc { thread, size, align_log2, zeroed } => {
                let t = thread % thread_count;
                let layout = Layout::from_size_align(size, 1 << align_log2).expect("valid layout");
                steps.push((t, Step::Alloc { id: next_id, layout, zeroed }));
                live.push((next_id, layout, t));
                next_id += 1;
                threads[t].allocations += 1;
                threads[t].allocated_bytes += size as u64;
                enter(&mut classes, size);
            }
            Op::Realloc { thread, pick, new_size } if !live.is_empty() => {
                let t = thread % thread_count;
                let i = pick % live.len();
                let (id, old, origin) = live[i];
                steps.push((t, Step::Realloc { id, old, new_size }));
                // As the allocator sees it, a reallocation frees the old block on this thread and
                // hands out a new one, which this thread allocated.
                live[i] = (id, Layout::from_size_align(new_size, old.align()).expect("valid layout"), t);
                if origin == t {
                    threads[t].local_frees += 1;
                } else {
                    threads[t].remote_frees += 1;
                    threads[origin].freed_elsewhere += 1;
                }
                threads[t].reallocations += 1;
                threads[t].allocated_bytes += new_size as u64;
                threads[t].freed_bytes += old.size() as u64;
                leave(&mut classes, old.size());
                enter(&mut classes, new_size);
            }
            Op::Free { thread, pick } if !live.is_empty() => {
                let t = thread % thread_count;
                let (id, layout, origin) = live.swap_remove(pick % live.len());
                steps.push((t, Step::Free { id, layout }));
                threads[t].deallocations += 1;
                threads[t].freed_bytes += layout.size() as u64;
                if origin == t {
                    threads[t].local_frees += 1;
                } else {
                    threads[t].remote_frees += 1;
                    threads[origin].freed_elsewhere += 1;
                }
                leave(&mut classes, layout.size());
            }
            Op::Realloc { .. } | Op::Free { .. } => {} // nothing live to pick: skipped by the model too
        }
    }
    Plan { steps, threads, classes, blocks: next_id }
}

/// Runs `plan` on its threads, taking turns in plan order. Returns the live blocks left (pointer,
/// layout) for the caller to free once it has read the counters.
fn execute(plan: &Plan, thread_count: usize) -> Observed {
    let turn = AtomicUsize::new(0);
    let blocks: Vec<AtomicUsize> = (0..plan.blocks).map(|_| AtomicUsize::new(0)).collect();
    let tids: Vec<AtomicU64> = (0..thread_count).map(|_| AtomicU64::new(0)).collect();
    let gates: [Barrier; 4] = std::array::from_fn(|_| Barrier::new(thread_count + 1));
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..thread_count)
            .map(|me| {
                let (turn, blocks, tids, gates) = (&turn, &blocks, &tids, &gates);
                std::thread::Builder::new()
                    .name(format!("model-{me}"))
                    .spawn_scoped(s, move || {
                        // SAFETY: gettid has no arguments and cannot fail.
                        tids[me].store(unsafe { libc::syscall(libc::SYS_gettid) } as u64, Ordering::Relaxed);
                        gates[0].wait();
                        gates[1].wait();
                        for (i, (t, step)) in plan.steps.iter().enumerate() {
                            if *t != me {
                                continue;
                            }
                            let mut spins = 0u32;
                            while turn.load(Ordering::Acquire) != i {
                                spins += 1;
                                if spins < 64 { std::hint::spin_loop() } else { std::thread::yield_now() }
                            }
                            run(step, blocks);
                            turn.store(i + 1, Ordering::Release);
                        }
                        gates[2].wait();
                        gates[3].wait();
                    })
                    .expect("spawn")
            })
            .collect();
        gates[0].wait();
        let before_report = frag::report();
        let before = (frag::report::totals(), frag::report::size_classes());
        gates[1].wait();
        // The window: nothing but the workers' steps happens between the two readings.
        gates[2].wait();
        let after = (frag::report::totals(), frag::report::size_classes());
        let after_report = frag::report();
        let rows = tids
            .iter()
            .map(|tid| {
                let tid = tid.load(Ordering::Relaxed);
                let row = |r: &frag::Report| {
                    r.threads.iter().find(|t| t.tid == Some(tid) && t.alive).cloned().expect("worker row")
                };
                (row(&before_report), row(&after_report))
            })
            .collect();
        gates[3].wait();
        // Joined explicitly: the scope alone only waits for the closures, and a thread still tearing
        // down (freeing its own state) would disturb the next case's window.
        for w in workers {
            w.join().expect("worker");
        }
        Observed { before, after, rows, blocks: blocks.iter().map(|b| b.load(Ordering::Relaxed)).collect() }
    })
}

struct Observed {
    before: (frag::report::HeapCounts, [frag::report::SizeClassRow; frag::report::NUM_CLASSES]),
    after: (frag::report::HeapCounts, [frag::report::SizeClassRow; frag::report::NUM_CLASSES]),
    rows: Vec<(frag::report::ThreadRow, frag::report::ThreadRow)>,
    blocks: Vec<usize>,
}

fn run(step: &Step, blocks: &[AtomicUsize]) {
    match *step {
        Step::Alloc { id, layout, zeroed } => {
            // SAFETY: non-zero size, power-of-two alignment.
            let p = unsafe { if zeroed { alloc_zeroed(layout) } else { alloc(layout) } };
            assert!(!p.is_null(), "allocation of {layout:?} failed");
            if zeroed {
                // SAFETY: `p` points to `layout.size()` bytes just allocated.
                assert!(unsafe { std::slice::from_raw_parts(p, layout.size()) }.iter().all(|b| *b == 0));
            }
            blocks[id].store(p as usize, Ordering::Relaxed);
        }
        Step::Realloc { id, old, new_size } => {
            let p = blocks[id].load(Ordering::Relaxed) as *mut u8;
            // SAFETY: `p` is live with layout `old` (the plan tracks it); `new_size` is non-zero.
            let q = unsafe { realloc(p, old, new_size) };
            assert!(!q.is_null(), "reallocation to {new_size} failed");
            blocks[id].store(q as usize, Ordering::Relaxed);
        }
        Step::Free { id, layout } => {
            let p = blocks[id].swap(0, Ordering::Relaxed) as *mut u8;
            // SAFETY: `p` is live with `layout` and freed once.
            unsafe { dealloc(p, layout) };
        }
    }
}

fn check(ops: &[Op], thread_count: usize) -> Result<(), TestCaseError> {
    let plan = plan(ops, thread_count);
    let seen = execute(&plan, thread_count);

    // Totals.
    let (b, a) = (&seen.before.0, &seen.after.0);
    let sum = |f: fn(&ThreadModel) -> u64| plan.threads.iter().map(f).sum::<u64>();
    let live_blocks: i64 = plan.classes.values().map(|c| c.live_blocks).sum();
    let live_bytes: i64 = plan.classes.values().map(|c| c.live_bytes).sum();
    prop_assert_eq!(a.allocations - b.allocations, sum(|t| t.allocations), "allocations");
    prop_assert_eq!(a.deallocations - b.deallocations, sum(|t| t.deallocations), "deallocations");
    prop_assert_eq!(a.reallocations - b.reallocations, sum(|t| t.reallocations), "reallocations");
    prop_assert_eq!(a.live_blocks as i64 - b.live_blocks as i64, live_blocks, "live blocks");
    prop_assert_eq!(a.allocated_bytes as i64 - b.allocated_bytes as i64, live_bytes, "live bytes");

    // Every size class, empty ones included.
    for (i, (cb, ca)) in seen.before.1.iter().zip(&seen.after.1).enumerate() {
        let m = plan.classes.get(&i).copied().unwrap_or_default();
        let got = ClassModel {
            allocations: ca.allocations - cb.allocations,
            deallocations: ca.deallocations - cb.deallocations,
            live_blocks: ca.live_blocks as i64 - cb.live_blocks as i64,
            live_bytes: ca.live_bytes as i64 - cb.live_bytes as i64,
        };
        prop_assert_eq!(got, m, "class {} ({}..={:?})", i, ca.min_size, ca.max_size);
    }

    // Every worker's row, origin columns included (every block is sampled: exact).
    for (t, (rb, ra)) in seen.rows.iter().enumerate() {
        let got = ThreadModel {
            allocations: ra.allocations - rb.allocations,
            deallocations: ra.deallocations - rb.deallocations,
            reallocations: ra.reallocations - rb.reallocations,
            allocated_bytes: ra.allocated_bytes - rb.allocated_bytes,
            freed_bytes: ra.freed_bytes - rb.freed_bytes,
            local_frees: ra.local_frees - rb.local_frees,
            remote_frees: ra.remote_frees - rb.remote_frees,
            freed_elsewhere: ra.freed_elsewhere - rb.freed_elsewhere,
        };
        prop_assert_eq!(got, plan.threads[t], "thread model-{}", t);
    }

    // Free what the sequence left live (outside the measured window).
    let mut live: HashMap<usize, Layout> = HashMap::new();
    for (_, step) in &plan.steps {
        match *step {
            Step::Alloc { id, layout, .. } => {
                live.insert(id, layout);
            }
            Step::Realloc { id, old, new_size } => {
                live.insert(id, Layout::from_size_align(new_size, old.align()).expect("valid"));
            }
            Step::Free { id, .. } => {
                live.remove(&id);
            }
        }
    }
    for (id, layout) in live {
        // SAFETY: block `id` is still live with `layout`, and freed once here.
        unsafe { dealloc(seen.blocks[id] as *mut u8, layout) };
    }
    Ok(())
}

fn op() -> impl Strategy<Value = Op> {
    let size = prop_oneof![4 => 1usize..=256, 3 => 1usize..=4096];
    // Mostly the alignments Rust types use; sometimes page and huge-page alignment.
    let align = prop_oneof![6 => 0u32..=4, 2 => 5u32..=12, 1 => 13u32..=21];
    prop_oneof![
        4 => (0usize..3, size.clone(), align, any::<bool>())
            .prop_map(|(thread, size, align_log2, zeroed)| Op::Alloc { thread, size, align_log2, zeroed }),
        2 => (0usize..3, any::<usize>(), size).prop_map(|(thread, pick, new_size)| Op::Realloc { thread, pick, new_size }),
        3 => (0usize..3, any::<usize>()).prop_map(|(thread, pick)| Op::Free { thread, pick }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn report_equals_the_model(ops in prop::collection::vec(op(), 1..160), thread_count in 2usize..=3) {
        check(&ops, thread_count)?;
    }
}
