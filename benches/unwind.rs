//! What one stack costs, by method, at 8, 32 and 64 frames, warm and cold:
//! - `frag`: this build's unwinder (`frag::unwinder()`: the unwind tables in a plain build, the
//!   frame-pointer walk in a build with `RUSTFLAGS="-C force-frame-pointers=yes"`), exactly as a
//!   sampled allocation captures its stack;
//! - `backtrace`: the `backtrace` crate's `trace_unsynchronized` (libgcc's `_Unwind_Backtrace` over
//!   `.eh_frame`, what jemalloc's profiler uses), collecting the same return addresses.
//!
//! Warm: the same capture repeated (criterion). Cold: 301 captures, each after writing 64 MiB
//! (twice the last-level cache) so that the rows, the stack and the code start out of cache; the
//! median is printed. Run it twice, with and without the flag, for both unwinders of frag.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};

const DEPTHS: [usize; 3] = [8, 32, 64];

/// Runs `f` with `frames` frames of this file's own below it (counting the callers of `main`).
#[inline(never)]
fn at_depth<R>(depth: usize, f: &mut dyn FnMut() -> R) -> R {
    if depth == 0 { f() } else { black_box(at_depth(depth - 1, f)) }
}

#[inline(never)]
fn frag_stack(out: &mut [usize; 64]) -> usize {
    frag::capture_for_bench(out)
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

type Method = fn(&mut [usize; 64]) -> usize;

/// The recursion that gives a stack of `frames` frames in all (the callers of `main` included).
fn recursion_for(frames: usize, method: Method) -> usize {
    let mut out = [0; 64];
    let base = method(&mut out);
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

fn main() {
    let mut c = Criterion::default()
        .configure_from_args()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20);
    let frag_name = format!("frag_{}", frag::unwinder().name().replace(' ', "_"));
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
    for (name, method) in methods {
        for frames in DEPTHS {
            let (median, got) = cold_median(method, recursion_for(frames, method));
            println!("unwind_cold/{name}/{frames}: median {:.2} µs ({got} frames)", median.as_secs_f64() * 1e6);
        }
    }
    if let Some(t) = frag::unwind_tables() {
        println!("unwind tables: {t:?}");
    }
}
