//! The executable mappings of the process, with the build IDs that let `pprof` find the matching
//! binaries (and their debug information) to symbolize a profile offline.

/// One executable segment of a loaded object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Mapping {
    pub(crate) start: u64,
    pub(crate) limit: u64,
    pub(crate) file_offset: u64,
    /// The object's path (the program's own path for the main executable).
    pub(crate) file: String,
    /// The GNU build ID, lower-case hex; empty when the object has none.
    pub(crate) build_id: String,
}

/// Every executable segment of every loaded object, through the dynamic loader's list
/// (`dl_iterate_phdr`; it takes the loader's lock, so this is never called on the allocation path).
pub(crate) fn executable() -> Vec<Mapping> {
    let mut out: Vec<Mapping> = Vec::new();
    // SAFETY: the callback only reads the loader's description of each object (valid during the
    // call) and pushes to the vector passed through `data`, which outlives the call.
    unsafe { crate::loader::iterate(each, (&raw mut out).cast()) };
    let exe = std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_default();
    for m in &mut out {
        if m.file.is_empty() {
            m.file.clone_from(&exe);
        }
    }
    out
}

/// # Safety
///
/// A `dl_iterate_phdr` callback: `info` points to a valid `dl_phdr_info` for the call, and `data` to the `Vec` the caller passed.
unsafe extern "C" fn each(info: *mut libc::dl_phdr_info, _size: usize, data: *mut libc::c_void) -> libc::c_int {
    // SAFETY: the loader passes a valid description for the duration of the call, and `data` is the
    // vector `executable` passed.
    let (info, out) = unsafe { (&*info, &mut *data.cast::<Vec<Mapping>>()) };
    if info.dlpi_phdr.is_null() {
        return 0;
    }
    // SAFETY: `dlpi_phdr` points to `dlpi_phnum` program headers.
    let headers = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
    let base = info.dlpi_addr;
    let file = if info.dlpi_name.is_null() {
        String::new()
    } else {
        // SAFETY: a NUL-terminated string owned by the loader.
        unsafe { std::ffi::CStr::from_ptr(info.dlpi_name) }.to_string_lossy().into_owned()
    };
    let build_id = headers.iter().filter(|h| h.p_type == libc::PT_NOTE).find_map(|h| {
        // SAFETY: a loaded PT_NOTE segment is mapped at `base + p_vaddr` for `p_memsz` bytes.
        let notes = unsafe { std::slice::from_raw_parts((base + h.p_vaddr) as *const u8, h.p_memsz as usize) };
        gnu_build_id(notes)
    });
    // The segment's exact start and file offset, not the page-aligned ones `/proc/self/maps` shows:
    // Go's bundled `pprof` takes `start - (the executable segment's p_vaddr)` as the load bias, which
    // is only right when `start` is exactly where that segment begins (linkers such as lld place it
    // at a different page offset than its file offset). The standalone `pprof` accepts both.
    for h in headers.iter().filter(|h| h.p_type == libc::PT_LOAD && h.p_flags & libc::PF_X != 0) {
        out.push(Mapping {
            start: base + h.p_vaddr,
            limit: base + h.p_vaddr + h.p_memsz,
            file_offset: h.p_offset,
            file: file.clone(),
            build_id: build_id.clone().unwrap_or_default(),
        });
    }
    0
}

/// The `NT_GNU_BUILD_ID` note in a note segment, as hex.
fn gnu_build_id(mut notes: &[u8]) -> Option<String> {
    let word = |b: &[u8], at: usize| b.get(at..at + 4).map(|w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]) as usize);
    let align4 = |n: usize| (n + 3) & !3;
    while notes.len() >= 12 {
        let (namesz, descsz, kind) = (word(notes, 0)?, word(notes, 4)?, word(notes, 8)?);
        let name = notes.get(12..12 + namesz)?;
        let desc_at = 12 + align4(namesz);
        let desc = notes.get(desc_at..desc_at + descsz)?;
        if kind == 3 && name == b"GNU\0" {
            return Some(desc.iter().map(|b| format!("{b:02x}")).collect());
        }
        notes = notes.get(desc_at + align4(descsz)..)?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test binary's own build ID, as `readelf -n` would print it, is found by reading the ELF
    /// file's notes independently (section headers, not the loader's view).
    #[test]
    fn the_main_program_is_mapped_with_its_build_id() {
        let maps = executable();
        let here = executable as fn() -> Vec<Mapping> as usize as u64;
        let mine = maps.iter().find(|m| m.start <= here && here < m.limit).expect("a mapping holds our code");
        let exe = std::env::current_exe().unwrap();
        assert_eq!(mine.file, exe.display().to_string());
        let bytes = std::fs::read(&exe).unwrap();
        // The build ID note in the file: find "GNU\0" after a (4, n, 3) header.
        let found = bytes
            .windows(16)
            .position(|w| w[0..4] == 4u32.to_ne_bytes() && w[8..12] == 3u32.to_ne_bytes() && &w[12..16] == b"GNU\0");
        match found {
            Some(at) => {
                let n = u32::from_ne_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
                let hex: String = bytes[at + 16..at + 16 + n].iter().map(|b| format!("{b:02x}")).collect();
                assert_eq!(mine.build_id, hex);
            }
            None => assert_eq!(mine.build_id, ""),
        }
    }
}
