//! Wrapping an allocator of your own: `Tracked::with_introspect` with a `Introspect` that gives its usable
//! sizes and figures. The allocator here maps every block separately (`support/mmap_per_block.rs`),
//! so freeing returns memory to the OS at once: the report shows resident memory following live data.
//!
//! `cargo run --release --example own_allocator`

#[path = "support/mmap_per_block.rs"]
mod mmap_per_block;

use mmap_per_block::{MmapPerBlock, MmapProbe};

#[global_allocator]
static A: frag::Tracked<MmapPerBlock> = frag::Tracked::with_introspect(MmapPerBlock, &MmapProbe);

fn main() {
    let blocks: Vec<Vec<u8>> = (0..256).map(|i| vec![i as u8; 100 << 10]).collect();
    let held = frag::report();
    drop(blocks);
    let freed = frag::report();
    for (when, r) in [("holding 256 blocks of 100 KiB", &held), ("after freeing them", &freed)] {
        let mapped = r.allocator.and_then(|a| a.mapped).unwrap_or(0);
        println!(
            "{when}: live {} KiB, usable {} KiB (pages), mapped {} KiB, rss {} KiB",
            r.tracked.allocated_bytes >> 10,
            r.tracked.usable_bytes >> 10,
            mapped >> 10,
            r.process.rss_bytes.unwrap_or(0) >> 10
        );
    }
    println!("\n{freed}");
}
