//! Reading every shard into plain numbers. Runs on the reporting thread, never on the allocation path.

use crate::stats::class::NUM_CLASSES;
use crate::stats::pool::{self, LIVE, RELEASED};
use crate::stats::shard::{ClassCounters, Shard, Totals};
use crate::sync::Ordering;

/// Sums of one size class over all shards.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ClassSums {
    pub(crate) allocs: u64,
    pub(crate) frees: u64,
    pub(crate) req_in: u64,
    pub(crate) req_out: u64,
    pub(crate) usable_in: u64,
    pub(crate) usable_out: u64,
    pub(crate) explicit_in: u64,
    pub(crate) explicit_out: u64,
}

/// A slot's current owner, or its last one if it exited and the slot was not reused yet.
#[derive(Clone, Debug)]
pub(crate) struct SlotOwner {
    pub(crate) tid: u64,
    pub(crate) name: [u8; 16],
    pub(crate) alive: bool,
    pub(crate) totals: Totals,
}

#[derive(Clone, Debug)]
pub(crate) struct Snapshot {
    pub(crate) classes: [ClassSums; NUM_CLASSES],
    pub(crate) owners: Vec<SlotOwner>,
    /// Everything in the pool not attributed to a row in `owners`: threads whose slot was reused.
    pub(crate) retired: Totals,
    pub(crate) overflow: Totals,
    pub(crate) slots_used: usize,
    pub(crate) slots_live: usize,
    pub(crate) unslotted_threads: u64,
}

impl ClassSums {
    pub(crate) fn read(row: &ClassCounters) -> Self {
        Self {
            allocs: row.allocs.load(Ordering::Relaxed),
            frees: row.frees.load(Ordering::Relaxed),
            req_in: row.req_in.load(Ordering::Relaxed),
            req_out: row.req_out.load(Ordering::Relaxed),
            usable_in: row.usable_in.load(Ordering::Relaxed),
            usable_out: row.usable_out.load(Ordering::Relaxed),
            explicit_in: row.explicit_in.load(Ordering::Relaxed),
            explicit_out: row.explicit_out.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn add(&mut self, o: Self) {
        self.allocs += o.allocs;
        self.frees += o.frees;
        self.req_in += o.req_in;
        self.req_out += o.req_out;
        self.usable_in += o.usable_in;
        self.usable_out += o.usable_out;
        self.explicit_in += o.explicit_in;
        self.explicit_out += o.explicit_out;
    }

    /// Live blocks, live requested bytes and live usable bytes of one class, whose usable sizes the
    /// backend accounts as `usable` says.
    pub(crate) fn live(&self, usable: ClassUsable) -> (u64, u64, u64) {
        let blocks = self.allocs.saturating_sub(self.frees);
        let bytes = self.req_in.saturating_sub(self.req_out);
        let recorded = self.usable_in.saturating_sub(self.usable_out);
        let explicit_blocks = self.explicit_in.saturating_sub(self.explicit_out).min(blocks);
        let plain_blocks = blocks - explicit_blocks;
        let plain_usable = match usable {
            ClassUsable::Recorded => return (blocks, bytes, recorded),
            ClassUsable::Uniform(u) => plain_blocks.saturating_mul(u),
            // Requested stands in; plain blocks' share of requested bytes, exact when all are plain.
            ClassUsable::Requested if explicit_blocks == 0 => bytes,
            ClassUsable::Requested => (bytes as u128 * plain_blocks as u128 / blocks.max(1) as u128) as u64,
        };
        (blocks, bytes, recorded.saturating_add(plain_usable))
    }
}

/// How a backend accounts the usable sizes of one class (see `backend::usable`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ClassUsable {
    /// Every block without a recorded exception has this usable size.
    #[cfg_attr(not(any(feature = "jemalloc", feature = "snmalloc")), allow(dead_code))]
    Uniform(u64),
    /// Every block recorded its usable size.
    Recorded,
    /// Blocks without a recorded usable size count with their requested size.
    Requested,
}

/// Adds one shard's class counters to `into`.
pub(crate) fn add_classes(into: &mut [ClassSums; NUM_CLASSES], shard: &Shard) {
    for (sum, row) in into.iter_mut().zip(&shard.classes) {
        sum.add(ClassSums::read(row));
    }
}

/// Reads all shards. O(slots × classes); consistent per counter, not across counters while other
/// threads allocate (live figures are clamped at zero).
pub(crate) fn read() -> Snapshot {
    let slots = pool::used_slots();
    let mut classes = [ClassSums::default(); NUM_CLASSES];
    let mut owners = Vec::with_capacity(slots.len());
    let mut pool_total = Totals::default();
    let mut attributed = Totals::default();
    let mut slots_live = 0;
    for shard in slots {
        let generation = shard.meta.generation.load(Ordering::Acquire);
        let state = shard.meta.state.load(Ordering::Acquire);
        let totals = shard.totals();
        add_classes(&mut classes, shard);
        pool_total = pool_total.plus(totals);
        if state != LIVE && state != RELEASED {
            continue;
        }
        let owner = SlotOwner {
            tid: shard.meta.tid.load(Ordering::Relaxed),
            name: shard.name(),
            alive: state == LIVE,
            totals: totals.minus(shard.base()),
        };
        // A slot that changed hands while we read it is left to the retired aggregate this time.
        if shard.meta.generation.load(Ordering::Acquire) == generation {
            slots_live += usize::from(owner.alive);
            attributed = attributed.plus(owner.totals);
            owners.push(owner);
        }
    }
    let overflow = pool::overflow();
    add_classes(&mut classes, overflow);
    Snapshot {
        classes,
        owners,
        retired: pool_total.minus(attributed),
        overflow: overflow.totals(),
        slots_used: slots.len(),
        slots_live,
        unslotted_threads: pool::unslotted_threads(),
    }
}
