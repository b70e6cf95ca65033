//! The cold paths of `Tracked`: sampling events and sampled blocks, marked pointers, threads without
//! a shard, over-aligned and large requests, reallocation, failed allocations.
//!
//! The `GlobalAlloc` methods are inlined into their callers, so each entry point here is called (or
//! jumped to, by a tail call) from the allocating code itself: a sampled allocation's stack starts
//! at the frame above the one of ours that records the anchor (`sites::unwind`). A reallocation's
//! cold path is inlined into its out-of-line entry for the same reason.
//!
//! These entries are generic, so they are compiled in the program's crate, where a non-generic
//! function of frag's is a call unless it is `#[inline]`: the small helpers they call (the clock's,
//! the usable size's, the calling thread's) are, so that a sample's bookkeeping is not a string of
//! calls (`git log` of docs/PERFORMANCE.md has the measurement).

use core::alloc::{GlobalAlloc, Layout};

use super::{Tier, Tracked};
use crate::backend::{self, usable};
use crate::sample_life::{self, fold_live_if_due};
use crate::sampler::side_table::SampledBlock;
use crate::sampler::{self, mark};
use crate::sites::{self, unwind::ColdFrame as Frame};
use crate::stats::class::Class;
use crate::stats::countdown::Countdown;
use crate::stats::pool::{self, Home, with_writer};
use crate::stats::shard::{Shard, Writer};

/// Where the calling thread's counts go, claiming a shard on its first allocation.
#[inline(always)]
fn home<A: 'static, T: Tier, C: Countdown>(t: &Tracked<A, T, C>) -> Home {
    pool::home_or(|| t.slow_shard())
}

/// How the block handed out at `ptr` for the caller's `layout` was really allocated: where it
/// starts and its layout. Its entry `e` says whether it carries the mark: at its head (`e.lead`
/// bytes before the allocator's block, which has the caller's layout), or in a marked layout (for
/// the backend's `page_class`, see `mark::marked`).
#[inline]
fn real(page_class: usize, ptr: *mut u8, layout: Layout, e: Option<&SampledBlock>) -> (*mut u8, Layout) {
    match e.filter(|e| e.marked) {
        Some(e) if e.lead != 0 => (ptr.wrapping_add(usize::from(e.lead)), layout),
        Some(_) => match mark::marked(layout, page_class) {
            Some(m) => (ptr.wrapping_sub(m.offset), m.layout),
            None => (ptr, layout),
        },
        None => (ptr, layout),
    }
}

/// How a sampled block was placed: in its natural place; marked, with its twin's address (0 for
/// none); or at its head, `lead` bytes before the allocator's block.
#[derive(Clone, Copy)]
enum Placed {
    Natural,
    Marked { twin: usize },
    Head { lead: u16 },
}

/// Puts the sampled block at `ptr` (`size` bytes requested, weighing `weight`, placed as `placed`)
/// in the side table with its site and the calling thread: it has arrived (`sample_life`). Its entry, or
/// `None` when the table had no room.
fn insert(ptr: *mut u8, size: usize, weight: f64, frame: Frame, placed: Placed) -> Option<SampledBlock> {
    let (marked, lead, twin) = match placed {
        Placed::Natural => (false, 0, 0),
        Placed::Marked { twin } => (true, 0, twin),
        Placed::Head { lead } => (true, lead, 0),
    };
    let site = |scope| sites::capture(frame, scope, (size as f64 * weight) as u64);
    let entry = sample_life::entry(size as u64, weight, site, marked, lead, twin);
    if !sampler::insert(ptr, entry) {
        return None;
    }
    sample_life::arrived(&entry, ptr);
    Some(entry)
}

/// The sampled block the allocator put at `ptr` (null: it failed), kept in its natural place: the
/// block and its entry, if the side table had room.
fn in_place(ptr: *mut u8, size: usize, weight: f64, frame: Frame) -> (*mut u8, Option<SampledBlock>) {
    let entry = if ptr.is_null() { None } else { insert(ptr, size, weight, frame, Placed::Natural) };
    (ptr, entry)
}

/// A block entering (`entering`) or leaving class `size`'s counters of `s`, written by `W`: every
/// block in the exact tier; in the sampled tier only sampled ones (`sample_life`, their entry), weighted.
/// A sampled block's figures are rounded with random bits drawn from its entry, the same when it
/// enters and when it leaves, so that its rounding cancels once it is freed.
#[inline(always)]
fn count<W: Writer, T: Tier>(
    s: &'static Shard,
    entering: bool,
    size: usize,
    usable: usable::Usable,
    sample: Option<&SampledBlock>,
) {
    let class = Class::of(size);
    match (T::EXACT, sample) {
        (true, _) if entering => s.count_in::<W>(class, size, usable),
        (true, _) => s.count_out::<W>(class, size, usable),
        (false, Some(e)) => s.count_weighted::<W>(entering, class, size, usable, e.weight, sampler::rounding(e)),
        (false, None) => {}
    }
}

impl<A: GlobalAlloc + 'static, T: Tier, C: Countdown> Tracked<A, T, C> {
    /// A fast-path allocation the inner allocator refused: its charge goes back to the clock (the
    /// clock counts bytes handed out). Nothing is counted.
    #[cold]
    #[inline(never)]
    pub(super) fn failed(size: usize) -> *mut u8 {
        pool::give_back::<C>(size);
        core::ptr::null_mut()
    }

    /// How the block requested with `layout` and allocated at `ptr` with `real` (marked, if it was
    /// sampled while marking), is accounted: in the exact tier, what the allocator gave it; in the
    /// sampled tier, where a sample stands for many blocks, what an unmarked block would have had
    /// (a marked block's 4 KiB, times its weight, would stand for nothing real).
    #[inline(always)]
    fn usable(&self, ptr: *mut u8, layout: Layout, real: Layout) -> usable::Usable {
        let backend = backend::backend_of_value(&self.inner);
        if real == layout {
            usable::of(backend, self.introspect, ptr, real)
        } else if T::EXACT {
            usable::apart(backend, self.introspect, ptr, real)
        } else {
            usable::standing_in(backend, self.introspect, ptr, layout, real)
        }
    }

    /// An allocation off the fast path.
    ///
    /// # Safety
    ///
    /// As `GlobalAlloc::alloc` (or `alloc_zeroed` when `zeroed`) for `layout`.
    #[cold]
    #[inline(never)]
    pub(super) unsafe fn allocate_cold(&self, layout: Layout, zeroed: bool) -> *mut u8 {
        let frame = Frame::here();
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.allocate_rehomed(layout, zeroed, frame) }
    }

    /// [`Self::allocate_cold`] after `pool::count_down_owing` found an event: the countdown still
    /// has `layout.size()` taken off, given back here first. The sampled tier's allocations come
    /// here, so that their call sites hold one call on the cold side.
    ///
    /// # Safety
    ///
    /// As `GlobalAlloc::alloc` (or `alloc_zeroed` when `zeroed`) for `layout`; called right after
    /// `pool::count_down_owing::<C>(layout.size())` returned `false`.
    #[cold]
    #[inline(never)]
    pub(super) unsafe fn allocate_cold_owing(&self, layout: Layout, zeroed: bool) -> *mut u8 {
        let frame = Frame::here();
        pool::give_back::<C>(layout.size());
        // SAFETY: the caller's guarantees, passed on.
        unsafe { self.allocate_rehomed(layout, zeroed, frame) }
    }

    /// Both cold allocations, once the countdown is as it was before the call: the countdown
    /// moved into `C`'s cell, then the allocation in the calling thread's home. `frame` is the
    /// caller's, read by the cold entry itself (the walk starts there).
    ///
    /// # Safety
    ///
    /// As `GlobalAlloc::alloc` (or `alloc_zeroed` when `zeroed`) for `layout`.
    #[inline(always)]
    unsafe fn allocate_rehomed(&self, layout: Layout, zeroed: bool, frame: Frame) -> *mut u8 {
        pool::rehome::<C>();
        // SAFETY: the caller's guarantees, passed on.
        with_writer!(home(self), |s, W| unsafe { self.allocate_in::<W>(s, layout, zeroed, frame) })
    }

    /// [`Self::allocate_cold`] in shard `s`, written by `W`.
    ///
    /// # Safety
    ///
    /// As `GlobalAlloc::alloc` (or `alloc_zeroed` when `zeroed`) for `layout`; `s` is the calling thread's home, written as `W` says.
    #[inline(always)]
    unsafe fn allocate_in<W: Writer>(&self, s: &'static Shard, layout: Layout, zeroed: bool, frame: Frame) -> *mut u8 {
        let size = layout.size();
        let weight = self.charge::<W>(s, size);
        let (ptr, kept) = match weight {
            // SAFETY: the caller's guarantees, passed on.
            Some(w) => unsafe { self.allocate_sampled(layout, zeroed, w, frame) },
            // SAFETY: the caller's guarantees, passed on.
            None => (unsafe { self.inner_alloc(layout, zeroed) }, None),
        };
        if ptr.is_null() {
            pool::on_clock(&s.hot.clock, W::SHARED, |c| c.refund(size, W::SHARED, weight.is_some()));
            return ptr;
        }
        let (base, real) = real(self.page_class(), ptr, layout, kept.as_ref());
        count::<W, T>(s, true, size, self.usable(base, layout, real), kept.as_ref());
        if weight.is_some() {
            backend::assist::at_sample(backend::backend_of_value(&self.inner));
        }
        ptr
    }

    /// Charges an allocation of `size` bytes to the clock of `s`: the weight of the block if it is
    /// sampled. Publishes the owner's live figure when enough bytes went through.
    #[inline(always)]
    fn charge<W: Writer>(&self, s: &'static Shard, size: usize) -> Option<f64> {
        let event = pool::on_clock(&s.hot.clock, W::SHARED, |c| c.charge(size, sampler::mean(), W::SHARED))?;
        if !W::SHARED {
            fold_live_if_due(s, event.unfolded);
        }
        event.weight
    }

    /// A sampled allocation: marked (while marking is on: `mark::marked` says how), with its site, in
    /// the side table. A block the table has no room for is not sampled, and never carries the mark.
    /// Returns the block handed out and its entry if it is in the side table (from which [`real`]
    /// tells where and how it was allocated).
    ///
    /// # Safety
    ///
    /// `layout` as for `GlobalAlloc::alloc`.
    unsafe fn allocate_sampled(
        &self,
        layout: Layout,
        zeroed: bool,
        weight: f64,
        frame: Frame,
    ) -> (*mut u8, Option<SampledBlock>) {
        if !mark::marking() {
            // SAFETY: the caller's guarantees.
            let ptr = unsafe { self.inner_alloc(layout, zeroed) };
            return in_place(ptr, layout.size(), weight, frame);
        }
        let Some(m) = mark::marked(layout, self.page_class()) else {
            // No room for the mark (a size near `isize::MAX`): not sampled, since frees only look for
            // sampled blocks at their marks.
            // SAFETY: the caller's guarantees.
            return (unsafe { self.inner_alloc(layout, zeroed) }, None);
        };
        // A mark on the boundary itself (`m.offset` 0: a request of 4 KiB and more) can be its head.
        if m.offset == 0 && backend::backend_of_value(&self.inner).is_some_and(|b| b.owns_its_head(layout)) {
            // SAFETY: the caller's guarantees.
            return unsafe { self.allocate_at_head(layout, zeroed, weight, frame) };
        }
        // The twin first, so that it takes the region the block itself would have had.
        // SAFETY: the caller's guarantees.
        let twin = unsafe { self.twin(layout) };
        // SAFETY: `m.layout` is valid (`mark::marked` built it) and non-zero in size.
        let base = unsafe { self.inner_alloc(m.layout, zeroed) };
        if base.is_null() || base as usize % mark::MARK_ALIGN != 0 {
            // SAFETY: `base` (if any) was just allocated with `m.layout`, `twin` with `layout` (or is
            // 0), and nobody else knows them.
            unsafe {
                if !base.is_null() {
                    // A block of the page class off the boundary (no known backend does that): not
                    // sampled.
                    self.inner.dealloc(base, m.layout);
                }
                self.free_twin(twin, layout);
            }
            // The mark may be what failed: the caller's own layout is still owed a try.
            // SAFETY: the caller's guarantees.
            return (unsafe { self.inner_alloc(layout, zeroed) }, None);
        }
        // In bounds: the block is `m.offset` bytes larger than the request.
        let ptr = base.wrapping_add(m.offset);
        if let Some(entry) = insert(ptr, layout.size(), weight, frame, Placed::Marked { twin }) {
            return (ptr, Some(entry));
        }
        // SAFETY: `base` was just allocated with `m.layout`, `twin` with `layout` (or is 0), and
        // nobody else knows them.
        unsafe {
            self.inner.dealloc(base, m.layout);
            self.free_twin(twin, layout);
        }
        // SAFETY: the caller's guarantees.
        (unsafe { self.inner_alloc(layout, zeroed) }, None)
    }

    /// A sampled allocation of a `layout` whose blocks own their head (`KnownAllocator::owns_its_head`):
    /// allocated as the caller asked, handed out at the 4 KiB boundary at or below it (its mark),
    /// `lead` bytes before it. A block already on the boundary is in its natural place. The head's
    /// bytes are zeroed for a zeroed request (the allocator zeroed only its block's). A block the
    /// side table has no room for stays where it is, unsampled.
    ///
    /// # Safety
    ///
    /// `layout` as for `GlobalAlloc::alloc`, and `owns_its_head(layout)`.
    unsafe fn allocate_at_head(
        &self,
        layout: Layout,
        zeroed: bool,
        weight: f64,
        frame: Frame,
    ) -> (*mut u8, Option<SampledBlock>) {
        // SAFETY: the caller's guarantees.
        let block = unsafe { self.inner_alloc(layout, zeroed) };
        let lead = block as usize % mark::MARK_ALIGN;
        if block.is_null() || lead == 0 {
            return in_place(block, layout.size(), weight, frame);
        }
        if lead % 16 != 0 {
            // Outside `owns_its_head`'s promise, and beyond what the entry records: not sampled.
            return (block, None);
        }
        let head = block.wrapping_sub(lead);
        if zeroed {
            // SAFETY: the head belongs to the block (`owns_its_head`), and nobody else knows it.
            unsafe { head.write_bytes(0, lead) };
        }
        // `lead` is below 4 KiB: it fits a `u16`.
        match insert(head, layout.size(), weight, frame, Placed::Head { lead: lead as u16 }) {
            Some(entry) => (head, Some(entry)),
            None => (block, None),
        }
    }

    /// A free off the fast path: a marked pointer (a sampled block is counted out and freed with the
    /// layout it was allocated with), a thread without a shard, or a request the fast path does not
    /// take. Counted before the block goes back to the allocator.
    ///
    /// # Safety
    ///
    /// As `GlobalAlloc::dealloc`: `ptr` came from this allocator with `layout` and is freed once.
    #[cold]
    #[inline(never)]
    pub(super) unsafe fn deallocate_cold(&self, ptr: *mut u8, layout: Layout) {
        let sampled = sampler::remove(ptr, layout);
        let (base, real) = real(self.page_class(), ptr, layout, sampled.as_ref());
        let usable = self.usable(base, layout, real);
        let weight = sampled.map(|e| e.weight);
        if T::EXACT || weight.is_some() {
            let here = home(self);
            let size = layout.size();
            let counted = sampled.as_ref().map_or(here, |e| sample_life::home_of(e, here));
            with_writer!(counted, |s, W| count::<W, T>(s, false, size, usable, sampled.as_ref()));
            // Sampled frees move the thread towards folding its live figure in too, so that a thread
            // that only frees (no allocations, no clock events) still does.
            if let (Home::Owned(s), Some(w)) = (counted, weight) {
                fold_live_if_due(s, s.hot.clock.moved((w * size as f64) as u64));
            }
        }
        if let Some(e) = sampled {
            sample_life::departed(&pool::calling_thread(), &e, ptr);
            // SAFETY: the twin was allocated with the block's layout, the caller's, and goes with it.
            unsafe { self.free_twin(e.twin, layout) };
        }
        // SAFETY: the block came from this allocator at `base` with `real`: the caller's pointer and
        // layout, or for a marked block the ones it was allocated with (`allocate_sampled`).
        unsafe { self.inner.dealloc(base, real) }
    }

    /// The size of the backend's class whose blocks start on a 4 KiB boundary
    /// (`KnownAllocator::PAGE_CLASS`; 0 for none or an unknown backend).
    #[inline(always)]
    fn page_class(&self) -> usize {
        backend::backend_of_value(&self.inner).map_or(0, backend::Backend::page_class)
    }

    /// A twin for a marked sample of `layout` (`SampledBlock::twin`): a block of that layout from
    /// the allocator, where the backend can say how full its slab is (`KnownAllocator::TWIN_MAX`);
    /// 0 when there is none (too large, another backend, or the allocator failed).
    ///
    /// # Safety
    ///
    /// `layout` is valid and non-zero in size.
    #[inline(always)]
    unsafe fn twin(&self, layout: Layout) -> usize {
        let max = backend::backend_of_value(&self.inner).map_or(0, backend::Backend::twin_max);
        if layout.size() > max {
            return 0;
        }
        // SAFETY: the caller's guarantees.
        unsafe { self.inner.alloc(layout) as usize }
    }

    /// Frees the twin at `twin` (0: none), allocated with `layout`.
    ///
    /// # Safety
    ///
    /// `twin` is 0 or a twin from [`Self::twin`] with `layout`, freed once.
    #[inline(always)]
    unsafe fn free_twin(&self, twin: usize, layout: Layout) {
        if twin != 0 {
            // SAFETY: the caller's guarantees.
            unsafe { self.inner.dealloc(twin as *mut u8, layout) };
        }
    }

    /// `realloc`. The new size is an allocation for the clock; the old block, if sampled, is freed
    /// as far as the sampler is concerned (counted out on this thread). When the old block carries the
    /// mark, or the new one is sampled and the allocator put it where its frees would not look, the
    /// move is made by hand (allocate, copy, free), so that each block keeps the layout it was
    /// allocated with.
    ///
    /// Inlined into its two callers (`reallocate_exact`, `reallocate_maybe_marked`, each tier uses one),
    /// so that a reallocation has one frame of frag's, whatever the compiler does with tail calls:
    /// the stack starts above it (`sites::unwind`).
    ///
    /// # Safety
    ///
    /// As `GlobalAlloc::realloc`: `ptr` came from this allocator with `layout`, and `new_size` is non-zero and does not overflow `isize` once rounded to `layout.align()`.
    #[inline(always)]
    pub(super) unsafe fn reallocate(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let frame = Frame::here();
        pool::rehome::<C>();
        // SAFETY: the caller's guarantees, passed on.
        with_writer!(home(self), |s, W| unsafe { self.reallocate_in::<W>(s, ptr, layout, new_size, frame) })
    }

    /// # Safety
    ///
    /// As [`Self::reallocate`]; `s` is the calling thread's home, written as `W` says.
    #[inline(always)]
    unsafe fn reallocate_in<W: Writer>(
        &self,
        s: &'static Shard,
        ptr: *mut u8,
        layout: Layout,
        new_size: usize,
        frame: Frame,
    ) -> *mut u8 {
        // The block is ours: nobody else can remove or add its entry meanwhile.
        let old = sampler::peek(ptr, layout);
        let (old_base, old_real) = real(self.page_class(), ptr, layout, old.as_ref());
        let old_usable = self.usable(old_base, layout, old_real);
        // SAFETY: `realloc`'s contract guarantees `new_size`, rounded up to `layout.align()`, does not
        // overflow `isize`, which is all `Layout` requires.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        let weight = self.charge::<W>(s, new_size);
        // A layout of ours on either side, which only we can move into or out of: by hand.
        let (new_ptr, kept) = if old.is_some_and(|e| e.marked) || (weight.is_some() && mark::marking()) {
            // SAFETY: the caller's guarantees about `ptr`, `layout` and `new_size`.
            unsafe { self.move_by_hand(ptr, layout, new_layout, old, weight, frame) }
        } else {
            // Before the old block can go back to the allocator (its address may be reused at once).
            if let Some(e) = old {
                sampler::remove(ptr, layout);
                sample_life::departing(&e, ptr);
            }
            // SAFETY: forwarded with the caller's guarantees; an unmarked block has the caller's layout.
            let p = unsafe { self.inner.realloc(ptr, layout, new_size) };
            if p.is_null() {
                // The old block is untouched and still live: its entry goes back (an unmarked entry,
                // so if its neighbourhood filled up meanwhile only the sample is lost).
                if let Some(e) = old.filter(|e| sampler::insert(ptr, *e)) {
                    sample_life::stayed(&e, ptr);
                }
            } else if let Some(e) = old {
                sample_life::counted_out(&pool::calling_thread(), &e);
            }
            let kept = match weight {
                // Produced in place of an unmarked block while marking is off: its layout stays.
                Some(w) if !p.is_null() => insert(p, new_size, w, frame, Placed::Natural),
                _ => None,
            };
            (p, kept)
        };
        if new_ptr.is_null() {
            pool::on_clock(&s.hot.clock, W::SHARED, |c| c.refund(new_size, W::SHARED, weight.is_some()));
            return new_ptr;
        }
        let (new_base, new_real) = real(self.page_class(), new_ptr, new_layout, kept.as_ref());
        let new_usable = self.usable(new_base, new_layout, new_real);
        if T::EXACT {
            s.count_realloc::<W>((layout.size(), old_usable), (new_size, new_usable));
        } else {
            // The old sample leaves the shard it entered (`sample_life::home_of`).
            let left = old.as_ref().map_or(Home::of(s), |e| sample_life::home_of(e, Home::of(s)));
            with_writer!(left, |o, V| count::<V, T>(o, false, layout.size(), old_usable, old.as_ref()));
            count::<W, T>(s, true, new_size, new_usable, kept.as_ref());
            if let Some(e) = kept {
                s.count_reallocs::<W>(e.weight, sampler::rounding(&e));
            }
        }
        new_ptr
    }

    /// A reallocation where a block carries the mark: allocate the new block (sampled or not), copy,
    /// then count out and free the old one where and with the layout it was allocated. On failure
    /// nothing changed. Returns the new block and its entry if it is sampled.
    ///
    /// # Safety
    ///
    /// `ptr` is live, from this allocator, allocated with `layout` (marked if `old` says so);
    /// `new_layout` is valid and non-zero in size.
    unsafe fn move_by_hand(
        &self,
        ptr: *mut u8,
        layout: Layout,
        new_layout: Layout,
        old: Option<SampledBlock>,
        weight: Option<f64>,
        frame: Frame,
    ) -> (*mut u8, Option<SampledBlock>) {
        let (p, kept) = match weight {
            // SAFETY: `new_layout` is valid and non-zero in size.
            Some(w) => unsafe { self.allocate_sampled(new_layout, false, w, frame) },
            // SAFETY: as above.
            None => (unsafe { self.inner_alloc(new_layout, false) }, None),
        };
        if p.is_null() {
            return (p, None);
        }
        // SAFETY: both blocks are live and distinct, each at least the copied length.
        unsafe { core::ptr::copy_nonoverlapping(ptr, p, layout.size().min(new_layout.size())) };
        let (base, real) = real(self.page_class(), ptr, layout, old.as_ref());
        if let Some(e) = old {
            sampler::remove(ptr, layout);
            sample_life::departed(&pool::calling_thread(), &e, ptr);
            // SAFETY: the old block's twin, allocated with its layout, goes with it.
            unsafe { self.free_twin(e.twin, layout) };
        }
        // SAFETY: the block came from this allocator at `base` with `real`, and its entry is gone.
        unsafe { self.inner.dealloc(base, real) };
        (p, kept)
    }
}
