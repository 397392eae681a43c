//! The compressed form the store keeps for content token vectors: int8 codes with one f32 scale
//! per vector (388 bytes per 384-d vector instead of 1,536).
//!
//! Encoding: s = max_k |x_k| / 127, q_k = round(x_k / s). Decoding multiplies back and
//! re-normalises the row, so decoded rows are unit vectors again and cosines stay in [-1, 1].
//! The error this costs is measured in BENCHMARKS.md (on real QQP token vectors) and bounded in
//! the tests below.

use super::rcmd::Tokens;

/// Token vectors as int8 codes + per-vector scales.
#[derive(Debug, Clone, PartialEq)]
pub struct I8Tokens {
    codes: Vec<i8>,
    scales: Vec<f32>,
    dim: usize,
}

impl I8Tokens {
    /// Compresses `tokens`.
    pub fn encode(tokens: Tokens<'_>) -> Self {
        let dim = tokens.dim();
        let mut codes = Vec::with_capacity(tokens.len() * dim);
        let mut scales = Vec::with_capacity(tokens.len());
        for i in 0..tokens.len() {
            let at = codes.len();
            codes.resize(at + dim, 0);
            scales.push(crate::math::distance::sq8_encode(
                tokens.row(i),
                &mut codes[at..],
            ));
        }
        I8Tokens { codes, scales, dim }
    }

    /// Rebuilds from stored parts; `None` if the lengths do not fit together.
    pub fn from_parts(codes: Vec<i8>, scales: Vec<f32>, dim: usize) -> Option<Self> {
        (dim > 0 && codes.len() == scales.len() * dim).then_some(I8Tokens { codes, scales, dim })
    }

    /// The int8 codes, row-major.
    pub fn codes(&self) -> &[i8] {
        &self.codes
    }

    /// One scale per vector.
    pub fn scales(&self) -> &[f32] {
        &self.scales
    }

    /// Number of vectors.
    pub fn len(&self) -> usize {
        self.scales.len()
    }

    /// True when there are no vectors.
    pub fn is_empty(&self) -> bool {
        self.scales.is_empty()
    }

    /// Vector dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Bytes of payload (codes + scales).
    pub fn byte_len(&self) -> usize {
        self.codes.len() + 4 * self.scales.len()
    }

    /// Decodes into `out` (cleared first): unit rows, `len × dim`.
    pub fn decode_into(&self, out: &mut Vec<f32>) {
        out.clear();
        out.reserve(self.codes.len());
        for row in self.codes.chunks_exact(self.dim) {
            let start = out.len();
            out.extend(row.iter().map(|&q| f32::from(q)));
            let norm = out[start..].iter().map(|x| x * x).sum::<f32>().sqrt();
            if norm > 0.0 {
                out[start..].iter_mut().for_each(|x| *x /= norm);
            }
        }
    }

    /// The raw codes as f32 (`out`) and each row's inverse code norm (`inv_norms`): the cosine
    /// of a unit vector x with decoded row j is `dot(x, out_j) * inv_norms[j]`, which spares
    /// the rerank fast path a normalisation pass.
    pub fn decode_raw_into(&self, out: &mut Vec<f32>, inv_norms: &mut Vec<f32>) {
        out.clear();
        out.extend(self.codes.iter().map(|&q| f32::from(q)));
        inv_norms.clear();
        inv_norms.extend(self.codes.chunks_exact(self.dim).map(|row| {
            let sq: i32 = row.iter().map(|&q| i32::from(q) * i32::from(q)).sum();
            if sq > 0 {
                1.0 / (sq as f32).sqrt()
            } else {
                0.0
            }
        }));
    }

    /// Decodes into a new vector.
    pub fn decode(&self) -> Vec<f32> {
        let mut out = Vec::new();
        self.decode_into(&mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::score::cosine;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip_keeps_direction(row in prop::collection::vec(-1.0f32..1.0, 384)) {
            prop_assume!(row.iter().any(|x| x.abs() > 1e-3));
            let q = I8Tokens::encode(Tokens::new(&row, 384));
            prop_assert_eq!(q.byte_len(), 384 + 4);
            let back = q.decode();
            // Uniform quantisation of a 384-d vector: the angle barely moves.
            prop_assert!(cosine(&row, &back) > 0.999);
            let norm: f32 = back.iter().map(|x| x * x).sum::<f32>().sqrt();
            prop_assert!((norm - 1.0).abs() < 1e-5);
        }
    }

    #[test]
    fn zero_rows_and_parts() {
        let q = I8Tokens::encode(Tokens::new(&[0.0; 4], 2));
        assert_eq!(q.decode(), vec![0.0; 4]);
        let again = I8Tokens::from_parts(q.codes().to_vec(), q.scales().to_vec(), 2);
        assert_eq!(again.as_ref(), Some(&q));
        assert!(I8Tokens::from_parts(vec![1, 2, 3], vec![1.0], 2).is_none());
    }
}
