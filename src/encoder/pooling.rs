//! What the encoder derives from the last hidden states, as pure functions over host slices:
//! masked mean pooling (sentence-transformers' sentence vector), L2 normalisation and the
//! moment-matched Gaussian intent (design.md §3, papers/variational-siamese-wasserstein-quora.txt §4).

pub use crate::score::cosine::l2_normalize;
use crate::types::Gaussian;

/// Default floor on each intent σ: keeps W2 finite-scaled and σ strictly positive for texts
/// with one content token (whose sample std is 0).
pub const SIGMA_FLOOR: f32 = 1e-3;

/// Mean of the rows of `rows` (`n × d`, row-major), accumulated in f64.
pub fn mean_rows(rows: &[f32], d: usize) -> Vec<f32> {
    let n = rows.len() / d;
    let mut acc = vec![0f64; d];
    for row in rows.chunks_exact(d) {
        acc.iter_mut()
            .zip(row)
            .for_each(|(a, &x)| *a += f64::from(x));
    }
    acc.iter().map(|a| (a / n.max(1) as f64) as f32).collect()
}

/// The sentence vector: mean over the given (non-pad) hidden states, then L2-normalised.
pub fn sentence_vector(hidden: &[f32], d: usize) -> Vec<f32> {
    let mut s = mean_rows(hidden, d);
    l2_normalize(&mut s);
    s
}

/// The moment-matched intent of token vectors `rows` (`n × d`): μ = mean, σ = per-dimension
/// population standard deviation, floored at `floor`.
pub fn moment_intent(rows: &[f32], d: usize, floor: f32) -> Gaussian {
    let n = (rows.len() / d).max(1) as f64;
    let mu = mean_rows(rows, d);
    let mut var = vec![0f64; d];
    for row in rows.chunks_exact(d) {
        for ((v, &x), &m) in var.iter_mut().zip(row).zip(&mu) {
            let dx = f64::from(x) - f64::from(m);
            *v += dx * dx;
        }
    }
    let sigma = var
        .iter()
        .map(|v| ((v / n).sqrt() as f32).max(floor))
        .collect();
    Gaussian { mu, sigma }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_gives_unit_norm_and_keeps_zero() {
        let mut v = vec![3.0, 4.0];
        l2_normalize(&mut v);
        assert!((v[0] - 0.6).abs() < 1e-6 && (v[1] - 0.8).abs() < 1e-6);
        let mut z = vec![0.0; 3];
        l2_normalize(&mut z);
        assert_eq!(z, vec![0.0; 3]);
    }

    #[test]
    fn intent_of_known_rows() {
        // Two rows in 2-D: mean (2, 0), population std (1, 0) → floored to the floor.
        let g = moment_intent(&[1.0, 0.0, 3.0, 0.0], 2, 1e-3);
        assert_eq!(g.mu, vec![2.0, 0.0]);
        assert!((g.sigma[0] - 1.0).abs() < 1e-6);
        assert_eq!(g.sigma[1], 1e-3);
    }

    #[test]
    fn single_token_intent_is_floored() {
        let g = moment_intent(&[0.5, -0.5], 2, SIGMA_FLOOR);
        assert_eq!(g.mu, vec![0.5, -0.5]);
        assert_eq!(g.sigma, vec![SIGMA_FLOOR; 2]);
    }
}
