//! The arithmetic every layer shares: the dot-product kernels ([`mod@dot`]: the one every
//! score, the chunker's network, training and the encoder's layer norm are built on; the
//! graph's SIMD distances in [`distance`]), L2 normalisation and cosine similarity, and
//! [`SplitMix64`], the seedable generator training, sampling and tests draw from. Pure
//! functions; it uses nothing of the crate.

pub mod distance;
pub mod dot;

pub use dot::{dot, dot4, dot_fused, dot_simd};

/// L2-normalises `v` in place; a zero vector stays zero (sentence-transformers clamps the norm
/// at 1e-12 the same way).
pub fn l2_normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x /= norm);
}

/// Cosine similarity cos(a, b) = a·b / (‖a‖‖b‖), clamped to [-1, 1]; 0 when either is zero.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let na = dot(a, a).sqrt();
    let nb = dot(b, b).sqrt();
    if na == 0.0 || nb == 0.0 {
        return 0.0;
    }
    (dot(a, b) / (na * nb)).clamp(-1.0, 1.0)
}

/// SplitMix64: a small, seedable generator (reproducible batches without a `rand` dependency).
#[derive(Debug, Clone)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A number in `0..n` (0 when n is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }

    /// A uniformly shuffled `0..n` (Fisher–Yates).
    pub fn permutation(&mut self, n: usize) -> Vec<usize> {
        let mut v: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            v.swap(i, self.below(i + 1));
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_values() {
        assert!((cosine(&[1.0, 0.0], &[0.0, 1.0])).abs() < 1e-7);
        assert!((cosine(&[1.0, 2.0], &[2.0, 4.0]) - 1.0).abs() < 1e-6);
        assert!((cosine(&[1.0, 2.0], &[-1.0, -2.0]) + 1.0).abs() < 1e-6);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 1.0]), 0.0);
        let a: Vec<f32> = (0..19).map(|i| i as f32).collect();
        let want: f32 = a.iter().map(|x| x * x).sum();
        assert!((dot(&a, &a) - want).abs() < 1e-3);
    }

    proptest! {
        #[test]
        fn cosine_bounded_and_symmetric(
            v in prop::collection::vec((-10.0f32..10.0, -10.0f32..10.0), 1..64)
        ) {
            let (a, b): (Vec<f32>, Vec<f32>) = v.into_iter().unzip();
            let c = cosine(&a, &b);
            prop_assert!((-1.0..=1.0).contains(&c));
            prop_assert!((c - cosine(&b, &a)).abs() < 1e-6);
        }
    }
}
