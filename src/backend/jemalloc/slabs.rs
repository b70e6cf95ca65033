//! How full the slab of a given block is: jemalloc's `experimental.utilization.batch_query`, which
//! reads, for each pointer, the extent it lies in (`{free regions, regions, extent bytes}`).
//!
//! jemalloc accepts pointers it never returned (its comment in `ctl.c`: an extent it cannot find
//! reads as zeros), but not a block freed while the query runs: `inspect_extent_util_stats_get`
//! reads the extent's slab bit and its size class in two loads without a lock, and a slab emptied
//! and reused as a large extent between them indexes `bin_infos` past its end. The caller keeps the
//! blocks live meanwhile (`sampler::gate`).

use crate::backend::SlabUse;
use crate::backend::introspect::StatsError;

/// Pointers per call: bounds the answer buffer on the stack (1.5 KiB).
const BATCH: usize = 64;

/// The use of the slab (or extent) of each of `ptrs`, written to `out` in order (as long as `ptrs`).
/// The blocks stay live meanwhile; nothing is allocated or freed.
pub(super) fn slab_use(ptrs: &[usize], out: &mut [SlabUse]) -> Result<(), StatsError> {
    let name = "experimental.utilization.batch_query";
    let mut answer = [0usize; BATCH * 3];
    for (chunk, out) in ptrs.chunks(BATCH).zip(out.chunks_mut(BATCH)) {
        let answer = &mut answer[..chunk.len() * 3];
        let mut len = core::mem::size_of_val(answer);
        // SAFETY: the name is NUL-terminated; `newp` points to `chunk.len()` pointer-sized words and
        // `newlen` says so; `oldp` points to `len` writable bytes, three `size_t` per pointer, as the
        // call requires (anything else is refused with EINVAL before it writes). The blocks at
        // `chunk` stay live during the call (the caller's promise), which jemalloc's read needs.
        let code = unsafe {
            tikv_jemalloc_sys::mallctl(
                c"experimental.utilization.batch_query".as_ptr(),
                answer.as_mut_ptr().cast(),
                &mut len,
                chunk.as_ptr().cast_mut().cast(),
                core::mem::size_of_val(chunk),
            )
        };
        if code != 0 {
            return Err(StatsError::MallctlCode { name, code });
        }
        for (o, a) in out.iter_mut().zip(answer.chunks_exact(3)) {
            if let [free, regions, bytes] = *a {
                *o = SlabUse { free: free as u64, regions: regions as u64, bytes: bytes as u64 };
            }
        }
    }
    Ok(())
}
