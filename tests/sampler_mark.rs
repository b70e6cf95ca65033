//! The mark's perturbation, against jemalloc's own answer for each block (`sallocx`): which blocks
//! the sampler moved into another size class, what that costs in memory, and that the report
//! accounts each block at the size jemalloc really gave it.
#![cfg(feature = "jemalloc")]

use std::alloc::Layout;

#[global_allocator]
static A: frag::Tracked<tikv_jemallocator::Jemalloc, frag::Exact> = frag::Tracked::new(tikv_jemallocator::Jemalloc);

const SIZE: usize = 1000; // class 897..=1024; jemalloc's class 1024

fn real_size(p: *mut u8) -> usize {
    // SAFETY: `p` is a live jemalloc block.
    unsafe { tikv_jemalloc_sys::sallocx(p.cast(), 0) }
}

fn class_usable() -> u64 {
    frag::report::size_classes().iter().find(|c| c.contains(SIZE as u64)).map_or(0, |c| c.usable_bytes)
}

/// Allocates `n` blocks of `SIZE` on this thread; returns them with jemalloc's size for each.
fn blocks(n: usize) -> Vec<(usize, usize)> {
    let layout = Layout::from_size_align(SIZE, 8).unwrap();
    (0..n)
        .map(|_| {
            // SAFETY: non-zero size; freed below with the same layout.
            let p = unsafe { std::alloc::alloc(layout) };
            assert!(!p.is_null());
            (p as usize, real_size(p))
        })
        .collect()
}

fn free(blocks: Vec<(usize, usize)>) {
    let layout = Layout::from_size_align(SIZE, 8).unwrap();
    // SAFETY: each block was allocated above with `layout` and is freed once.
    blocks.into_iter().for_each(|(p, _)| unsafe { std::alloc::dealloc(p as *mut u8, layout) });
}

#[test]
fn only_sampled_blocks_move_and_the_mark_costs_about_a_page_per_sample() {
    // SAFETY: nallocx has no preconditions beyond a non-zero size.
    let class = unsafe { tikv_jemalloc_sys::nallocx(SIZE, 0) };
    assert_eq!(class, 1024);

    // At the default mean (512 KiB), 100,000 blocks of 1000 B (95 MiB) give about 190 samples.
    frag::set_sampling(frag::Sampling::DEFAULT).unwrap();
    let before = class_usable();
    let live = blocks(100_000);
    let after = class_usable();
    let moved: Vec<&(usize, usize)> = live.iter().filter(|(_, s)| *s != class).collect();
    // Every block jemalloc did not put in its class is a marked one: 8 bytes past a 4 KiB boundary
    // (a request aligned to 8), in a block of 4 KiB.
    for &&(p, s) in &moved {
        assert_eq!((p % 4096, s), (8, 4096), "a block moved into another class without the mark");
    }
    // Poisson with mean 100,000 x (1 - e^(-1000/524288)) = 190.6: 130..=260 fails once in 10^5 runs.
    assert!((130..=260).contains(&moved.len()), "{} sampled blocks", moved.len());
    let live_bytes = (live.len() * SIZE) as f64;
    let overhead: usize = moved.iter().map(|(_, s)| s - class).sum();
    assert!((overhead as f64) < 0.012 * live_bytes, "the mark costs {overhead} B of {live_bytes} B");
    // The report accounts each block at the size jemalloc gave it.
    let real_total: u64 = live.iter().map(|(_, s)| *s as u64).sum();
    assert_eq!(after - before, real_total);
    free(live);
    assert_eq!(class_usable(), before);

    // Every block: no block changes its layout (every free looks in the side table instead).
    frag::set_sampling(frag::Sampling::EveryBlock).unwrap();
    let live = blocks(10_000);
    assert!(live.iter().all(|(_, s)| *s == class), "every-block mode moved a block");
    free(live);
    frag::set_sampling(frag::Sampling::DEFAULT).unwrap();
}

/// Large requests are marked on a page boundary with no extra bytes: no large block, sampled or
/// not, and no step of a growing buffer, ends up in another class than its request's, and every
/// sampled block is found again when it is freed (reallocated blocks included).
#[test]
fn large_blocks_keep_their_class() {
    frag::set_sampling(frag::Sampling::DEFAULT).unwrap();
    let origin = || frag::report().origin.map_or((0, 0), |o| (o.sampled_blocks, o.sampled_frees));
    let (sampled0, freed0) = origin();
    let layout = Layout::from_size_align(64 << 10, 8).unwrap();
    // SAFETY: nallocx has no preconditions beyond a non-zero size.
    let class = unsafe { tikv_jemalloc_sys::nallocx(layout.size(), 0) };
    // 400 blocks of 64 KiB: about 12% of them sampled.
    let blocks: Vec<*mut u8> = (0..400)
        .map(|_| {
            // SAFETY: non-zero size; freed below with the same layout.
            let p = unsafe { std::alloc::alloc(layout) };
            assert!(!p.is_null());
            assert_eq!(real_size(p), class, "a 64 KiB block moved into another class");
            p
        })
        .collect();
    // 40 buffers grown from 8 KiB to 4 MiB by doubling: most of the large steps are sampled.
    let mut buffers: Vec<Vec<u8>> = (0..40).map(|_| Vec::with_capacity(8 << 10)).collect();
    for b in &mut buffers {
        while b.capacity() < 4 << 20 {
            b.resize(b.capacity(), 1);
            b.reserve_exact(b.capacity()); // full: doubles, by a reallocation
            // SAFETY: nallocx has no preconditions beyond a non-zero size.
            let class = unsafe { tikv_jemalloc_sys::nallocx(b.capacity(), 0) };
            assert_eq!(real_size(b.as_mut_ptr()), class, "a {} B buffer moved into another class", b.capacity());
        }
    }
    drop(buffers);
    // SAFETY: each block was allocated above with `layout` and is freed once.
    blocks.into_iter().for_each(|p| unsafe { std::alloc::dealloc(p, layout) });
    let (sampled1, freed1) = origin();
    let (sampled, freed) = (sampled1 - sampled0, freed1 - freed0);
    // 400 x 11.7% = 47, plus about 5 per buffer.
    assert!(sampled > 100, "{sampled} samples");
    // The reports' own allocations may be sampled and still live: a few.
    assert!(freed + 3 >= sampled, "{sampled} sampled blocks, {freed} found at their free");
}

/// jemalloc's count of the large allocations its arenas served (thread caches' hits not included),
/// after an epoch advance.
fn arena_large_allocations() -> u64 {
    tikv_jemalloc_ctl::epoch::advance().unwrap();
    // SAFETY: `stats.arenas.<i>.large.nmalloc` is a `uint64_t`; 4096 is `MALLCTL_ARENAS_ALL`.
    unsafe { tikv_jemalloc_ctl::raw::read::<u64>(b"stats.arenas.4096.large.nmalloc\0") }.unwrap()
}

/// A sampled request of a large class is allocated as any other block of its class, from the
/// thread's cache, and handed out at the page boundary below it (its head): jemalloc's arenas serve
/// almost none of the samples of a 32 KiB malloc-free loop, where a 4 KiB-aligned allocation would
/// bypass the cache every time. The head is the block's to use (every byte written), and zeroed
/// for a zeroed request, though the block's earlier samples wrote it.
#[test]
fn large_samples_come_from_the_thread_cache() {
    frag::set_sampling(frag::Sampling::DEFAULT).unwrap();
    let sampled = || frag::report().origin.map_or(0, |o| o.sampled_blocks);
    let layout = Layout::from_size_align(32 << 10, 8).unwrap();
    let (samples0, arena0) = (sampled(), arena_large_allocations());
    let mut heads = 0;
    for i in 0..20_000u32 {
        // SAFETY: non-zero size; freed below with the same layout.
        let p = unsafe { if i % 2 == 0 { std::alloc::alloc(layout) } else { std::alloc::alloc_zeroed(layout) } };
        assert!(!p.is_null());
        if i % 2 == 1 {
            // SAFETY: `p` is live, `layout.size()` bytes.
            let block = unsafe { std::slice::from_raw_parts(p, layout.size()) };
            assert!(
                block.iter().all(|&b| b == 0),
                "a zeroed block with a non-zero byte at {:?}",
                block.iter().position(|&b| b != 0)
            );
        }
        heads += usize::from(p as usize % 4096 == 0);
        // SAFETY: as above; every byte of the block is the program's.
        unsafe {
            p.write_bytes(0xab, layout.size());
            std::alloc::dealloc(p, layout);
        }
    }
    let (samples, arena) = (sampled() - samples0, arena_large_allocations() - arena0);
    // 20,000 x (1 - e^(-1/16)) = 1,212 samples.
    assert!(samples > 900, "{samples} samples");
    assert!(heads as u64 >= samples - 5, "{heads} blocks at a page boundary for {samples} samples");
    assert!(arena < samples / 20, "jemalloc's arenas served {arena} large allocations for {samples} samples");
}
