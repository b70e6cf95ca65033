//! Allocation origin: which thread allocated each block that a thread frees.
//!
//! In a work-stealing runtime a block is usually freed on another thread than the one that allocated
//! it, and most allocators handle such *cross-thread frees* worse than local ones (they go back to the
//! allocating thread's cache or arena, later or through a slower path, and pin its pages meanwhile).
//! This module estimates that share from the sampler's blocks (`sampler`): each sampled block's
//! entry says which thread allocated it and when; its free, on whichever thread, counts it out here,
//! weighted by the inverse of its sampling probability:
//!
//! - per thread (in each thread's shard): local frees, frees of its blocks elsewhere, frees it made
//!   of others' blocks, with the sums of squared weights behind their intervals;
//! - process-wide (`tally`): per size class (and, for the sampled tier's class estimates, the
//!   variance of each class's live blocks and bytes), per lifetime decade, and per (allocating
//!   thread → freeing thread) pair.
//!
//! A reallocation is, as the allocator sees it, the free of the old block (on the reallocating
//! thread) and the allocation of a new one: a sampled block reallocated on another thread counts as
//! a cross-thread free.

pub(crate) mod tally;

use crate::estimate::SampleSums;
use crate::sampler::side_table::SampledBlock;
use crate::stats::class::class_of;
use crate::stats::pool::{self, CallingThread};
use crate::stats::shard::{Shard, origin_field};
use crate::sync::Ordering;
use tally::Tally;

pub(crate) static TALLY: Tally = Tally::new();

/// A sampled block of `size` bytes, adding `sums` to the estimates, went into the side table.
pub(crate) fn arrived(size: u64, sums: SampleSums) {
    TALLY.arrived(class_of(size as usize), sums);
}

/// The sampled block `e` (adding `sums` to the estimates) was freed (or reallocated) by the thread
/// `caller`, `lifetime_ns` after its allocation.
pub(crate) fn departed(caller: &CallingThread, e: &SampledBlock, sums: SampleSums, lifetime_ns: u64) {
    let cross = e.tid != caller.tid;
    let SampleSums { w, wb, w2, bytes_var } = sums;
    let add = |shard: &Shard, field: usize, v: u64| {
        if let Some(c) = shard.origin.get(field) {
            c.fetch_add(v, Ordering::Relaxed);
        }
    };
    if cross {
        add(caller.shard, origin_field::REMOTE, w);
        add(caller.shard, origin_field::REMOTE + 1, wb);
        add(caller.shard, origin_field::REMOTE_W2, w2);
        add(caller.shard, origin_field::REMOTE_BYTES_VAR, bytes_var);
        let owner = match e.slot {
            Some((index, generation)) => pool::slot_if_generation(index, generation),
            None => Some(pool::overflow()),
        };
        match owner {
            Some(owner) => {
                add(owner, origin_field::ELSEWHERE, w);
                add(owner, origin_field::ELSEWHERE + 1, wb);
            }
            None => {
                TALLY.retired_elsewhere[0].fetch_add(w, Ordering::Relaxed);
                TALLY.retired_elsewhere[1].fetch_add(wb, Ordering::Relaxed);
            }
        }
    } else {
        add(caller.shard, origin_field::LOCAL, w);
        add(caller.shard, origin_field::LOCAL + 1, wb);
        add(caller.shard, origin_field::LOCAL_W2, w2);
        add(caller.shard, origin_field::LOCAL_BYTES_VAR, bytes_var);
    }
    TALLY.freed(&tally::SampledFree {
        class: class_of(e.size as usize),
        cross,
        lifetime_ns,
        alloc_tid: e.tid,
        free_tid: caller.tid,
        sums,
    });
}
