//! Reading the site table: one figure set per distinct stack, as estimates (report side: allocates).

use std::collections::HashMap;

use super::SITES;
use crate::sync::Ordering;
use crate::tally::Figures;

/// One site's figures.
#[derive(Clone, Debug, Default)]
pub(crate) struct SiteFigures {
    /// Return addresses, leaf first; empty for the "no stack" site.
    pub(crate) stack: Vec<usize>,
    /// The scope its samples were taken in (`scope`'s slot; 0 for none, and when merged over
    /// scopes).
    pub(crate) scope: u16,
    /// The estimates.
    pub(crate) tally: Figures,
    /// Estimated free bytes in slabs that the site's live blocks keep resident (`report::pins`).
    pub(crate) pinned_bytes: f64,
}

/// How sites are told apart: by stack alone (the report's sites), or by stack and scope (profiles,
/// whose samples carry the scope as a label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Grouping {
    Stack,
    StackAndScope,
}

/// Every site with a sample, merged by stack (two racing threads may have interned one stack
/// twice) or by stack and scope as `grouping` says, the "no stack" site first if it has any;
/// `pinned` holds each site id's pinned bytes.
pub(crate) fn snapshot(pinned: &HashMap<u32, f64>, grouping: Grouping) -> Vec<SiteFigures> {
    let mut by_key: HashMap<(Vec<usize>, u16), SiteFigures> = HashMap::new();
    for (id, stack, scope) in SITES.stacks() {
        let t = SITES.tallies(id);
        if t.samples.load(Ordering::Relaxed) == 0 {
            continue;
        }
        let scope = if grouping == Grouping::StackAndScope { scope } else { 0 };
        let e = by_key.entry((stack.clone(), scope)).or_insert_with(|| SiteFigures {
            stack,
            scope,
            ..SiteFigures::default()
        });
        e.tally.add(t);
        e.pinned_bytes += pinned.get(&id).copied().unwrap_or(0.0);
    }
    let mut out: Vec<SiteFigures> = by_key.into_values().collect();
    out.sort_by(|a, b| {
        a.stack
            .is_empty()
            .cmp(&b.stack.is_empty())
            .reverse()
            .then(b.tally.inuse_bytes.total_cmp(&a.tally.inuse_bytes))
            .then(a.scope.cmp(&b.scope))
    });
    out
}

/// Stacks the site table had no room for.
pub(crate) fn dropped() -> u64 {
    SITES.dropped()
}

/// Samples walked on a stack the program switched to, and samples not walked because the kernel
/// refused to say which stack memory is readable (`unwind::stack`).
pub(crate) fn stack_counts() -> (u64, u64) {
    super::unwind::stack_counts()
}
