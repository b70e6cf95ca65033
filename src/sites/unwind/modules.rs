//! The loaded modules' unwind rows: found with `dl_iterate_phdr`, built off the allocation path,
//! installed for the walker without locks.
//!
//! **When.** At start-up, before `main` (a constructor in `.init_array`, see [`super`]), for the
//! executable and the libraries loaded with it; then again by [`refresh`], which `report()` and the
//! publisher's ticks call, so that modules loaded later (`dlopen`) are picked up by a thread that
//! is not allocating (not the reclaimer's rounds: they are paid from its CPU budget). A refresh that finds the loader's counts of loads
//! and unloads (`dlpi_adds`, `dlpi_subs`) unchanged does nothing else.
//!
//! **Never a module's memory after `dlclose`.** The builder reads a library's `.eh_frame` only while
//! holding a reference of its own to it (`dlopen` with `RTLD_NOLOAD`, checked against the load
//! address found), so it cannot be unloaded meanwhile; the executable is never unloaded. The walker
//! reads only the rows, which are copies, and the stack. A module gone from the loader's list leaves
//! the installed set at the next refresh.
//!
//! **Publication.** The whole set is one immutable [`Set`] behind an atomic pointer. A writer (one at
//! a time, under [`WRITER`]) builds the next set, swaps it in, and frees the old one once every walk
//! that may have started on it has ended: walks register in one of two reader counts chosen by an
//! epoch, and the writer flips the epoch and waits for the old count to drain (the two-slot scheme of
//! a grace period). A walk is about a microsecond; a writer that has waited a second (a child forked
//! while a walk was under way in another thread never drains) leaks the old set instead.

use crate::sync::{AtomicPtr, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::ffi::{CStr, CString};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::cfi::{self, Mapped};
use super::recent::Recent;
use super::rows::Rows;
#[cfg(test)]
use super::rows::Rule;
use super::summary::UnwindTables;

/// One module's rows.
#[derive(Debug)]
pub(crate) struct Module {
    /// The path the loader gives (empty for the executable).
    pub(crate) name: String,
    /// Load bias and `.eh_frame_hdr` address: with the name, what tells a module from another loaded
    /// at the same place later.
    base: usize,
    hdr: usize,
    pub(crate) rows: Rows,
    pub(crate) stats: cfi::Stats,
}

/// The modules with rows, sorted by address, and the loader's counts when it was built.
#[derive(Debug, Default)]
pub(crate) struct Set {
    modules: Vec<Arc<Module>>,
    adds: u64,
    subs: u64,
    /// How long building it took (modules reused from the previous set cost nothing).
    pub(crate) build_time: Duration,
    /// The rules walks looked up in this set's rows lately.
    recent: Recent,
    /// Where the modules' code lies, in at most two spans (see [`code_spans`]).
    code: [(usize, usize); 2],
    /// Whether a cold walk may scan the stack first: not on valgrind (see [`on_valgrind`]).
    scan_when_cold: bool,
}

impl Set {
    /// The rules walks looked up lately.
    #[inline]
    pub(crate) fn recent(&self) -> &Recent {
        &self.recent
    }

    /// Whether a walk that starts cold may scan the stack for its rules first.
    #[inline(always)]
    pub(crate) fn scan_when_cold(&self) -> bool {
        self.scan_when_cold
    }

    /// Whether `word` may be an address in some module's code: inside one of two spans that cover
    /// every module (the executable's and the libraries'). Two compares per span; a word in a gap
    /// between modules of one span passes too.
    #[inline(always)]
    pub(crate) fn may_be_code(&self, word: usize) -> bool {
        let [(a, b), (c, d)] = self.code;
        (word.wrapping_sub(a) < b - a) | (word.wrapping_sub(c) < d - c)
    }

    /// The rows of the module holding `pc`. Allocation-free, lock-free.
    #[inline]
    pub(crate) fn rows_for(&self, pc: usize) -> Option<&Rows> {
        // The last module starting at or below `pc`.
        let i = self.modules.partition_point(|m| m.rows.range().0 <= pc);
        let rows = &self.modules.get(i.checked_sub(1)?)?.rows;
        rows.contains(pc).then_some(rows)
    }

    /// The rule for the instruction at `pc`.
    #[cfg(test)]
    pub(crate) fn rule(&self, pc: usize) -> Rule {
        self.rows_for(pc).map_or(Rule::UNKNOWN, |r| r.rule(pc))
    }
}

static CURRENT: AtomicPtr<Set> = AtomicPtr::new(core::ptr::null_mut());
static EPOCH: AtomicUsize = AtomicUsize::new(0);
static READERS: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];
/// Serialises writers: the process id of the one writing, 0 when none. Not a mutex: a child forked
/// while a thread of its parent was writing must not wait for that thread, which it does not have;
/// it takes over (the set it sees is whole either way: publication is one atomic swap). Never taken
/// on the allocation path.
static WRITER: AtomicU64 = AtomicU64::new(0);

/// Holds [`WRITER`] for this process until dropped.
struct Writing;

impl Writing {
    fn enter() -> Self {
        let me = u64::from(std::process::id());
        let mut seen = WRITER.load(SeqCst);
        loop {
            if seen == me {
                // Another thread of this process is writing: it ends soon.
                std::thread::yield_now();
                seen = WRITER.load(SeqCst);
                continue;
            }
            // Free, or held by a thread of the process this one was forked from.
            match WRITER.compare_exchange(seen, me, SeqCst, SeqCst) {
                Ok(_) => return Self,
                Err(now) => seen = now,
            }
        }
    }
}

impl Drop for Writing {
    fn drop(&mut self) {
        WRITER.store(0, SeqCst);
    }
}

/// Which set is installed: a new value for each set replaced since (walks kept in a `trace::Trace`
/// from an older set are walked again). A set installed while a walk was being kept may go unseen
/// until the next replacement: the kept walk then stands for one taken a moment earlier.
#[inline]
pub(crate) fn epoch() -> usize {
    EPOCH.load(SeqCst)
}

/// A registered walk: the set it reads stays alive until it is dropped.
pub(crate) struct Reading {
    slot: usize,
}

impl Reading {
    /// Registers a walk. Two or three sequentially consistent atomic operations; no lock.
    #[inline]
    pub(crate) fn enter() -> Self {
        loop {
            let epoch = EPOCH.load(SeqCst);
            let slot = epoch & 1;
            READERS[slot].fetch_add(1, SeqCst);
            if EPOCH.load(SeqCst) == epoch {
                return Self { slot };
            }
            // A writer flipped the epoch in between: it may not wait for this slot.
            READERS[slot].fetch_sub(1, SeqCst);
        }
    }

    /// The installed set, if any.
    #[inline]
    pub(crate) fn set(&self) -> Option<&Set> {
        // SAFETY: a installed set is freed only after the readers of the epoch it was replaced in
        // have drained, and this reading registered before loading it (`enter`), so the set lives at
        // least as long as `self`.
        unsafe { CURRENT.load(SeqCst).as_ref() }
    }
}

impl Drop for Reading {
    #[inline]
    fn drop(&mut self) {
        READERS[self.slot].fetch_sub(1, SeqCst);
    }
}

/// The installed tables, summarised; `None` before the first build.
pub(crate) fn summary() -> Option<UnwindTables> {
    let r = Reading::enter();
    let set = r.set()?;
    let mut s = UnwindTables {
        modules: 0,
        rows: 0,
        bytes: 0,
        unknown_rows: 0,
        failed_entries: 0,
        last_build_ms: set.build_time.as_secs_f64() * 1e3,
    };
    for m in &set.modules {
        s.modules += 1;
        s.rows += m.rows.len();
        s.bytes += m.rows.bytes() + size_of::<Module>() + m.name.len();
        s.unknown_rows += m.stats.unknown;
        s.failed_entries += m.stats.failed;
    }
    Some(s)
}

/// Brings the installed set up to date with the loaded modules; builds rows only for modules not
/// seen before. Allocates and takes the loader's lock: never call it on the allocation path.
pub(crate) fn refresh() {
    // A child forked during a walk of the loader's list cannot list modules: it keeps the tables it
    // inherited (`crate::loader`).
    if crate::loader::stuck() {
        return;
    }
    let _writer = Writing::enter();
    // SAFETY: only writers free sets, and this thread is the only writer (`WRITER`).
    let current = unsafe { CURRENT.load(SeqCst).as_ref() };
    if let Some(c) = current
        && counts() == Some((c.adds, c.subs))
    {
        return;
    }
    let next = Box::new(build(&loaded(), current));
    let old = CURRENT.swap(Box::into_raw(next), SeqCst);
    if !old.is_null() {
        retire(old);
    }
}

/// The set of the modules `found`, reusing the rows of those `current` has already built.
fn build(found: &Listing, current: Option<&Set>) -> Set {
    let started = Instant::now();
    let mut modules: Vec<Arc<Module>> = found
        .modules
        .iter()
        .filter_map(|f| {
            let same = |m: &&Arc<Module>| m.base == f.base && m.hdr == f.hdr && m.name == f.name();
            match current.and_then(|c| c.modules.iter().find(same)) {
                Some(m) => Some(Arc::clone(m)),
                None => build_pinned(f).map(Arc::new),
            }
        })
        .collect();
    modules.sort_by_key(|m| m.rows.range().0);
    let code = code_spans(modules.iter().map(|m| m.rows.range()));
    let (adds, subs, build_time) = (found.adds, found.subs, started.elapsed());
    Set { modules, adds, subs, build_time, recent: Recent::new(), code, scan_when_cold: !on_valgrind() }
}

/// Whether this process runs on valgrind's synthetic CPU, asked with valgrind's documented client
/// request `RUNNING_ON_VALGRIND` (0x1001): a preamble of four rotations of `rdi` by 128 bits in all
/// (no change on a real CPU) and `xchg rbx, rbx`, which valgrind recognises and answers in `rdx`; a
/// real CPU leaves the default there, 0. On valgrind the clock runs slow, so every walk would look
/// cold: the scan would read every word of the stack (uninitialised ones included, which memcheck
/// reports) and callgrind would count it on every walk. There a walk never scans.
fn on_valgrind() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let request: [u64; 6] = [0x1001, 0, 0, 0, 0, 0];
        let answer: u64;
        // SAFETY: on a real CPU, rotations that leave `rdi` as it was and an exchange of `rbx` with
        // itself: only the flags change (not preserved here). On valgrind, it reads the six words
        // `rax` points to, alive for the whole block, and writes `rdx` only.
        unsafe {
            core::arch::asm!(
                "rol rdi, 3",
                "rol rdi, 13",
                "rol rdi, 61",
                "rol rdi, 51",
                "xchg rbx, rbx",
                in("rax") request.as_ptr(),
                inout("rdx") 0u64 => answer,
                options(nostack, readonly)
            );
        }
        answer != 0
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Two spans that cover `ranges` (sorted by start): split at the widest gap between consecutive
/// ranges, which on Linux separates the executable from the libraries near the stack. Empty spans
/// (`(0, 0)`) where there is nothing to cover.
fn code_spans(ranges: impl Iterator<Item = (usize, usize)>) -> [(usize, usize); 2] {
    let ranges: Vec<(usize, usize)> = ranges.filter(|(a, b)| a < b).collect();
    let (Some(first), Some(last)) = (ranges.first(), ranges.last()) else { return [(0, 0); 2] };
    let split = (1..ranges.len()).max_by_key(|&i| ranges[i].0.saturating_sub(ranges[i - 1].1));
    let end = |r: &[(usize, usize)]| r.iter().map(|x| x.1).max().unwrap_or(0);
    match split {
        Some(i) => [(first.0, end(&ranges[..i]).max(first.0)), (ranges[i].0, end(&ranges[i..]).max(ranges[i].0))],
        None => [(first.0, last.1), (0, 0)],
    }
}

/// Frees `old` (swapped out) once the walks that may read it have ended.
fn retire(old: *mut Set) {
    let epoch = EPOCH.fetch_add(1, SeqCst);
    let deadline = Instant::now() + Duration::from_secs(1);
    while READERS[epoch & 1].load(SeqCst) != 0 {
        if Instant::now() > deadline {
            tracing::debug!(target: "frag", "unwind tables: a walk did not end within 1 s (a forked child?): the old tables stay allocated");
            return;
        }
        std::thread::yield_now();
    }
    // SAFETY: `old` came from `Box::into_raw` in `refresh`, is no longer installed, and every reader
    // that could have loaded it registered in the drained slot.
    drop(unsafe { Box::from_raw(old) });
}

/// A loaded module as the loader lists it.
struct Found {
    cname: CString,
    base: usize,
    /// `.eh_frame_hdr`'s address, if the module has one.
    hdr: usize,
    /// Loaded segments, `[start, start + file size)`: mapped from the file, readable.
    segments: Vec<(usize, usize)>,
}

struct Listing {
    modules: Vec<Found>,
    adds: u64,
    subs: u64,
}

/// The loader's counts of loads and unloads (glibc's `dlpi_adds`, `dlpi_subs`), read from the first
/// module listed; allocation-free.
fn counts() -> Option<(u64, u64)> {
    /// # Safety
    ///
    /// A `dl_iterate_phdr` callback: `info` points to a valid `dl_phdr_info` for the call, and `data` to what the caller passed for it.
    unsafe extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        if size >= core::mem::offset_of!(libc::dl_phdr_info, dlpi_subs) + size_of::<u64>() {
            // SAFETY: `data` is the `Option` passed below; `info` is valid for this call and at
            // least `size` bytes (checked above for the counts).
            unsafe { *data.cast::<Option<(u64, u64)>>() = Some(((*info).dlpi_adds, (*info).dlpi_subs)) };
        }
        1 // stop after the first
    }
    let mut out: Option<(u64, u64)> = None;
    // SAFETY: `first` matches the callback type and only writes `out` through `data`.
    unsafe { crate::loader::iterate(first, (&raw mut out).cast()) };
    out
}

impl Found {
    /// The path the loader gives (empty for the executable).
    fn name(&self) -> std::borrow::Cow<'_, str> {
        self.cname.to_string_lossy()
    }
}

/// The loaded modules with an `.eh_frame_hdr`, and the loader's counts of loads and unloads.
fn loaded() -> Listing {
    /// # Safety
    ///
    /// A `dl_iterate_phdr` callback: `info` points to a valid `dl_phdr_info` for the call, and `data` to what the caller passed for it.
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: `data` is the `Listing` passed below, used by this thread only; `info` is valid for
        // this call (the loader's contract) and at least `size` bytes, checked before reading the
        // counts.
        let (listing, info) = unsafe { (&mut *data.cast::<Listing>(), &*info) };
        if size >= core::mem::offset_of!(libc::dl_phdr_info, dlpi_subs) + size_of::<u64>() {
            listing.adds = info.dlpi_adds;
            listing.subs = info.dlpi_subs;
        }
        let base = info.dlpi_addr as usize;
        let mut hdr = 0;
        let mut segments = Vec::new();
        for i in 0..usize::from(info.dlpi_phnum) {
            // SAFETY: the loader gives `dlpi_phnum` program headers at `dlpi_phdr`.
            let ph = unsafe { &*info.dlpi_phdr.add(i) };
            match ph.p_type {
                libc::PT_LOAD => {
                    let start = base.wrapping_add(ph.p_vaddr as usize);
                    segments.push((start, start.wrapping_add(ph.p_filesz as usize)));
                }
                libc::PT_GNU_EH_FRAME => hdr = base.wrapping_add(ph.p_vaddr as usize),
                _ => {}
            }
        }
        if hdr != 0 {
            let cname = if info.dlpi_name.is_null() {
                CString::default()
            } else {
                // SAFETY: the loader's name is a NUL-terminated string valid for this call.
                unsafe { CStr::from_ptr(info.dlpi_name) }.to_owned()
            };
            listing.modules.push(Found { cname, base, hdr, segments });
        }
        0
    }
    let mut listing = Listing { modules: Vec::new(), adds: 0, subs: 0 };
    // SAFETY: `each` matches the callback type and only uses `data` as the `Listing` given.
    unsafe { crate::loader::iterate(each, (&raw mut listing).cast()) };
    listing
}

/// The bytes of `f`'s segments from `addr` to the end of the segment holding it.
///
/// # Safety
///
/// `f` is loaded and stays loaded while the slice is used.
unsafe fn mapped_from(f: &Found, addr: usize) -> Option<Mapped<'static>> {
    let &(_, end) = f.segments.iter().find(|&&(s, e)| s <= addr && addr < e)?;
    // SAFETY: `[addr, end)` lies in a segment mapped from the file, readable, and the caller keeps
    // the module loaded.
    Some(Mapped { addr, bytes: unsafe { core::slice::from_raw_parts(addr as *const u8, end - addr) } })
}

/// Builds `f`'s rows while holding a reference to it, so that it cannot be unloaded meanwhile.
fn build_pinned(f: &Found) -> Option<Module> {
    let pin = Pin::new(f)?;
    // SAFETY: `pin` keeps the module loaded until it is dropped, after the build.
    let hdr = unsafe { mapped_from(f, f.hdr) }?;
    // SAFETY: as above.
    let built = cfi::build(hdr, |addr| unsafe { mapped_from(f, addr) });
    drop(pin);
    match built {
        Ok((rows, stats)) => Some(Module { name: f.name().into_owned(), base: f.base, hdr: f.hdr, rows, stats }),
        Err(e) => {
            tracing::debug!(target: "frag", "unwind tables: {} left out: {e:?}", f.name());
            None
        }
    }
}

/// A reference to a loaded library (`dlopen` with `RTLD_NOLOAD`), released on drop. The executable
/// (no name) needs none.
struct Pin(*mut libc::c_void);

impl Pin {
    fn new(f: &Found) -> Option<Self> {
        if f.cname.is_empty() {
            return Some(Self(core::ptr::null_mut()));
        }
        // SAFETY: a NUL-terminated name; RTLD_NOLOAD loads nothing, it only takes a reference.
        let handle = unsafe { libc::dlopen(f.cname.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
        if handle.is_null() {
            return None; // unloaded since it was listed (or not reachable by name, like the vDSO)
        }
        let pin = Self(handle);
        let mut map: *const usize = core::ptr::null();
        // SAFETY: `handle` is live; RTLD_DI_LINKMAP stores a `struct link_map *`, whose first field is
        // the load bias (`l_addr`, <link.h>).
        let ok = unsafe { libc::dlinfo(handle, libc::RTLD_DI_LINKMAP, (&raw mut map).cast()) } == 0 && !map.is_null();
        // SAFETY: `map` points at the loader's live link map of `handle`.
        (ok && unsafe { map.read() } == f.base).then_some(pin)
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: releases the reference `new` took.
            unsafe { libc::dlclose(self.0) };
        }
    }
}

/// For tests: builds every loaded module's rows into a set that is not installed.
#[cfg(test)]
pub(crate) fn scan_for_test() -> Set {
    build(&loaded(), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The spans cover every range, split at the widest gap; words outside every span do not pass.
    #[test]
    fn code_spans_cover_every_module_and_split_at_the_widest_gap() {
        let exe = (0x5555_0000_0000, 0x5555_0060_0000);
        let libs = [(0x7f00_0000_0000, 0x7f00_0020_0000), (0x7f00_0040_0000, 0x7f00_0050_0000)];
        let spans = code_spans([exe, libs[0], libs[1]].into_iter());
        assert_eq!(spans, [exe, (libs[0].0, libs[1].1)]);
        let set = Set { code: spans, ..Set::default() };
        for (a, b) in [exe, libs[0], libs[1]] {
            assert!(set.may_be_code(a) && set.may_be_code(b - 1));
        }
        for word in [0, 1, exe.0 - 1, exe.1, libs[0].0 - 1, libs[1].1, usize::MAX, 0x7ffd_0000_1000] {
            assert!(!set.may_be_code(word), "{word:#x}");
        }
        assert_eq!(code_spans([exe].into_iter()), [exe, (0, 0)]);
        let empty = Set::default();
        assert!(!empty.may_be_code(0) && !empty.may_be_code(exe.0));
    }

    /// Valgrind's client request tells its synthetic CPU from a real one: CI runs the unit tests
    /// natively and on memcheck (`FRAG_MEMCHECK`).
    #[test]
    fn valgrind_is_recognised() {
        assert_eq!(on_valgrind(), std::env::var_os("FRAG_MEMCHECK").is_some());
    }
}
