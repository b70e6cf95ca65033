//! The one sampler: which allocations are followed, what each one stands for, and how a free finds
//! them again. Origin tallies (`origin`) and allocation sites (`sites`) both consume its samples.
//!
//! - **When** (`stats::clock`, which each thread's shard holds): a Poisson countdown over each
//!   thread's allocated bytes, decided before the inner call: a block of `s` bytes is sampled with probability `1 - exp(-s / mean)`, independent of
//!   its address and of everything before it;
//! - **how a free knows** (`mark`): a sampled block is placed 8 bytes past a 4 KiB boundary (small
//!   requests aligned to at most 8 bytes) or on one (the others), so a free whose pointer is neither
//!   knows from the pointer alone that there is nothing to look up;
//! - **what is remembered** (`side_table`): each sampled block's allocating thread, size, weight, birth
//!   time, site and mark, in a fixed lock-free side table, until its free (or reallocation) removes
//!   it, before the block goes back to the allocator;
//! - **asking the allocator about them** (`gate`): a report's question about live sampled blocks
//!   runs in a window their frees wait for.
//!
//! Set the mean with [`set_sampling`] or [`Tracked::with_sampling`](crate::Tracked::with_sampling).

pub(crate) mod buckets;
pub(crate) mod gate;
pub(crate) mod mark;
pub(crate) mod side_table;

use core::alloc::Layout;
use core::fmt;

use crate::sync::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use gate::Gate;
use side_table::{SampledBlock, Table};

/// Every live sampled block.
pub(crate) static TABLE: Table = Table::new();

/// Between questions about live sampled blocks and their frees.
static GATE: Gate = Gate::new();

/// The mean in bytes between samples; [`OFF`] when sampling is off, 0 for every block.
static MEAN: AtomicU64 = AtomicU64::new(DEFAULT_MEAN);

/// The default mean: 512 KiB, the convention of jemalloc's `lg_prof_sample:19`, tcmalloc and Go's
/// `MemProfileRate`.
pub(crate) const DEFAULT_MEAN: u64 = 512 << 10;

/// `MEAN` when sampling is off.
pub(crate) const OFF: u64 = u64::MAX;

/// The smallest mean that is not `EveryBlock` in disguise.
const MIN_MEAN: u64 = 4 << 10;

/// Which allocations are sampled: followed from allocation to free for their origin (allocating
/// thread, lifetime, the thread that frees them) and their site (stack).
///
/// The sample is by bytes: on average one sample per [`MeanBytes`](Sampling::MeanBytes) allocated on
/// each thread, a block of `s` bytes with probability `1 - exp(-s / mean)` (large blocks nearly
/// always, small ones rarely), decided before the allocator is called and independent of the address
/// it returns. Every estimate weighs each sample by the inverse of that probability, as jemalloc's,
/// tcmalloc's and Go's heap profilers do. An estimate resting on `k` samples has a relative standard
/// error of about `1 / sqrt(k)`: a figure of `B` bytes about `sqrt(mean / B)` (8.8% at 64 MiB with
/// the default mean).
///
/// **Cost.** An unsampled allocation costs a countdown (a load, a subtraction, a test and a store);
/// an unsampled free a test of its pointer. A sampled allocation takes the cold path: a stack walk
/// (0.37 to 0.46 µs for 32 frames from the unwind tables, warm; about 60 ns with frame pointers; see
/// `docs/UNWIND.md`) and an entry in the side table until it is freed.
///
/// **Memory.** A sampled block is allocated 4 KiB-aligned (its mark), which costs up to 4 KiB per live
/// sampled small block (large blocks are page-aligned anyway on jemalloc, mimalloc and snmalloc):
/// about 0.8% of live bytes at the default mean. Below a mean of 64 KiB (and for
/// `EveryBlock`) blocks are not marked and keep their layout; every free then looks in the side table
/// instead, for the rest of the process (a block sampled without the mark must still be found).
/// Those means need the exact tier (`Tracked<_, frag::Exact>`): the sampled tier's frees test the
/// mark alone, and refuse them ([`SamplingError::NeedsExactTier`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Sampling {
    /// Nothing is sampled: no origin, no sites.
    Off,
    /// Every allocation: exact origin and site figures, for tests and debugging, in the exact tier
    /// (`Tracked<_, frag::Exact>`; the sampled tier refuses it). Every free takes the
    /// cold path from then on (about 100 ns per allocation + free), and blocks beyond the side
    /// table's capacity (16,384 live) are dropped from the figures (the report counts them).
    EveryBlock,
    /// One sample per this many allocated bytes on average (at least 4096).
    MeanBytes(u64),
}

impl Sampling {
    /// The default: one sample per 512 KiB allocated.
    pub const DEFAULT: Self = Self::MeanBytes(DEFAULT_MEAN);

    /// The mean as the sampler keeps it: [`OFF`], 0 for every block, or the mean.
    pub(crate) const fn mean(self) -> Result<u64, SamplingError> {
        match self {
            Self::Off => Ok(OFF),
            Self::EveryBlock => Ok(0),
            Self::MeanBytes(m) if m < MIN_MEAN || m == OFF => Err(SamplingError::TooSmall { mean: m }),
            Self::MeanBytes(m) => Ok(m),
        }
    }

    pub(crate) const fn from_mean(m: u64) -> Self {
        match m {
            OFF => Self::Off,
            0 => Self::EveryBlock,
            m => Self::MeanBytes(m),
        }
    }
}

/// Serialises as `{"mean_bytes": n}`, `"every_block"` or `"off"`.
#[cfg(feature = "serde")]
impl serde::Serialize for Sampling {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            Self::MeanBytes(m) => {
                let mut map = ser.serialize_map(Some(1))?;
                map.serialize_entry("mean_bytes", m)?;
                map.end()
            }
            Self::EveryBlock => ser.serialize_str("every_block"),
            Self::Off => ser.serialize_str("off"),
        }
    }
}

impl Default for Sampling {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// A [`Sampling`] that cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SamplingError {
    /// `MeanBytes` below 4096 (or `u64::MAX`): use `EveryBlock` for exact figures.
    TooSmall {
        /// The mean asked for.
        mean: u64,
    },
    /// `EveryBlock`, or a mean below 64 KiB, in the sampled tier: its frees tell sampled blocks by
    /// their mark alone, and at such means blocks are not marked. Use `Tracked<_, frag::Exact>`
    /// (where every free can look in the side table), or a mean of at least 64 KiB.
    NeedsExactTier {
        /// The mean asked for (0 for `EveryBlock`).
        mean: u64,
    },
    /// jemalloc's profiler samples (`frag::sample_in_jemalloc`): its mean is changed there.
    InJemalloc,
}

impl fmt::Display for SamplingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooSmall { mean } => write!(
                f,
                "Sampling::MeanBytes({mean}) is outside 4096..=18446744073709551614 (the exact tier's; the sampled \
                 tier's is {}..=18446744073709551614): use Sampling::EveryBlock (exact tier) for exact figures",
                mark::MIN_MARKING_MEAN
            ),
            Self::NeedsExactTier { mean: 0 } => write!(
                f,
                "Sampling::EveryBlock needs Tracked<_, frag::Exact>: the sampled tier accepts \
                 Sampling::MeanBytes({}..=18446744073709551614) only (it follows marked blocks alone)",
                mark::MIN_MARKING_MEAN
            ),
            Self::NeedsExactTier { mean } => write!(
                f,
                "Sampling::MeanBytes({mean}) is outside the sampled tier's {}..=18446744073709551614 (it follows \
                 marked blocks alone): use Tracked<_, frag::Exact> or a larger mean",
                mark::MIN_MARKING_MEAN
            ),
            Self::InJemalloc => f.write_str(
                "jemalloc's profiler does the sampling (frag::sample_in_jemalloc): change its mean with \
                 frag::sample_in_jemalloc",
            ),
        }
    }
}

impl std::error::Error for SamplingError {}

/// Sets the sampling for the whole process, from now on: at once on the calling thread, and on every
/// other thread once its current interval runs out (at the old mean; new threads start with the new
/// one). Blocks sampled before keep their weight. Returns the setting in effect.
///
/// # Errors
///
/// [`SamplingError::TooSmall`] for a mean below 4096 bytes; [`SamplingError::NeedsExactTier`] for
/// `EveryBlock` or a mean below 64 KiB under the sampled tier (`Tracked<A>`);
/// [`SamplingError::InJemalloc`] while jemalloc's profiler samples.
///
/// # Example
///
/// ```no_run
/// #[global_allocator]
/// static A: frag::Tracked<std::alloc::System, frag::Exact> = frag::Tracked::new(std::alloc::System);
///
/// // One sample per 128 KiB allocated: finer profiles, more samples in the side table.
/// frag::set_sampling(frag::Sampling::MeanBytes(128 << 10)).unwrap();
/// // Exact origin and site figures while debugging a test (the exact tier only):
/// frag::set_sampling(frag::Sampling::EveryBlock).unwrap();
/// ```
pub fn set_sampling(s: Sampling) -> Result<Sampling, SamplingError> {
    let mean = s.mean()?;
    if REPORTED.load(Ordering::Relaxed) {
        return Err(SamplingError::InJemalloc);
    }
    apply(mean)?;
    EXPLICIT.store(true, Ordering::Relaxed);
    if let Some(s) = crate::stats::pool::owned() {
        crate::stats::pool::on_clock(&s.hot.clock, false, |c| c.restart_now(mean));
    }
    Ok(Sampling::from_mean(mean))
}

/// Whether `set_sampling` was called: a `Tracked`'s configured sampling then no longer applies.
static EXPLICIT: AtomicBool = AtomicBool::new(false);

/// Makes `mean` the process's mean, unless the tier cannot sample at it.
fn apply(mean: u64) -> Result<(), SamplingError> {
    // Before any block is sampled at this mean (see `mark`).
    if mean < mark::MIN_MARKING_MEAN && !mark::look_up_every_free() {
        return Err(SamplingError::NeedsExactTier { mean });
    }
    MEAN.store(mean, Ordering::SeqCst);
    Ok(())
}

/// Called at registration (the process's first shard claim, before any block is sampled), before
/// [`configure`]: the sampled tier follows marked blocks only (`mark::marks_only`). A mean that
/// `set_sampling` set before then and that the tier cannot use falls back to the default; the report
/// warns ([`configured_error`]).
pub(crate) fn register_tier(exact: bool) {
    if exact {
        return;
    }
    let mean = mean();
    if !mark::marks_only() {
        refuse(SamplingError::NeedsExactTier { mean });
        MEAN.store(DEFAULT_MEAN, Ordering::SeqCst);
    }
}

/// The current sampling.
#[must_use]
pub fn sampling() -> Sampling {
    Sampling::from_mean(mean())
}

/// The current mean: [`OFF`], 0 for every block, or the mean.
#[inline]
pub(crate) fn mean() -> u64 {
    MEAN.load(Ordering::Relaxed)
}

/// The mean that count intervals assume for blocks nobody sampled: the current one, or the default
/// while sampling is off or takes every block.
pub(crate) fn interval_mean() -> u64 {
    match mean() {
        m if m == 0 || m == OFF => DEFAULT_MEAN,
        m => m,
    }
}

/// Applies a `Tracked`'s configured sampling at registration (the process's first shard claim),
/// unless `set_sampling` came first. An invalid configuration keeps the default; the report warns
/// ([`configured_error`]).
pub(crate) fn configure(s: Sampling) {
    if EXPLICIT.load(Ordering::Relaxed) {
        return;
    }
    if let Err(e) = s.mean().and_then(apply) {
        refuse(e);
    }
}

/// Why a sampling the installed `Tracked` was given was not applied: 0 none, 1 `TooSmall`, 2
/// `NeedsExactTier`; and its mean.
static INVALID: AtomicU8 = AtomicU8::new(0);
static INVALID_MEAN: AtomicU64 = AtomicU64::new(0);

fn refuse(e: SamplingError) {
    let (code, mean) = match e {
        SamplingError::TooSmall { mean } => (1, mean),
        SamplingError::NeedsExactTier { mean } => (2, mean),
        SamplingError::InJemalloc => return,
    };
    INVALID_MEAN.store(mean, Ordering::Relaxed);
    INVALID.store(code, Ordering::Release);
}

/// Why the installed `Tracked`'s configured sampling (or one set before its first allocation) was
/// not applied, if it was not.
pub(crate) fn configured_error() -> Option<SamplingError> {
    let mean = || INVALID_MEAN.load(Ordering::Relaxed);
    match INVALID.load(Ordering::Acquire) {
        1 => Some(SamplingError::TooSmall { mean: mean() }),
        2 => Some(SamplingError::NeedsExactTier { mean: mean() }),
        _ => None,
    }
}

pub(crate) use mark::{at_its_own_mark, in_an_occupied_bucket, may_carry_a_mark, maybe_sampled, maybe_sampled_marked};

/// Puts the sampled block at `ptr` in the side table, before it is handed out. `false` (and a
/// counted drop) when its neighbourhood is full.
pub(crate) fn insert(ptr: *mut u8, entry: SampledBlock) -> bool {
    let kept = TABLE.insert(ptr, entry);
    if kept {
        mark::noted(ptr);
    }
    kept
}

/// The entry of the block at `ptr` (requested with `layout`), if it was sampled, left in place.
/// Owner only (the thread freeing or reallocating the block).
pub(crate) fn peek(ptr: *mut u8, layout: Layout) -> Option<SampledBlock> {
    if maybe_sampled(ptr, layout) { TABLE.get(ptr) } else { None }
}

/// Removes the entry of the block at `ptr` (requested with `layout`) out of the side table, if it was
/// sampled, before the block (and its twin) go back to the allocator, and passes the gate (a report
/// may be asking the allocator about it: `gate`). Owner only.
pub(crate) fn remove(ptr: *mut u8, layout: Layout) -> Option<SampledBlock> {
    let e = if maybe_sampled(ptr, layout) { TABLE.remove(ptr) } else { None };
    if e.is_some() {
        mark::forgotten(ptr);
        GATE.pass();
    }
    e
}

/// Sets the mean of a sampler that runs elsewhere (jemalloc's, see `hooked`): what weights and
/// intervals assume. Nothing here samples at it.
#[cfg_attr(not(feature = "jemalloc"), allow(dead_code))] // used by `hooked` alone
pub(crate) fn set_reported_mean(mean: u64) {
    MEAN.store(mean, Ordering::SeqCst);
    EXPLICIT.store(true, Ordering::Relaxed);
    REPORTED.store(true, Ordering::Relaxed);
}

/// Whether the sampling runs elsewhere ([`set_reported_mean`]): [`set_sampling`] then refuses.
static REPORTED: AtomicBool = AtomicBool::new(false);

/// Whether the sampling runs in the allocator ([`set_reported_mean`]).
pub(crate) fn reported() -> bool {
    REPORTED.load(Ordering::Relaxed)
}

/// Puts a block sampled by an allocator that reports its sampled frees itself (jemalloc's hooks) in
/// the side table: unmarked, found by its free's report rather than by its address. `false` when
/// its neighbourhood is full.
#[cfg_attr(not(feature = "jemalloc"), allow(dead_code))] // used by `hooked` alone
pub(crate) fn insert_reported(ptr: *mut u8, entry: SampledBlock) -> bool {
    TABLE.insert(ptr, entry)
}

/// Removes the entry of a block [`insert_reported`] put in the side table, if it is there. Owner only.
#[cfg_attr(not(feature = "jemalloc"), allow(dead_code))] // used by `hooked` alone
pub(crate) fn remove_reported(ptr: *mut u8) -> Option<SampledBlock> {
    TABLE.remove(ptr)
}

/// Calls `f(slot, address, entry)` with every sampled block still live (report side; see
/// `Table::for_each`).
pub(crate) fn for_each_live(f: impl FnMut(usize, usize, SampledBlock)) {
    TABLE.for_each(f);
}

/// Asks `ask` about the live sampled blocks of `queries` (from [`for_each_live`]) with their frees held
/// back meanwhile: `answers[i]` gets the answer for `queries[i]` if its block was still live (see
/// `Gate::ask`; `ask` must not allocate or free). Whether the allocator answered: `false` when `ask`
/// refused, and for blocks jemalloc's profiler sampled ([`reported`]), which are never asked about
/// (they sit outside their natural slabs, and their frees are reported after the fact).
pub(crate) fn ask_live<T: Copy + Default>(
    queries: &[gate::Query],
    answers: &mut [Option<T>],
    ask: impl FnMut(&[usize], &mut [T]) -> bool,
) -> bool {
    if reported() {
        return false;
    }
    // A child forked mid-question must find its windows closed; without the handler, no question.
    fork_hook::install() && GATE.ask(&TABLE, queries, answers, ask)
}

#[cfg(unix)]
mod fork_hook {
    //! A `pthread_atfork` child handler, registered once, before the first window opens: a child
    //! forked while a report of the parent's was asking has no asker to close its window.

    use crate::sync::{AtomicBool, Ordering};

    static REGISTERED: AtomicBool = AtomicBool::new(false);

    extern "C" fn child() {
        super::GATE.after_fork_in_child();
    }

    /// Whether the handler is registered (now or before). Two first callers at once may both
    /// register it: the handler runs twice in a child, which is harmless.
    pub(super) fn install() -> bool {
        if REGISTERED.load(Ordering::Acquire) {
            return true;
        }
        // SAFETY: `child` has the handler ABI and stays valid for the life of the process.
        let registered = unsafe { libc::pthread_atfork(None, None, Some(child)) } == 0;
        if registered {
            REGISTERED.store(true, Ordering::Release);
        }
        registered
    }
}

#[cfg(not(unix))]
mod fork_hook {
    pub(super) fn install() -> bool {
        true
    }
}

/// 64 random bits that belong to the sample `e` (from its birth time and size): the same whenever
/// its entry is read, so that a figure rounded at random when the block is allocated is rounded the
/// same way when it is freed.
pub(crate) fn rounding(e: &SampledBlock) -> u64 {
    crate::stats::clock::splitmix64(e.born ^ e.size.rotate_left(32))
}

pub(crate) use crate::stats::clock::now_ns;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_means_are_refused() {
        assert_eq!(Sampling::MeanBytes(4095).mean(), Err(SamplingError::TooSmall { mean: 4095 }));
        assert_eq!(Sampling::MeanBytes(u64::MAX).mean(), Err(SamplingError::TooSmall { mean: u64::MAX }));
        assert_eq!(Sampling::MeanBytes(4096).mean(), Ok(4096));
        for s in [Sampling::DEFAULT, Sampling::Off, Sampling::EveryBlock] {
            assert_eq!(Sampling::from_mean(s.mean().unwrap()), s);
        }
    }

    /// A child forked while a window is open (its asker stays in the parent) passes the gate, as its
    /// first sampled free must: the fork handler closed the window. Without it the child would wait
    /// forever (checked by breaking `Gate::after_fork_in_child`: the child is killed at the limit).
    #[cfg(unix)]
    #[test]
    fn a_child_forked_while_a_window_is_open_passes_the_gate() {
        use std::time::{Duration, Instant};

        let address = 0x7e00_0000_1000usize;
        let entry = SampledBlock {
            tid: 1,
            slot: None,
            size: 160,
            weight: 1.0,
            born: 1,
            site: 0,
            marked: false,
            lead: 0,
            twin: 0,
            frag: false,
            scope: 0,
        };
        assert!(TABLE.insert(address as *mut u8, entry));
        let mut queries = Vec::new();
        for_each_live(|slot, a, e| {
            if a == address {
                queries.push(gate::Query { slot, address: a, twin: e.twin, at: a });
            }
        });
        let mut answers = vec![None; queries.len()];
        let mut child = None;
        let answered = ask_live(&queries, &mut answers, |_, out: &mut [u8]| {
            // Inside the window: the child does what a sampled free does after removing its entry.
            // SAFETY: the child only runs atomics and `_exit`.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                GATE.pass();
                // SAFETY: ends the child at once.
                unsafe { libc::_exit(0) };
            }
            let start = Instant::now();
            let mut status = 0;
            // SAFETY: `pid` is this process's child; `status` is a valid out-pointer.
            while unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } != pid {
                if start.elapsed() > Duration::from_secs(30) {
                    // SAFETY: as above; the child is still running.
                    unsafe {
                        libc::kill(pid, libc::SIGKILL);
                        libc::waitpid(pid, &mut status, 0);
                    }
                    break;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            child = Some(status);
            out.fill(1);
            true
        });
        assert!(TABLE.remove(address as *mut u8).is_some());
        assert!(answered, "the block was asked about");
        assert_eq!(answers, [Some(1)]);
        let status = child.expect("the child was forked inside the window");
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child hung in the gate (status {status})"
        );
    }
}
