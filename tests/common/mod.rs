//! Test helpers shared by the integration tests (each test file installs its own global allocator).
#![allow(dead_code)]

pub mod churn;
pub mod example;
pub mod free_churn;
pub mod go;
pub mod limit;
pub mod otel;
#[cfg(feature = "jemalloc")]
pub mod pins;
pub mod png;
pub mod reclaim;
#[cfg(feature = "http")]
pub mod server;
#[cfg(all(feature = "serde", feature = "tokio"))]
pub mod service;
pub mod stacks;

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The README's backend where the build has it (jemalloc), else glibc's: for the tests whose cases hold
/// on any backend, run with the one a service most likely has.
#[cfg(feature = "jemalloc")]
pub type Backend = tikv_jemallocator::Jemalloc;
/// See [`Backend`].
#[cfg(feature = "jemalloc")]
pub const BACKEND: Backend = tikv_jemallocator::Jemalloc;
/// See [`Backend`].
#[cfg(not(feature = "jemalloc"))]
pub type Backend = std::alloc::System;
/// See [`Backend`].
#[cfg(not(feature = "jemalloc"))]
pub const BACKEND: Backend = std::alloc::System;

/// `System`, except that every request for `SIZE` bytes gets null (allocation failure on demand), on
/// `alloc`, `alloc_zeroed` and `realloc`.
pub struct Refusing<const SIZE: usize>;

// SAFETY: every call is System's with the caller's arguments, or null (a refusal `GlobalAlloc`
// allows).
unsafe impl<const SIZE: usize> GlobalAlloc for Refusing<SIZE> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's guarantees, passed on.
        if layout.size() == SIZE { std::ptr::null_mut() } else { unsafe { std::alloc::System.alloc(layout) } }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's guarantees, passed on.
        if layout.size() == SIZE { std::ptr::null_mut() } else { unsafe { std::alloc::System.alloc_zeroed(layout) } }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's guarantees, passed on.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size == SIZE {
            std::ptr::null_mut()
        } else {
            // SAFETY: the caller's guarantees, passed on.
            unsafe { std::alloc::System.realloc(ptr, layout, new_size) }
        }
    }
}

/// A backend wrapper that counts what it serves: the independent ground truth for `Tracked`'s
/// counters. Its own counters are global atomics (slow, but obviously right).
pub struct Counting<A>(pub A);

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static DEALLOCS: AtomicU64 = AtomicU64::new(0);
static REALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES_IN: AtomicU64 = AtomicU64::new(0);
static BYTES_OUT: AtomicU64 = AtomicU64::new(0);

/// What `Counting` saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Truth {
    pub allocations: u64,
    pub deallocations: u64,
    pub reallocations: u64,
    pub live_bytes: u64,
}

pub fn truth() -> Truth {
    Truth {
        allocations: ALLOCS.load(Relaxed),
        deallocations: DEALLOCS.load(Relaxed),
        reallocations: REALLOCS.load(Relaxed),
        live_bytes: BYTES_IN.load(Relaxed) - BYTES_OUT.load(Relaxed),
    }
}

/// Every byte `Counting` served since the process started (requested sizes, frees not taken off).
pub fn served_bytes() -> u64 {
    BYTES_IN.load(Relaxed)
}

/// Everything `Tracked` counted: the program's figures (`frag::report::totals()`) and frag's own
/// (`frag::report::own_totals()`), whose sum is what the backend served. Allocation-free.
pub fn all_totals() -> frag::report::HeapCounts {
    let (mut t, own) = (frag::report::totals(), frag::report::own_totals());
    t.allocations += own.allocations;
    t.deallocations += own.deallocations;
    t.reallocations += own.reallocations;
    t.live_blocks += own.live_blocks;
    t.allocated_bytes += own.allocated_bytes;
    t.usable_bytes += own.usable_bytes;
    t
}

/// Reads [`all_totals`] at a moment when nothing allocates (the truth is the same before and
/// after), and returns both.
pub fn quiescent_totals() -> (Truth, frag::report::HeapCounts) {
    loop {
        let before = truth();
        let totals = all_totals();
        if truth() == before {
            return (before, totals);
        }
        std::thread::yield_now();
    }
}

// SAFETY: every call goes to `A` with the caller's arguments and returns its result; the counting
// around it touches only atomics.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Counting<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's guarantees, passed on.
        let p = unsafe { self.0.alloc(layout) };
        if !p.is_null() {
            ALLOCS.fetch_add(1, Relaxed);
            BYTES_IN.fetch_add(layout.size() as u64, Relaxed);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's guarantees, passed on.
        let p = unsafe { self.0.alloc_zeroed(layout) };
        if !p.is_null() {
            ALLOCS.fetch_add(1, Relaxed);
            BYTES_IN.fetch_add(layout.size() as u64, Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.0.dealloc(ptr, layout) };
        DEALLOCS.fetch_add(1, Relaxed);
        BYTES_OUT.fetch_add(layout.size() as u64, Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's guarantees, passed on.
        let p = unsafe { self.0.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            REALLOCS.fetch_add(1, Relaxed);
            BYTES_OUT.fetch_add(layout.size() as u64, Relaxed);
            BYTES_IN.fetch_add(new_size as u64, Relaxed);
        }
        p
    }
}

/// Compares what `Tracked` counted (`counted`, calls the program made) with what the backend served
/// (`served`), both as differences over the same stretch. They are equal but for one exact relation:
/// a reallocation where a sampled block carries the mark is served as an allocation, a copy and a
/// free (each block keeps the layout it was allocated with), and a sample the side table has no room
/// for is allocated a second time without the mark; each adds one allocation and one free the program
/// did not make, and a move also takes one reallocation away. Those happen only to sampled blocks,
/// so they are few.
pub fn counted_as_served(counted: (u64, u64, u64), served: (u64, u64, u64)) -> Result<(), String> {
    let (ca, cd, cr) = counted;
    let (sa, sd, sr) = served;
    let moved = cr.checked_sub(sr).ok_or(format!("served {sr} reallocations, counted only {cr}"))?;
    let extra = sa.checked_sub(ca).ok_or(format!("served {sa} allocations, counted more: {ca}"))?;
    if sd.checked_sub(cd) != Some(extra) {
        return Err(format!(
            "allocations {ca} counted / {sa} served, frees {cd} / {sd}: not one free per extra allocation"
        ));
    }
    if extra < moved || extra > 16 + (ca + cr) / 50 {
        return Err(format!("{extra} extra allocations for {moved} moved reallocations among {ca} allocations"));
    }
    Ok(())
}

/// [`counted_as_served`] between two quiescent readings (`quiescent_totals`); returns what was
/// counted: (allocations, deallocations, reallocations).
pub fn counted_between(
    (truth0, t0): (Truth, frag::report::HeapCounts),
    (truth1, t1): (Truth, frag::report::HeapCounts),
) -> Result<(u64, u64, u64), String> {
    let served = (
        truth1.allocations - truth0.allocations,
        truth1.deallocations - truth0.deallocations,
        truth1.reallocations - truth0.reallocations,
    );
    let counted =
        (t1.allocations - t0.allocations, t1.deallocations - t0.deallocations, t1.reallocations - t0.reallocations);
    counted_as_served(counted, served).map_err(|e| format!("counted {counted:?}, served {served:?}: {e}"))?;
    Ok(counted)
}

/// Asserts that `Tracked`'s process-wide counters agree with what the backend served (see
/// [`counted_as_served`]): live bytes and blocks exactly.
pub fn assert_conserved() {
    let (truth, t) = quiescent_totals();
    let counted = (t.allocations, t.deallocations, t.reallocations);
    let served = (truth.allocations, truth.deallocations, truth.reallocations);
    if let Err(e) = counted_as_served(counted, served) {
        panic!("{e}");
    }
    assert_eq!(t.allocated_bytes, truth.live_bytes, "live requested bytes");
    assert_eq!(t.live_blocks, t.allocations - t.deallocations, "live blocks");
    assert_eq!(truth.allocations - truth.deallocations, t.live_blocks, "live blocks served");
}

/// The report row of the thread whose OS name is `name`.
pub fn row<'a>(report: &'a frag::Report, name: &str) -> &'a frag::report::ThreadRow {
    report
        .threads
        .iter()
        .find(|r| r.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no thread row named {name}: {report}"))
}

/// Runs `work` on a thread named `name` and hands `inspect` a report taken once the thread has
/// started (its start-up allocations are done) and one taken after `work` finished, while the thread
/// is still alive. Between the two the thread does nothing but `work` (barriers do not allocate), so
/// the difference of its rows is exactly what `work` did.
pub fn on_named_thread<T: Send>(
    name: &str,
    work: impl FnOnce() + Send,
    inspect: impl FnOnce(&frag::Report, &frag::Report) -> T,
) -> T {
    let steps: [std::sync::Barrier; 4] = std::array::from_fn(|_| std::sync::Barrier::new(2));
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn_scoped(s, || {
                // A thread's allocated bytes are exact to other threads as of its last reading of
                // frag's figures (or sampling event): it reads them before each report is taken.
                let _ = frag::report::totals();
                steps[0].wait();
                steps[1].wait();
                work();
                let _ = frag::report::totals();
                steps[2].wait();
                steps[3].wait();
            })
            .expect("spawn");
        steps[0].wait();
        let before = frag::report();
        steps[1].wait();
        steps[2].wait();
        let after = frag::report();
        // A failed assertion still lets the thread finish, so the failure is reported, not a hang.
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| inspect(&before, &after)));
        steps[3].wait();
        out.unwrap_or_else(|e| std::panic::resume_unwind(e))
    })
}

/// `after - before` of the row of thread `name`.
pub fn row_delta(before: &frag::Report, after: &frag::Report, name: &str) -> [u64; 5] {
    let (b, a) = (row(before, name), row(after, name));
    [
        a.allocations - b.allocations,
        a.deallocations - b.deallocations,
        a.reallocations - b.reallocations,
        a.allocated_bytes - b.allocated_bytes,
        a.freed_bytes - b.freed_bytes,
    ]
}

/// Request sizes that cover every size class up to `max`: every size up to 4 KiB, then a prime step.
pub fn sizes_up_to(max: usize) -> Vec<usize> {
    let mut v: Vec<usize> = (1..=4096).collect();
    v.extend((4097..=max).step_by(61));
    v.push(max);
    v
}

/// For each layout: allocates one block through the global allocator and checks that the tracked
/// usable bytes grew by exactly what `real` (the backend's own per-pointer answer) says, and shrink
/// back by the same amount when it is freed. Returns the layouts whose usable size differed, with
/// (tracked, real). Must run while no other thread allocates.
pub fn usable_mismatches(layouts: &[Layout], real: impl Fn(*mut u8) -> usize) -> Vec<(Layout, u64, u64)> {
    let mut out = Vec::with_capacity(layouts.len());
    for &layout in layouts {
        // Another thread (the test harness starting up) may allocate meanwhile: a measurement counts
        // only if exactly our one allocation and our one free happened between the readings.
        let mut tries = 0u32;
        let (grown, shrunk, truth) = loop {
            let t0 = frag::report::totals();
            // SAFETY: non-zero size, valid alignment; freed below with the same layout.
            let p = unsafe { std::alloc::alloc(layout) };
            assert!(!p.is_null());
            let t1 = frag::report::totals();
            let truth = real(p) as u64;
            // SAFETY: allocated above with `layout`.
            unsafe { std::alloc::dealloc(p, layout) };
            let t2 = frag::report::totals();
            // (A reallocation elsewhere changes usable bytes without changing either count.)
            let alone = t1.allocations == t0.allocations + 1
                && t1.deallocations == t0.deallocations
                && t2.allocations == t1.allocations
                && t2.deallocations == t1.deallocations + 1
                && t2.reallocations == t0.reallocations
                && t1.live_blocks == t0.live_blocks + 1
                && t2.live_blocks == t0.live_blocks
                && t1.allocated_bytes == t0.allocated_bytes + layout.size() as u64
                && t2.allocated_bytes == t0.allocated_bytes;
            // `totals()` reads per-thread counters one by one, so a reading taken while another thread
            // allocates can be torn (its counts from before, its bytes from after): every figure has
            // to show exactly our block, and the differences may not even be positive otherwise.
            let grown = t1.usable_bytes.checked_sub(t0.usable_bytes);
            let shrunk = t1.usable_bytes.checked_sub(t2.usable_bytes);
            if let (true, Some(grown), Some(shrunk)) = (alone, grown, shrunk) {
                break (grown, shrunk, truth);
            }
            tries += 1;
            assert!(tries < 10_000, "{layout:?}: never measured alone ({t0:?}, {t1:?}, {t2:?})");
            std::thread::yield_now();
        };
        assert_eq!(grown, shrunk, "a block's usable size is the same at allocation and at free: {layout:?}");
        if grown != truth && out.len() < out.capacity() {
            out.push((layout, grown, truth));
        }
    }
    out
}

/// Layouts with over-alignment, which backends serve through other paths.
pub fn aligned_layouts() -> Vec<Layout> {
    [(24, 32), (100, 64), (5000, 4096), (1, 256), (70_000, 128), (3 << 20, 1 << 21)]
        .iter()
        .map(|&(s, a)| Layout::from_size_align(s, a).unwrap())
        .collect()
}

/// Every size up to `max` (see `sizes_up_to`) at the alignments Rust types use by default.
pub fn plain_layouts(max: usize) -> Vec<Layout> {
    let mut v = Vec::new();
    for align in [1, 8, 16] {
        v.extend(sizes_up_to(max).into_iter().map(|s| Layout::from_size_align(s, align).unwrap()));
    }
    v
}

/// Asserts that tracked usable sizes equal the backend's own per-block answer (`real`) for every size
/// class up to 64 KiB at alignments 1, 8 and 16, for the `extra` sizes (alignment 8), and for
/// over-aligned layouts.
pub fn assert_usable_exact(backend: &str, extra: &[usize], real: impl Fn(*mut u8) -> usize) {
    let mut layouts = plain_layouts(64 << 10);
    layouts.extend(extra.iter().map(|&s| Layout::from_size_align(s, 8).unwrap()));
    layouts.extend(aligned_layouts());
    let bad = usable_mismatches(&layouts, real);
    assert!(
        bad.is_empty(),
        "usable size differs from {backend}'s for {} layouts: {:?}",
        bad.len(),
        &bad[..bad.len().min(10)]
    );
}

/// The size-class row holding requests of `size` bytes.
pub fn class_row(report: &frag::Report, size: u64) -> Option<&frag::report::SizeClassRow> {
    report.size_classes.iter().find(|c| c.min_size <= size && c.max_size.is_none_or(|m| size <= m))
}

/// The OS thread id of the (live or exited) thread called `name` in `report`.
pub fn tid_of(report: &frag::Report, name: &str) -> Option<u64> {
    report.threads.iter().find(|r| r.name.as_deref() == Some(name)).and_then(|r| r.tid)
}

/// The thread row of the thread called `name`.
pub fn thread_row<'a>(report: &'a frag::Report, name: &str) -> Option<&'a frag::report::ThreadRow> {
    report.threads.iter().find(|r| r.name.as_deref() == Some(name))
}

/// Estimated `(frees, cross-thread frees)` in the origin section.
pub fn origin_counts(report: &frag::Report) -> (u64, u64) {
    report.origin.as_ref().map_or((0, 0), |o| (o.frees, o.cross_thread_frees))
}

/// Runs `f` on a new thread called `name` and returns its result.
pub fn on_thread<T: Send + 'static>(name: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new().name(name.into()).spawn(f).expect("spawn").join().expect("join")
}

/// A raw block of `size` bytes (alignment 8), as an address that can cross threads.
pub fn raw_alloc(size: usize) -> usize {
    let layout = Layout::from_size_align(size, 8).expect("layout");
    // SAFETY: non-zero size, valid alignment.
    let p = unsafe { std::alloc::alloc(layout) };
    assert!(!p.is_null());
    p as usize
}

/// xorshift64: the tests' deterministic stream of sizes and choices.
pub fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// Blocks from `raw_alloc` that live a little while: each new one takes the place of the oldest,
/// which is freed.
pub struct Ring(Vec<(usize, usize)>, usize);

impl Ring {
    /// A ring of `len` places, empty.
    pub fn new(len: usize) -> Self {
        Self(vec![(0, 0); len], 0)
    }

    /// Keeps `block` of `size` bytes, freeing the oldest block when the ring is full.
    pub fn keep(&mut self, block: usize, size: usize) {
        let at = self.1 % self.0.len();
        self.1 += 1;
        let old = std::mem::replace(&mut self.0[at], (block, size));
        if old.0 != 0 {
            raw_free(old.0, old.1);
        }
    }

    /// Frees every block still kept.
    pub fn free_all(self) {
        self.0.into_iter().filter(|b| b.0 != 0).for_each(|(b, s)| raw_free(b, s));
    }
}

/// Frees a block from `raw_alloc`.
pub fn raw_free(addr: usize, size: usize) {
    let layout = Layout::from_size_align(size, 8).expect("layout");
    // SAFETY: `addr` came from `raw_alloc(size)` and is freed once.
    unsafe { std::alloc::dealloc(addr as *mut u8, layout) };
}

/// The process's resident set in bytes, from `/proc/self/statm` (independent of the crate's reader).
pub fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).expect("statm resident");
    // SAFETY: sysconf has no preconditions.
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64
}

/// Whether this process is a child started by [`run_child`].
pub fn is_child() -> bool {
    std::env::var_os("FRAG_TEST_CHILD").is_some()
}

/// Opens an `#[ignore]`d child helper: it tests nothing unless its parent test started it with the
/// environment it needs, so run outside one it fails rather than passing empty.
pub fn child_only(parent: &str) {
    assert!(is_child(), "a child-process helper: run `{parent}`, which starts it with its environment");
}

/// Runs the test `name` of this test binary in a new process with `env` set (environment variables
/// read at start-up, such as allocator options, can only be tested this way); panics with its
/// output if it fails, else returns that output (stdout, then stderr).
pub fn run_child(name: &str, env: &[(&str, &str)]) -> String {
    run_child_in(name, env, &[])
}

/// [`run_child`] with the variables `removed` taken out of the child's environment.
pub fn run_child_in(name: &str, env: &[(&str, &str)], removed: &[&str]) -> String {
    let exe = std::env::current_exe().expect("test binary path");
    let mut cmd = std::process::Command::new(exe);
    for k in removed {
        cmd.env_remove(k);
    }
    // Child helpers are `#[ignore]`d so that they do not count as tests of their own.
    cmd.args(["--exact", name, "--include-ignored", "--nocapture", "--test-threads=1"]).env("FRAG_TEST_CHILD", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("start the child test");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "child test {name} failed:\n{text}");
    assert!(text.contains("1 passed"), "child test {name} did not run:\n{text}");
    text
}

/// Runs `f` with a `tracing` subscriber that records every event as text; returns the text.
pub fn capture_tracing<T>(f: impl FnOnce() -> T) -> (T, String) {
    #[derive(Clone, Default)]
    struct Buffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Buffer {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buffer = Buffer::default();
    let sink = buffer.clone();
    let subscriber = tracing_subscriber::fmt().with_writer(move || sink.clone()).with_ansi(false).finish();
    let value = tracing::subscriber::with_default(subscriber, f);
    let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
    (value, text)
}

/// `n` divided by `FRAG_TEST_SCALE` (default 1, at least 1): CI's memcheck run sets it to shrink the
/// heaviest loops, which run 20-50 times slower under valgrind. A loop whose check bounds an estimate
/// by its standard errors is not shrunk below hundreds of samples: with a few, one sample of a small
/// block moves the estimate by several standard errors, and a correct estimator fails.
pub fn scaled(n: usize) -> usize {
    let divisor = std::env::var("FRAG_TEST_SCALE").ok().and_then(|v| v.parse::<usize>().ok()).unwrap_or(1);
    (n / divisor.max(1)).max(1)
}

/// Waits until every other thread of this process is asleep (state `S` in `/proc/self/task/*/stat`),
/// as the test harness's main thread is once it has started a test's thread and waits for it: its
/// bookkeeping right after the spawn (a few allocations, served from its own thread cache) would
/// otherwise land inside a counting window that opens at the test's first lines. Panics after 30 s.
pub fn others_asleep() {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() }.to_string();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let awake: Vec<String> = std::fs::read_dir("/proc/self/task")
            .expect("/proc/self/task")
            .flatten()
            .map(|t| t.file_name().to_string_lossy().into_owned())
            .filter(|t| *t != tid)
            .filter(|t| {
                let stat = std::fs::read_to_string(format!("/proc/self/task/{t}/stat")).unwrap_or_default();
                // The state follows the command's closing parenthesis (the command may hold spaces).
                stat.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('S'))
            })
            .collect();
        if awake.is_empty() {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "threads still awake after 30 s: {awake:?}");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Whether the suite runs under valgrind's memcheck (`.ci/run` sets `FRAG_MEMCHECK`). Its allocator
/// replaces glibc's and keeps freed blocks in a quarantine, so resident-memory bounds do not apply.
pub fn under_memcheck() -> bool {
    std::env::var_os("FRAG_MEMCHECK").is_some()
}

/// Every estimate of `report` is at most the exact count it is part of: per thread, local and
/// remote frees against the blocks the thread freed, remote bytes against the bytes it freed; in the
/// origin section, all estimated frees against every block freed.
pub fn assert_estimates_within_exact(report: &frag::Report) {
    for r in &report.threads {
        let freed = r.deallocations + r.reallocations;
        assert!(r.local_frees + r.remote_frees <= freed, "estimates above the exact count: {r:?}");
        assert!(r.remote_freed_bytes <= r.freed_bytes, "{r:?}");
    }
    if let Some(o) = &report.origin {
        // Kish's effective sample size never exceeds the samples it is computed from.
        let row_samples: u64 = report.threads.iter().map(|r| r.free_samples).sum();
        assert!(row_samples <= o.sampled_frees + report.threads.len() as u64, "{row_samples} of {}", o.sampled_frees);
        let t = &report.tracked;
        assert!(o.frees <= t.deallocations + t.reallocations, "{} estimated frees of {t:?}", o.frees);
        for p in &o.pairs {
            if let Some(r) = report.threads.iter().find(|r| r.tid == Some(p.free_tid)) {
                assert!(p.frees <= r.deallocations + r.reallocations, "pair {p:?} above its freer {r:?}");
                assert!(p.bytes <= r.freed_bytes, "pair {p:?} above its freer {r:?}");
            }
        }
        assert!(o.cross_thread_frees <= o.frees);
    }
}

/// A report whose allocation sites have named leaf frames.
pub fn symbolized_report() -> frag::Report {
    let mut report = frag::report();
    report.sites.as_mut().expect("a sites section").symbolize();
    report
}

/// Whether a site row's frame (`function (file:line)`) is `function` (unqualified) or a closure in
/// it: full paths in builds with full debug information, the bare name for functions that builds
/// with line tables only name by their DWARF name.
pub fn frame_is(frame: &str, function: &str) -> bool {
    let name = frame.split(" (").next().unwrap_or(frame);
    name.split("::").any(|segment| segment == function)
}

/// Declares allocation sites: functions (never inlined, so each is its own site) that allocate
/// `bytes / size` blocks of `size` bytes into a vector sized up front, and return them with the bytes
/// the site holds (the vector's own block included).
#[macro_export]
macro_rules! sites {
    ($($name:ident),+ $(,)?) => {$(
        #[inline(never)]
        fn $name(bytes: usize, size: usize) -> (Vec<Box<[u8]>>, u64) {
            let n = bytes / size;
            let mut v = Vec::with_capacity(n);
            for i in 0..n {
                v.push(vec![i as u8; size].into_boxed_slice());
            }
            (std::hint::black_box(v), (n * size + n * size_of::<Box<[u8]>>()) as u64)
        }
    )+};
}
