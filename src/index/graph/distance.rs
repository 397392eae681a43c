//! Distances for the graph: the kernels of [`crate::math::distance`], and prefetching.

use super::storage::Row;

#[cfg(test)]
pub(super) use crate::math::distance::{cos_portable, l2sq_portable};
pub(super) use crate::math::distance::{kernels, kernels_sq8, sq8_encode, Dist8Fn, DistFn};

// ---------------------------------------------------------------- storage

#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) fn prefetch(p: *const u8) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    // SAFETY: prefetching is a hint and never faults; SSE is part of the x86_64 baseline.
    unsafe { _mm_prefetch::<_MM_HINT_T0>(p as *const i8) };
}

/// Prefetches the first cache lines of a vector (the hardware prefetcher streams the rest).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) fn prefetch_vec(v: Row<'_>) {
    let p = v.as_ptr();
    for i in (0..v.bytes().min(PREFETCH_BYTES)).step_by(64) {
        // SAFETY: `i` is below the row's length in bytes: the pointer stays inside it.
        prefetch(unsafe { p.add(i) });
    }
}

/// Bytes of a vector prefetched ahead of its distance (12 cache lines).
#[cfg(target_arch = "x86_64")]
pub(super) const PREFETCH_BYTES: usize = 768;
