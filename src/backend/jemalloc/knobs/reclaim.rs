//! The reclaimer's action on jemalloc: purge arena by arena, largest unused first, so that one action
//! can stop between arenas when its budget is spent, and keep what it is asked to keep.

use super::mallctl::{self, ArenaKey, Key};
use super::controls::require;
use super::mallctl::all_arenas;
use crate::backend::tuning::{Method, TuneError};

/// Unused (dirty and muzzy) bytes per initialised arena that has any.
fn unused_by_arena() -> Result<Vec<(usize, u64)>, TuneError> {
    mallctl::typed("epoch", tikv_jemalloc_ctl::epoch::advance())?;
    let page = Key::<usize>::new(b"arenas.page\0").read()? as u64;
    let dirty = ArenaKey::<usize>::new(b"stats.arenas.0.pdirty\0")?;
    let muzzy = ArenaKey::<usize>::new(b"stats.arenas.0.pmuzzy\0")?;
    let (_, live) = mallctl::arenas()?;
    let mut unused = Vec::with_capacity(live.len());
    for i in live {
        let pages = (dirty.read(i)? + muzzy.read(i)?) as u64;
        if pages > 0 {
            unused.push((i, pages * page));
        }
    }
    unused.sort_by_key(|&(_, bytes)| core::cmp::Reverse(bytes));
    Ok(unused)
}

/// Returns unused pages until at most `keep` bytes of them remain. With something to keep, decays
/// every arena first (the pages past their decay time go, the recently freed ones stay, as a
/// background thread would leave them); then purges whole arenas, largest first, asking `more`
/// before each after the first.
pub(crate) fn reclaim(keep: u64, more: &mut dyn FnMut() -> bool) -> Result<Method, TuneError> {
    require()?;
    let decayed = keep > 0;
    if decayed {
        mallctl::call(all_arenas!("arena", "decay"))?;
    }
    let unused = unused_by_arena()?;
    let purge = ArenaKey::<()>::new(b"arena.0.purge\0")?;
    let mut remaining: u64 = unused.iter().map(|(_, b)| b).sum();
    let (mut purged, mut stopped) = (0u32, false);
    for &(arena, bytes) in &unused {
        if remaining <= keep {
            break;
        }
        if purged > 0 && !more() {
            stopped = true;
            break;
        }
        purge.call(arena)?;
        remaining -= bytes;
        purged += 1;
    }
    Ok(Method::Jemalloc { decayed, purged, arenas: unused.len() as u32, stopped })
}
