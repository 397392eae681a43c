//! The rerank fast path: s_RCMD of one query against many candidates, scores only (no plans, no
//! explanation), reusing scratch buffers across candidates. Over f32 token vectors or the
//! store's int8 form ([`I8Tokens`], decoded one candidate at a time into a reused buffer).
//! Uniform token weights, as in [`rcmd`](super::rcmd::rcmd) with `Weights::Uniform`; or, with
//! [`Reranker::directions_i8_weighted`], given weights as well, from the same pass (each
//! token's best partner does not depend on the weights, only how the directions average them).

use super::quant::I8Tokens;
use super::rcmd::{best_partners, Tokens, Weights};

/// RCMD's two directions (RCMD_1 query → candidate, RCMD_2 candidate → query) under uniform
/// weights and under the weights asked for (the same as `uniform` when those are uniform).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Directions {
    /// With w = 1/L on both sides.
    pub uniform: (f32, f32),
    /// With the given weights, normalised per side as [`rcmd`](super::rcmd::rcmd) does.
    pub weighted: (f32, f32),
}

/// Scratch space for scoring many candidates against one query.
#[derive(Debug, Default)]
pub struct Reranker {
    rows: Vec<(f32, usize)>,
    cols: Vec<(f32, usize)>,
    decoded: Vec<f32>,
    inv_norms: Vec<f32>,
}

impl Reranker {
    /// A reranker with empty scratch buffers.
    pub fn new() -> Self {
        Self::default()
    }

    /// s_RCMD(query, candidate); 0 if either is empty.
    pub fn score(&mut self, query: Tokens<'_>, candidate: Tokens<'_>) -> f32 {
        if query.is_empty() || candidate.is_empty() {
            return 0.0;
        }
        symmetric(self.finish(query, candidate, None))
    }

    /// (RCMD_1, RCMD_2) = (query → candidate, candidate → query); zeros if either is empty.
    fn finish(
        &mut self,
        query: Tokens<'_>,
        candidate: Tokens<'_>,
        scale: Option<&[f32]>,
    ) -> (f32, f32) {
        best_partners(query, candidate, scale, &mut self.rows, &mut self.cols);
        let forward = self.rows.iter().map(|r| r.0).sum::<f32>() / self.rows.len() as f32;
        let backward = self.cols.iter().map(|c| c.0).sum::<f32>() / self.cols.len() as f32;
        (forward, backward)
    }

    /// s_RCMD(query, candidate) for an int8-compressed candidate.
    pub fn score_i8(&mut self, query: Tokens<'_>, candidate: &I8Tokens) -> f32 {
        symmetric(self.directions_i8(query, candidate))
    }

    /// (RCMD_1, RCMD_2) of the query against an int8-compressed candidate.
    pub fn directions_i8(&mut self, query: Tokens<'_>, candidate: &I8Tokens) -> (f32, f32) {
        if query.is_empty() || candidate.is_empty() {
            return (0.0, 0.0);
        }
        let (mut decoded, mut inv_norms) = (
            std::mem::take(&mut self.decoded),
            std::mem::take(&mut self.inv_norms),
        );
        candidate.decode_raw_into(&mut decoded, &mut inv_norms);
        let s = self.finish(
            query,
            Tokens::new(&decoded, candidate.dim()),
            Some(&inv_norms),
        );
        (self.decoded, self.inv_norms) = (decoded, inv_norms);
        s
    }

    /// [`Reranker::directions_i8`] under uniform weights and under `weights` (the query's, the
    /// candidate's), from one pass; zeros if either side is empty.
    pub fn directions_i8_weighted(
        &mut self,
        query: Tokens<'_>,
        candidate: &I8Tokens,
        weights: Weights<'_>,
    ) -> Directions {
        let uniform = self.directions_i8(query, candidate);
        let weighted = match weights {
            Weights::Given(wq, wc) if !query.is_empty() && !candidate.is_empty() => {
                assert_eq!(wq.len(), self.rows.len(), "one weight per query token");
                assert_eq!(wc.len(), self.cols.len(), "one weight per candidate token");
                let forward = weighted_mean(self.rows.iter().map(|r| r.0), wq);
                let backward = weighted_mean(self.cols.iter().map(|c| c.0), wc);
                (forward, backward)
            }
            _ => uniform,
        };
        Directions { uniform, weighted }
    }
}

/// Σ wᵢ·xᵢ / Σ wᵢ over the positive finite weights (the others count 0), clamped to [-1, 1];
/// the plain mean when no weight is positive — as [`rcmd`](super::rcmd::rcmd) normalises.
fn weighted_mean(values: impl Iterator<Item = f32> + Clone, weights: &[f32]) -> f32 {
    let usable = |w: f32| if w.is_finite() && w > 0.0 { w } else { 0.0 };
    let total: f32 = weights.iter().map(|&w| usable(w)).sum();
    if total > 0.0 {
        values
            .zip(weights)
            .map(|(x, &w)| usable(w) / total * x)
            .sum::<f32>()
            .clamp(-1.0, 1.0)
    } else {
        let n = weights.len().max(1) as f32;
        values.sum::<f32>() / n
    }
}

fn symmetric((forward, backward): (f32, f32)) -> f32 {
    (0.5 * (forward + backward)).clamp(-1.0, 1.0)
}

/// s_RCMD of `query` against each candidate, in order.
pub fn rcmd_scores(query: Tokens<'_>, candidates: &[Tokens<'_>]) -> Vec<f32> {
    let mut r = Reranker::new();
    candidates.iter().map(|&c| r.score(query, c)).collect()
}

/// s_RCMD of `query` against each int8-compressed candidate, in order.
pub fn rcmd_scores_i8(query: Tokens<'_>, candidates: &[I8Tokens]) -> Vec<f32> {
    let mut r = Reranker::new();
    candidates.iter().map(|c| r.score_i8(query, c)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::score::rcmd::{rcmd, Weights};

    fn unit(seed: u32, n: usize, d: usize) -> Vec<f32> {
        // A small deterministic generator keeps the test free of extra dependencies.
        let mut x = seed.wrapping_mul(2_654_435_761).max(1);
        let mut v: Vec<f32> = (0..n * d)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                (x as f32 / u32::MAX as f32) - 0.5
            })
            .collect();
        for row in v.chunks_mut(d) {
            let norm = row.iter().map(|a| a * a).sum::<f32>().sqrt();
            row.iter_mut().for_each(|a| *a /= norm);
        }
        v
    }

    #[test]
    fn fast_path_equals_full_rcmd_and_int8_is_close() {
        let d = 64;
        let q = unit(1, 7, d);
        let cands: Vec<Vec<f32>> = (0..20)
            .map(|s| unit(s + 2, 3 + s as usize % 9, d))
            .collect();
        let views: Vec<Tokens<'_>> = cands.iter().map(|c| Tokens::new(c, d)).collect();
        let compressed: Vec<I8Tokens> = views.iter().map(|&t| I8Tokens::encode(t)).collect();
        let fast = rcmd_scores(Tokens::new(&q, d), &views);
        let int8 = rcmd_scores_i8(Tokens::new(&q, d), &compressed);
        for ((view, f), i) in views.iter().zip(&fast).zip(&int8) {
            let full = rcmd(Tokens::new(&q, d), *view, Weights::Uniform).score;
            assert!((full - f).abs() < 1e-6);
            assert!((full - i).abs() < 5e-3, "int8 {i} vs f32 {full}");
        }
    }

    #[test]
    fn weighted_fast_path_equals_full_weighted_rcmd_on_decoded_vectors() {
        let d = 48;
        let q = unit(7, 6, d);
        let wq: Vec<f32> = (0..6).map(|i| 1.0 + i as f32).collect();
        let mut r = Reranker::new();
        for s in 0..10u32 {
            let c = unit(s + 11, 2 + s as usize % 7, d);
            let n = c.len() / d;
            // Zero and negative weights count 0, as in rcmd.
            let wc: Vec<f32> = (0..n).map(|i| [2.0, 0.0, 5.5, -1.0][i % 4]).collect();
            let stored = I8Tokens::encode(Tokens::new(&c, d));
            let decoded = stored.decode();
            let (tq, tc) = (Tokens::new(&q, d), Tokens::new(&decoded, d));
            let got = r.directions_i8_weighted(tq, &stored, Weights::Given(&wq, &wc));
            let full = rcmd(tq, tc, Weights::Given(&wq, &wc));
            let plain = rcmd(tq, tc, Weights::Uniform);
            let close = |x: f32, y: f32| (x - y).abs() < 1e-5;
            assert!(close(got.weighted.0, full.forward) && close(got.weighted.1, full.backward));
            assert!(close(got.uniform.0, plain.forward) && close(got.uniform.1, plain.backward));
            let same = r.directions_i8_weighted(tq, &stored, Weights::Uniform);
            assert_eq!(same.weighted, same.uniform);
        }
    }
}
