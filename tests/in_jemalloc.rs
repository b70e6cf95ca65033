//! Sampling inside jemalloc (`frag::sample_in_jemalloc`): the global allocator is the bare
//! `tikv_jemallocator::Jemalloc`, jemalloc's profiler samples, and frag's hooks walk the stacks and
//! keep the samples. Checked against what the test allocated, and against jemalloc's own heap
//! profile of the same samples (`prof.dump`), which estimates each stack's bytes by itself.

#![cfg(feature = "jemalloc-prof")]

mod common;

use std::collections::HashMap;

use common::symbolized_report;
use frag::tune::jemalloc::JemallocConfig;

#[global_allocator]
static A: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

frag::jemalloc_conf!(JemallocConfig::new().prof(true).prof_active(false));

sites!(site_a, site_b, site_c);

const MEAN: u64 = 64 << 10;

/// Starts sampling inside jemalloc once for the whole file, at 64 KiB, and on the calling thread
/// from now on.
fn start() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let got = frag::sample_in_jemalloc(frag::Sampling::MeanBytes(MEAN)).expect("jemalloc's profiler");
        assert_eq!(got, frag::Sampling::MeanBytes(MEAN));
    });
    // A thread's next sample was drawn at jemalloc's start-up mean (512 KiB): one block of 64 times
    // that passes it but for a chance of e^-64, so the thread's samples after it are at `MEAN`.
    drop(std::hint::black_box(Vec::<u8>::with_capacity(64 << 19)));
}

#[test]
fn the_mean_is_jemallocs_and_set_sampling_says_where_to_change_it() {
    start();
    assert!(frag::sampling_in_jemalloc());
    assert_eq!(frag::sampling(), frag::Sampling::MeanBytes(MEAN));
    // SAFETY: `prof.lg_sample` is a `size_t`, `prof.active` a `bool`.
    assert_eq!(unsafe { tikv_jemalloc_ctl::raw::read::<usize>(b"prof.lg_sample\0") }.unwrap(), 16);
    // SAFETY: as above.
    assert!(unsafe { tikv_jemalloc_ctl::raw::read::<bool>(b"prof.active\0") }.unwrap());
    assert_eq!(frag::set_sampling(frag::Sampling::MeanBytes(1 << 20)), Err(frag::SamplingError::InJemalloc));
    assert_eq!(frag::sampling(), frag::Sampling::MeanBytes(MEAN));
}

/// The site rows whose leaf frame is `function`.
fn rows<'a>(report: &'a frag::Report, function: &str) -> Vec<&'a frag::report::SiteRow> {
    let sites = report.sites.as_ref().expect("a sites section");
    sites.top.iter().filter(|r| r.frames.first().is_some_and(|f| common::frame_is(f, function))).collect()
}

fn in_use(report: &frag::Report, function: &str) -> u64 {
    rows(report, function).iter().map(|r| r.inuse_bytes).sum()
}

/// jemalloc's own heap profile, dumped now: each stack (return addresses, leaf first) with its
/// estimate of the bytes in use. The dump holds what pprof's unsampling expects (`heap_v2/R`: a
/// stack's sampled bytes `s` in `c` blocks); the estimate is `s / (1 - exp(-(s / c) / R))`, which
/// jemalloc computed from each sample's usable size (`prof_unbias`) and `jeprof` or `pprof` recover.
fn jemalloc_profile() -> HashMap<Vec<u64>, f64> {
    let path = std::env::temp_dir().join(format!("frag-in-jemalloc-{}.heap", std::process::id()));
    let c_path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: `prof.dump` takes a `const char *`, a NUL-terminated path that outlives the call.
    unsafe { tikv_jemalloc_ctl::raw::write::<*const std::ffi::c_char>(b"prof.dump\0", c_path.as_ptr()) }
        .expect("prof.dump");
    let text = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let mut out = HashMap::new();
    let mut stack = None;
    let mut rate = 0.0;
    for line in text.lines() {
        if let Some(r) = line.strip_prefix("heap_v2/") {
            rate = r.trim().parse::<f64>().unwrap();
        } else if let Some(addrs) = line.strip_prefix("@ ") {
            stack =
                Some(addrs.split(' ').map(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).unwrap()).collect());
        } else if let (Some(s), Some(counts)) = (stack.take(), line.strip_prefix("  t*: ")) {
            // `curobjs: curbytes [accumobjs: accumbytes]`
            let mut fields = counts.split(' ');
            let blocks: f64 = fields.next().unwrap().trim_end_matches(':').parse().unwrap();
            let bytes: f64 = fields.next().unwrap().parse().unwrap();
            let estimate = if blocks == 0.0 { 0.0 } else { bytes / -(-(bytes / blocks) / rate).exp_m1() };
            out.insert(s, estimate);
        }
    }
    out
}

#[test]
fn sites_are_the_allocating_functions_with_their_bytes() {
    start();
    let (a, a_truth) = site_a(48 << 20, 1024);
    let (b, b_truth) = site_b(16 << 20, 4096);
    let report = symbolized_report();
    assert!(report.tracked.sampled_in_jemalloc, "{report}");
    for (name, truth) in [("site_a", a_truth), ("site_b", b_truth)] {
        let est = in_use(&report, name);
        let err = est as f64 / truth as f64 - 1.0;
        eprintln!("{name}: truth {truth}, estimate {est}, error {:+.2}%", err * 100.0);
        // 48 MiB at a 64 KiB mean: about 770 samples, a standard error of 3.6%; 16 MiB: 6.3%.
        assert!(err.abs() <= 0.25, "{name}: estimate {est} vs truth {truth}\n{report}");
    }
    // The thread's allocated bytes are jemalloc's own count (usable bytes), brought up to date at
    // its last sample: at most what jemalloc counts now, and at least what the sites hold less what
    // came after the last sample (more than 1 MiB without one: e^-16 at this mean).
    // SAFETY: `gettid` has no preconditions.
    let tid = unsafe { libc::gettid() } as u64;
    let row = report.threads.iter().find(|t| t.tid == Some(tid)).expect("this thread's row");
    // SAFETY: `thread.allocated` is a `uint64_t`.
    let now = unsafe { tikv_jemalloc_ctl::raw::read::<u64>(b"thread.allocated\0") }.unwrap();
    assert!(
        row.allocated_bytes >= a_truth + b_truth - (1 << 20) && row.allocated_bytes <= now,
        "{} not in {}..={now}",
        row.allocated_bytes,
        a_truth + b_truth
    );
    drop((a, b));
    let after = symbolized_report();
    assert!(in_use(&after, "site_a") < a_truth / 20, "site_a's samples were not settled at their frees\n{after}");
}

#[test]
fn each_sites_bytes_match_jemallocs_own_profile_of_the_same_samples() {
    start();
    // Requests of a whole size class: frag weighs requested bytes, jemalloc usable ones; here they
    // are the same, so the two estimators must agree on every stack, not just on average.
    let (c, _) = site_c(32 << 20, 2048);
    // The report's and the dump's samples must be the same ones: nothing allocates in between but
    // the report and the dump themselves, at other stacks.
    let report = frag::report();
    let profile = jemalloc_profile();
    let mut report = report;
    report.sites.as_mut().unwrap().symbolize();
    let rows = rows(&report, "site_c");
    assert!(!rows.is_empty(), "no site_c row\n{report}");
    let mut compared = 0;
    for row in rows {
        // jemalloc's stacks start inside jemalloc; frag's start at the code that called it. Each of
        // frag's is the tail of one or more of jemalloc's (two paths through jemalloc, one caller).
        let theirs: f64 = profile
            .iter()
            .filter(|(stack, _)| stack.len() > row.stack.len() && stack.ends_with(&row.stack))
            .map(|(_, bytes)| bytes)
            .sum();
        assert!(theirs > 0.0, "jemalloc's profile has no stack ending in {:x?} (site_c)\n{report}", row.stack);
        let ours = row.inuse_bytes;
        eprintln!("site_c row: frag {ours}, jemalloc {theirs:.0} ({} samples)", row.samples);
        let diff = (ours as f64 - theirs).abs() / theirs.max(1.0);
        assert!(diff < 0.01, "site_c: frag {ours} against jemalloc's {theirs}\n{report}");
        compared += ours;
    }
    assert!(compared > 16 << 20, "{compared}");
    drop(c);
}

/// Vectors grown from nothing by pushes: jemalloc reallocates them, in place where it can.
#[inline(never)]
fn grow(n: usize, len: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let mut v = Vec::new();
            for j in 0..len {
                v.push((i + j) as u8);
            }
            v
        })
        .collect()
}

#[test]
fn reallocated_and_cross_thread_blocks_leave_no_sample_behind() {
    start();
    // Grown in place and moved by jemalloc's reallocation, then freed on another thread.
    let grown = grow(256, 1 << 20);
    // Blocks of 1 MiB are sampled at a 64 KiB mean with probability 1 - e^-16: the estimate is the
    // truth, unless a reallocation left the old block's entry in place of the new one's.
    let truth = grown.iter().map(Vec::capacity).sum::<usize>() as f64;
    let before = symbolized_report();
    let est = in_use(&before, "grow") as f64;
    assert!((est / truth - 1.0).abs() < 0.02, "grown vectors: {est} against {truth}\n{before}");
    std::thread::spawn(move || drop(grown)).join().unwrap();
    let after = symbolized_report();
    let left = in_use(&after, "grow");
    assert_eq!(left, 0, "samples of freed blocks are still in use\n{after}");
    let origin = after.origin.as_ref().expect("an origin section");
    assert!(origin.sampled_frees > 0, "{after}");
}

/// jemalloc's sample hook runs on the allocating thread: its samples carry that thread's scope, and
/// each scope's live bytes (two scopes of 24 and 8 MiB in 16 KiB blocks, at 64 KiB) are within twice
/// their 95% intervals' half-width (about 4 standard errors: a false failure in 10^4 runs), while
/// blocks freed under another scope leave their own scope's figures.
#[test]
fn samples_taken_inside_jemalloc_carry_the_scope() {
    start();
    let (big, small) = (frag::Scope::new("jemalloc-big").unwrap(), frag::Scope::new("jemalloc-small").unwrap());
    let alloc = |scope: frag::Scope, bytes: usize| {
        let _in = scope.enter();
        (0..bytes / (16 << 10)).map(|i| vec![i as u8; 16 << 10]).collect::<Vec<_>>()
    };
    let held = [alloc(big, 24 << 20), alloc(small, 8 << 20)];
    for (scope, truth) in [(big, 24u64 << 20), (small, 8 << 20)] {
        let live = scope.live_bytes();
        eprintln!("{}: {live:?}, truth {truth}", scope.name());
        // The holder's own buffer (about 24 KiB at most) is in the scope too.
        let half = (live.interval.1 - live.interval.0) as f64 / 2.0;
        let error = (live.estimate as f64 - truth as f64).abs();
        assert!(error <= 2.0 * half + f64::from(32 << 10), "{}: {live:?}", scope.name());
        assert!(live.samples > 30, "{}: {live:?}", scope.name());
    }
    {
        let _in = small.enter();
        drop(held);
    }
    assert!(big.live_bytes().estimate < 1 << 20, "{:?}", big.live_bytes());
}

/// Blocks jemalloc cannot serve (1 PiB: beyond the address space), asked for with `alloc`,
/// `alloc_zeroed`, over-aligned, and as a `realloc` of a kept 1 MiB block: null each time, the old
/// block whole; the site holds the one block served and nothing of the refused ones.
#[inline(never)]
fn refused_in_jemalloc() -> (*mut u8, std::alloc::Layout) {
    use std::alloc::{Layout, alloc, alloc_zeroed, realloc};
    use std::hint::black_box;
    let huge = 1usize << 50;
    for align in [8, 4096] {
        let layout = Layout::from_size_align(huge, align).unwrap();
        // SAFETY: a non-zero size; the null result is checked, never used.
        unsafe {
            assert!(black_box(alloc(layout)).is_null(), "alloc, align {align}");
            assert!(black_box(alloc_zeroed(layout)).is_null(), "alloc_zeroed, align {align}");
        }
    }
    let layout = Layout::from_size_align(1 << 20, 8).unwrap();
    // SAFETY: a fresh block, written inside its size; its refused reallocation leaves it ours.
    unsafe {
        let p = alloc(layout);
        assert!(!p.is_null());
        p.write_bytes(0x5a, layout.size());
        assert!(black_box(realloc(p, layout, huge)).is_null());
        assert_eq!(*p.add(layout.size() - 1), 0x5a);
        (p, layout)
    }
}

#[test]
fn allocations_jemalloc_refuses_leave_no_sample() {
    start();
    let (p, layout) = refused_in_jemalloc();
    let report = symbolized_report();
    let rows = rows(&report, "refused_in_jemalloc");
    let (inuse, allocated): (u64, u64) = rows.iter().fold((0, 0), |(u, a), r| (u + r.inuse_bytes, a + r.alloc_bytes));
    // The 1 MiB block is sampled for certain at a 64 KiB mean; a refused block counted would add 1 PiB.
    assert_eq!(inuse, 1 << 20, "{report}");
    assert!(allocated < 2 << 20, "{allocated} B allocated at the site\n{report}");
    // SAFETY: the block came from `alloc` with `layout`.
    unsafe { std::alloc::dealloc(p, layout) };
}
