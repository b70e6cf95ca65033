//! The bookkeeping never allocates: `Tracked` runs inside a sentinel allocator that aborts the process
//! if it is entered again while one of its calls is in progress on the same thread. Any allocation
//! made by `Tracked` itself (claiming a shard, registering the backend, thread exit, ...) would do
//! exactly that. Only allocation-free std items are used inside the sentinel.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Sentinel<A>(A);

std::thread_local! {
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

fn enter() {
    if INSIDE.try_with(|i| i.replace(true)).unwrap_or(false) {
        // Re-entered: the wrapped allocator allocated from inside an allocation call.
        std::process::abort();
    }
}

fn leave() {
    let _ = INSIDE.try_with(|i| i.set(false));
}

// SAFETY: every call goes to `A` with the caller's arguments and returns its result; the sentinel
// around it touches only a thread-local flag.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Sentinel<A> {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        enter();
        // SAFETY: the caller's guarantees, passed on.
        let p = unsafe { self.0.alloc(l) };
        leave();
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        enter();
        // SAFETY: the caller's guarantees, passed on.
        let p = unsafe { self.0.alloc_zeroed(l) };
        leave();
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        enter();
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.0.dealloc(p, l) };
        leave();
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        enter();
        // SAFETY: the caller's guarantees, passed on.
        let q = unsafe { self.0.realloc(p, l, n) };
        leave();
        q
    }
}

#[global_allocator]
static A: Sentinel<frag::Tracked<System, frag::Exact>> = Sentinel(frag::Tracked::new(System));

struct AllocOnDrop;

impl Drop for AllocOnDrop {
    fn drop(&mut self) {
        std::hint::black_box(vec![1u8; 300]);
    }
}

std::thread_local! {
    static LATE: AllocOnDrop = const { AllocOnDrop };
}

#[test]
fn claims_exits_reallocs_and_reports_never_reenter() {
    for round in 0..20 {
        let handles: Vec<_> = (0..8)
            .map(|t| {
                std::thread::spawn(move || {
                    LATE.try_with(|_| {}).expect("thread-local alive");
                    let mut v: Vec<Vec<u8>> = Vec::new();
                    for i in 0..200 {
                        let mut b = vec![0u8; 1 + (i * 37 + t) % 5000];
                        b.resize(b.len() * 2 + 1, 1); // realloc
                        v.push(b);
                    }
                    let aligned = Layout::from_size_align(256, 4096).unwrap();
                    // SAFETY: valid layout, freed right away.
                    unsafe { System.dealloc(std::hint::black_box(System.alloc(aligned)), aligned) };
                    if round % 5 == 0 {
                        let r = frag::report();
                        assert!(r.tracked.allocations > 0);
                    }
                    v.len()
                })
            })
            .collect();
        for h in handles {
            assert_eq!(h.join().unwrap(), 200);
        }
    }
    let r = frag::report();
    assert_eq!(r.backend, Some(frag::backend::WrappedBackend::Known(frag::backend::Backend::System)));
    println!("{r}");
}
