//! A function inlined into two callers is a frame of its own in sites and profiles, wherever the
//! binary has the tables for it (any debug information, `line-tables-only` included): the truth is
//! the source below, where `filled` is inlined (`#[inline(always)]`) into `from_alpha` and
//! `from_beta`, each holding a known number of bytes.

mod common;

use frag::profile::{Endpoint, GoQuery, go_answer};

#[global_allocator]
static A: frag::Tracked<std::alloc::System, frag::Exact> = frag::Tracked::new(std::alloc::System);

#[inline(always)]
fn filled(n: usize) -> Vec<u8> {
    vec![7; n]
}

// Loops rather than iterator closures: a closure would be the caller `filled` is inlined into.
#[inline(never)]
fn from_alpha() -> Vec<Vec<u8>> {
    let mut blocks = Vec::with_capacity(300);
    for _ in 0..300 {
        blocks.push(filled(1_000));
    }
    blocks
}

#[inline(never)]
fn from_beta() -> Vec<Vec<u8>> {
    let mut blocks = Vec::with_capacity(200);
    for _ in 0..200 {
        blocks.push(filled(3_000));
    }
    blocks
}

#[test]
fn an_inlined_function_is_a_frame_under_each_caller() {
    assert_ne!(frag::sites::unwinder(), frag::sites::Unwinder::None, "no stacks on this target");
    frag::set_sampling(frag::Sampling::EveryBlock).unwrap();
    let (alpha, beta) = (from_alpha(), from_beta());

    // Sites: `filled`'s blocks under each caller, as two rows whose frames go filled -> caller.
    let report = common::symbolized_report();
    let sites = report.sites.as_ref().expect("a sites section");
    let under = |caller: &str| -> u64 {
        sites
            .top
            .iter()
            .filter(|r| {
                let at = r.frames.iter().position(|f| common::frame_is(f, "filled"));
                at.and_then(|i| r.frames.get(i + 1)).is_some_and(|f| common::frame_is(f, caller))
            })
            .map(|r| r.inuse_bytes)
            .sum()
    };
    assert_eq!(under("from_alpha"), 300 * 1_000, "{report}");
    assert_eq!(under("from_beta"), 200 * 3_000, "{report}");

    // The profile (Go's text form, symbolized in process): the same two stacks, each naming `filled`
    // at the caller's own return address, then the caller.
    let query = GoQuery::parse("debug=1").expect("a query");
    let text = String::from_utf8(go_answer(Endpoint::Heap, &query).body).expect("text");
    for (caller, bytes) in [("from_alpha", 300 * 1_000), ("from_beta", 200 * 3_000)] {
        // Each record: its sample line (`blocks: bytes [...] @ addresses`), then one line per frame.
        let record = text
            .split("\n\n")
            .map(|r| r.lines().skip_while(|l| !l.contains(" @ 0x")).collect::<Vec<_>>().join("\n"))
            .find(|r| {
                let names: Vec<&str> = r.lines().skip(1).filter_map(|l| l.split('\t').nth(2)).collect();
                let at = names.iter().position(|n| common::frame_is(n, "filled"));
                at.and_then(|i| names.get(i + 1)).is_some_and(|n| common::frame_is(n, caller))
            })
            .unwrap_or_else(|| panic!("no stack filled -> {caller}:\n{text}"));
        let blocks = bytes / if caller == "from_alpha" { 1_000 } else { 3_000 };
        assert!(record.starts_with(&format!("{blocks}: {bytes} ")), "{record}");
        // Inlined: `filled` and its caller share one address.
        let lines: Vec<Vec<&str>> = record.lines().skip(1).map(|l| l.split('\t').collect()).collect();
        let at = lines.iter().position(|l| l.get(2).is_some_and(|n| common::frame_is(n, "filled"))).expect("filled");
        assert_eq!(lines[at].get(1), lines[at + 1].get(1), "{record}");
    }
    drop((alpha, beta));
}
