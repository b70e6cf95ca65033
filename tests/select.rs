//! `Tracked<Select>`: `FRAG_ALLOCATOR` picks the backend at start-up. For every backend compiled in, a
//! child process started with the variable set allocates through it, which the backend's own
//! per-pointer query confirms, and the report names it; an unknown name falls back to the default
//! with a report warning.

mod common;

use std::alloc::Layout;

use frag::{Backend, Select};

#[global_allocator]
static A: frag::Tracked<Select> = frag::Tracked::new(Select::new());

/// The backend's own answer for a block it handed out (its usable size), or 0 if it does not know it.
fn owned_by(backend: Backend, p: *mut u8) -> usize {
    match backend {
        // SAFETY: `p` is a live block; glibc only reads its chunk header.
        Backend::System => unsafe { libc::malloc_usable_size(p.cast()) },
        #[cfg(feature = "jemalloc")]
        // SAFETY: `p` is a live block (from jemalloc, or the test fails).
        Backend::Jemalloc => unsafe { tikv_jemallocator::usable_size(p) },
        #[cfg(feature = "mimalloc")]
        // SAFETY: `p` is a live block; mimalloc checks whether it owns it first.
        Backend::Mimalloc => unsafe {
            if libmimalloc_sys::mi_is_in_heap_region(p.cast()) { libmimalloc_sys::mi_usable_size(p.cast()) } else { 0 }
        },
        #[cfg(feature = "snmalloc")]
        Backend::Snmalloc => snmalloc_rs::SnMalloc.usable_size(p).unwrap_or(0),
        _ => 0,
    }
}

#[test]
fn chosen_backend_child() {
    if !common::is_child() {
        return;
    }
    let expected = match std::env::var("EXPECTED").unwrap().as_str() {
        "default" => Backend::DEFAULT,
        name => *Backend::ALL.iter().find(|b| b.name() == name).expect("a compiled-in backend"),
    };
    assert_eq!(Select::new().backend(), expected);
    let layout = Layout::from_size_align(1000, 8).unwrap();
    // SAFETY: valid layout; freed below.
    let p = unsafe { std::alloc::alloc(layout) };
    assert!(owned_by(expected, p) >= 1000, "{expected} did not hand out the block");
    // SAFETY: allocated above with `layout`.
    unsafe { std::alloc::dealloc(p, layout) };

    let report = frag::report();
    assert_eq!(report.backend, expected.name());
    let warned = report.warnings.iter().any(|w| w.contains(frag::SELECT_ENV));
    assert_eq!(warned, std::env::var("WARNED").as_deref() == Ok("yes"), "{:?}", report.warnings);
}

#[test]
fn every_compiled_backend_is_selectable() {
    for b in Backend::ALL {
        common::run_child(
            "chosen_backend_child",
            &[(frag::SELECT_ENV, b.name()), ("EXPECTED", b.name()), ("WARNED", "no")],
        );
    }
    common::run_child("chosen_backend_child", &[(frag::SELECT_ENV, "GLIBC"), ("EXPECTED", "system"), ("WARNED", "no")]);
}

#[test]
fn unknown_or_missing_backends_fall_back_with_a_warning() {
    common::run_child(
        "chosen_backend_child",
        &[(frag::SELECT_ENV, "tcmalloc"), ("EXPECTED", "default"), ("WARNED", "yes")],
    );
    common::run_child("chosen_backend_child", &[(frag::SELECT_ENV, ""), ("EXPECTED", "default"), ("WARNED", "no")]);
    if !cfg!(feature = "snmalloc") {
        common::run_child(
            "chosen_backend_child",
            &[(frag::SELECT_ENV, "snmalloc"), ("EXPECTED", "default"), ("WARNED", "yes")],
        );
    }
}
