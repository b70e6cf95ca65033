//! Which sites pin the holes: each slab class's free space (the allocator's own figure) shared among
//! the allocation sites by their estimated live blocks in that class (report side: allocates).
//!
//! A class's holes are the free regions of its slabs in use; a slab stays resident while any of its
//! regions is live, so the class's live blocks keep its holes resident together. With only sampled
//! blocks to go on (which sit outside their natural slabs: see `sampler::mark`), which slab each live
//! block is in is unknown, so each site gets the class's holes in proportion to its estimated live
//! blocks there. That is the offline method jemalloc's maintainers suggested (per-site live blocks
//! by class, times the class's utilization); what it cannot tell apart is two sites in one class
//! whose blocks sit in slabs of different fullness (documented in docs/SAMPLING.md).

use std::collections::HashMap;

use crate::backend::AllocatorClass;
use crate::sampler;

/// The holes of the allocator's slab classes shared among sites, by site id.
#[derive(Debug, Default)]
pub(crate) struct Shares {
    /// Estimated pinned bytes per site id (`sites::table` ids; the "no stack" site included).
    pub(crate) by_site: HashMap<u32, f64>,
    /// Free bytes in the slabs of every slab class (the allocator's own figure).
    pub(crate) holes: u64,
    /// Holes of classes where no sampled block is live: no site to give them to.
    pub(crate) unattributed: u64,
}

/// The index in `slab_sizes` (ascending region sizes of the slab classes) of the class that serves a
/// request of `size` bytes: the smallest region that holds it; `None` above the largest.
fn class_of(slab_sizes: &[u64], size: u64) -> Option<usize> {
    let i = slab_sizes.partition_point(|&s| s < size.max(1));
    (i < slab_sizes.len()).then_some(i)
}

/// The shares, from `classes` (the allocator's, with their slab figures) and `live` (sampled blocks
/// still live, as `(site, requested size, weight)`); `None` when no class has slab figures (the
/// backend does not split its holes by class).
pub(crate) fn split(classes: &[AllocatorClass], live: impl IntoIterator<Item = (u32, u64, f64)>) -> Option<Shares> {
    let slab: Vec<&AllocatorClass> = {
        let mut v: Vec<&AllocatorClass> = classes.iter().filter(|c| c.slabs.is_some()).collect();
        v.sort_by_key(|c| c.size);
        v
    };
    if slab.is_empty() {
        return None;
    }
    let sizes: Vec<u64> = slab.iter().map(|c| c.size).collect();
    // Estimated live blocks per (class, site), and per class.
    let mut per_site: HashMap<(usize, u32), f64> = HashMap::new();
    let mut per_class = vec![0.0f64; slab.len()];
    for (site, size, weight) in live {
        if let Some(j) = class_of(&sizes, size) {
            *per_site.entry((j, site)).or_default() += weight;
            per_class[j] += weight;
        }
    }
    let mut out = Shares::default();
    for (j, c) in slab.iter().enumerate() {
        let holes = c.free_in_slabs();
        out.holes = out.holes.saturating_add(holes);
        if per_class[j] <= 0.0 {
            out.unattributed = out.unattributed.saturating_add(holes);
        }
    }
    for ((j, site), w) in per_site {
        let holes = slab[j].free_in_slabs() as f64;
        *out.by_site.entry(site).or_default() += holes * w / per_class[j];
    }
    Some(out)
}

/// The shares for the live sampled blocks of this process.
pub(crate) fn current(classes: &[AllocatorClass]) -> Option<Shares> {
    if !classes.iter().any(|c| c.slabs.is_some()) {
        return None;
    }
    let mut live = Vec::new();
    sampler::for_each_live(|e| live.push((e.site, e.size, e.weight)));
    split(classes, live)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slab(size: u64, slabs: u64, regions: u64, held: u64) -> AllocatorClass {
        AllocatorClass { size, requests: held, held, slabs: Some((slabs, regions)) }
    }

    #[test]
    fn a_class_with_no_live_sample_is_unattributed() {
        let classes = [slab(16, 2, 256, 100), slab(32, 1, 128, 128), slab(48, 3, 256, 10)];
        // Site 7: three quarters of class 16's estimated blocks, site 9 the rest; class 48 has no sample.
        let s = split(&classes, [(7, 9, 300.0), (9, 16, 100.0), (9, 17, 5.0)]).expect("slab classes");
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
    fn no_slab_figures_no_split() {
        let large = AllocatorClass { size: 1 << 20, requests: 1, held: 1, slabs: None };
        assert!(split(&[large], [(1, 1 << 20, 1.0)]).is_none());
    }
}
