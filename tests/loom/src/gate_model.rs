//! loom model of the sampler's gate (`src/sampler/gate.rs`, with the side table it checks): a block
//! an asker asks about is never given back to the allocator while the allocator reads it. The
//! block's memory is a loom cell that the allocator reads in the window and that its reuse after the
//! free writes: loom fails the model on any interleaving where the two are not ordered.

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;

use crate::gate::{Gate, Query};
use crate::model;
use crate::side_table::{SampledBlock, Table};

type Small = Table<4>;

fn entry(twin: usize) -> SampledBlock {
    SampledBlock {
        tid: 1,
        slot: Some((1, 1)),
        size: 64,
        weight: 1.0,
        born: 5,
        site: 3,
        marked: twin != 0,
        lead: 0,
        twin,
        frag: false,
        scope: 0,
    }
}

/// What an asker reads of the live blocks, as `report::pins` does: each block's slot, address and
/// twin, asked at its twin where it has one.
fn queries(t: &Small) -> Vec<Query> {
    let mut q = Vec::new();
    t.for_each(|slot, address, e| {
        q.push(Query { slot, address, twin: e.twin, at: if e.twin != 0 { e.twin } else { address } })
    });
    q
}

/// The owner of the block at `p`: frees it (its entry removed, the gate passed), and the allocator
/// hands its memory out again (a write to the cell).
fn free_and_reuse(
    t: &Arc<Small>,
    gate: &Arc<Gate>,
    memory: &Arc<UnsafeCell<u64>>,
    p: *mut u8,
) -> thread::JoinHandle<()> {
    let (t, gate, memory, p) = (Arc::clone(t), Arc::clone(gate), Arc::clone(memory), p as usize);
    thread::spawn(move || {
        assert!(t.remove(p as *mut u8).is_some());
        gate.pass();
        // SAFETY: loom checks this write against every read of the cell.
        memory.with_mut(|m| unsafe { *m = 0 });
    })
}

/// The owner frees its sampled block (and the allocator reuses its memory) while an asker asks
/// about it: the asker's read and the reuse never overlap, and the asker gets either no answer or
/// the live block's contents.
#[test]
fn a_block_asked_about_is_not_freed_meanwhile() {
    model(|| {
        let t = Arc::new(Small::new());
        let gate = Arc::new(Gate::new());
        let memory = Arc::new(UnsafeCell::new(7u64));
        let p = 0x4000 as *mut u8;
        assert!(t.insert(p, entry(0)));
        let owner = free_and_reuse(&t, &gate, &memory, p);
        let q = queries(&t);
        let mut answers = vec![None; q.len()];
        gate.ask(&t, &q, &mut answers, |at, out| {
            for (o, &a) in out.iter_mut().zip(at) {
                assert_eq!(a, p as usize);
                // SAFETY: loom checks this read against the reuse's write.
                *o = memory.with(|m| unsafe { *m });
            }
            true
        });
        owner.join().unwrap();
        assert!(answers.iter().all(|a| matches!(a, None | Some(7))), "{answers:?}");
    });
}

/// Two askers at once, a marked block asked about at its twin: the twin (freed with the block) is
/// read by neither once the owner gives it back.
#[test]
fn two_askers_and_a_twin() {
    model(|| {
        let t = Arc::new(Small::new());
        let gate = Arc::new(Gate::new());
        let twin = Arc::new(UnsafeCell::new(7u64));
        let p = 0x8000 as *mut u8;
        assert!(t.insert(p, entry(0x9040)));
        let owner = free_and_reuse(&t, &gate, &twin, p);
        let asker = {
            let (t, gate, twin) = (Arc::clone(&t), Arc::clone(&gate), Arc::clone(&twin));
            thread::spawn(move || {
                let q = queries(&t);
                let mut answers = vec![None; q.len()];
                gate.ask(&t, &q, &mut answers, |_, out| {
                    // SAFETY: loom checks this read against the reuse's write.
                    out.fill(twin.with(|m| unsafe { *m }));
                    true
                });
                answers
            })
        };
        let q = queries(&t);
        let mut answers = vec![None; q.len()];
        gate.ask(&t, &q, &mut answers, |_, out| {
            // SAFETY: as above.
            out.fill(twin.with(|m| unsafe { *m }));
            true
        });
        owner.join().unwrap();
        let theirs = asker.join().unwrap();
        for a in answers.iter().chain(&theirs) {
            assert!(matches!(a, None | Some(7)), "{a:?}");
        }
    });
}
