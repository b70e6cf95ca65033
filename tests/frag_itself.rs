//! frag's own memory against an independent count of everything the allocator serves (`Counting`):
//! symbolizing 100 times moves neither the program's live bytes (exact tier) nor its sites, and what
//! `Counting` holds beyond the program's figures is what the report calls frag's own, shown while
//! the symbolizer's cache is kept and gone once it is released.

mod common;

use common::{Counting, symbolized_report as symbolized, truth};

#[global_allocator]
static A: frag::Tracked<Counting<std::alloc::System>, frag::Exact> = frag::Tracked::new(Counting(std::alloc::System));

const MIB: u64 = 1 << 20;

/// The program's data: 4,000 blocks of 1,000 to 3,999 bytes, from one site.
#[inline(never)]
fn program_data() -> Vec<Box<[u8]>> {
    (0..4_000).map(|i| vec![i as u8; 1_000 + i % 3_000].into_boxed_slice()).collect()
}

/// What the allocator holds beyond the program's live bytes, and those, at a moment when nothing
/// allocates; frag's own live bytes (`own_totals`, allocation-free), read at the same moment, are
/// exactly the former.
///
/// Another thread's call in flight (the allocator has served or taken the block, its thread's
/// counters not yet moved) is invisible to the reads before and after: the test harness's main
/// thread allocates and frees while this test starts. Such a call ends within microseconds, so a
/// difference that lasts through 200 readings 5 ms apart is frag's own memory miscounted.
fn beyond_the_program() -> (u64, u64) {
    let mut last = (0, 0);
    for _ in 0..200 {
        let before = truth();
        let (program, own) = (frag::report::totals(), frag::report::own_totals());
        if truth() == before {
            let beyond = before.live_bytes - program.allocated_bytes;
            if own.allocated_bytes == beyond {
                return (beyond, program.allocated_bytes);
            }
            last = (own.allocated_bytes, beyond);
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    panic!(
        "frag's own live bytes against what the allocator holds beyond the program's, for 1 s: {} against {}",
        last.0, last.1
    );
}

#[test]
fn symbolizing_in_a_loop_is_frags_own_memory() {
    // Before this line, the allocator served the test harness (some 20 KiB) and frag's build of
    // the unwind tables before `main` (megabytes of temporaries): the latter is frag's own memory.
    let served = common::served_bytes();
    let start = frag::report();
    let program: u64 = start.threads.iter().map(|t| t.allocated_bytes).sum();
    assert!(start.sites.as_ref().and_then(|s| s.unwind_tables.as_ref()).is_some(), "tables built before main");
    assert!(program < 256 << 10, "{program} of the {served} bytes served before the test are the program's\n{start}");
    assert!(served - program > MIB, "{program} of the {served} bytes served before the test are the program's");
    drop(start);
    frag::set_sampling(frag::Sampling::EveryBlock).unwrap();
    frag::sites::keep_symbol_cache(true);
    let data = program_data();
    let data_bytes: u64 = data.iter().map(|b| b.len() as u64).sum::<u64>() + (data.capacity() * 16) as u64;
    let (_, program_before) = beyond_the_program();

    drop(symbolized());
    let first = frag::report().frag_itself;
    for _ in 1..100 {
        drop(symbolized());
    }
    let (frags, program_after) = beyond_the_program();
    // The program's live bytes did not move (the reports handed over were freed): within what the
    // test harness's own threads may hold at either moment.
    assert!(program_after.abs_diff(program_before) < 64 << 10, "{program_before} -> {program_after}");
    // What the allocator holds beyond them is frag's: its symbolizer's cache, kept.
    assert!(frags > MIB, "frag holds {frags} bytes with its cache kept");

    let report = symbolized();
    let shown = report.frag_itself;
    assert!(shown.symbol_cache_kept);
    // The report's line is what the allocator holds beyond the program's bytes, up to the report's
    // own temporaries at the moment it read its counters.
    assert!(shown.live_bytes.abs_diff(frags) < MIB / 2, "shown {} against {frags}\n{report}", shown.live_bytes);
    // Bounded: a hundred symbolizations keep the one cache.
    assert!(shown.live_bytes < first.live_bytes + first.live_bytes / 10 + MIB, "{first:?} then {shown:?}");
    assert!(report.to_string().contains("frag itself live"), "{report}");

    // No site of frag's, and the program's site is all its data.
    let sites = report.sites.as_ref().expect("a sites section");
    for row in &sites.top {
        let frames = row.frames.join(" | ");
        assert!(
            !["gimli::", "addr2line::", "backtrace::symbolize", "sites::symbols"].iter().any(|f| frames.contains(f)),
            "a site of frag's own: {frames}\n{report}"
        );
    }
    let data_site: u64 = sites
        .top
        .iter()
        .filter(|r| r.frames.iter().any(|f| common::frame_is(f, "program_data")))
        .map(|r| r.inuse_bytes)
        .sum();
    assert_eq!(data_site, data_bytes, "{report}");
    drop(report);

    // Released: the allocator gives back what the report called frag's own.
    frag::sites::keep_symbol_cache(false);
    let (left, program_end) = beyond_the_program();
    assert!(left < MIB / 2, "frag still holds {left} bytes after releasing its cache");
    assert!(program_end.abs_diff(program_before) < 64 << 10, "{program_before} -> {program_end}");
    assert!(frag::report().frag_itself.live_bytes < MIB / 2);
    drop(data);
}
