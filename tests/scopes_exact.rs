//! Scopes to the byte: in the exact tier with every block sampled, each scope's live bytes, frees
//! and frees made under another scope are exact, as a scope grows, reallocates and shrinks.

use frag::{Sampling, Scope};

#[global_allocator]
static A: frag::Tracked<std::alloc::System, frag::Exact> = frag::Tracked::new(std::alloc::System);

/// With every block sampled the estimates are exact: a scope's live bytes follow it as it grows,
/// reallocates and shrinks, and stay its own when another scope frees its blocks.
#[test]
fn every_block_sampled_gives_each_scopes_live_bytes_exactly() {
    frag::set_sampling(Sampling::EveryBlock).unwrap();
    let a = Scope::new("grows").unwrap();
    let b = Scope::new("frees").unwrap();
    let live = |s: Scope| {
        let l = s.live_bytes();
        assert_eq!(l.interval, (l.estimate, l.estimate), "every block sampled: a point");
        l.estimate
    };
    let mut held: Vec<Vec<u8>> = Vec::with_capacity(64);
    {
        let _in = a.enter();
        for i in 0..32 {
            held.push(vec![1; 1000 + i]);
        }
    }
    let truth: u64 = (0..32).map(|i| 1000 + i).sum();
    assert_eq!(live(a), truth);
    {
        let _in = a.enter();
        held[0].reserve_exact(9000); // a reallocation: 1000 -> 10000 bytes, still `a`'s
    }
    assert_eq!(live(a), truth + 9000);
    let moved: Vec<Vec<u8>> = held.drain(16..).collect();
    {
        let _in = b.enter();
        drop(moved); // `a`'s blocks, freed under `b`
    }
    let gone: u64 = (16..32).map(|i| 1000 + i).sum();
    assert_eq!(live(a), truth + 9000 - gone);
    assert_eq!(live(b), 0);
    {
        let _in = a.enter();
        drop(held); // the rest, freed in `a` itself
    }
    assert_eq!(live(a), 0);
    // 16 of `a`'s 32 frees (the reallocation's old block is not a free) were made under `b`.
    let report = frag::report();
    let rows = &report.scopes.as_ref().unwrap().rows;
    let a_row = rows.iter().find(|r| r.name.as_deref() == Some("grows")).unwrap();
    assert_eq!(a_row.free_samples, 33, "32 blocks and the reallocation's old one");
    assert_eq!(a_row.freed_elsewhere_share, Some(16.0 / 33.0));
    // Nested scopes restore the outer one.
    let outer = a.enter();
    {
        let _inner = b.enter();
        assert_eq!(Scope::current(), Some(b));
    }
    assert_eq!(Scope::current(), Some(a));
    drop(outer);
    assert_eq!(Scope::current(), None);
}
