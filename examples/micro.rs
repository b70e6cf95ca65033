use std::alloc::{GlobalAlloc, Layout};
use std::hint::black_box;
use std::time::Instant;
static T: frag::Tracked<tikv_jemallocator::Jemalloc> = frag::Tracked::new(tikv_jemallocator::Jemalloc);
static B: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
#[inline(always)]
fn run<A: GlobalAlloc>(a: &A, size: usize, n: u64) -> f64 {
    let l = Layout::from_size_align(size, 8).unwrap();
    let t = Instant::now();
    for _ in 0..n { unsafe { let p = a.alloc(l); black_box(p); a.dealloc(p, l); } }
    t.elapsed().as_nanos() as f64 / n as f64
}
fn main() {
    one::<16>(); one::<64>(); one::<1024>(); one::<32768>();
}
#[inline(never)]
fn one<const S: usize>() {
    let size = S;
    {
        let (mut b, mut t) = (f64::MAX, f64::MAX);
        for _ in 0..60 { b = b.min(run(&B, size, 1_000_000)); t = t.min(run(&T, size, 1_000_000)); }
        println!("{size:>6}: bare {b:.2} tracked {t:.2} ratio {:.3} diff {:+.2}", t / b, t - b);
    }
}
