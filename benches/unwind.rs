//! What one stack costs, by method, at 8, 32 and 64 frames, warm and cold:
//! - `frag`: this build's unwinder (`frag::sites::unwinder()`: the unwind tables in a plain build, the
//!   frame-pointer walk in a build with `RUSTFLAGS="-C force-frame-pointers=yes"`), exactly as a
//!   sampled allocation captures its stack;
//! - `backtrace`: the `backtrace` crate's `trace_unsynchronized` (libgcc's `_Unwind_Backtrace` over
//!   `.eh_frame`, what jemalloc's profiler uses), collecting the same return addresses.
//!
//! Warm: the same capture repeated (criterion). Cold: 301 captures, each after writing 64 MiB
//! (twice the last-level cache) so that the rows, the stack and the code start out of cache; the
//! median is printed, beside the floor (the same measurement of a capture that walks nothing) and
//! the latency of one load that depends on the one before, from memory (a walk's unit of cold cost:
//! each frame's rule and return address depend on the frame below). Run it twice, with and without
//! the flag, for both unwinders of frag.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};

const DEPTHS: [usize; 3] = [8, 32, 64];

/// Runs `f` with `depth` frames of this file's own below it, each a different function (with its own
/// code and unwind rows, as in a real stack), cycling through 64 of them.
fn at_depth<R>(depth: usize, f: &mut dyn FnMut() -> R) -> R {
    let mut out = None;
    level_00(depth, &mut || out = Some(f()));
    out.expect("the innermost level runs f")
}

type Inner<'a> = &'a mut dyn FnMut();

macro_rules! levels {
    ($($name:ident => $next:ident,)*) => {$(
        #[inline(never)]
        fn $name(depth: usize, f: Inner<'_>) {
            if depth == 0 { f() } else { $next(depth - 1, f) }
            black_box(depth);
        }
    )*};
}

levels! {
    level_00 => level_01,
    level_01 => level_02,
    level_02 => level_03,
    level_03 => level_04,
    level_04 => level_05,
    level_05 => level_06,
    level_06 => level_07,
    level_07 => level_08,
    level_08 => level_09,
    level_09 => level_10,
    level_10 => level_11,
    level_11 => level_12,
    level_12 => level_13,
    level_13 => level_14,
    level_14 => level_15,
    level_15 => level_16,
    level_16 => level_17,
    level_17 => level_18,
    level_18 => level_19,
    level_19 => level_20,
    level_20 => level_21,
    level_21 => level_22,
    level_22 => level_23,
    level_23 => level_24,
    level_24 => level_25,
    level_25 => level_26,
    level_26 => level_27,
    level_27 => level_28,
    level_28 => level_29,
    level_29 => level_30,
    level_30 => level_31,
    level_31 => level_32,
    level_32 => level_33,
    level_33 => level_34,
    level_34 => level_35,
    level_35 => level_36,
    level_36 => level_37,
    level_37 => level_38,
    level_38 => level_39,
    level_39 => level_40,
    level_40 => level_41,
    level_41 => level_42,
    level_42 => level_43,
    level_43 => level_44,
    level_44 => level_45,
    level_45 => level_46,
    level_46 => level_47,
    level_47 => level_48,
    level_48 => level_49,
    level_49 => level_50,
    level_50 => level_51,
    level_51 => level_52,
    level_52 => level_53,
    level_53 => level_54,
    level_54 => level_55,
    level_55 => level_56,
    level_56 => level_57,
    level_57 => level_58,
    level_58 => level_59,
    level_59 => level_60,
    level_60 => level_61,
    level_61 => level_62,
    level_62 => level_63,
    level_63 => level_00,
}

#[inline(never)]
fn frag_stack(out: &mut [usize; 64]) -> usize {
    frag::sites::capture_for_bench(out)
}

#[inline(never)]
fn libgcc_stack(out: &mut [usize; 64]) -> usize {
    let mut n = 0;
    // SAFETY: nothing else unwinds this thread meanwhile (the bench thread is the only one).
    unsafe {
        backtrace::trace_unsynchronized(|frame| {
            out[n] = frame.ip() as usize;
            n += 1;
            n < out.len()
        })
    };
    n
}

/// No unwinding at all: what the cold measurement costs by itself (the timer, a cold call).
#[inline(never)]
fn no_stack(out: &mut [usize; 64]) -> usize {
    black_box(out);
    0
}

type Method = fn(&mut [usize; 64]) -> usize;

/// The recursion that gives a stack of `frames` frames in all (the callers of `main` included).
fn recursion_for(frames: usize, method: Method) -> usize {
    let base = at_depth(0, &mut || method(&mut [0; 64]));
    frames.saturating_sub(base)
}

fn cold_median(method: Method, depth: usize) -> (Duration, usize) {
    let mut junk = vec![0u8; 64 << 20];
    let mut times = Vec::with_capacity(301);
    let mut frames = 0;
    for round in 0..301u32 {
        for chunk in junk.chunks_mut(64) {
            chunk[0] = chunk[0].wrapping_add(round as u8);
        }
        black_box(&junk);
        at_depth(depth, &mut || {
            let mut out = [0; 64];
            let start = Instant::now();
            frames = black_box(method(&mut out));
            times.push(start.elapsed());
        });
    }
    times.sort();
    (times[times.len() / 2], frames)
}

/// Nanoseconds per load in a chase of pointers through 64 MiB in random order (each load's address is
/// the previous load's value): the latency of a dependent load that misses every cache.
fn dependent_load_ns() -> f64 {
    const LINE_WORDS: usize = 8;
    let lines = (64 << 20) / 64;
    let mut order: Vec<usize> = (0..lines).collect();
    // A fixed xorshift shuffle: the same order every run.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in (1..lines).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % (i as u64 + 1)) as usize);
    }
    let mut next = vec![0usize; lines * LINE_WORDS];
    for w in order.windows(2) {
        next[w[0] * LINE_WORDS] = w[1] * LINE_WORDS;
    }
    next[order[lines - 1] * LINE_WORDS] = order[0] * LINE_WORDS;
    let steps = 2_000_000;
    let mut at = order[0] * LINE_WORDS;
    let start = Instant::now();
    for _ in 0..steps {
        at = next[at];
    }
    black_box(at);
    start.elapsed().as_secs_f64() * 1e9 / steps as f64
}

fn main() {
    let mut c = Criterion::default()
        .configure_from_args()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20);
    let frag_name = format!("frag_{}", frag::sites::unwinder().name().replace(' ', "_"));
    let methods: [(&str, Method); 2] = [(&frag_name, frag_stack), ("backtrace", libgcc_stack)];
    let mut group = c.benchmark_group("unwind_warm");
    for (name, method) in methods {
        for frames in DEPTHS {
            let depth = recursion_for(frames, method);
            group.bench_with_input(BenchmarkId::new(name, frames), &depth, |b, &d| {
                at_depth(d, &mut || {
                    b.iter(|| {
                        let mut out = [0; 64];
                        black_box(method(&mut out))
                    })
                })
            });
        }
    }
    group.finish();
    println!("dependent load from memory: {:.0} ns", dependent_load_ns());
    let (floor, _) = cold_median(no_stack, recursion_for(32, frag_stack));
    println!("unwind_cold/floor: median {:.2} µs (the timer and a call, nothing walked)", floor.as_secs_f64() * 1e6);
    for (name, method) in methods {
        for frames in DEPTHS {
            let (median, got) = cold_median(method, recursion_for(frames, method));
            println!("unwind_cold/{name}/{frames}: median {:.2} µs ({got} frames)", median.as_secs_f64() * 1e6);
        }
    }
    if let Some(t) = frag::sites::unwind_tables() {
        println!("unwind tables: {t:?}");
    }
}
