//! glibc's `malloc_info`: the free-chunk histograms of every arena, from which the whole pages
//! `malloc_trim(0)` gives back are estimated. Report time only: it takes every arena's lock and
//! mallocs its output buffer (glibc's own malloc, not the Rust global allocator).

use core::ffi::c_char;

/// What `malloc_info` tells beyond `mallinfo2`, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct FreeSpace {
    /// Whole pages inside the free chunks of every arena's bins (an estimate, see [`parse`]): what
    /// `malloc_trim(0)` releases besides the main heap's top.
    pub whole_pages: u64,
    /// Free space at the top of the thread arenas' heaps, which `malloc_trim` leaves alone.
    pub thread_tops: u64,
}

/// [`FreeSpace`] of this process now; `None` when `malloc_info` fails.
pub(crate) fn free_space() -> Option<FreeSpace> {
    Some(parse(&read()?, crate::process::page_size()))
}

/// `malloc_info(0, …)` into a memory stream.
fn read() -> Option<String> {
    let mut buf: *mut c_char = core::ptr::null_mut();
    let mut len: libc::size_t = 0;
    // SAFETY: both out-pointers are valid for writes; the stream is closed below.
    let fp = unsafe { libc::open_memstream(&mut buf, &mut len) };
    if fp.is_null() {
        return None;
    }
    // SAFETY: `fp` is an open stream; options must be 0.
    let rc = unsafe { libc::malloc_info(0, fp) };
    // SAFETY: `fp` is open and closed once; afterwards `buf` and `len` describe the written bytes.
    unsafe { libc::fclose(fp) };
    let text = (rc == 0 && !buf.is_null()).then(|| {
        // SAFETY: after fclose, `buf` points at `len` initialised bytes owned by us.
        let bytes = unsafe { core::slice::from_raw_parts(buf.cast::<u8>(), len) };
        String::from_utf8_lossy(bytes).into_owned()
    });
    // SAFETY: `buf` was allocated by open_memstream with glibc's malloc (or is null).
    unsafe { libc::free(buf.cast()) };
    text
}

/// The value of attribute `name` in one XML element line.
fn attr(line: &str, name: &str) -> Option<u64> {
    let start = line.find(&format!(" {name}=\""))? + name.len() + 3;
    let end = line[start..].find('"')? + start;
    line[start..end].parse().ok()
}

/// Reads the per-heap sections. Whole pages: from `<size … total=T count=C/>` and `<unsorted …/>`
/// entries, `max(0, T − C × page)` per entry. A free chunk of `s` bytes at an arbitrary address holds
/// about `s − page` bytes of whole pages (less its header, rounded to pages at both ends); chunks
/// smaller than a page hold none. A heap's top is not in a bin: it is its `rest` total (top and
/// regular bins) minus its bins (all `<size>` entries, less the fast bins' total). `malloc_trim`
/// releases only the main heap's top (`keepcost`), so only thread arenas' tops are summed.
///
/// Pages an earlier trim already returned still sit in free chunks and are counted: callers cap the
/// estimate by what can be resident.
pub(crate) fn parse(xml: &str, page: u64) -> FreeSpace {
    let mut out = FreeSpace::default();
    let (mut heap, mut bins, mut fast) = (None::<u64>, 0u64, 0u64);
    for line in xml.lines().map(str::trim_start) {
        if line.starts_with("<heap ") {
            (heap, bins, fast) = (attr(line, "nr"), 0, 0);
        } else if line.starts_with("</heap>") {
            heap = None;
        } else if line.starts_with("<size ") || line.starts_with("<unsorted ") {
            let (Some(total), Some(count)) = (attr(line, "total"), attr(line, "count")) else { continue };
            out.whole_pages += total.saturating_sub(count.saturating_mul(page));
            bins += total;
        } else if line.starts_with("<total type=\"fast\"") {
            fast = attr(line, "size").unwrap_or(0);
        } else if line.starts_with("<total type=\"rest\"") {
            if let (Some(nr), Some(rest)) = (heap, attr(line, "size")) {
                if nr != 0 {
                    out.thread_tops += rest.saturating_sub(bins.saturating_sub(fast));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_pages_come_from_large_free_chunks_only() {
        let xml = r#"<malloc version="1">
<heap nr="0">
<sizes>
<size from="17" to="32" total="640" count="20"/>
<size from="3969" to="4080" total="40000" count="10"/>
<unsorted from="67108864" to="67108864" total="67108864" count="1"/>
</sizes>
<total type="rest" count="32" size="67250000"/>
</heap>
<heap nr="1">
<sizes>
<size from="12289" to="16368" total="32768" count="2"/>
</sizes>
<total type="fast" count="0" size="0"/>
<total type="rest" count="3" size="1000000"/>
</heap>
<total type="mmap" count="0" size="0"/>
</malloc>"#;
        let f = parse(xml, 4096);
        assert_eq!(f.whole_pages, (67_108_864 - 4096) + (32_768 - 2 * 4096));
        // Heap 1: rest 1,000,000 = top + regular bins (32,768, no fast ones).
        assert_eq!(f.thread_tops, 1_000_000 - 32_768);
    }

    #[test]
    fn reads_this_process() {
        let xml = read().expect("malloc_info");
        assert!(xml.contains("<malloc version="), "{xml}");
    }
}
