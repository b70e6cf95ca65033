//! Stacks in a build without frame pointers (the repository's default build): every block sampled,
//! each stack's frames named by the `backtrace` crate (its own symbolizer, independent of the
//! unwinder) and checked against the call structure the test itself knows: through the standard
//! library and serde_json, two paths below one leaf, `file:line` in the report.

mod common;

use std::hint::black_box;

#[global_allocator]
static A: frag::Tracked<std::alloc::System, frag::Exact> = frag::Tracked::new(std::alloc::System);

/// The report lists the top 10 sites by bytes in use: one test at a time, so that another's blocks
/// do not push a test's sites out of the list under `cargo test` (nextest runs each in a process).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Each frame's function names (inlined ones included), leaf first.
fn names(stack: &[u64]) -> Vec<String> {
    let mut out = Vec::new();
    for &pc in stack {
        // A return address: the call is the instruction before it.
        backtrace::resolve((pc as usize - 1) as *mut std::ffi::c_void, |sym| {
            if let Some(name) = sym.name() {
                out.push(format!("{name:#}"));
            }
        });
    }
    out
}

/// Whether `names` holds the function `function` of this file (any path prefix, a closure in it).
fn holds(names: &[String], function: &str) -> bool {
    names.iter().any(|n| n.split("::").any(|s| s == function))
}

/// Every site row, named. The report lists the top 10 by bytes, so the tests' sites are large, and
/// the symbolizer's caches (megabytes, in use while they last) are dropped after each naming.
fn named_rows() -> Vec<(Vec<String>, u64, u64)> {
    let report = frag::report();
    let sites = report.sites.expect("a sites section");
    assert_eq!(sites.unwinder, frag::sites::unwinder());
    let rows = sites.top.iter().map(|r| (names(&r.stack), r.inuse_bytes, r.inuse_blocks)).collect();
    backtrace::clear_symbol_cache();
    rows
}

#[inline(never)]
fn site_fs_read(path: &str) -> Vec<u8> {
    black_box(std::fs::read(path).expect("readable"))
}

#[inline(never)]
fn site_serde_json(n: usize) -> Vec<u8> {
    let value: Vec<serde_json::Value> = (0..n).map(|i| serde_json::json!({ "i": i, "s": "x".repeat(16) })).collect();
    black_box(serde_json::to_vec(&value).expect("serialisable"))
}

/// The leaf both paths below share.
#[inline(never)]
fn shared_leaf(n: usize) -> Box<[u8]> {
    black_box(vec![7u8; n].into_boxed_slice())
}

#[inline(never)]
fn path_one(n: usize) -> Box<[u8]> {
    black_box(shared_leaf(n))
}

#[inline(never)]
fn path_two(n: usize) -> Box<[u8]> {
    black_box(shared_leaf(n))
}

#[test]
fn stacks_cross_the_standard_library_and_dependencies() {
    let _serial = serial();
    assert_ne!(frag::sites::unwinder(), frag::sites::Unwinder::None);
    frag::set_sampling(frag::Sampling::EveryBlock).unwrap();
    // A file of 3 MiB read by `std::fs::read`: one block, allocated inside `std`.
    let dir = std::env::temp_dir().join(format!("frag-sites-unwind-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("three-mib");
    std::fs::write(&path, vec![1u8; 3 << 20]).unwrap();
    let read = site_fs_read(path.to_str().unwrap());
    // A JSON array serialised into a vector that serde_json grows (small enough that every block of
    // the values fits in the side table).
    let json = site_serde_json(3_000);
    let rows = named_rows();
    let by = |f: &str| rows.iter().filter(|(n, _, _)| holds(n, f)).map(|(_, b, _)| *b).sum::<u64>();
    assert!(by("site_fs_read") >= read.capacity() as u64, "std::fs::read's block not under its caller: {rows:#?}");
    assert!(by("site_serde_json") >= json.capacity() as u64, "serde_json's vector not under its caller: {rows:#?}");
    // The frames inside std and serde_json are there too, below their callers.
    let (read_names, _, _) = rows.iter().find(|(n, _, _)| holds(n, "site_fs_read")).unwrap();
    let at = |f: &str| read_names.iter().position(|n| n.contains(f));
    assert!(at("fs::read").unwrap() < at("site_fs_read").unwrap(), "{read_names:#?}");
    drop((read, json));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn two_paths_below_one_leaf_are_two_stacks_with_their_own_bytes() {
    let _serial = serial();
    frag::set_sampling(frag::Sampling::EveryBlock).unwrap();
    let one: Vec<Box<[u8]>> = (0..64).map(|_| path_one(40 << 10)).collect();
    let two: Vec<Box<[u8]>> = (0..32).map(|_| path_two(40 << 10)).collect();
    let rows = named_rows();
    let under = |path: &str| {
        let r: Vec<_> = rows.iter().filter(|(n, _, _)| holds(n, "shared_leaf") && holds(n, path)).collect();
        assert_eq!(r.len(), 1, "one stack through {path}: {rows:#?}");
        (r[0].1, r[0].2)
    };
    assert_eq!(under("path_one"), (64 * (40 << 10), 64));
    assert_eq!(under("path_two"), (32 * (40 << 10), 32));
    drop((one, two));
}

#[test]
fn a_symbolized_site_shows_file_and_line() {
    let _serial = serial();
    frag::set_sampling(frag::Sampling::EveryBlock).unwrap();
    let kept: Vec<Box<[u8]>> = (0..48).map(|_| path_one(64 << 10)).chain((0..40).map(|_| path_two(64 << 10))).collect();
    let report = common::symbolized_report();
    let sites = report.sites.as_ref().unwrap();
    let row = |path: &str| {
        sites
            .top
            .iter()
            .find(|r| r.frames.iter().any(|f| common::frame_is(f, path)))
            .unwrap_or_else(|| panic!("{path}: {report}"))
    };
    let (one, two) = (row("path_one"), row("path_two"));
    let frame = one.frames.iter().find(|f| common::frame_is(f, "path_one")).unwrap();
    assert!(frame.contains("sites_unwind.rs:"), "{frame}");
    // The two rows name as many frames as it takes to tell them apart.
    assert_ne!(one.frames, two.frames);
    drop(kept);
    backtrace::clear_symbol_cache();
}
