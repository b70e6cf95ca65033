//! mimalloc: its options as a typed enum, and `mi_collect`.
//!
//! mimalloc numbers its options in a C enum that changed between v2 and v3 after option 25; the
//! numbers here follow the version linked in (read from `mi_version()`), and options that exist in
//! only one version are refused in the other. `mi_option_set` is not thread-safe in mimalloc: set
//! options at start-up, before threads allocate heavily.

use core::time::Duration;

use libmimalloc_sys as sys;

use crate::backend::Backend;
use crate::backend::tuning::{DECAY_EXPECTED, Decay, Released, TuneError};

const NAME: &str = "mimalloc";

/// When mimalloc commits arena memory (`arena_eager_commit`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EagerCommit {
    /// Commit on demand.
    Never,
    /// Commit whole arenas up front.
    Always,
    /// Commit up front only on systems that overcommit (Linux): mimalloc's default.
    OnOvercommit,
}

/// A mimalloc option with its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MimallocOption {
    /// `purge_delay`: how long freed pages stay before being purged (default 10 ms).
    ///
    /// [`Decay::Immediate`] is refused at run time: set with `mi_option_set` on a running process,
    /// 0 left freed memory stranded (RSS stayed near 200 MiB after `mi_collect(true)` in our
    /// measurement), while `MIMALLOC_PURGE_DELAY=0` in the environment at start-up works.
    PurgeDelay(Decay),
    /// `purge_decommits`: purge by decommitting (`true`, default) or by resetting (`MADV_FREE`).
    PurgeDecommits(bool),
    /// `arena_eager_commit`.
    ArenaEagerCommit(EagerCommit),
    /// `arena_reserve`: initial size of each arena reservation, in bytes (whole KiB; default 1 GiB).
    ArenaReserve(usize),
    /// `arena_purge_mult`: arenas purge after `purge_delay` times this (default 10).
    ArenaPurgeMult(u32),
    /// `allow_large_os_pages`: use 2 MiB OS pages (implies eager commit).
    AllowLargeOsPages(bool),
    /// `allow_thp`: allow transparent huge pages for the process (default on).
    AllowThp(bool),
    /// `use_numa_nodes`: use at most this many NUMA nodes (0: all).
    UseNumaNodes(u32),
    /// `disallow_os_alloc`: allocate only from pre-reserved arenas.
    DisallowOsAlloc(bool),
    /// `generic_collect`: collect heaps every this many generic allocation calls (default 10,000).
    GenericCollect(u32),
    /// `abandoned_reclaim_on_free` (v2 only): a free may reclaim an abandoned segment.
    AbandonedReclaimOnFree(bool),
    /// `eager_commit_delay` (v2 only): the first N segments of a thread are committed on demand.
    EagerCommitDelay(u32),
    /// `page_full_retain` (v3 only): full small pages kept per size class (default 2).
    PageFullRetain(u32),
    /// `minimal_purge_size` (v3 only): smallest purge, in bytes (whole KiB).
    MinimalPurgeSize(usize),
}

/// The option numbers of each mimalloc major version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Major {
    V2,
    V3,
}

fn major() -> Major {
    // SAFETY: mi_version has no preconditions.
    if unsafe { sys::mi_version() } >= 30000 { Major::V3 } else { Major::V2 }
}

impl MimallocOption {
    /// The option's name, as in `MIMALLOC_<NAME>` (lower case).
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Self::PurgeDelay(_) => "purge_delay",
            Self::PurgeDecommits(_) => "purge_decommits",
            Self::ArenaEagerCommit(_) => "arena_eager_commit",
            Self::ArenaReserve(_) => "arena_reserve",
            Self::ArenaPurgeMult(_) => "arena_purge_mult",
            Self::AllowLargeOsPages(_) => "allow_large_os_pages",
            Self::AllowThp(_) => "allow_thp",
            Self::UseNumaNodes(_) => "use_numa_nodes",
            Self::DisallowOsAlloc(_) => "disallow_os_alloc",
            Self::GenericCollect(_) => "generic_collect",
            Self::AbandonedReclaimOnFree(_) => "abandoned_reclaim_on_free",
            Self::EagerCommitDelay(_) => "eager_commit_delay",
            Self::PageFullRetain(_) => "page_full_retain",
            Self::MinimalPurgeSize(_) => "minimal_purge_size",
        }
    }

    /// `mi_option_t` in `major`, or `None` if that version lacks the option.
    fn number(&self, major: Major) -> Option<sys::mi_option_t> {
        use Major::{V2, V3};
        Some(match (self, major) {
            (Self::ArenaEagerCommit(_), _) => 4,
            (Self::PurgeDecommits(_), _) => 5,
            (Self::AllowLargeOsPages(_), _) => 6,
            (Self::EagerCommitDelay(_), V2) => 14,
            (Self::PurgeDelay(_), _) => 15,
            (Self::UseNumaNodes(_), _) => 16,
            (Self::DisallowOsAlloc(_), _) => 17,
            (Self::ArenaReserve(_), _) => 23,
            (Self::ArenaPurgeMult(_), _) => 24,
            (Self::AbandonedReclaimOnFree(_), V2) => 26,
            (Self::GenericCollect(_), V2) => 36,
            (Self::AllowThp(_), V2) => 37,
            (Self::GenericCollect(_), V3) => 34,
            (Self::PageFullRetain(_), V3) => 36,
            (Self::AllowThp(_), V3) => 43,
            (Self::MinimalPurgeSize(_), V3) => 44,
            (Self::EagerCommitDelay(_) | Self::AbandonedReclaimOnFree(_), V3)
            | (Self::PageFullRetain(_) | Self::MinimalPurgeSize(_), V2) => return None,
        })
    }

    /// The raw value, or what is accepted.
    fn raw(&self) -> Result<libc::c_long, &'static str> {
        let kib = |bytes: usize| {
            (bytes % 1024 == 0).then(|| libc::c_long::try_from(bytes / 1024).ok()).flatten().ok_or("whole KiB")
        };
        Ok(match *self {
            Self::PurgeDelay(d) => {
                d.as_millis().and_then(|ms| libc::c_long::try_from(ms).ok()).ok_or(DECAY_EXPECTED)?
            }
            Self::PurgeDecommits(b)
            | Self::AllowLargeOsPages(b)
            | Self::AllowThp(b)
            | Self::DisallowOsAlloc(b)
            | Self::AbandonedReclaimOnFree(b) => libc::c_long::from(b),
            Self::ArenaEagerCommit(e) => match e {
                EagerCommit::Never => 0,
                EagerCommit::Always => 1,
                EagerCommit::OnOvercommit => 2,
            },
            Self::ArenaReserve(bytes) | Self::MinimalPurgeSize(bytes) => kib(bytes)?,
            Self::ArenaPurgeMult(n)
            | Self::UseNumaNodes(n)
            | Self::GenericCollect(n)
            | Self::EagerCommitDelay(n)
            | Self::PageFullRetain(n) => libc::c_long::from(n),
        })
    }

    /// The same option holding the raw value `v`.
    fn with_raw(&self, v: libc::c_long) -> Self {
        let count = u32::try_from(v).unwrap_or(u32::MAX);
        let bytes = usize::try_from(v).unwrap_or(0).saturating_mul(1024);
        match *self {
            Self::PurgeDelay(_) => Self::PurgeDelay(match v {
                ..0 => Decay::Disabled,
                0 => Decay::Immediate,
                ms => Decay::After(Duration::from_millis(ms as u64)),
            }),
            Self::PurgeDecommits(_) => Self::PurgeDecommits(v != 0),
            Self::AllowLargeOsPages(_) => Self::AllowLargeOsPages(v != 0),
            Self::AllowThp(_) => Self::AllowThp(v != 0),
            Self::DisallowOsAlloc(_) => Self::DisallowOsAlloc(v != 0),
            Self::AbandonedReclaimOnFree(_) => Self::AbandonedReclaimOnFree(v != 0),
            Self::ArenaEagerCommit(_) => Self::ArenaEagerCommit(match v {
                0 => EagerCommit::Never,
                1 => EagerCommit::Always,
                _ => EagerCommit::OnOvercommit,
            }),
            Self::ArenaReserve(_) => Self::ArenaReserve(bytes),
            Self::MinimalPurgeSize(_) => Self::MinimalPurgeSize(bytes),
            Self::ArenaPurgeMult(_) => Self::ArenaPurgeMult(count),
            Self::UseNumaNodes(_) => Self::UseNumaNodes(count),
            Self::GenericCollect(_) => Self::GenericCollect(count),
            Self::EagerCommitDelay(_) => Self::EagerCommitDelay(count),
            Self::PageFullRetain(_) => Self::PageFullRetain(count),
        }
    }

    /// One of each option, with a placeholder value: the list [`current`] reads.
    const ALL: [Self; 14] = [
        Self::PurgeDelay(Decay::Immediate),
        Self::PurgeDecommits(false),
        Self::ArenaEagerCommit(EagerCommit::Never),
        Self::ArenaReserve(0),
        Self::ArenaPurgeMult(0),
        Self::AllowLargeOsPages(false),
        Self::AllowThp(false),
        Self::UseNumaNodes(0),
        Self::DisallowOsAlloc(false),
        Self::GenericCollect(0),
        Self::AbandonedReclaimOnFree(false),
        Self::EagerCommitDelay(0),
        Self::PageFullRetain(0),
        Self::MinimalPurgeSize(0),
    ];
}

fn require() -> Result<Major, TuneError> {
    crate::backend::tuning::require(Backend::Mimalloc, NAME)?;
    Ok(major())
}

/// Sets a mimalloc option and returns its value read back.
///
/// # Errors
///
/// [`TuneError::WrongBackend`] unless mimalloc is wrapped; [`TuneError::Unsupported`] for an option
/// the linked mimalloc version lacks; [`TuneError::InvalidValue`]; [`TuneError::Refused`] for a
/// run-time `PurgeDelay(Decay::Immediate)`.
///
/// # Example
///
/// ```no_run
/// # #[global_allocator]
/// # static A: frag::Tracked<::mimalloc::MiMalloc> = frag::Tracked::new(::mimalloc::MiMalloc);
/// use std::time::Duration;
/// use frag::tune::{Decay, mimalloc::{self, MimallocOption}};
///
/// mimalloc::set(MimallocOption::PurgeDelay(Decay::After(Duration::from_millis(100))))?;
/// # Ok::<(), frag::tune::TuneError>(())
/// ```
pub fn set(option: MimallocOption) -> Result<MimallocOption, TuneError> {
    let major = require()?;
    let number = option.number(major).ok_or(TuneError::Unsupported {
        backend: crate::backend::WrappedBackend::Known(Backend::Mimalloc),
        knob: option.name(),
        hint: "not in the linked mimalloc version",
    })?;
    let raw = option.raw().map_err(|expected| TuneError::InvalidValue {
        knob: option.name(),
        value: format!("{option:?}"),
        expected,
    })?;
    if matches!(option, MimallocOption::PurgeDelay(Decay::Immediate)) {
        return Err(TuneError::Refused {
            knob: "purge_delay",
            reason: "a purge delay of 0 set at run time leaves freed memory unpurged (even after \
                     mi_collect(true)); set MIMALLOC_PURGE_DELAY=0 in the environment before start-up, or use a \
                     short delay such as 1 ms",
        });
    }
    // SAFETY: the option number belongs to the linked version and the value is in its range.
    unsafe { sys::mi_option_set(number, raw) };
    // SAFETY: as above.
    let read = unsafe { sys::mi_option_get(number) };
    let back = option.with_raw(read);
    if back == option {
        Ok(back)
    } else {
        Err(TuneError::ReadBack {
            knob: option.name().to_owned(),
            wrote: format!("{option:?}"),
            read: format!("{back:?}"),
        })
    }
}

/// Every option the linked mimalloc has, with its current value.
///
/// # Errors
///
/// [`TuneError::WrongBackend`] unless mimalloc is wrapped.
pub fn current() -> Result<Vec<MimallocOption>, TuneError> {
    let major = require()?;
    Ok(MimallocOption::ALL
        .iter()
        .filter_map(|o| {
            // SAFETY: the number belongs to the linked version.
            o.number(major).map(|n| o.with_raw(unsafe { sys::mi_option_get(n) }))
        })
        .collect())
}

/// `mi_collect(force)`: frees what mimalloc can, and with `force` purges everything free now
/// regardless of delays; reports the process's RSS around it.
///
/// # Errors
///
/// [`TuneError::WrongBackend`] unless mimalloc is wrapped.
pub fn collect(force: bool) -> Result<Released, TuneError> {
    require()?;
    // SAFETY: mi_collect has no preconditions.
    Ok(Released::around(|| unsafe { sys::mi_collect(force) }))
}

/// The reclaimer's action: `mi_collect(true)`, without the RSS readings around it.
pub(crate) fn collect_now() -> Result<(), TuneError> {
    require()?;
    // SAFETY: mi_collect has no preconditions.
    unsafe { sys::mi_collect(true) };
    Ok(())
}

/// Whether `MIMALLOC_<name>` names an option of the linked mimalloc (for the environment check).
pub(crate) fn is_option_name(name: &str) -> bool {
    const OTHERS: &[&str] = &[
        "show_errors",
        "show_stats",
        "verbose",
        "reserve_huge_os_pages",
        "reserve_huge_os_pages_at",
        "reserve_os_memory",
        "os_tag",
        "max_errors",
        "max_warnings",
        "destroy_on_exit",
        "disallow_arena_alloc",
        "retry_on_oom",
        "visit_abandoned",
        "guarded_min",
        "guarded_max",
        "guarded_precise",
        "guarded_sample_rate",
        "guarded_sample_seed",
        "max_segment_reclaim",
        "purge_extend_delay",
        "target_segments_per_thread",
        "page_reclaim_on_free",
        "page_max_candidates",
        "max_vabits",
        "pagemap_commit",
        "page_commit_on_demand",
        "page_max_reclaim",
        "page_cross_thread_max_reclaim",
        "arena_max_object_size",
        "arena_is_numa_local",
        "eager_commit",
        "abandoned_page_purge",
        // Old names mimalloc still reads.
        "large_os_pages",
        "eager_region_commit",
        "reset_decommits",
        "reset_delay",
        "abandoned_page_reset",
        "limit_os_alloc",
        // Read by mimalloc outside the option table.
        "disable_redirect",
        "disable_reserve",
        "show_stats_on_exit",
    ];
    let name = name.to_ascii_lowercase();
    MimallocOption::ALL.iter().any(|o| o.name() == name) || OTHERS.contains(&name.as_str())
}
