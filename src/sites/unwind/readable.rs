//! Whether memory is readable, asked of the kernel rather than found out by a fault:
//! `process_vm_readv` on the process itself copies one byte of each page, and stops at the first
//! page that is not mapped or not readable (a guard page, a gap between mappings).
//!
//! The kernel checks each page's mapping and protection and answers `EFAULT` where a load would
//! fault, so the question costs a system call and never a signal. No lock of the process's, no
//! allocation: the call's two small arrays are on the caller's stack (about 300 bytes). Used off the
//! hot part of a sampled allocation's walk (`stack`), on the first sample of a thread and on stacks
//! that are not the thread's own.

/// The granularity of the test: every page of 4 KiB is asked about, which covers any page size the
/// kernel may use (a larger page is asked about more than once).
pub(crate) const PAGE: usize = 4096;

/// Pages asked about in one system call.
const BATCH: usize = 16;

/// What the kernel said of `[from, to)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Readable {
    /// Every byte from `from` up to this address (at most `to`) can be read now; the page at this
    /// address (when below `to`) cannot.
    Until(usize),
    /// The kernel refused the question (a sandbox's filter, a kernel without the call): nothing is
    /// known.
    Refused,
}

/// How much of `[from, to)` can be read, from `from` up, asked one page at a time (see the module
/// docs). Pages may be unmapped later; the answer holds while nothing unmaps them (a stack that the
/// calling thread is running on, above its stack pointer).
#[cfg(target_os = "linux")]
pub(crate) fn until(from: usize, to: usize) -> Readable {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let mut bytes = [0u8; BATCH];
    let mut remote = [libc::iovec { iov_base: core::ptr::null_mut(), iov_len: 0 }; BATCH];
    let mut page = from & !(PAGE - 1);
    while page < to {
        let mut n = 0;
        while n < BATCH && page + n * PAGE < to {
            // The first byte asked about is `from` itself (inside its page), the others each page's
            // first.
            let at = (page + n * PAGE).max(from);
            remote[n] = libc::iovec { iov_base: at as *mut libc::c_void, iov_len: 1 };
            n += 1;
        }
        let local = libc::iovec { iov_base: bytes.as_mut_ptr().cast(), iov_len: n };
        // SAFETY: `local` describes `n` writable bytes of `bytes`, `remote` `n` descriptors; the
        // kernel reads the remote addresses on our behalf and reports a page it cannot read with a
        // short count or `EFAULT`, without touching it from this thread.
        let got = unsafe { libc::process_vm_readv(pid, &local, 1, remote.as_ptr(), n as libc::c_ulong, 0) };
        let got = match usize::try_from(got) {
            Ok(got) => got,
            Err(_) if errno() == libc::EFAULT => 0,
            Err(_) => return Readable::Refused,
        };
        if got < n {
            return Readable::Until((page + got * PAGE).max(from).min(to));
        }
        page += n * PAGE;
    }
    Readable::Until(to.max(from))
}

/// Nothing can be asked off Linux: nothing is known.
#[cfg(not(target_os = "linux"))]
pub(crate) fn until(_from: usize, _to: usize) -> Readable {
    Readable::Refused
}

/// The calling thread's `errno` (glibc's thread-local word: no allocation).
#[cfg(target_os = "linux")]
fn errno() -> i32 {
    // SAFETY: `__errno_location` returns the calling thread's errno word, valid for the thread's life.
    unsafe { *libc::__errno_location() }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An anonymous mapping of `pages` pages, with `protect(i)` choosing each page's protection.
    fn mapping(pages: usize, protect: impl Fn(usize) -> i32) -> usize {
        // SAFETY: a fresh private anonymous mapping; the result is checked.
        let base = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                pages * PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED);
        for i in 0..pages {
            // SAFETY: the page lies inside the mapping just made.
            let rc = unsafe { libc::mprotect(base.cast::<u8>().add(i * PAGE).cast(), PAGE, protect(i)) };
            assert_eq!(rc, 0);
        }
        base as usize
    }

    /// The kernel's answer against the protections laid out: readable pages up to the first guard
    /// page or unmapped one, from any byte inside a page, over more pages than one call asks about.
    #[test]
    fn stops_at_the_first_page_that_cannot_be_read() {
        let rw = libc::PROT_READ | libc::PROT_WRITE;
        let pages = 3 * BATCH;
        let guard = 2 * BATCH + 3;
        let base = mapping(pages, |i| if i == guard { libc::PROT_NONE } else { rw });
        let end = base + pages * PAGE;
        assert_eq!(until(base, end), Readable::Until(base + guard * PAGE));
        assert_eq!(until(base + 100, base + 5 * PAGE + 8), Readable::Until(base + 5 * PAGE + 8));
        assert_eq!(until(base + (guard + 1) * PAGE + 24, end), Readable::Until(end));
        assert_eq!(until(base + guard * PAGE + 8, end), Readable::Until(base + guard * PAGE + 8));
        // Unmapped above: the answer stops where the mapping ends.
        // SAFETY: the last page of the mapping made above, no longer used.
        assert_eq!(unsafe { libc::munmap((end - PAGE) as *mut libc::c_void, PAGE) }, 0);
        assert_eq!(until(base + (guard + 1) * PAGE, end + 4 * PAGE), Readable::Until(end - PAGE));
        // SAFETY: the rest of the mapping, no longer used.
        assert_eq!(unsafe { libc::munmap(base as *mut libc::c_void, pages * PAGE - PAGE) }, 0);
        assert_eq!(until(base, base + PAGE), Readable::Until(base));
    }
}
