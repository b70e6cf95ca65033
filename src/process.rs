//! The process's own memory, as the kernel sees it: read from `/proc` at report time.

/// Resident memory of the whole process.
///
/// RSS alone is noisy (shared pages, page-cache of mapped files); PSS and anonymous bytes from
/// `smaps_rollup` are the steadier figures for heap growth. `None` where the platform has no `/proc`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct ProcessStats {
    /// Resident set size (`/proc/self/statm`).
    pub rss_bytes: Option<u64>,
    /// Proportional set size (`/proc/self/smaps_rollup`).
    pub pss_bytes: Option<u64>,
    /// Anonymous resident bytes (`/proc/self/smaps_rollup`): heap, stacks, anonymous mappings.
    pub anon_bytes: Option<u64>,
}

impl ProcessStats {
    /// Reads the current figures. Allocates (file reads); never call it from an allocator.
    #[must_use]
    pub fn read() -> Self {
        let (pss_bytes, anon_bytes) = smaps_rollup();
        Self { rss_bytes: rss(), pss_bytes, anon_bytes }
    }
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 { n as u64 } else { 4096 }
}

pub(crate) fn rss() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * page_size())
}

/// `Pss:` and `Anonymous:` from smaps_rollup (Linux 4.14+), in bytes.
fn smaps_rollup() -> (Option<u64>, Option<u64>) {
    let Ok(text) = std::fs::read_to_string("/proc/self/smaps_rollup") else {
        return (None, None);
    };
    let field = |name: &str| {
        text.lines().find_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix(':')?;
            let kib: u64 = rest.trim().strip_suffix("kB")?.trim().parse().ok()?;
            Some(kib * 1024)
        })
    };
    (field("Pss"), field("Anonymous"))
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
        assert!(p.pss_bytes.is_some_and(|v| v > 0));
        assert!(p.anon_bytes.is_some_and(|v| v > 0 && v <= rss * 2));
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) } as u64;
        assert!(thread_comm(tid).is_some());
        assert!(thread_comm(u64::MAX).is_none());
    }
}
