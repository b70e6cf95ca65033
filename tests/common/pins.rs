//! Helpers of the pins tests (jemalloc): sites whose blocks land in jemalloc's 48-byte class, and
//! jemalloc's own free space per class and dirty pages, read by name (independent of frag's
//! reading by MIB).

const MALLCTL_ARENAS_ALL: usize = 4096;

/// A 40-byte block of the site that keeps its blocks (A).
#[inline(never)]
pub fn site_kept() -> Box<[u8; 40]> {
    std::hint::black_box(Box::new([1u8; 40]))
}

/// A 40-byte block of the site whose blocks are all freed (B).
#[inline(never)]
pub fn site_churned() -> Box<[u8; 40]> {
    std::hint::black_box(Box::new([2u8; 40]))
}

/// Readies a pins scenario, sampling off meanwhile: the unwind tables and the symbolizer's caches
/// first (the symbolizer keeps tens of thousands of blocks, which would crowd the side table), then
/// the free regions that warm-up left in the 48-byte class filled, so that the workload starts on
/// fresh slabs. Returns the filler, to keep until the end.
#[allow(clippy::vec_box)]
pub fn fresh_slabs() -> Vec<Box<[u8; 40]>> {
    assert_ne!(frag::sites::unwinder(), frag::sites::Unwinder::None, "no stacks on this target");
    frag::set_sampling(frag::Sampling::Off).unwrap();
    // A report's own work before the workload (with sampling off there may be no site to symbolize).
    let mut report = frag::report();
    if let Some(sites) = report.sites.as_mut() {
        sites.symbolize();
    }
    drop(report);
    let filler = (0..50_000).map(|_| Box::new([0u8; 40])).collect();
    frag::tune::jemalloc::flush_thread_tcache().unwrap();
    filler
}

/// jemalloc's free bytes in the slabs of each small class, `(region size, holes)`, read by name
/// after an `epoch` advance.
pub fn jemalloc_holes() -> Vec<(u64, u64)> {
    use tikv_jemalloc_ctl::raw;
    tikv_jemalloc_ctl::epoch::advance().unwrap();
    let read = |name: String| -> u64 {
        let key = format!("{name}\0");
        // SAFETY: `curslabs`, `curregs` and `size` are `size_t`, as jemalloc's manual gives them.
        unsafe { raw::read::<usize>(key.as_bytes()) }.unwrap() as u64
    };
    let read_u32 = |name: String| -> u64 {
        let key = format!("{name}\0");
        // SAFETY: `arenas.nbins` and `arenas.bin.<j>.nregs` are 32-bit.
        u64::from(unsafe { raw::read::<u32>(key.as_bytes()) }.unwrap())
    };
    (0..read_u32("arenas.nbins".into()))
        .map(|j| {
            let size = read(format!("arenas.bin.{j}.size"));
            let nregs = read_u32(format!("arenas.bin.{j}.nregs"));
            let slabs = read(format!("stats.arenas.{MALLCTL_ARENAS_ALL}.bins.{j}.curslabs"));
            let regs = read(format!("stats.arenas.{MALLCTL_ARENAS_ALL}.bins.{j}.curregs"));
            (size, (slabs * nregs).saturating_sub(regs) * size)
        })
        .collect()
}

/// The pinned bytes of the report's rows whose leaf frame is `function`.
pub fn pins(report: &frag::Report, function: &str) -> u64 {
    let sites = report.sites.as_ref().expect("a sites section");
    sites
        .top
        .iter()
        .filter(|r| r.frames.first().is_some_and(|f| super::frame_is(f, function)))
        .map(|r| r.pinned_bytes.expect("jemalloc splits its holes by class"))
        .sum()
}

/// The report's estimated blocks in use at the rows whose leaf frame is `function`.
pub fn blocks(report: &frag::Report, function: &str) -> u64 {
    let sites = report.sites.as_ref().expect("a sites section");
    let rows = sites.top.iter().filter(|r| r.frames.first().is_some_and(|f| super::frame_is(f, function)));
    rows.map(|r| r.inuse_blocks).sum()
}

/// jemalloc's own answer, block by block, to how much free space each block at `ptrs` pins: for
/// each block in a slab of `region`-byte regions, `free × region / allocated regions` of its slab
/// (`experimental.utilization.batch_query`, called here by name); blocks in other slabs count 0.
/// Returns the sum and how many blocks were in such slabs.
pub fn pinned_by(ptrs: &[usize], region: u64) -> (f64, usize) {
    let (mut sum, mut counted) = (0.0, 0);
    for chunk in ptrs.chunks(4096) {
        // Per block: free regions, regions, slab bytes.
        let mut out = vec![0usize; 3 * chunk.len()];
        let mut out_len = out.len() * size_of::<usize>();
        // SAFETY: `out` holds three `size_t` per pointer, its length in bytes is `out_len`, and the
        // input is `chunk.len()` pointers, as jemalloc's `batch_query` takes them; jemalloc reads any
        // address safely (an unknown one reads as zeros).
        let code = unsafe {
            tikv_jemalloc_sys::mallctl(
                c"experimental.utilization.batch_query".as_ptr(),
                out.as_mut_ptr().cast(),
                &mut out_len,
                chunk.as_ptr() as *mut core::ffi::c_void,
                size_of_val(chunk),
            )
        };
        assert_eq!(code, 0, "batch_query");
        for q in out.chunks_exact(3) {
            let (free, regions, bytes) = (q[0] as u64, q[1] as u64, q[2] as u64);
            if regions > free && bytes / regions.max(1) == region {
                sum += (free * region) as f64 / (regions - free) as f64;
                counted += 1;
            }
        }
    }
    (sum, counted)
}

/// jemalloc's own sum over every arena of the `size_t` statistic `stats.arenas.<i>.<name>`.
pub fn arena_sum(name: &str) -> u64 {
    tikv_jemalloc_ctl::epoch::advance().unwrap();
    let arenas = tikv_jemalloc_ctl::arenas::narenas::read().unwrap();
    (0..arenas)
        .filter_map(|i| {
            let key = format!("stats.arenas.{i}.{name}\0");
            // SAFETY: the key names a `size_t` statistic, read into a `usize`.
            unsafe { tikv_jemalloc_ctl::raw::read::<usize>(key.as_bytes()) }.ok()
        })
        .sum::<usize>() as u64
}

/// jemalloc's own count of dirty pages, in bytes, every arena.
pub fn dirty_bytes() -> u64 {
    // SAFETY: `arenas.page` is a `size_t`.
    let page = unsafe { tikv_jemalloc_ctl::raw::read::<usize>(b"arenas.page\0") }.unwrap() as u64;
    arena_sum("pdirty") * page
}

/// What a purge of every arena called by hand releases now, by `/proc`.
pub fn hand_purge_releases() -> u64 {
    let before = super::rss_bytes();
    let name = c"arena.4096.purge"; // 4096: MALLCTL_ARENAS_ALL
    // SAFETY: a NUL-terminated name of a control that neither reads nor writes a value: every
    // pointer null, length 0.
    let rc = unsafe {
        tikv_jemalloc_sys::mallctl(
            name.as_ptr(),
            core::ptr::null_mut(),
            core::ptr::null_mut(),
            core::ptr::null_mut(),
            0,
        )
    };
    assert_eq!(rc, 0, "arena.<all>.purge");
    before.saturating_sub(super::rss_bytes())
}
