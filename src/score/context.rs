//! The context channel (issue 23; EVALUATION.md "The context channel in the pipeline"): a
//! candidate question is scored against a query twice — its own sentence vector's cosine, and
//! the cosine of the query to the candidate's *context* (its answers or comments: the
//! normalised mean of their sentence vectors, [`mean_direction`]) — and the two are added
//! after each is standardised over the candidates ([`fused`]), so neither needs a weight.
//! Also the compact form a context vector is stored in ([`encode_vector`]). Pure functions.

use super::dot;

/// Context texts per document (the first ones) that make its context vector: as many as the
/// harvest reads (`HarvestOptions::max_context_texts`); the channel measured weaker with 3.
pub const CONTEXT_TEXTS: usize = 10;

/// Normalised mean of unit vectors; None when empty (or when they cancel out).
pub fn mean_direction(rows: &[&[f32]]) -> Option<Vec<f32>> {
    let first = rows.first()?;
    let mut m = vec![0f32; first.len()];
    for r in rows {
        for (x, y) in m.iter_mut().zip(r.iter()) {
            *x += y;
        }
    }
    let n = dot(&m, &m).sqrt();
    (n > 0.0).then(|| m.iter().map(|x| x / n).collect())
}

/// Each score minus the scores' mean, over their standard deviation (all 0 when they do not
/// vary, or there is one).
pub fn standardised(scores: &[f32]) -> Vec<f32> {
    let n = scores.len() as f32;
    if scores.len() < 2 {
        return vec![0.0; scores.len()];
    }
    let mean = scores.iter().sum::<f32>() / n;
    let var = scores.iter().map(|s| (s - mean) * (s - mean)).sum::<f32>() / n;
    let sd = var.sqrt();
    if sd.is_nan() || sd <= 1e-12 {
        return vec![0.0; scores.len()];
    }
    scores.iter().map(|s| (s - mean) / sd).collect()
}

/// The channel's score of each candidate: its question cosine and its context cosine, each
/// standardised over the candidates, summed. `context[i]` is None for a candidate without a
/// context vector: its question cosine stands in, so it is ranked by its question alone.
pub fn fused(question: &[f32], context: &[Option<f32>]) -> Vec<f32> {
    let context: Vec<f32> = question
        .iter()
        .zip(context)
        .map(|(q, c)| c.unwrap_or(*q))
        .collect();
    standardised(question)
        .iter()
        .zip(standardised(&context))
        .map(|(q, c)| q + c)
        .collect()
}

/// A context vector as stored: its scale (f32, little-endian) then one signed byte per
/// dimension (x ≈ code · scale; 388 bytes at 384 dimensions instead of 1,536).
pub fn encode_vector(v: &[f32]) -> Vec<u8> {
    let max = v.iter().fold(0f32, |m, x| m.max(x.abs()));
    let scale = if max > 0.0 { max / 127.0 } else { 1.0 };
    let mut out = Vec::with_capacity(4 + v.len());
    out.extend_from_slice(&scale.to_le_bytes());
    out.extend(
        v.iter()
            .map(|x| (x / scale).round().clamp(-127.0, 127.0) as i8 as u8),
    );
    out
}

/// The vector [`encode_vector`] stored, renormalised to unit length (None: not such bytes).
pub fn decode_vector(bytes: &[u8]) -> Option<Vec<f32>> {
    let (scale, codes) = bytes.split_first_chunk::<4>()?;
    let scale = f32::from_le_bytes(*scale);
    if codes.is_empty() || !scale.is_finite() {
        return None;
    }
    let v: Vec<f32> = codes.iter().map(|&c| c as i8 as f32 * scale).collect();
    let n = dot(&v, &v).sqrt();
    (n > 0.0).then(|| v.iter().map(|x| x / n).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mean_direction_is_unit_length_and_none_for_no_rows() {
        let m = mean_direction(&[&[1.0, 0.0], &[0.0, 1.0]]).unwrap();
        assert!((m[0] - m[1]).abs() < 1e-6 && (dot(&m, &m) - 1.0).abs() < 1e-6);
        assert!(mean_direction(&[]).is_none());
        assert!(mean_direction(&[&[1.0, 0.0], &[-1.0, 0.0]]).is_none());
    }

    #[test]
    fn standardised_scores_have_mean_0_and_deviation_1_or_are_0() {
        let z = standardised(&[0.2, 0.4, 0.9]);
        let mean = z.iter().sum::<f32>() / 3.0;
        let var = z.iter().map(|x| x * x).sum::<f32>() / 3.0 - mean * mean;
        assert!(mean.abs() < 1e-6 && (var - 1.0).abs() < 1e-5, "{z:?}");
        assert_eq!(standardised(&[0.5, 0.5]), [0.0, 0.0]);
        assert_eq!(standardised(&[0.5]), [0.0]);
        assert!(standardised(&[]).is_empty());
    }

    #[test]
    fn context_reorders_candidates_the_question_cosine_cannot_tell_apart() {
        // Two candidates close to the query by their question; the second's answers match it.
        let s = fused(&[0.80, 0.79, 0.30], &[Some(0.20), Some(0.70), Some(0.10)]);
        assert!(s[1] > s[0] && s[0] > s[2], "{s:?}");
        // Without context vectors the order is the question cosine's.
        let s = fused(&[0.80, 0.79, 0.30], &[None, None, None]);
        assert!(s[0] > s[1] && s[1] > s[2], "{s:?}");
        // A candidate without one is ranked by its question among those with one.
        let s = fused(&[0.9, 0.5, 0.1], &[None, Some(0.5), Some(0.1)]);
        assert!(s[0] > s[1] && s[1] > s[2], "{s:?}");
    }

    #[test]
    fn stored_vectors_come_back_within_a_code_step_and_unit_length() {
        let v: Vec<f32> = (0..384)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
            .collect();
        let n = dot(&v, &v).sqrt();
        let v: Vec<f32> = v.iter().map(|x| x / n).collect();
        let bytes = encode_vector(&v);
        assert_eq!(bytes.len(), 4 + 384);
        let back = decode_vector(&bytes).unwrap();
        assert!(dot(&v, &back) > 0.9999, "{}", dot(&v, &back));
        assert!(decode_vector(&[1, 2]).is_none());
        assert!(decode_vector(&encode_vector(&[0.0, 0.0])).is_none());
    }
}
