//! Which sites pin the holes: the free space of the allocator's slabs (its own figure, class by
//! class), given to the allocation sites whose live blocks keep it resident (report side: allocates).
//!
//! A slab stays resident while any of its regions is live, so its free regions are pinned by its
//! live blocks together; each live block is charged an equal part, `free × region / live regions`.
//! A sampled block's slab is found where the allocator can say how full it is (jemalloc's
//! `experimental.utilization.batch_query`):
//! - a block in its natural place (the exact tier with `EveryBlock` or a mean under 64 KiB, where
//!   blocks are not marked) is asked about directly;
//! - a marked block (outside its natural slab) through its twin, a block of its own layout allocated
//!   and freed with it in the place it would have had (`SampledBlock::twin`, requests up to
//!   `KnownAllocator::TWIN_MAX`).
//!
//! A block that stands for itself alone (weight 1: every block sampled, or larger than the mean) is
//! charged its part of its slab, exactly. The others are estimates: in each class, what the exact
//! parts leave of the class's free space goes to them in proportion to `weight × part`, so that the
//! sampling noise moves shares between sites, never the class's total. Blocks whose slab is not known
//! (no twin: too large, or another backend) count at the class's mean part per unit of weight, or,
//! where no block of the class was located, by weight alone: the **class shares**, the offline method
//! jemalloc's maintainers suggested (per-site live blocks by class, times the class's utilization),
//! which cannot tell two sites in one class apart when their blocks sit in slabs of different
//! fullness (docs/SAMPLING.md).
//!
//! Which blocks are asked about, and why that is safe: the side table's entries are read without a
//! lock, and their owners may free the blocks at any moment, which jemalloc's read does not survive.
//! The question runs in the sampler's windows (`sampler::gate`): a block still in the table when its
//! window opens stays live until the allocator answered; one freed before is left out, with its
//! answer. Blocks jemalloc's profiler sampled sit in large extents of their own (it promotes small
//! samples), not in their natural slabs: they count by class.
//!
//! Thread caches: a region parked in a thread's cache counts as allocated in its slab. With exact
//! parts it takes its part like a live block and no site gets it: it is in `unattributed`, with the
//! holes of blocks the table does not hold; estimates share it out with the rest of the class. A
//! thread's `flush_thread_tcache` returns its parked regions to their slabs first.

use std::collections::HashMap;

use crate::backend::registry::Registration;
use crate::backend::{AllocatorClass, SlabUse};
use crate::sampler;
use crate::sampler::gate::Query;

/// How [`SiteRow::pinned_bytes`](crate::report::SiteRow::pinned_bytes) matches blocks to slabs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum PinMethod {
    /// Each live sampled block by its own slab, as the allocator reports its fullness (jemalloc's
    /// `experimental.utilization.batch_query`): the block itself where it sits in its natural place
    /// (the exact tier with [`Sampling::EveryBlock`](crate::Sampling::EveryBlock) or a mean under 64 KiB), else its twin, a block
    /// of its size allocated and freed with it in the place it would have had (requests up to
    /// 4 KiB). Exact with every block sampled; otherwise each class's free space is shared by the
    /// samples' estimated parts.
    Slabs,
    /// Each size class's free space shared among the sites by their estimated live blocks in the
    /// class: no block's slab is known (another backend's, blocks over 4 KiB, or blocks jemalloc's
    /// own profiler sampled, which it moves out of their slabs).
    ClassShares,
    /// Both: blocks whose slab is known by it, and the others of their class at the class's mean
    /// part, or by class where none is known.
    Both,
}

/// The holes of the allocator's slab classes shared among sites, by site id.
#[derive(Debug)]
pub(crate) struct Shares {
    /// Estimated pinned bytes per site id (`sites::site_table` ids; the "no stack" site included).
    pub(crate) by_site: HashMap<u32, f64>,
    /// Free bytes in the slabs of every slab class (the allocator's own figure).
    pub(crate) holes: u64,
    /// Holes no site was given: classes where no sampled block is live; with slabs, also the parts
    /// of regions parked in thread caches and of blocks the table does not hold.
    pub(crate) unattributed: u64,
    /// How blocks were matched to slabs.
    pub(crate) method: PinMethod,
}

/// The index in `slab_sizes` (ascending region sizes of the slab classes) of the class that serves a
/// request of `size` bytes: the smallest region that holds it; `None` above the largest.
fn class_of(slab_sizes: &[u64], size: u64) -> Option<usize> {
    let i = slab_sizes.partition_point(|&s| s < size.max(1));
    (i < slab_sizes.len()).then_some(i)
}

/// A live sampled block as the shares see it.
pub(crate) struct Block {
    pub(crate) site: u32,
    /// Requested size: its class.
    pub(crate) size: u64,
    pub(crate) weight: f64,
    /// How full its own slab is, for a block in its natural place whose slab the allocator told.
    pub(crate) slab: Option<SlabUse>,
}

/// The shares, from `classes` (the allocator's, with their slab figures) and the live sampled
/// blocks; `None` when no class has slab figures (the backend does not split its holes by class).
/// How each kind of block is charged: the module documentation.
pub(crate) fn share(classes: &[AllocatorClass], live: impl IntoIterator<Item = Block>) -> Option<Shares> {
    let slab: Vec<&AllocatorClass> = {
        let mut v: Vec<&AllocatorClass> = classes.iter().filter(|c| c.slabs.is_some()).collect();
        v.sort_by_key(|c| c.size);
        v
    };
    if slab.is_empty() {
        return None;
    }
    let sizes: Vec<u64> = slab.iter().map(|c| c.size).collect();
    let mut by_site: HashMap<u32, f64> = HashMap::new();
    let mut given = vec![0.0f64; slab.len()];
    // Per class and site: estimated parts of located blocks, weights of the others.
    let mut located: HashMap<(usize, u32), f64> = HashMap::new();
    let mut unplaced: HashMap<(usize, u32), f64> = HashMap::new();
    let (mut located_parts, mut located_weight, mut unplaced_weight) =
        (vec![0.0f64; slab.len()], vec![0.0f64; slab.len()], vec![0.0f64; slab.len()]);
    let (mut placed_any, mut unplaced_any) = (false, false);
    for b in live {
        let Some(j) = class_of(&sizes, b.size) else { continue };
        match b.slab {
            Some(use_) if b.weight <= 1.0 + 1e-9 => {
                let part = use_.hole_share();
                *by_site.entry(b.site).or_default() += part;
                given[j] += part;
                placed_any = true;
            }
            Some(use_) => {
                let part = b.weight * use_.hole_share();
                *located.entry((j, b.site)).or_default() += part;
                located_parts[j] += part;
                located_weight[j] += b.weight;
                placed_any = true;
            }
            None => {
                *unplaced.entry((j, b.site)).or_default() += b.weight;
                unplaced_weight[j] += b.weight;
                unplaced_any = true;
            }
        }
    }
    // Per class: what the exact parts left, and the sum of the estimates it is shared by.
    let mut holes = 0u64;
    let mut unattributed = 0.0f64;
    let mut rest = Vec::with_capacity(slab.len());
    let mut mean_part = Vec::with_capacity(slab.len());
    let mut total = Vec::with_capacity(slab.len());
    for (j, c) in slab.iter().enumerate() {
        let h = c.free_in_slabs();
        holes = holes.saturating_add(h);
        let r = (h as f64 - given[j]).max(0.0);
        // Unplaced blocks count at the located ones' mean part per unit of weight, or by weight alone
        // where none was located (class shares).
        let m = if located_weight[j] > 0.0 { located_parts[j] / located_weight[j] } else { 1.0 };
        let t = located_parts[j] + unplaced_weight[j] * m;
        if t <= 0.0 {
            unattributed += r;
        }
        rest.push(r);
        mean_part.push(m);
        total.push(t);
    }
    let estimates = located.into_iter().chain(unplaced.into_iter().map(|((j, site), w)| ((j, site), w * mean_part[j])));
    for ((j, site), e) in estimates {
        if total[j] > 0.0 {
            *by_site.entry(site).or_default() += rest[j] * e / total[j];
        }
    }
    let method = match (placed_any, unplaced_any) {
        (true, false) => PinMethod::Slabs,
        (true, true) => PinMethod::Both,
        (false, _) => PinMethod::ClassShares,
    };
    Some(Shares { by_site, holes, unattributed: unattributed.round() as u64, method })
}

/// Where the allocator can be asked about the slab of the sampled block at `address`: the block
/// itself in its natural place or past its head, a marked block's twin, or nowhere.
fn slab_address(address: usize, e: &sampler::side_table::SampledBlock) -> Option<usize> {
    match (e.marked, e.lead, e.twin) {
        (false, _, _) => Some(address),
        (true, 0, 0) => None,
        (true, 0, twin) => Some(twin),
        (true, lead, _) => Some(address + usize::from(lead)),
    }
}

/// The shares for the live sampled blocks of this process: blocks by their own slab or their twin's
/// where the backend tells it, the others by class.
pub(crate) fn current(classes: &[AllocatorClass], reg: Option<Registration>) -> Option<Shares> {
    if !classes.iter().any(|c| c.slabs.is_some()) {
        return None;
    }
    let mut live = Vec::new();
    sampler::for_each_live(|slot, address, e| live.push((slot, address, e)));
    let queries: Vec<Query> = live
        .iter()
        .filter_map(|&(slot, address, e)| slab_address(address, &e).map(|at| Query { slot, address, twin: e.twin, at }))
        .collect();
    let mut answers = vec![None; queries.len()];
    let answered = !queries.is_empty()
        && reg
            .is_some_and(|r| sampler::ask_live(&queries, &mut answers, |at, out| r.slab_use(at, out).unwrap_or(false)));
    let mut answers = answers.into_iter();
    let blocks = live.into_iter().filter_map(|(_, address, e)| {
        let block = |slab| Block { site: e.site, size: e.size, weight: e.weight, slab };
        match (slab_address(address, &e).map(|_| answers.next().flatten()), answered) {
            (Some(Some(slab)), _) => Some(block(Some(slab))),
            // Freed before its question: left out.
            (Some(None), true) => None,
            _ => Some(block(None)),
        }
    });
    share(classes, blocks)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(site: u32, size: u64, weight: f64, slab: Option<SlabUse>) -> Block {
        Block { site, size, weight, slab }
    }

    fn slab(size: u64, slabs: u64, regions: u64, held: u64) -> AllocatorClass {
        AllocatorClass { size, requests: held, held, slabs: Some((slabs, regions)) }
    }

    #[test]
    fn a_class_with_no_live_sample_is_unattributed() {
        let classes = [slab(16, 2, 256, 100), slab(32, 1, 128, 128), slab(48, 3, 256, 10)];
        // Site 7: three quarters of class 16's estimated blocks, site 9 the rest; class 48 has no sample.
        let s = share(&classes, [block(7, 9, 300.0, None), block(9, 16, 100.0, None), block(9, 17, 5.0, None)])
            .expect("slab classes");
        assert_eq!(s.method, PinMethod::ClassShares);
        let holes16 = (2 * 256 - 100) * 16;
        let holes48 = (3 * 256 - 10) * 48;
        assert_eq!(s.holes, holes16 + holes48, "class 32 is full");
        assert_eq!(s.unattributed, holes48);
        assert!((s.by_site[&7] - 0.75 * holes16 as f64).abs() < 1e-6);
        // Site 9's 17-byte block is in class 32, whose slabs are full: nothing more.
        assert!((s.by_site[&9] - 0.25 * holes16 as f64).abs() < 1e-6);
    }

    #[test]
    fn requests_map_to_the_smallest_region_that_holds_them() {
        let sizes = [8, 16, 32, 48];
        assert_eq!(class_of(&sizes, 0), Some(0));
        assert_eq!(class_of(&sizes, 8), Some(0));
        assert_eq!(class_of(&sizes, 9), Some(1));
        assert_eq!(class_of(&sizes, 48), Some(3));
        assert_eq!(class_of(&sizes, 49), None);
    }

    #[test]
    fn each_block_takes_its_slabs_free_space_over_its_live_regions() {
        let classes = [slab(64, 3, 64, 100)];
        // Slab 1: 60 free of 64, four live blocks of site 1. Slab 2: full. A large extent.
        let part = SlabUse { free: 60, regions: 64, bytes: 4096 };
        let full = SlabUse { free: 0, regions: 64, bytes: 4096 };
        let large = SlabUse { free: 0, regions: 1, bytes: 1 << 20 };
        let live = [
            block(1, 64, 1.0, Some(part)),
            block(1, 64, 1.0, Some(part)),
            block(1, 64, 1.0, Some(part)),
            block(1, 64, 1.0, Some(part)),
            block(2, 64, 1.0, Some(full)),
            block(3, 1 << 20, 1.0, Some(large)),
        ];
        let s = share(&classes, live).expect("slab classes");
        assert_eq!(s.method, PinMethod::Slabs);
        assert!((s.by_site[&1] - 60.0 * 64.0).abs() < 1e-9, "{:?}", s.by_site);
        assert_eq!(s.by_site[&2], 0.0);
        assert!(!s.by_site.contains_key(&3), "a large block is in no slab class");
        assert_eq!(s.holes, (3 * 64 - 100) * 64);
        assert_eq!(s.unattributed, (3 * 64 - 100) * 64 - 60 * 64, "the rest of the class's holes");
    }

    #[test]
    fn marked_blocks_share_what_the_slabs_left() {
        let classes = [slab(64, 2, 64, 64)];
        // Site 1's block is charged 60 regions of its slab; the class's other 4 free regions go to the
        // marked blocks of sites 2 and 3, by weight.
        let part = SlabUse { free: 60, regions: 64, bytes: 4096 };
        let live = [block(1, 64, 1.0, Some(part)), block(2, 64, 3.0, None), block(3, 64, 1.0, None)];
        let s = share(&classes, live).expect("slab classes");
        assert_eq!(s.method, PinMethod::Both);
        assert!((s.by_site[&1] - 60.0 * 64.0 * 0.25).abs() < 1e-9, "{:?}", s.by_site);
        let rest = 64.0 * 64.0 - 60.0 * 64.0 * 0.25;
        assert!((s.by_site[&2] - 0.75 * rest).abs() < 1e-9 && (s.by_site[&3] - 0.25 * rest).abs() < 1e-9);
        assert_eq!(s.unattributed, 0);
    }

    #[test]
    fn estimates_share_the_class_by_weight_times_part() {
        // Class 48: 3 slabs of 256 regions, 500 allocated. Site 1's samples (weight 100) sit in half
        // empty slabs, site 2's (weight 100) in full ones, site 3's (weight 50) has no twin.
        let classes = [slab(48, 3, 256, 500)];
        let h = (3 * 256 - 500) as f64 * 48.0;
        let half = SlabUse { free: 128, regions: 256, bytes: 256 * 48 };
        let full = SlabUse { free: 0, regions: 256, bytes: 256 * 48 };
        let live = [
            block(1, 40, 100.0, Some(half)),
            block(1, 40, 100.0, Some(half)),
            block(2, 40, 100.0, Some(full)),
            block(2, 40, 100.0, Some(full)),
            block(3, 40, 50.0, None),
        ];
        let s = share(&classes, live).expect("slab classes");
        assert_eq!(s.method, PinMethod::Both);
        // Estimates: site 1 2 × 100 × 48, site 2 0, site 3 50 × the mean part per weight (48 / 2).
        let (e1, e3) = (2.0 * 100.0 * 48.0, 50.0 * 24.0);
        assert!((s.by_site[&1] - h * e1 / (e1 + e3)).abs() < 1e-6, "{:?}", s.by_site);
        assert_eq!(s.by_site[&2], 0.0, "a site in full slabs pins nothing");
        assert!((s.by_site[&3] - h * e3 / (e1 + e3)).abs() < 1e-6, "{:?}", s.by_site);
        let sum: f64 = s.by_site.values().sum();
        assert!((sum - h).abs() < 1e-6 && s.unattributed == 0, "estimates share the whole class, never more");
    }

    #[test]
    fn estimates_in_full_slabs_leave_the_class_unattributed() {
        let classes = [slab(48, 2, 256, 500)];
        let full = SlabUse { free: 0, regions: 256, bytes: 256 * 48 };
        let s = share(&classes, [block(2, 40, 100.0, Some(full))]).expect("slab classes");
        assert_eq!(s.by_site.get(&2).copied().unwrap_or(0.0), 0.0);
        assert_eq!(s.unattributed, 12 * 48);
    }

    #[test]
    fn no_slab_figures_no_split() {
        let large = AllocatorClass { size: 1 << 20, requests: 1, held: 1, slabs: None };
        assert!(share(&[large], [block(1, 1 << 20, 1.0, None)]).is_none());
    }
}
