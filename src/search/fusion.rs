//! Reciprocal-rank fusion (Cormack et al., 2009): a document's fused score is
//! Σ_stage weight_stage / (k0 + rank_stage), over the stages that retrieved it (ranks from 1).
//! Pure: ranked id lists in, one ranked list out.

use std::collections::HashMap;
use std::hash::Hash;

/// One stage's ranked list and its weight.
#[derive(Debug, Clone, Copy)]
pub struct Ranked<'a, K> {
    /// Ids, best first.
    pub ids: &'a [K],
    /// The stage's weight (0 disables it).
    pub weight: f32,
}

/// Fuses ranked lists: (id, fused score), best first; ties broken by first appearance (stage
/// order, then rank), so the output is deterministic.
pub fn rrf<K: Clone + Eq + Hash>(stages: &[Ranked<'_, K>], k0: f32) -> Vec<(K, f32)> {
    let mut scores: HashMap<&K, (f32, usize)> = HashMap::new();
    let mut order = 0;
    for stage in stages.iter().filter(|s| s.weight > 0.0) {
        for (rank, id) in stage.ids.iter().enumerate() {
            let e = scores.entry(id).or_insert_with(|| {
                order += 1;
                (0.0, order)
            });
            e.0 += stage.weight / (k0 + rank as f32 + 1.0);
        }
    }
    let mut out: Vec<(&K, (f32, usize))> = scores.into_iter().collect();
    out.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0).then(a.1 .1.cmp(&b.1 .1)));
    out.into_iter()
        .map(|(id, (s, _))| (id.clone(), s))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    /// RRF of two stages with weights `wa` and `wb`, k0 = 60.
    fn two(a: &[String], b: &[String], wa: f32, wb: f32) -> Vec<(String, f32)> {
        rrf(
            &[Ranked { ids: a, weight: wa }, Ranked { ids: b, weight: wb }],
            60.0,
        )
    }

    #[test]
    fn agreement_wins_and_weights_count() {
        let (a, b) = (ids(&["x", "y", "z"]), ids(&["y", "w"]));
        let fused = two(&a, &b, 1.0, 1.0);
        assert_eq!(fused[0].0, "y");
        assert!((fused[0].1 - (1.0 / 62.0 + 1.0 / 61.0)).abs() < 1e-7);
        assert_eq!(fused.len(), 4);
        // A heavier second stage puts its second item above the first stage's first.
        let fused = two(&a, &b, 1.0, 3.0);
        assert_eq!(fused[1].0, "w");
        // Weight 0 switches a stage off.
        let fused = two(&a, &b, 1.0, 0.0);
        assert_eq!(
            fused.iter().map(|f| f.0.as_str()).collect::<Vec<_>>(),
            ["x", "y", "z"]
        );
    }

    #[test]
    fn ties_keep_first_appearance() {
        let (a, b) = (ids(&["p"]), ids(&["q"]));
        assert_eq!(two(&a, &b, 1.0, 1.0)[0].0, "p");
    }
}
