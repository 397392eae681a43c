//! The scores of a (query, candidate) pair that the duplicate model reads, and the lexical
//! similarity they include. Pure: vectors, terms and IDF in, numbers out.

use std::collections::HashMap;
use std::hash::Hash;

use serde::{Deserialize, Serialize};

/// Everything kindred knows about how alike two questions are.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PairFeatures {
    /// Cosine of the sentence vectors.
    pub cosine: f32,
    /// 2-Wasserstein distance of the intents (lower is closer).
    pub w2: f32,
    /// RCMD_1, query → candidate.
    pub rcmd_forward: f32,
    /// RCMD_2, candidate → query.
    pub rcmd_backward: f32,
    /// TF-IDF cosine over word uni- and bigrams ([`lexical_similarity`]).
    pub lexical: f32,
    /// P(duplicate) from the model's variational-siamese classifier, when the model carries
    /// one (not a calibrator input).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub siamese: Option<f32>,
}

impl PairFeatures {
    /// Names, in [`PairFeatures::to_vec`] order.
    pub const NAMES: [&'static str; 5] =
        ["cosine", "w2", "rcmd_forward", "rcmd_backward", "lexical"];

    /// The features as a vector, in [`PairFeatures::NAMES`] order.
    pub fn to_vec(&self) -> [f64; 5] {
        [
            self.cosine as f64,
            self.w2 as f64,
            self.rcmd_forward as f64,
            self.rcmd_backward as f64,
            self.lexical as f64,
        ]
    }

    /// s_RCMD = mean of both directions.
    pub fn rcmd(&self) -> f32 {
        0.5 * (self.rcmd_forward + self.rcmd_backward)
    }
}

/// TF-IDF cosine of two term lists (raw term counts × `idf`); 0 when either side is empty.
pub fn lexical_similarity(a: &[String], b: &[String], idf: impl Fn(&str) -> f32) -> f32 {
    tfidf_cosine(&counts(a), &counts(b), idf)
}

/// TF-IDF cosine of two term-count maps, each term weighted by `idf`; 0 when either side is
/// empty. The same number whether terms are strings or a vocabulary's ids.
pub fn tfidf_cosine<K: Eq + Hash + Copy>(
    ta: &HashMap<K, f32>,
    tb: &HashMap<K, f32>,
    idf: impl Fn(K) -> f32,
) -> f32 {
    if ta.is_empty() || tb.is_empty() {
        return 0.0;
    }
    let w: HashMap<K, f32> = ta.keys().chain(tb.keys()).map(|&t| (t, idf(t))).collect();
    let na: f32 = ta.iter().map(|(t, c)| (c * w[t]).powi(2)).sum();
    let nb: f32 = tb.iter().map(|(t, c)| (c * w[t]).powi(2)).sum();
    let dot: f32 = ta
        .iter()
        .filter_map(|(t, c)| tb.get(t).map(|d| c * d * w[t].powi(2)))
        .sum();
    if na <= 0.0 || nb <= 0.0 {
        return 0.0;
    }
    (dot / (na.sqrt() * nb.sqrt())).clamp(0.0, 1.0)
}

fn counts(terms: &[String]) -> HashMap<&str, f32> {
    let mut m = HashMap::new();
    for t in terms {
        *m.entry(t.as_str()).or_insert(0.0) += 1.0;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::terms;

    #[test]
    fn lexical_similarity_is_a_weighted_cosine() {
        let one = |_: &str| 1.0;
        let a = terms("how do I learn rust");
        assert!((lexical_similarity(&a, &a, one) - 1.0).abs() < 1e-6);
        assert_eq!(lexical_similarity(&a, &terms("pizza naples"), one), 0.0);
        assert_eq!(lexical_similarity(&a, &[], one), 0.0);
        let b = terms("learn rust");
        let plain = lexical_similarity(&a, &b, one);
        // Up-weighting the shared rare words raises the similarity.
        let rare = |t: &str| if t.contains("rust") { 5.0 } else { 1.0 };
        assert!(lexical_similarity(&a, &b, rare) > plain);
        assert!((lexical_similarity(&a, &b, rare) - lexical_similarity(&b, &a, rare)).abs() < 1e-6);
    }
}
