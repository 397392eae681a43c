//! The graph's distance kernels: cosine distance `1 − a·b` of unit vectors and squared L2,
//! portable and in AVX-512 / AVX2+FMA intrinsics, the widest this CPU has chosen once at run
//! time ([`kernels`]).

use std::sync::OnceLock;

/// A distance kernel (unsafe: a SIMD one needs the CPU feature [`kernels`] checked).
pub type DistFn = unsafe fn(&[f32], &[f32]) -> f32;

/// Squared L2 distance, portable (eight independent accumulators).
pub fn l2sq_portable(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| (x - y) * (x - y))
        .sum();
    for (x, y) in ca.zip(cb) {
        for ((s, x), y) in acc.iter_mut().zip(x).zip(y) {
            *s += (x - y) * (x - y);
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// Cosine distance of unit vectors, `1 − a·b`, by the portable kernel [`crate::math::dot`].
#[inline]
pub fn cos_portable(a: &[f32], b: &[f32]) -> f32 {
    1.0 - super::dot(a, b)
}

#[cfg(target_arch = "x86_64")]
mod simd {
    use std::arch::x86_64::*;

    macro_rules! kernel512 {
        ($name:ident, $step:ident) => {
            /// # Safety
            /// The CPU must support AVX-512F.
            #[target_feature(enable = "avx512f")]
            pub(super) unsafe fn $name(a: &[f32], b: &[f32]) -> f32 {
                let n = a.len().min(b.len());
                let (pa, pb) = (a.as_ptr(), b.as_ptr());
                let (mut s0, mut s1, mut s2, mut s3) = (
                    _mm512_setzero_ps(),
                    _mm512_setzero_ps(),
                    _mm512_setzero_ps(),
                    _mm512_setzero_ps(),
                );
                let mut i = 0;
                // SAFETY: every unmasked load reads 16 floats at offset i with i + 16 <= n, and the
                // masked tail load only touches lanes below n, so all reads are inside both slices.
                unsafe {
                    while i + 64 <= n {
                        s0 = $step(_mm512_loadu_ps(pa.add(i)), _mm512_loadu_ps(pb.add(i)), s0);
                        s1 = $step(
                            _mm512_loadu_ps(pa.add(i + 16)),
                            _mm512_loadu_ps(pb.add(i + 16)),
                            s1,
                        );
                        s2 = $step(
                            _mm512_loadu_ps(pa.add(i + 32)),
                            _mm512_loadu_ps(pb.add(i + 32)),
                            s2,
                        );
                        s3 = $step(
                            _mm512_loadu_ps(pa.add(i + 48)),
                            _mm512_loadu_ps(pb.add(i + 48)),
                            s3,
                        );
                        i += 64;
                    }
                    while i + 16 <= n {
                        s0 = $step(_mm512_loadu_ps(pa.add(i)), _mm512_loadu_ps(pb.add(i)), s0);
                        i += 16;
                    }
                    if i < n {
                        let m = ((1u32 << (n - i)) - 1) as __mmask16;
                        s1 = $step(
                            _mm512_maskz_loadu_ps(m, pa.add(i)),
                            _mm512_maskz_loadu_ps(m, pb.add(i)),
                            s1,
                        );
                    }
                }
                _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)))
            }
        };
    }
    macro_rules! kernel256 {
        ($name:ident, $step:ident, $scalar:expr) => {
            /// # Safety
            /// The CPU must support AVX2 and FMA.
            #[target_feature(enable = "avx2,fma")]
            pub(super) unsafe fn $name(a: &[f32], b: &[f32]) -> f32 {
                let n = a.len().min(b.len());
                let (pa, pb) = (a.as_ptr(), b.as_ptr());
                let (mut s0, mut s1, mut s2, mut s3) = (
                    _mm256_setzero_ps(),
                    _mm256_setzero_ps(),
                    _mm256_setzero_ps(),
                    _mm256_setzero_ps(),
                );
                let mut i = 0;
                // SAFETY: every load reads 8 floats at offset i with i + 8 <= n.
                unsafe {
                    while i + 32 <= n {
                        s0 = $step(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), s0);
                        s1 = $step(
                            _mm256_loadu_ps(pa.add(i + 8)),
                            _mm256_loadu_ps(pb.add(i + 8)),
                            s1,
                        );
                        s2 = $step(
                            _mm256_loadu_ps(pa.add(i + 16)),
                            _mm256_loadu_ps(pb.add(i + 16)),
                            s2,
                        );
                        s3 = $step(
                            _mm256_loadu_ps(pa.add(i + 24)),
                            _mm256_loadu_ps(pb.add(i + 24)),
                            s3,
                        );
                        i += 32;
                    }
                    while i + 8 <= n {
                        s0 = $step(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), s0);
                        i += 8;
                    }
                }
                let s = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
                let h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
                let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
                let h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
                let tail: f32 = a[i..n].iter().zip(&b[i..n]).map($scalar).sum();
                _mm_cvtss_f32(h) + tail
            }
        };
    }
    #[inline(always)]
    fn fma512(a: __m512, b: __m512, s: __m512) -> __m512 {
        // SAFETY: only inlined into the avx512f kernels above.
        unsafe { _mm512_fmadd_ps(a, b, s) }
    }
    #[inline(always)]
    fn sq512(a: __m512, b: __m512, s: __m512) -> __m512 {
        // SAFETY: only inlined into the avx512f kernels above.
        unsafe {
            let d = _mm512_sub_ps(a, b);
            _mm512_fmadd_ps(d, d, s)
        }
    }
    #[inline(always)]
    fn fma256(a: __m256, b: __m256, s: __m256) -> __m256 {
        // SAFETY: only inlined into the avx2+fma kernels above.
        unsafe { _mm256_fmadd_ps(a, b, s) }
    }
    #[inline(always)]
    fn sq256(a: __m256, b: __m256, s: __m256) -> __m256 {
        // SAFETY: only inlined into the avx2+fma kernels above.
        unsafe {
            let d = _mm256_sub_ps(a, b);
            _mm256_fmadd_ps(d, d, s)
        }
    }
    kernel512!(dot512, fma512);
    kernel512!(l2sq512, sq512);
    kernel256!(dot256, fma256, |(x, y)| x * y);
    kernel256!(l2sq256, sq256, |(x, y)| (x - y) * (x - y));

    /// # Safety
    /// The CPU must support AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn cos512(a: &[f32], b: &[f32]) -> f32 {
        // SAFETY: same requirement as ours.
        1.0 - unsafe { dot512(a, b) }
    }
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn cos256(a: &[f32], b: &[f32]) -> f32 {
        // SAFETY: same requirement as ours.
        1.0 - unsafe { dot256(a, b) }
    }
}

/// (cosine distance, squared L2) kernels for this CPU, chosen once.
pub fn kernels() -> (DistFn, DistFn) {
    static K: OnceLock<(DistFn, DistFn)> = OnceLock::new();
    *K.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx512f") {
                return (simd::cos512 as DistFn, simd::l2sq512 as DistFn);
            }
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                return (simd::cos256 as DistFn, simd::l2sq256 as DistFn);
            }
        }
        (cos_portable as DistFn, l2sq_portable as DistFn)
    })
}
