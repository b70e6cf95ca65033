//! The static shard pool: claim on a thread's first allocation, release at thread exit, reuse later.
//!
//! Nothing here allocates or takes a lock. A thread finds its shard through one thread-local pointer
//! (`thread::hot`), which points at the [`PARKED`] shard until the thread owns one: the parked
//! shard's clock is never started, so every allocation there takes the cold path, which reads the
//! thread's state (`thread::slot`). The first allocation on a thread takes the slow path below,
//! which claims a slot with a compare-and-swap, starts its sampling clock, and registers a pthread
//! key destructor that releases the slot when the thread exits. Released slots keep their counters: a new owner records where they stood as its `base`, so
//! process totals are plain sums over all slots and nothing is ever folded, moved or lost.
//!
//! Threads that find the pool full, allocate while claiming, or allocate after their slot was released
//! (late thread-teardown code) are counted in the shared overflow shard with atomic adds. There is no
//! thread limit that can fail: past [`POOL_SIZE`] live threads, attribution degrades, counts don't.

use crate::stats::registry::{Claimable, Registry, SETTING_UP};
pub(crate) use crate::stats::registry::{LIVE, RELEASED};
use crate::stats::shard::Shard;
use crate::stats::thread::{self, CLAIMING, EXITED, FIRST_ADDRESS, FRAG_WORK, NO_SLOT, PARKED, UNCLAIMED};
use crate::sync::{AtomicU8, AtomicU64, Ordering};

/// Number of per-thread shards. Each is 6.1 KiB of zeroed static memory (3.1 MiB in all, virtual)
/// that only becomes resident once a thread claims it (both figures asserted by a unit test below).
pub const POOL_SIZE: usize = 512;

static POOL: Registry<Shard, POOL_SIZE> = Registry::new([const { Shard::new() }; POOL_SIZE]);
static OVERFLOW: Shard = Shard::new();
/// frag's own shard: what threads allocate while doing frag's own work (`own`), written by anyone
/// with atomic adds and never part of the program's figures.
static FRAG: Shard = Shard::new();
/// Mixed into every clock's seed, so that processes draw independent samples: from `getrandom`,
/// once, at the first claim.
static PROCESS_SEED: AtomicU64 = AtomicU64::new(0);
/// Threads that found no free slot and write to the overflow shard.
static UNSLOTTED_THREADS: AtomicU64 = AtomicU64::new(0);

/// The calling thread's own shard, if it has one; `None` means "take the slow path".
#[inline(always)]
pub(crate) fn owned() -> Option<&'static Shard> {
    let word = thread::slot();
    // SAFETY: words at or above FIRST_ADDRESS are only ever stored by `slow` below, and are the
    // address of an element of the `'static` POOL array.
    (word >= FIRST_ADDRESS).then(|| unsafe { &*(word as *const Shard) })
}

pub(crate) use crate::stats::thread::{count_down, count_down_owing, give_back, on_clock, rehome};

/// The shard the fast path writes to: the calling thread's own, or `PARKED`.
#[inline(always)]
pub(crate) fn current() -> &'static Shard {
    thread::hot()
}

/// Whether `s` is the parked shard: a thread without a shard of its own (yet, or any more).
#[inline(always)]
pub(crate) fn is_parked(s: &Shard) -> bool {
    core::ptr::eq(s, &PARKED)
}

/// The calling thread's own shard (`Ok`), or, for a thread without one, what `slow` gives: its new
/// shard (`Ok`, once claimed) or the overflow one (`Err`).
#[inline(always)]
pub(crate) fn owned_or(slow: impl FnOnce() -> &'static Shard) -> Result<&'static Shard, &'static Shard> {
    match owned() {
        Some(s) => Ok(s),
        None => {
            let s = slow();
            owned().ok_or(s)
        }
    }
}

/// Where a count goes, and how it is written there.
#[derive(Clone, Copy)]
pub(crate) enum Home {
    /// The calling thread's own shard: plain stores (`shard::Owner`).
    Owned(&'static Shard),
    /// The overflow shard: atomic adds that keep the process-wide live figure (`shard::Anyone`).
    Overflow(&'static Shard),
    /// frag's own shard: atomic adds, outside every figure of the program's (`shard::Frag`).
    Frag(&'static Shard),
}

impl Home {
    /// The home that `s` is: frag's own shard, the overflow shard, or a thread's own (which only its
    /// owner may call its home).
    pub(crate) fn of(s: &'static Shard) -> Self {
        if core::ptr::eq(s, &FRAG) {
            Self::Frag(s)
        } else if core::ptr::eq(s, &OVERFLOW) {
            Self::Overflow(s)
        } else {
            Self::Owned(s)
        }
    }
}

/// `$body` with `$s` the shard of `$home` and `$w` the type of its writer (`shard::Owner`,
/// `shard::Anyone` or `shard::Frag`): the one dispatch from a home to generic counting code.
macro_rules! with_writer {
    ($home:expr, |$s:ident, $w:ident| $body:expr) => {
        match $home {
            $crate::stats::pool::Home::Owned($s) => {
                type $w = $crate::stats::shard::Owner;
                $body
            }
            $crate::stats::pool::Home::Overflow($s) => {
                type $w = $crate::stats::shard::Anyone;
                $body
            }
            $crate::stats::pool::Home::Frag($s) => {
                type $w = $crate::stats::shard::Frag;
                $body
            }
        }
    };
}
pub(crate) use with_writer;

/// The calling thread's home: its own shard, or what `slow` gives a thread without one (see
/// [`slow`]).
#[inline(always)]
pub(crate) fn home_or(slow: impl FnOnce() -> &'static Shard) -> Home {
    match owned_or(slow) {
        Ok(s) => Home::Owned(s),
        Err(s) => Home::of(s),
    }
}

/// frag's own shard.
pub(crate) fn frag() -> &'static Shard {
    &FRAG
}

/// Whether the calling thread is doing frag's own work (`own`).
#[inline]
pub(crate) fn frag_work() -> bool {
    thread::slot() == FRAG_WORK
}

/// The calling thread as origin tracking identifies it. Cold path only (may make a system call).
pub(crate) struct CallingThread {
    pub(crate) tid: u32,
    /// Pool slot index and the low 16 bits of its generation, for a thread with its own shard.
    pub(crate) slot: Option<(u16, u16)>,
    /// Where the thread's own origin figures go.
    pub(crate) shard: &'static Shard,
}

#[inline]
pub(crate) fn calling_thread() -> CallingThread {
    match owned() {
        Some(s) => CallingThread {
            tid: s.meta.tid.load(Ordering::Relaxed) as u32,
            slot: index_of(s).map(|i| (i as u16, s.meta.generation.load(Ordering::Relaxed) as u16)),
            shard: s,
        },
        None => CallingThread { tid: os::thread_id() as u32, slot: None, shard: &OVERFLOW },
    }
}

impl Claimable for Shard {
    fn state(&self) -> &AtomicU8 {
        &self.meta.state
    }
}

fn index_of(shard: &Shard) -> Option<usize> {
    POOL.index_of(shard)
}

/// Slot `index`, if it is still held by the owner that had generation `generation` (low 16 bits).
pub(crate) fn slot_if_generation(index: u16, generation: u16) -> Option<&'static Shard> {
    let s = POOL.get(usize::from(index))?;
    let state = s.meta.state.load(Ordering::Acquire);
    (s.meta.generation.load(Ordering::Relaxed) as u16 == generation && (state == LIVE || state == RELEASED))
        .then_some(s)
}

/// The shard for a thread that has none of its own: the first allocation on a thread claims one
/// (running `register` once, then starting the shard's clock at `mean()`); threads without a slot
/// get the overflow shard, and a thread doing frag's own work frag's own shard. Callers write to the
/// result with atomic adds, which is correct on any shard.
pub(crate) fn slow(register: impl FnOnce(), mean: fn() -> u64) -> &'static Shard {
    match thread::slot() {
        UNCLAIMED => {}
        FRAG_WORK => return &FRAG,
        _ => return &OVERFLOW,
    }
    thread::set_slot(CLAIMING);
    register();
    match POOL.claim() {
        Some(shard) => {
            let base = shard.totals();
            shard.set_base(base);
            shard.meta.tid.store(os::thread_id(), Ordering::Relaxed);
            shard.set_name(os::thread_name());
            let generation = shard.meta.generation.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
            let seed = (index_of(shard).unwrap_or(0) as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93)
                ^ generation.rotate_left(32)
                ^ process_seed();
            shard.hot.clock.start(seed, mean());
            POOL.expose(shard);
            exit_hook::install(shard);
            fork_hook::install();
            thread::set_slot(shard as *const Shard as usize);
            shard
        }
        None => {
            UNSLOTTED_THREADS.fetch_add(1, Ordering::Relaxed);
            thread::set_slot(NO_SLOT);
            &OVERFLOW
        }
    }
}

/// The process's seed: drawn once from `getrandom` (a system call: no allocation, no lock); the
/// clock's address and the time stand in where it fails.
fn process_seed() -> u64 {
    let seed = PROCESS_SEED.load(Ordering::Relaxed);
    if seed != 0 {
        return seed;
    }
    let mut bytes = [0u8; 8];
    // SAFETY: `bytes` is a valid buffer of the length passed; GRND_NONBLOCK never waits.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), libc::GRND_NONBLOCK) };
    let mut seed = u64::from_ne_bytes(bytes);
    if n != bytes.len() as isize {
        seed = super::clock::now_ns().rotate_left(29) ^ (&PROCESS_SEED as *const AtomicU64 as u64);
    }
    let seed = seed | 1;
    match PROCESS_SEED.compare_exchange(0, seed, Ordering::Relaxed, Ordering::Relaxed) {
        Ok(_) => seed,
        Err(won) => won,
    }
}

/// Called once on the exiting thread, after Rust's thread-local destructors have run.
fn vacate(shard: &'static Shard) {
    shard.fold_live();
    // Rust names a spawned thread after its first allocations may already have happened; by now the
    // name is final.
    shard.set_name(os::thread_name());
    // From here on this thread's allocations go to the overflow shard; it must not touch `shard` again.
    thread::set_slot(EXITED);
    POOL.vacate(shard);
}

/// Reading side: the slots used so far and the overflow shard. Allocation-free. The calling
/// thread's countdown goes to its shard first (`thread::fold_countdown`), so that its own figures are
/// exact.
pub(crate) fn used_slots() -> &'static [Shard] {
    thread::fold_countdown();
    POOL.used()
}

pub(crate) fn overflow() -> &'static Shard {
    &OVERFLOW
}

pub(crate) fn unslotted_threads() -> u64 {
    UNSLOTTED_THREADS.load(Ordering::Relaxed)
}

#[cfg(unix)]
mod exit_hook {
    //! Thread-exit notification through a pthread key destructor.
    //!
    //! Why not a thread-local with `Drop`: the standard library registers its destructor lazily on
    //! first access, which allocates on some platforms, and accessing such a thread-local during
    //! teardown fails. A pthread key is created once, setting its value never goes through Rust's
    //! allocator, and glibc runs key destructors after `__call_tls_dtors`, so allocations made by Rust
    //! thread-local destructors are still counted in the exiting thread's own shard.

    use super::{Shard, vacate};
    use crate::sync::{AtomicUsize, Ordering};

    const UNINIT: usize = 0;
    const BUSY: usize = 1;
    const FAILED: usize = 2;
    const OFFSET: usize = 3;
    static KEY: AtomicUsize = AtomicUsize::new(UNINIT);

    /// # Safety
    ///
    /// Called by the C library at thread exit with the value stored under `KEY`: null, or a `&'static Shard` stored by `install`.
    unsafe extern "C" fn on_exit(value: *mut libc::c_void) {
        if !value.is_null() {
            // SAFETY: the only non-null value ever stored under KEY is a `&'static Shard` (see
            // `install`).
            vacate(unsafe { &*(value as *const Shard) });
        }
    }

    fn key() -> Option<libc::pthread_key_t> {
        loop {
            match KEY.load(Ordering::Acquire) {
                UNINIT => {
                    if KEY.compare_exchange(UNINIT, BUSY, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                        let mut key: libc::pthread_key_t = 0;
                        // SAFETY: `key` is a valid out-pointer and `on_exit` has the destructor ABI.
                        let rc = unsafe { libc::pthread_key_create(&mut key, Some(on_exit)) };
                        let word = if rc == 0 { key as usize + OFFSET } else { FAILED };
                        KEY.store(word, Ordering::Release);
                    }
                }
                // Another thread is creating the key; that takes microseconds and cannot block on us.
                BUSY => std::thread::yield_now(),
                FAILED => return None,
                word => return Some((word - OFFSET) as libc::pthread_key_t),
            }
        }
    }

    /// In a forked child: a key creation the parent had in flight will never finish here.
    pub(super) fn after_fork_in_child() {
        let _ = KEY.compare_exchange(BUSY, UNINIT, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Arranges for `shard` to be released when the calling thread exits. Without a key (the process
    /// ran out of them) the slot simply stays with its thread's figures; totals are unaffected.
    pub(super) fn install(shard: &'static Shard) {
        if let Some(key) = key() {
            // SAFETY: `key` was created by `pthread_key_create`; the value is a `'static` pointer.
            unsafe { libc::pthread_setspecific(key, shard as *const Shard as *const libc::c_void) };
        }
    }
}

/// In a child process just after `fork()`: only the forking thread exists there. Every other slot
/// whose owner was alive in the parent is released (its figures stay, as retired), a slot caught
/// mid-claim is freed, and the forking thread's slot takes the child's thread id. Runs
/// single-threaded, before the child's first instruction after `fork` returns.
fn after_fork_in_child() {
    let me = owned();
    for shard in used_slots() {
        if me.is_some_and(|m| core::ptr::eq(m, shard)) {
            shard.meta.tid.store(os::thread_id(), Ordering::Relaxed);
            continue;
        }
        match shard.meta.state.load(Ordering::Relaxed) {
            LIVE => {
                // Its owner is gone, so this thread may act as the owner one last time.
                shard.fold_live();
                POOL.vacate(shard);
            }
            SETTING_UP => {
                shard.set_base(shard.totals());
                POOL.vacate(shard);
            }
            _ => {}
        }
    }
    exit_hook::after_fork_in_child();
}

#[cfg(unix)]
mod fork_hook {
    //! A `pthread_atfork` child handler, registered once, on the first shard claim. glibc's
    //! `pthread_atfork` never calls back into Rust's allocator, so registering it from the claim slow
    //! path cannot re-enter `Tracked`.

    use crate::sync::{AtomicBool, Ordering};

    static REGISTERED: AtomicBool = AtomicBool::new(false);

    extern "C" fn child() {
        super::after_fork_in_child();
    }

    pub(super) fn install() {
        if !REGISTERED.swap(true, Ordering::AcqRel) {
            // SAFETY: `child` has the handler ABI and stays valid for the life of the process. A
            // failure (ENOMEM) leaves forked children with the parent's view of its threads.
            unsafe { libc::pthread_atfork(None, None, Some(child)) };
        }
    }
}

#[cfg(not(unix))]
mod fork_hook {
    pub(super) fn install() {}
}

#[cfg(not(unix))]
mod exit_hook {
    //! No portable thread-exit hook that avoids Rust's allocator: slots stay with their thread.
    pub(super) fn install(_: &'static super::Shard) {}
    pub(super) fn after_fork_in_child() {}
}

mod os {
    //! The OS's view of the calling thread, read with raw system calls only.

    #[cfg(any(target_os = "linux", target_os = "android"))]
    pub(super) fn thread_id() -> u64 {
        // SAFETY: gettid takes no arguments and cannot fail.
        unsafe { libc::syscall(libc::SYS_gettid) as u64 }
    }

    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    pub(super) fn thread_id() -> u64 {
        0
    }

    /// The kernel's name for the calling thread (at most 15 bytes; Rust sets it from the thread's
    /// name when it spawns a named thread).
    #[cfg(any(target_os = "linux", target_os = "android"))]
    pub(super) fn thread_name() -> [u8; 16] {
        let mut buf = [0u8; 16];
        // SAFETY: PR_GET_NAME writes at most 16 bytes, including the NUL, into `buf`.
        unsafe { libc::prctl(libc::PR_GET_NAME, buf.as_mut_ptr()) };
        buf
    }

    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    pub(super) fn thread_name() -> [u8; 16] {
        [0; 16]
    }
}

#[cfg(test)]
mod stated_sizes {
    use super::*;

    /// The figures the docs above state.
    #[test]
    fn pool_and_shard_sizes_are_as_documented() {
        let shard = size_of::<Shard>() as f64 / 1024.0;
        let pool = (POOL_SIZE * size_of::<Shard>()) as f64 / (1 << 20) as f64;
        assert_eq!(format!("{shard:.1} KiB, {pool:.1} MiB"), "6.1 KiB, 3.1 MiB");
    }
}
