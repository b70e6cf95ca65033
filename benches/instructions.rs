//! The workloads `scripts/instructions.py` counts under callgrind: the allocation path's cost in
//! instructions (and simulated L1 misses), bare backend against `Tracked`, deterministic.
//!
//! Every variant is one out-of-line function per `GlobalAlloc` method, called through a function
//! pointer, with the layout's size and alignment as run-time arguments: the shape of `__rust_alloc`
//! in a real program, where the wrapper is inlined into the allocator shim and the shim is a call.
//! A wrapper inlined into a benchmark loop would look free; this one cannot.
//!
//! ```text
//! instructions pair  <backend> <variant> <size> <iters>   malloc + free of `size` bytes, align 8
//! instructions churn <backend> <variant> <steps>          65,536 live blocks of 16..=1024 bytes
//!                                                         (random), one replaced at random per step
//! instructions handoff <backend> <variant> <size> <iters> allocated on one thread, freed on another
//! instructions poll <plain|scoped> <iters>                 a pending future polled, bare or wrapped
//!                                                         in a scope (`ScopeExt::in_scope`)
//! ```
//!
//! `<variant>` is `bare` (the backend alone), `sampled` (`Tracked`'s production tier), `exact`
//! (`Tracked<_, Exact>`) or, on jemalloc and glibc, `floor` (`SampleOnly` of
//! `examples/support/floor.rs`: the least a sampler that marks its samples does) and `floor-exact`
//! (`CountInline<SampleOnly<_>>`: that, plus a per-thread count and byte total per size class).
//!
//! ```text
//! ```
//!
//! Built with the feature `jemalloc-prof`, the process's global allocator is jemalloc, started
//! with its profiler on but not sampling, and `<variant>` may also be `in-jemalloc`: the bare
//! backend, sampled inside jemalloc (`frag::sample_in_jemalloc`, at the default mean).
//!
//! `FRAG_NO_STACKS=1` in the environment turns stack capture off (`frag::sites::set_stacks(false)`).
//!
//! Run under `cargo bench` (no workload named) it prints where the counting script is and exits.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;

use frag::{Exact, Tracked};

#[allow(dead_code)]
#[path = "../examples/support/floor.rs"]
mod floor;

/// One variant's `GlobalAlloc` methods as plain out-of-line functions.
struct Variant {
    alloc: unsafe fn(usize, usize) -> *mut u8,
    dealloc: unsafe fn(*mut u8, usize, usize),
}

/// Declares a module with the out-of-line entry points of `$value` (a `GlobalAlloc` static).
macro_rules! variant {
    ($name:ident, $ty:ty, $value:expr) => {
        mod $name {
            use super::*;
            static A: $ty = $value;
            #[inline(never)]
            pub(super) unsafe fn alloc(size: usize, align: usize) -> *mut u8 {
                // SAFETY: the workloads pass a non-zero size and a power-of-two alignment.
                unsafe { A.alloc(Layout::from_size_align_unchecked(size, align)) }
            }
            #[inline(never)]
            pub(super) unsafe fn dealloc(ptr: *mut u8, size: usize, align: usize) {
                // SAFETY: `ptr` came from `alloc` above with this size and alignment.
                unsafe { A.dealloc(ptr, Layout::from_size_align_unchecked(size, align)) }
            }
            pub(super) const VARIANT: Variant = Variant { alloc, dealloc };
        }
    };
}

variant!(system_bare, System, System);
variant!(system_floor, floor::SampleOnly<System>, floor::SampleOnly(System));
variant!(
    system_floor_exact,
    floor::CountInline<floor::SampleOnly<System>>,
    floor::CountInline(floor::SampleOnly(System))
);
variant!(system_sampled, Tracked<System>, Tracked::new(System));
variant!(system_exact, Tracked<System, Exact>, Tracked::new(System));
#[cfg(feature = "jemalloc")]
variant!(jemalloc_bare, tikv_jemallocator::Jemalloc, tikv_jemallocator::Jemalloc);
#[cfg(feature = "jemalloc")]
variant!(
    jemalloc_floor,
    floor::SampleOnly<tikv_jemallocator::Jemalloc>,
    floor::SampleOnly(tikv_jemallocator::Jemalloc)
);
#[cfg(feature = "jemalloc")]
variant!(
    jemalloc_floor_exact,
    floor::CountInline<floor::SampleOnly<tikv_jemallocator::Jemalloc>>,
    floor::CountInline(floor::SampleOnly(tikv_jemallocator::Jemalloc))
);
#[cfg(feature = "jemalloc")]
variant!(jemalloc_sampled, Tracked<tikv_jemallocator::Jemalloc>, Tracked::new(tikv_jemallocator::Jemalloc));
#[cfg(feature = "jemalloc")]
variant!(jemalloc_exact, Tracked<tikv_jemallocator::Jemalloc, Exact>, Tracked::new(tikv_jemallocator::Jemalloc));
#[cfg(feature = "mimalloc")]
variant!(mimalloc_bare, mimalloc::MiMalloc, mimalloc::MiMalloc);
#[cfg(feature = "mimalloc")]
variant!(mimalloc_sampled, Tracked<mimalloc::MiMalloc>, Tracked::new(mimalloc::MiMalloc));
#[cfg(feature = "mimalloc")]
variant!(mimalloc_exact, Tracked<mimalloc::MiMalloc, Exact>, Tracked::new(mimalloc::MiMalloc));
#[cfg(feature = "snmalloc")]
variant!(snmalloc_bare, snmalloc_rs::SnMalloc, snmalloc_rs::SnMalloc);
#[cfg(feature = "snmalloc")]
variant!(snmalloc_sampled, Tracked<snmalloc_rs::SnMalloc>, Tracked::new(snmalloc_rs::SnMalloc));
#[cfg(feature = "snmalloc")]
variant!(snmalloc_exact, Tracked<snmalloc_rs::SnMalloc, Exact>, Tracked::new(snmalloc_rs::SnMalloc));

#[cfg(feature = "jemalloc-prof")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[cfg(feature = "jemalloc-prof")]
frag::jemalloc_conf!(frag::tune::jemalloc::JemallocConfig::new().prof(true).prof_active(false));

fn variant(backend: &str, kind: &str) -> Option<Variant> {
    Some(match (backend, kind) {
        ("system", "bare") => system_bare::VARIANT,
        ("system", "sampled") => system_sampled::VARIANT,
        ("system", "floor") => system_floor::VARIANT,
        ("system", "floor-exact") => system_floor_exact::VARIANT,
        ("system", "exact") => system_exact::VARIANT,
        #[cfg(feature = "jemalloc")]
        ("jemalloc", "bare") => jemalloc_bare::VARIANT,
        #[cfg(feature = "jemalloc")]
        ("jemalloc", "sampled") => jemalloc_sampled::VARIANT,
        #[cfg(feature = "jemalloc-prof")]
        ("jemalloc", "in-jemalloc") => {
            frag::sample_in_jemalloc(frag::Sampling::DEFAULT).expect("jemalloc's profiler");
            jemalloc_bare::VARIANT
        }
        #[cfg(feature = "jemalloc")]
        ("jemalloc", "floor") => jemalloc_floor::VARIANT,
        #[cfg(feature = "jemalloc")]
        ("jemalloc", "floor-exact") => jemalloc_floor_exact::VARIANT,
        #[cfg(feature = "jemalloc")]
        ("jemalloc", "exact") => jemalloc_exact::VARIANT,
        #[cfg(feature = "mimalloc")]
        ("mimalloc", "bare") => mimalloc_bare::VARIANT,
        #[cfg(feature = "mimalloc")]
        ("mimalloc", "sampled") => mimalloc_sampled::VARIANT,
        #[cfg(feature = "mimalloc")]
        ("mimalloc", "exact") => mimalloc_exact::VARIANT,
        #[cfg(feature = "snmalloc")]
        ("snmalloc", "bare") => snmalloc_bare::VARIANT,
        #[cfg(feature = "snmalloc")]
        ("snmalloc", "sampled") => snmalloc_sampled::VARIANT,
        #[cfg(feature = "snmalloc")]
        ("snmalloc", "exact") => snmalloc_exact::VARIANT,
        _ => return None,
    })
}

/// xorshift64: deterministic, allocation-free.
fn next(rng: &mut u64) -> u64 {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    *rng
}

fn pair(v: &Variant, size: usize, iters: u64) {
    let (alloc, dealloc) = (black_box(v.alloc), black_box(v.dealloc));
    let size = black_box(size);
    for _ in 0..iters {
        // SAFETY: non-zero size, alignment 8; the block is freed with the same layout.
        unsafe {
            let p = alloc(size, 8);
            dealloc(black_box(p), size, 8);
        }
    }
}

const CHURN_LIVE: usize = 1 << 16;

fn churn(v: &Variant, steps: u64) {
    let (alloc, dealloc) = (black_box(v.alloc), black_box(v.dealloc));
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let size = |rng: &mut u64| 16 + (next(rng) % 1009) as usize;
    let mut live: Vec<(*mut u8, usize)> = (0..CHURN_LIVE)
        .map(|_| {
            let s = size(&mut rng);
            // SAFETY: non-zero size, alignment 8.
            (unsafe { alloc(s, 8) }, s)
        })
        .collect();
    for _ in 0..steps {
        let i = (next(&mut rng) as usize) % CHURN_LIVE;
        let s = size(&mut rng);
        let slot = &mut live[i];
        // SAFETY: each slot holds a live block with its size; it is freed once and replaced.
        unsafe {
            dealloc(slot.0, slot.1, 8);
            *slot = (alloc(s, 8), s);
        }
    }
    for (p, s) in live {
        // SAFETY: as above.
        unsafe { dealloc(p, s, 8) };
    }
}

fn handoff(v: &Variant, size: usize, iters: u64) {
    const BATCH: usize = 256;
    let (alloc, dealloc) = (black_box(v.alloc), black_box(v.dealloc));
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<usize>>(4);
    let (back_tx, back_rx) = std::sync::mpsc::channel::<Vec<usize>>();
    for _ in 0..4 {
        back_tx.send(Vec::with_capacity(BATCH)).ok();
    }
    std::thread::scope(|s| {
        s.spawn(move || {
            for mut batch in rx {
                for p in batch.drain(..) {
                    // SAFETY: allocated below with this size and alignment 8, freed once.
                    unsafe { dealloc(p as *mut u8, size, 8) };
                }
                if back_tx.send(batch).is_err() {
                    break;
                }
            }
        });
        let mut left = iters as usize;
        while left > 0 {
            let Ok(mut batch) = back_rx.recv() else { break };
            for _ in 0..left.min(BATCH) {
                // SAFETY: non-zero size, alignment 8.
                batch.push(unsafe { alloc(size, 8) } as usize);
            }
            left -= batch.len();
            if tx.send(batch).is_err() {
                break;
            }
        }
        drop(tx);
    });
}

/// A future that is never ready: each poll is the wrapper's cost and a call. Opaque to the
/// optimizer (as any real future's poll is), so that the scope's two thread-local writes around it
/// cannot be folded away.
struct Pending;

impl std::future::Future for Pending {
    type Output = ();
    #[inline(never)]
    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        black_box(cx);
        std::task::Poll::Pending
    }
}

/// Polls `future` `iters` times.
#[inline(never)]
fn poll_n<F: std::future::Future>(future: F, iters: u64) {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    for _ in 0..iters {
        let _ = black_box(future.as_mut().poll(&mut cx));
    }
}

fn main() {
    // The sampled variants without their stacks, to count what the unwinder adds to a sample.
    if std::env::var_os("FRAG_NO_STACKS").is_some() {
        frag::sites::set_stacks(false);
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
    let number = |i: usize| arg(i).parse::<u64>().unwrap_or(0);
    if arg(0) == "poll" {
        use frag::ScopeExt;
        let scope = frag::Scope::new("bench").expect("a name");
        match arg(1) {
            "scoped" => poll_n(Pending.in_scope(scope), number(2)),
            _ => poll_n(Pending, number(2)),
        }
        return;
    }
    let Some(v) = variant(arg(1), arg(2)) else {
        if args.iter().any(|a| a == "--bench") {
            println!(
                "instructions: run `python3 scripts/instructions.py` (callgrind) to count instructions per operation"
            );
            return;
        }
        eprintln!("usage: instructions pair|churn|handoff <backend> <bare|sampled|exact> [size] <iters>");
        std::process::exit(2);
    };
    match arg(0) {
        "pair" => pair(&v, number(3) as usize, number(4)),
        "churn" => churn(&v, number(3)),
        "handoff" => handoff(&v, number(3) as usize, number(4)),
        other => {
            eprintln!("unknown workload {other:?}");
            std::process::exit(2);
        }
    }
}
