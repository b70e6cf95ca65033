//! The process's own memory, as the kernel sees it: read from `/proc` (and the memory cgroup's files
//! under `/sys/fs/cgroup`) at report time.

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};

/// The memory cgroup the process belongs to: in a container, the limit that kills the service is
/// this one, not the host's memory. cgroup v2 (`memory.current`, `memory.max`, `memory.stat`) or,
/// where only the v1 memory controller is mounted, its equivalents (`memory.usage_in_bytes`,
/// `memory.limit_in_bytes`, `memory.stat`). Figures are for the whole cgroup: every process in it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct CgroupMemory {
    /// Which cgroup interface the figures come from.
    pub version: CgroupVersion,
    /// Memory charged to the cgroup now, page cache included.
    pub current_bytes: u64,
    /// The limit; `None` for no limit (`max`, or v1's "unlimited" value).
    pub max_bytes: Option<u64>,
    /// Anonymous memory of the cgroup (`anon`; v1 `rss`).
    pub anon_bytes: Option<u64>,
    /// Page cache of the cgroup (`file`; v1 `cache`), which the kernel reclaims before it kills.
    pub file_bytes: Option<u64>,
}

/// The memory cgroup interface a [`CgroupMemory`] was read from. Serialises (feature `serde`) as the
/// number, `1` or `2`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CgroupVersion {
    /// The v1 memory controller (`memory.usage_in_bytes`, `memory.limit_in_bytes`).
    V1,
    /// The unified v2 hierarchy (`memory.current`, `memory.max`).
    #[default]
    V2,
}

impl core::fmt::Display for CgroupVersion {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::V1 => "v1",
            Self::V2 => "v2",
        })
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for CgroupVersion {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u8(match self {
            Self::V1 => 1,
            Self::V2 => 2,
        })
    }
}

impl CgroupMemory {
    /// Reads the process's memory cgroup, `None` without one (no cgroup filesystem, or the root
    /// cgroup, which has no limit files).
    ///
    /// Which directory is the process's own is decided once, and again only when `/proc/self/cgroup`
    /// changes (the process was moved) or the process is a forked child: deciding reads
    /// `cgroup.procs`, whose cost grows with every thread in the cgroup (about 0.3 ms with 1,000).
    #[must_use]
    pub fn read() -> Option<Self> {
        let membership = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let (version, dir) = Place::cached(membership)?;
        if version == 2 {
            let current_bytes = read_u64(&format!("{dir}/memory.current"))?;
            let max = std::fs::read_to_string(format!("{dir}/memory.max")).ok();
            let stat = std::fs::read_to_string(format!("{dir}/memory.stat")).unwrap_or_default();
            return Some(Self {
                version: CgroupVersion::V2,
                current_bytes,
                max_bytes: max.and_then(|m| m.trim().parse().ok()),
                anon_bytes: stat_field(&stat, "anon"),
                file_bytes: stat_field(&stat, "file"),
            });
        }
        let current_bytes = read_u64(&format!("{dir}/memory.usage_in_bytes"))?;
        // v1 says "no limit" with the largest page-aligned value that fits in an i64.
        let max_bytes =
            std::fs::read_to_string(format!("{dir}/memory.limit_in_bytes")).ok().and_then(|t| match limit_value(&t) {
                LimitValue::Bytes(b) => Some(b),
                LimitValue::Unlimited | LimitValue::Bad => None,
            });
        let stat = std::fs::read_to_string(format!("{dir}/memory.stat")).unwrap_or_default();
        Some(Self {
            version: CgroupVersion::V1,
            current_bytes,
            max_bytes,
            anon_bytes: stat_field(&stat, "rss"),
            file_bytes: stat_field(&stat, "cache"),
        })
    }
}

/// Where the process's memory cgroup is, and what it was decided from.
struct Place {
    pid: u32,
    membership: String,
    /// `None` when the process has no memory cgroup of its own.
    found: Option<(u8, String)>,
}

/// The last decision, leaked: replaced (and the old one leaked too) only when the process moves or
/// forks, at most [`MAX_PLACES`] times; after that each read decides afresh and keeps nothing (a
/// process moved between cgroups without end costs a decision per read, never memory). An atomic
/// pointer rather than a lock: a report in a forked child must not wait on a lock a parent's thread
/// held at the fork.
static PLACE: AtomicPtr<Place> = AtomicPtr::new(core::ptr::null_mut());
/// Decisions leaked so far.
static PLACES: AtomicUsize = AtomicUsize::new(0);
/// The most decisions kept for the life of the process (each a few hundred bytes).
const MAX_PLACES: usize = 16;

impl Place {
    /// The memory cgroup's `(version, directory)`, decided again only when the process moved or forked.
    fn cached(membership: String) -> Option<(u8, String)> {
        let pid = std::process::id();
        // SAFETY: a non-null PLACE points to a leaked `Place`, never freed or written after it was
        // published (Release below, Acquire here).
        let current = unsafe { PLACE.load(Ordering::Acquire).as_ref() };
        if let Some(p) = current.filter(|p| p.pid == pid && p.membership == membership) {
            return p.found.clone();
        }
        let found = locate_v2(&membership).map(|d| (2, d)).or_else(|| locate_v1(&membership).map(|d| (1, d)));
        if PLACES.fetch_add(1, Ordering::Relaxed) < MAX_PLACES {
            let fresh: &'static Place = Box::leak(Box::new(Place { pid, membership, found: found.clone() }));
            PLACE.store(core::ptr::from_ref(fresh).cast_mut(), Ordering::Release);
        }
        found
    }
}

fn locate_v2(membership: &str) -> Option<String> {
    locate_v2_under("", membership)
}

fn locate_v1(membership: &str) -> Option<String> {
    locate_v1_under("", membership)
}

/// The v2 hierarchy's mount point under `root` ("" for the live system).
fn v2_mount(root: &str) -> String {
    format!("{root}/sys/fs/cgroup")
}

/// The v1 memory controller's mount point under `root`.
fn v1_mount(root: &str) -> String {
    format!("{root}/sys/fs/cgroup/memory")
}

/// The process's v2 cgroup directory under `root`, if it has the memory controller there.
fn locate_v2_under(root: &str, membership: &str) -> Option<String> {
    let path = membership.lines().find_map(|l| l.strip_prefix("0::"))?;
    let dir = format!("{}{}", v2_mount(root), path.trim_end_matches('/'));
    // Hybrid hierarchies list a v2 path without the memory controller there: then v1 has it.
    let has_memory = std::fs::exists(format!("{dir}/memory.current")).unwrap_or(false);
    (has_memory && lists_this_process(&dir)).then_some(dir)
}

/// The process's v1 memory cgroup directory under `root`.
fn locate_v1_under(root: &str, membership: &str) -> Option<String> {
    let path = membership.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers.split(',').any(|c| c == "memory").then_some(path)
    })?;
    // Inside a container the process's own cgroup is often mounted as the root of the hierarchy,
    // and the path it is listed under may name another cgroup there: take the directory whose
    // `cgroup.procs` lists this process.
    let dirs = [format!("{}{}", v1_mount(root), path.trim_end_matches('/')), v1_mount(root)];
    dirs.into_iter().find(|d| lists_this_process(d))
}

/// The memory limit the kernel holds the process to through its memory cgroup: the least limit of
/// its cgroup and of every ancestor up to the hierarchy's mount point (a parent's limit covers its
/// children). In each, v2's `memory.high` (where the kernel starts to throttle and reclaim) and
/// `memory.max` (where it kills), v1's `memory.limit_in_bytes`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CgroupLimit {
    /// The limit in bytes.
    pub(crate) bytes: u64,
    /// The file it was read from, path and all.
    pub(crate) file: String,
}

/// The process's memory cgroup limit, read from the files under `root` ("" for the live system:
/// `/proc/self/cgroup`, `/sys/fs/cgroup`); `Ok(None)` without a memory cgroup or without a limit in
/// it. Reads `cgroup.procs` to find the process's own directory: not for the allocation path, nor for
/// a loop (about 0.3 ms with 1,000 threads).
///
/// # Errors
///
/// The path of a file that could not be read as a limit: one that holds something other than a
/// number of bytes or the kernel's "no limit" (garbage, `-1`, a number that overflows), or the
/// process's own cgroup's file, missing (every cgroup but the root has it: gone for a moment).
pub(crate) fn cgroup_limit_under(root: &str) -> Result<Option<CgroupLimit>, String> {
    let Ok(membership) = std::fs::read_to_string(format!("{root}/proc/self/cgroup")) else { return Ok(None) };
    let (dir, mount, files): (String, String, &[&str]) = if let Some(dir) = locate_v2_under(root, &membership) {
        (dir, v2_mount(root), &["memory.high", "memory.max"])
    } else if let Some(dir) = locate_v1_under(root, &membership) {
        (dir, v1_mount(root), &["memory.limit_in_bytes"])
    } else {
        return Ok(None);
    };
    let mut least: Option<CgroupLimit> = None;
    let mut at = std::path::PathBuf::from(&dir);
    // The hierarchy's root (the mount point) has no limit files; every cgroup below it has them.
    let mut own = dir.len() > mount.len();
    loop {
        for file in files {
            let path = at.join(file);
            let bytes = match std::fs::read_to_string(&path).map(|t| limit_value(&t)) {
                Ok(LimitValue::Bytes(b)) => b,
                Ok(LimitValue::Unlimited) => continue,
                // An ancestor without the file: the hierarchy's root, which has no limit.
                Err(_) if !own => continue,
                Ok(LimitValue::Bad) | Err(_) => return Err(path.display().to_string()),
            };
            if least.as_ref().is_none_or(|l| bytes < l.bytes) {
                least = Some(CgroupLimit { bytes, file: path.display().to_string() });
            }
        }
        own = false;
        if at.as_os_str().len() <= mount.len() || !at.pop() {
            break;
        }
    }
    Ok(least)
}

/// What a cgroup limit file says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LimitValue {
    Bytes(u64),
    /// No limit: v2's `max`, v1's largest page-aligned `i64`.
    Unlimited,
    /// Neither: garbage, a negative or overflowing number.
    Bad,
}

/// A cgroup limit file's value.
fn limit_value(text: &str) -> LimitValue {
    let text = text.trim();
    if text == "max" {
        return LimitValue::Unlimited;
    }
    match text.parse::<u64>() {
        Ok(v) if v < (i64::MAX as u64) & !0xfff => LimitValue::Bytes(v),
        Ok(v) if v <= i64::MAX as u64 => LimitValue::Unlimited,
        _ => LimitValue::Bad,
    }
}

/// Physical memory (`MemTotal` of `/proc/meminfo` under `root`).
pub(crate) fn physical_memory_under(root: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("{root}/proc/meminfo")).ok()?;
    text.lines().find_map(|l| {
        let kib: u64 = l.strip_prefix("MemTotal:")?.trim().strip_suffix("kB")?.trim().parse().ok()?;
        Some(kib * 1024)
    })
}

/// Whether the cgroup directory `dir` has this process among its members.
fn lists_this_process(dir: &str) -> bool {
    let pid = std::process::id().to_string();
    std::fs::read_to_string(format!("{dir}/cgroup.procs")).is_ok_and(|procs| procs.lines().any(|l| l.trim() == pid))
}

fn read_u64(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// `name value` from a cgroup `memory.stat`.
fn stat_field(stat: &str, name: &str) -> Option<u64> {
    stat.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Resident memory of the whole process.
///
/// RSS and anonymous bytes come from `/proc/self/statm` (the kernel's running counters: cheap at any
/// size). PSS needs `/proc/self/smaps_rollup`, a walk of every page table entry of the process
/// (measured: 0.5 ms with 10 threads, 7 ms with 1,000), so it is read only after
/// [`set_pss`]`(true)`. `None` where the platform has no `/proc`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct ProcessStats {
    /// Resident set size (`/proc/self/statm`).
    pub rss_bytes: Option<u64>,
    /// Proportional set size (`/proc/self/smaps_rollup`); `None` unless [`set_pss`]
    /// turned it on.
    pub pss_bytes: Option<u64>,
    /// Anonymous resident bytes: heap, stacks, anonymous mappings (`/proc/self/statm`: resident minus
    /// file-backed and shared pages, the kernel's `RssAnon`).
    pub anon_bytes: Option<u64>,
    /// The process's memory cgroup, where it has one.
    pub cgroup: Option<CgroupMemory>,
}

static PSS: AtomicBool = AtomicBool::new(false);

/// Whether reports read PSS (`/proc/self/smaps_rollup`, a page-table walk whose cost grows with the
/// process's mappings: 7 ms with 1,000 threads on this project's machine). Off by default; returns the
/// previous setting.
///
/// ```no_run
/// # #[global_allocator]
/// # static A: frag::Tracked<std::alloc::System> = frag::Tracked::new(std::alloc::System);
/// frag::process::set_pss(true);
/// assert!(frag::report().process.pss_bytes.is_some());
/// ```
pub fn set_pss(on: bool) -> bool {
    PSS.swap(on, Ordering::Relaxed)
}

impl ProcessStats {
    /// Reads the current figures (PSS only after [`set_pss`]`(true)`). Allocates
    /// (file reads); never call it from an allocator.
    #[must_use]
    pub fn read() -> Self {
        let (rss_bytes, anon_bytes) = statm().unzip();
        let pss_bytes = if PSS.load(Ordering::Relaxed) { smaps_pss() } else { None };
        Self { rss_bytes, pss_bytes, anon_bytes, cgroup: CgroupMemory::read() }
    }
}

/// The kernel's page size (4 KiB where `sysconf` cannot say).
pub(crate) fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 { n as u64 } else { 4096 }
}

/// Resident and anonymous resident bytes from `/proc/self/statm` (`resident` and `resident − shared`,
/// where `shared` counts file-backed and shared-memory pages).
pub(crate) fn statm() -> Option<(u64, u64)> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let mut fields = statm.split_whitespace().skip(1).map(str::parse::<u64>);
    let (resident, shared) = (fields.next()?.ok()?, fields.next()?.ok()?);
    Some((resident * page_size(), resident.saturating_sub(shared) * page_size()))
}

pub(crate) fn rss() -> Option<u64> {
    statm().map(|(rss, _)| rss)
}

/// `Pss:` from smaps_rollup (Linux 4.14+), in bytes.
fn smaps_pss() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/smaps_rollup").ok()?;
    text.lines().find_map(|l| {
        let rest = l.strip_prefix("Pss")?.strip_prefix(':')?;
        let kib: u64 = rest.trim().strip_suffix("kB")?.trim().parse().ok()?;
        Some(kib * 1024)
    })
}

/// Minor page faults of the whole process so far (`getrusage`).
pub(crate) fn minor_faults() -> u64 {
    // SAFETY: an all-zero rusage is valid; getrusage fills it.
    let mut usage: libc::rusage = unsafe { core::mem::zeroed() };
    // SAFETY: `usage` is a valid out-pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    u64::try_from(usage.ru_minflt).unwrap_or(0)
}

/// CPU time (user and system) the calling thread has used so far.
pub(crate) fn thread_cpu_time() -> core::time::Duration {
    // SAFETY: an all-zero timespec is valid; clock_gettime fills it.
    let mut t: libc::timespec = unsafe { core::mem::zeroed() };
    // SAFETY: `t` is a valid out-pointer; the clock id is a constant the kernel knows.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) } != 0 {
        return core::time::Duration::ZERO;
    }
    core::time::Duration::new(u64::try_from(t.tv_sec).unwrap_or(0), u32::try_from(t.tv_nsec).unwrap_or(0))
}

/// The kernel's current name of thread `tid` of this process, or `None` if it no longer exists.
pub(crate) fn thread_comm(tid: u64) -> Option<String> {
    let name = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).ok()?;
    Some(name.trim_end_matches('\n').to_owned())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn reads_proc() {
        let p = ProcessStats::read();
        let rss = p.rss_bytes.expect("statm");
        assert!(rss > 0);
        assert!(p.anon_bytes.is_some_and(|v| v > 0 && v <= rss));
        // statm's anonymous figure against the kernel's RssAnon line (kB).
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let rss_anon = status.lines().find_map(|l| l.strip_prefix("RssAnon:")).unwrap();
        let rss_anon: u64 = rss_anon.trim().strip_suffix("kB").unwrap().trim().parse::<u64>().unwrap() * 1024;
        assert!(p.anon_bytes.unwrap().abs_diff(rss_anon) < 4 << 20, "{p:?} vs RssAnon {rss_anon}");
        assert!(smaps_pss().is_some_and(|v| v > 0));
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) } as u64;
        assert!(thread_comm(tid).is_some());
        assert!(thread_comm(u64::MAX).is_none());
    }

    #[test]
    fn pss_is_read_only_when_asked_for() {
        assert_eq!(ProcessStats::read().pss_bytes, None);
        let before = set_pss(true);
        assert!(ProcessStats::read().pss_bytes.is_some_and(|v| v > 0));
        set_pss(before);
    }

    #[test]
    fn cgroup_stat_fields() {
        let stat = "anon 1234\nfile 99\nanon_thp 0\n";
        assert_eq!((stat_field(stat, "anon"), stat_field(stat, "file")), (Some(1234), Some(99)));
        assert_eq!(stat_field(stat, "shmem"), None);
    }

    /// A process moved between cgroups again and again keeps at most `MAX_PLACES` decisions, and
    /// each read still decides right (no cgroup directory exists for these made-up memberships).
    #[test]
    fn moves_without_end_keep_a_bounded_number_of_decisions() {
        for i in 0..3 * MAX_PLACES {
            assert_eq!(Place::cached(format!("0::/nowhere-{i}\n")), None);
        }
        assert!(PLACES.load(Ordering::Relaxed) >= 3 * MAX_PLACES, "every read past the bound decided afresh");
        // SAFETY: as in `Place::cached`.
        let kept = unsafe { PLACE.load(Ordering::Acquire).as_ref() }.expect("a decision kept");
        let n: usize = kept.membership.trim().trim_start_matches("0::/nowhere-").parse().unwrap_or(0);
        assert!(n < MAX_PLACES, "the decision kept is one of the first {MAX_PLACES}: {}", kept.membership);
    }

    /// Against the kernel's own files, wherever this process has a memory cgroup: the usage of the
    /// cgroup directory whose member list holds this process.
    #[test]
    fn cgroup_matches_the_kernel_files() {
        let Some(c) = CgroupMemory::read() else { return };
        let pid = std::process::id().to_string();
        let mut dirs = vec!["/sys/fs/cgroup".to_owned(), "/sys/fs/cgroup/memory".to_owned()];
        for l in std::fs::read_to_string("/proc/self/cgroup").unwrap().lines() {
            let path = l.splitn(3, ':').nth(2).unwrap_or("");
            dirs.push(format!("/sys/fs/cgroup{path}"));
            dirs.push(format!("/sys/fs/cgroup/memory{path}"));
        }
        let ours = dirs.iter().find(|d| {
            std::fs::read_to_string(format!("{d}/cgroup.procs")).is_ok_and(|p| p.lines().any(|l| l == pid))
                && ["memory.current", "memory.usage_in_bytes"]
                    .iter()
                    .any(|f| std::path::Path::new(&format!("{d}/{f}")).exists())
        });
        let ours = ours.expect("a memory cgroup directory listing this process");
        let usage =
            ["memory.current", "memory.usage_in_bytes"].iter().find_map(|f| read_u64(&format!("{ours}/{f}"))).unwrap();
        // Other processes of the cgroup allocate meanwhile: close, not equal.
        assert!(usage.abs_diff(c.current_bytes) < 256 << 20, "{c:?} vs {ours}: {usage}");
        assert!(c.anon_bytes.is_some(), "memory.stat");
    }
}
