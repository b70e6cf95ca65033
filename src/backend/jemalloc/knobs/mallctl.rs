//! The few `mallctl` shapes the typed keys of tikv-jemalloc-ctl do not cover: per-arena keys by MIB,
//! C-string options, and calls with no value at all (purge, decay, flush).

use core::ffi::{CStr, c_char};

use tikv_jemalloc_ctl::raw;

use crate::backend::tuning::TuneError;

fn name_of(name: &[u8]) -> String {
    String::from_utf8_lossy(name.strip_suffix(b"\0").unwrap_or(name)).into_owned()
}

fn failed(name: &[u8], e: tikv_jemalloc_ctl::Error) -> TuneError {
    TuneError::Mallctl { name: name_of(name), message: in_words(e) }
}

/// A result of one of tikv-jemalloc-ctl's typed keys, with the key's name on failure.
pub(crate) fn typed<T>(name: &str, r: tikv_jemalloc_ctl::Result<T>) -> Result<T, TuneError> {
    r.map_err(|e| TuneError::Mallctl { name: name.to_owned(), message: in_words(e) })
}

/// `mallctl`'s error in a user's words. tikv-jemalloc-ctl keeps the errno private and describes it
/// in terms of `mallctl`'s C arguments (`newp`, `*oldlenp`), so the description is matched here.
fn in_words(e: tikv_jemalloc_ctl::Error) -> String {
    let text = e.to_string();
    let words = if text.starts_with("`newp` is not `NULL`") {
        "jemalloc refused the value (EINVAL): out of its accepted range"
    } else if text.starts_with("`name` or `mib` specifies an unknown") {
        "this jemalloc build has no such setting (ENOENT)"
    } else if text.starts_with("Attempt to read or write `void`") {
        "the setting is read-only once jemalloc has started (EPERM): set it as a start-up option"
    } else if text.starts_with("A memory allocation failure") {
        "jemalloc ran out of memory applying it (EAGAIN)"
    } else if text.starts_with("An interface with side effects failed") {
        "jemalloc could not apply it (EFAULT): the feature may be unsupported on this platform"
    } else {
        return format!("jemalloc error: {text}");
    };
    words.to_owned()
}

/// The number of arena slots (`arenas.narenas`) and the indices of those initialised.
pub(crate) fn arenas() -> Result<(u32, Vec<usize>), TuneError> {
    let narenas = typed("arenas.narenas", tikv_jemalloc_ctl::arenas::narenas::read())?;
    let initialized = ArenaKey::<bool>::new(b"arena.0.initialized\0")?;
    let mut live = Vec::new();
    for i in 0..narenas as usize {
        if initialized.read(i)? {
            live.push(i);
        }
    }
    Ok((narenas, live))
}

/// A key whose value jemalloc stores as `T`.
///
/// Reading with the wrong `T` would misread memory; each key below is paired with the type jemalloc
/// documents for it, which is the reason these helpers stay private to the tuning module.
pub(crate) struct Key<T> {
    pub(crate) name: &'static [u8],
    _type: core::marker::PhantomData<T>,
}

impl<T: Copy> Key<T> {
    pub(crate) const fn new(name: &'static [u8]) -> Self {
        Self { name, _type: core::marker::PhantomData }
    }

    pub(crate) fn read(&self) -> Result<T, TuneError> {
        // SAFETY: `name` is NUL-terminated and jemalloc stores this key as a `T` (see `Key`).
        unsafe { raw::read::<T>(self.name) }.map_err(|e| failed(self.name, e))
    }

    pub(crate) fn write(&self, value: T) -> Result<(), TuneError> {
        // SAFETY: as for `read`; the value is a valid `T`.
        unsafe { raw::write::<T>(self.name, value) }.map_err(|e| failed(self.name, e))
    }
}

impl Key<*const c_char> {
    /// A C-string option (`opt.thp`, ...), which jemalloc keeps for the life of the process.
    pub(crate) fn read_str(&self) -> Result<&'static str, TuneError> {
        // SAFETY: the key's type is `const char *`, a static string owned by jemalloc.
        let bytes = unsafe { raw::read_str(self.name) }.map_err(|e| failed(self.name, e))?;
        Ok(CStr::from_bytes_with_nul(bytes).ok().and_then(|c| c.to_str().ok()).unwrap_or(""))
    }
}

/// A per-arena key (`arena.<i>.<leaf>`, `stats.arenas.<i>.<leaf>`) of type `T`, resolved to a MIB
/// once.
pub(crate) struct ArenaKey<T> {
    name: &'static [u8],
    mib: [usize; 4],
    len: usize,
    /// Which MIB component is the arena index (the name's `0` component).
    index: usize,
    _type: core::marker::PhantomData<T>,
}

impl<T> ArenaKey<T> {
    /// `name` is the key with `0` for the arena index and its NUL; the index is replaced per call.
    pub(crate) fn new(name: &'static [u8]) -> Result<Self, TuneError> {
        let parts: Vec<&[u8]> = name.strip_suffix(b"\0").unwrap_or(name).split(|b| *b == b'.').collect();
        let index = parts.iter().position(|p| *p == b"0");
        let (Some(index), true) = (index, parts.len() <= 4) else {
            return Err(TuneError::Mallctl { name: name_of(name), message: "not a per-arena key".to_owned() });
        };
        let mut mib = [0; 4];
        raw::name_to_mib(name, &mut mib[..parts.len()]).map_err(|e| failed(name, e))?;
        Ok(Self { name, mib, len: parts.len(), index, _type: core::marker::PhantomData })
    }

    fn at(&self, arena: usize) -> [usize; 4] {
        let mut mib = self.mib;
        mib[self.index] = arena;
        mib
    }
}

impl<T: Copy> ArenaKey<T> {
    pub(crate) fn read(&self, arena: usize) -> Result<T, TuneError> {
        // SAFETY: the MIB names a key of type `T` (see `Key`).
        unsafe { raw::read_mib::<T>(&self.at(arena)[..self.len]) }.map_err(|e| failed(self.name, e))
    }

    pub(crate) fn write(&self, arena: usize, value: T) -> Result<(), TuneError> {
        // SAFETY: as for `read`.
        unsafe { raw::write_mib::<T>(&self.at(arena)[..self.len], value) }.map_err(|e| failed(self.name, e))
    }
}

impl ArenaKey<()> {
    /// Runs a per-arena `mallctl` that takes and returns nothing (`arena.<i>.purge`) for `arena`.
    pub(crate) fn call(&self, arena: usize) -> Result<(), TuneError> {
        let mib = self.at(arena);
        let null = core::ptr::null_mut::<core::ffi::c_void>();
        // SAFETY: the MIB names a void mallctl (see `call`); null pointers with zero length.
        let rc =
            unsafe { tikv_jemalloc_sys::mallctlbymib(mib.as_ptr(), self.len, null, core::ptr::null_mut(), null, 0) };
        if rc == 0 { Ok(()) } else { Err(failed_rc(self.name, rc)) }
    }
}

fn failed_rc(name: &[u8], rc: libc::c_int) -> TuneError {
    TuneError::Mallctl { name: name_of(name), message: std::io::Error::from_raw_os_error(rc).to_string() }
}

/// Runs a `mallctl` that takes and returns nothing (`arena.<i>.purge`, `thread.tcache.flush`).
///
/// tikv-jemalloc-ctl has no such call: writing `()` passes a non-null pointer with length 0, which
/// jemalloc refuses with `EPERM`.
pub(crate) fn call(name: &'static [u8]) -> Result<(), TuneError> {
    debug_assert_eq!(name.last(), Some(&0));
    let null = core::ptr::null_mut::<core::ffi::c_void>();
    // SAFETY: `name` is NUL-terminated; null old/new pointers with zero length are the documented
    // way to invoke a void mallctl.
    let rc = unsafe { tikv_jemalloc_sys::mallctl(name.as_ptr().cast(), null, core::ptr::null_mut(), null, 0) };
    if rc == 0 { Ok(()) } else { Err(failed_rc(name, rc)) }
}

/// The mallctl name `$prefix.<MALLCTL_ARENAS_ALL>.$leaf`, NUL-terminated, as bytes: jemalloc.h's
/// `MALLCTL_ARENAS_ALL` (4096) is the arena index that stands for every arena.
macro_rules! all_arenas {
    ($prefix:literal, $leaf:literal) => {
        concat!($prefix, ".4096.", $leaf, "\0").as_bytes()
    };
}
pub(crate) use all_arenas;

#[cfg(test)]
mod tests {
    use super::*;

    /// jemalloc's errors come out in words, not in terms of `mallctl`'s C arguments.
    #[test]
    fn errors_are_in_words() {
        // SAFETY: reading a key that does not exist writes nothing.
        let e = unsafe { raw::read::<usize>(b"no.such.key\0") }.unwrap_err();
        assert_eq!(in_words(e), "this jemalloc build has no such setting (ENOENT)");
        // SAFETY: `max_background_threads` is a size_t; jemalloc refuses values above its ceiling.
        let e = unsafe { raw::write::<usize>(b"max_background_threads\0", usize::MAX) }.unwrap_err();
        assert!(in_words(e).contains("EINVAL"));
    }
}
