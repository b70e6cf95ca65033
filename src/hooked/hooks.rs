//! The three hooks jemalloc's profiler calls (jemalloc 5.3's `experimental.hooks.*`): a stack for
//! each allocation it samples, the sample itself, and a sampled block's free.
//!
//! They run inside `malloc` and `free`, with jemalloc's reentrancy level raised (a nested call into
//! jemalloc neither samples nor deadlocks), under the allocation-path contract stated in
//! `tracked/mod.rs`: no allocation of ours, no lock, no panic. Each sample goes where `Tracked`'s
//! samples go: the side table (unmarked: jemalloc reports its frees), the origin and site tallies,
//! and the allocating thread's shard, weighted by the inverse of its probability under jemalloc's
//! sampler (a Poisson process over each thread's usable bytes, as `frag`'s own).

use core::alloc::Layout;
use core::cell::Cell;
use core::ffi::{c_uint, c_void};

use super::entry;
use super::error::InJemallocError;
use crate::backend::{Backend, usable};
use crate::sample_life::{self, fold_live_if_due};
use crate::sampler::{self, side_table::SampledBlock};
use crate::sites::{self, unwind::ColdFrame};
use crate::stats::class::Class;
use crate::stats::clock;
use crate::stats::pool::{self, Home};
use crate::stats::shard::Shard;
use crate::sync::{AtomicBool, Ordering};

static INSTALLED: AtomicBool = AtomicBool::new(false);

type BacktraceHook = unsafe extern "C" fn(*mut *mut c_void, *mut c_uint, c_uint);
type SampleHook = unsafe extern "C" fn(*const c_void, usize, *mut *mut c_void, c_uint, usize);
type FreeHook = unsafe extern "C" fn(*const c_void, usize);

/// Whether the hooks are in place.
pub(super) fn installed() -> bool {
    INSTALLED.load(Ordering::Acquire)
}

/// Puts the three hooks in place (again, harmlessly, on a second call).
pub(super) fn install() -> Result<(), InJemallocError> {
    let write = |name: &'static str, key: &[u8], hook: *const c_void| {
        // SAFETY: `key` is a NUL-terminated mallctl name whose value is a function pointer of the type
        // `hook` was cast from (`prof_backtrace_hook_t`, `prof_sample_hook_t`,
        // `prof_sample_free_hook_t`), the size of a pointer.
        unsafe { tikv_jemalloc_ctl::raw::write::<*const c_void>(key, hook) }
            .map_err(|error| InJemallocError::Mallctl { name, error })
    };
    // The stack first: samples may start as soon as the sample hook is in.
    let backtrace: BacktraceHook = backtrace;
    let sample: SampleHook = sample;
    let free: FreeHook = free;
    write("experimental.hooks.prof_backtrace", b"experimental.hooks.prof_backtrace\0", backtrace as *const c_void)?;
    write("experimental.hooks.prof_sample_free", b"experimental.hooks.prof_sample_free\0", free as *const c_void)?;
    write("experimental.hooks.prof_sample", b"experimental.hooks.prof_sample\0", sample as *const c_void)?;
    INSTALLED.store(true, Ordering::Release);
    Ok(())
}

thread_local! {
    /// A block this thread's last sample replaced in place (jemalloc reallocated a sampled block
    /// without moving it): the free that jemalloc reports next for that address is the old block's,
    /// settled already. 0: none.
    static REPLACED: Cell<usize> = const { Cell::new(0) };
    /// jemalloc's counter of the bytes this thread allocated (`thread.allocatedp`; 0: not read yet,
    /// 1: unavailable), and its value when the thread's clock last took it.
    static ALLOCATED: Cell<(usize, u64)> = const { Cell::new((0, 0)) };
}

/// Brings the calling thread's clock up to jemalloc's count of the bytes it allocated (usable
/// bytes: jemalloc counts those). Owner only.
fn catch_up(s: &Shard) {
    let Ok((mut counter, seen)) = ALLOCATED.try_with(Cell::get) else { return };
    if counter == 0 {
        // A name lookup (jemalloc's controls are set up: `sample_in_jemalloc` read them) and a read
        // of this thread's data: no lock, no allocation.
        // SAFETY: `thread.allocatedp` is a NUL-terminated mallctl name whose value is a `uint64_t *`.
        counter =
            unsafe { tikv_jemalloc_ctl::raw::read::<*const u64>(b"thread.allocatedp\0") }.map_or(1, |p| p as usize);
        counter = counter.max(1);
    }
    if counter == 1 {
        let _ = ALLOCATED.try_with(|a| a.set((1, 0)));
        return;
    }
    // SAFETY: `counter` is jemalloc's per-thread counter of the calling thread (`thread.allocatedp`),
    // which lives as long as the thread; only this thread reads it through this cell.
    let now = unsafe { *(counter as *const u64) };
    s.hot.clock.add_allocated(now.wrapping_sub(seen));
    let _ = ALLOCATED.try_with(|a| a.set((counter, now)));
}

/// jemalloc's stack for the allocation it is sampling: `frag`'s walk from the unwind tables, leaf
/// first, into `vec` (room for `max` frames). jemalloc's own frames lead it; symbolization trims
/// them (`sites::symbols`).
///
/// # Safety
///
/// Called by jemalloc's profiler (`prof_backtrace_hook_t`): `vec` has room for `max` frames and `len` is writable.
#[inline(never)]
unsafe extern "C" fn backtrace(vec: *mut *mut c_void, len: *mut c_uint, max: c_uint) {
    let mut frames = [0usize; sites::unwind::MAX_FRAMES];
    let depth = sites::walk(ColdFrame::here(), &mut frames).min(max as usize);
    for (i, &pc) in frames.iter().take(depth).enumerate() {
        // SAFETY: jemalloc's vector has room for `max` frames, and `i < depth <= max`.
        unsafe { *vec.add(i) = pc as *mut c_void };
    }
    // SAFETY: `len` points to jemalloc's length for this vector; `depth <= max` fits.
    unsafe { *len = depth as c_uint };
}

/// A sampled block entering or leaving its class's counters, weighted: in the calling thread's
/// shard (claimed at its first sample), or where the sample's counts go (`sample_life::home_of`).
fn count(entering: bool, ptr: *const c_void, e: &SampledBlock) {
    let size = e.size as usize;
    let layout = Layout::from_size_align(size, 1).unwrap_or(Layout::new::<u8>());
    let usable = usable::of(Some(Backend::Jemalloc), None, ptr.cast_mut().cast(), layout);
    let random = sampler::rounding(e);
    let class = Class::of(size);
    let home = sample_life::home_of(e, pool::home_or(|| pool::slow(|| {}, sampler::mean)));
    pool::with_writer!(home, |s, W| s.count_weighted::<W>(entering, class, size, usable, e.weight, random));
    if let Home::Owned(s) = home {
        catch_up(s);
        fold_live_if_due(s, s.hot.clock.moved((e.weight * size as f64) as u64));
    }
}

/// A block jemalloc sampled: `size` bytes requested, `usable` given, its stack in `bt`.
///
/// # Safety
///
/// Called by jemalloc's profiler (`prof_sample_hook_t`) for the block at `ptr` it just sampled: `bt` holds `bt_len` frames.
unsafe extern "C" fn sample(ptr: *const c_void, size: usize, bt: *mut *mut c_void, bt_len: c_uint, usable: usize) {
    let Some(weight) = clock::weight(usable as u64, sampler::mean()) else { return };
    let mut frames = [0usize; sites::unwind::MAX_FRAMES];
    let depth = (bt_len as usize).min(frames.len());
    for (i, f) in frames.iter_mut().take(depth).enumerate() {
        // SAFETY: jemalloc's vector holds `bt_len` frames, and `i < depth <= bt_len`.
        *f = unsafe { *bt.add(i) } as usize;
    }
    let address = ptr.cast_mut().cast::<u8>();
    // Reallocated in place: the old block's entry is still here, and jemalloc reports its free next.
    if let Some(old) = sampler::remove_reported(address) {
        settle(&old, ptr);
        let _ = REPLACED.try_with(|r| r.set(address as usize));
    }
    let site = |scope| {
        // jemalloc's own frames lead the stack: the site starts at the code that called it.
        let skip = entry::leading(frames.get(..depth).unwrap_or(&[]));
        frames.copy_within(skip..depth, 0);
        sites::intern(&frames, depth - skip, scope)
    };
    let entry = sample_life::entry(size as u64, weight, site, false, 0, 0);
    if !sampler::insert_reported(address, entry) {
        return;
    }
    sample_life::arrived(&entry, address);
    count(true, ptr, &entry);
}

/// Settles the entry `e` of a sampled block at `ptr`, freed (or replaced) by the calling thread.
fn settle(e: &SampledBlock, ptr: *const c_void) {
    count(false, ptr, e);
    sample_life::departed(&pool::calling_thread(), e, ptr.cast());
}

/// A sampled block is being freed (or was reallocated away).
///
/// # Safety
///
/// Called by jemalloc's profiler (`prof_sample_free_hook_t`) as the sampled block at `ptr` is freed.
unsafe extern "C" fn free(ptr: *const c_void, _usable: usize) {
    let address = ptr as usize;
    if REPLACED.try_with(|r| r.replace(0) == address).unwrap_or(false) {
        return;
    }
    if let Some(e) = sampler::remove_reported(address as *mut u8) {
        settle(&e, ptr);
    }
}
