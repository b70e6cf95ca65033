//! An allocator of your own, wrapped by `frag::Tracked` with a `frag::Introspect`: every block is its own
//! anonymous `mmap`, unmapped at its free, so memory goes back to the OS at once (no fragmentation
//! at all, at the price of a system call and a whole page per block). Shared by
//! `examples/own_allocator.rs` and `tests/own_allocators.rs`.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// One `mmap` per block, rounded up to whole pages; alignments up to a page.
pub struct MmapPerBlock;

/// Bytes mapped now (whole pages), blocks mapped now, blocks ever handed out.
static MAPPED: AtomicU64 = AtomicU64::new(0);
static BLOCKS: AtomicU64 = AtomicU64::new(0);
static SERVED: AtomicU64 = AtomicU64::new(0);

impl MmapPerBlock {
    /// Blocks handed out since start-up: the allocator's own count, to check a wrapper's against.
    #[allow(dead_code)] // the example does not need it
    pub fn served() -> u64 {
        SERVED.load(Relaxed)
    }

    /// Blocks and bytes mapped now.
    pub fn live() -> (u64, u64) {
        (BLOCKS.load(Relaxed), MAPPED.load(Relaxed))
    }
}

/// Every block's length: its size rounded up to whole pages (at least one).
pub fn block_len(size: usize) -> usize {
    size.max(1).next_multiple_of(page())
}

fn page() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 { n as usize } else { 4096 }
}

// SAFETY: `alloc` returns a fresh mapping of at least `layout.size()` bytes, page-aligned (so aligned
// for every alignment it accepts), or null; `dealloc` unmaps exactly what `alloc` mapped for the
// same layout.
unsafe impl GlobalAlloc for MmapPerBlock {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.align() > page() {
            return core::ptr::null_mut();
        }
        let len = block_len(layout.size());
        // SAFETY: an anonymous private mapping with valid arguments.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return core::ptr::null_mut();
        }
        MAPPED.fetch_add(len as u64, Relaxed);
        BLOCKS.fetch_add(1, Relaxed);
        SERVED.fetch_add(1, Relaxed);
        p.cast()
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let len = block_len(layout.size());
        // SAFETY: `ptr` is a mapping of `len` bytes made by `alloc` for this layout (the caller's
        // `GlobalAlloc` contract), unmapped once.
        unsafe { libc::munmap(ptr.cast(), len) };
        MAPPED.fetch_sub(len as u64, Relaxed);
        BLOCKS.fetch_sub(1, Relaxed);
    }
}

/// What `frag` asks of an allocator it does not know: its name, each block's usable size, and its
/// own figures for the report. Never allocates (the usable size is called on the allocation path).
pub struct MmapProbe;

impl frag::Introspect for MmapProbe {
    fn name(&self) -> &'static str {
        "mmap-per-block"
    }

    fn usable_size(&self, _ptr: *mut u8, layout: Layout) -> Option<usize> {
        Some(block_len(layout.size()))
    }

    fn stats(&self) -> Option<frag::backend::AllocatorStats> {
        let mut s = frag::backend::AllocatorStats::default();
        let (_, mapped) = MmapPerBlock::live();
        s.allocated = Some(mapped);
        s.active = Some(mapped); // pages holding blocks: every mapped page
        s.mapped = Some(mapped);
        Some(s)
    }
}
