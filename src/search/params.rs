//! What a search can be told: candidate sources, ordering, depths, fusion weights, the
//! metadata filter, and the checks that reject a bad request before any encoder time. The four
//! settings a collection's search defaults may also choose (`Mode`, `Rerank`, `Weighting`,
//! `FusionWeights`) are plain data in [`crate::types`], re-exported here.

use serde::{Deserialize, Serialize};

use crate::error::{Result, UserError};
use crate::index::Filter;
pub use crate::types::{FusionWeights, Mode, Rerank, Weighting};

/// How many candidates each first stage contributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Depths {
    /// Cosine HNSW depth.
    pub cosine: usize,
    /// W2 HNSW depth.
    pub w2: usize,
    /// Lexical depth.
    pub lexical: usize,
}

impl Default for Depths {
    /// The dense stages stop at 64: deeper asks cost loading and scoring without improving the
    /// reranked list (EVALUATION.md, "First-stage depth"); the lexical stage runs while the
    /// query is encoded, so its depth is free.
    fn default() -> Self {
        Depths {
            cosine: 64,
            w2: 64,
            lexical: 100,
        }
    }
}

/// Everything a search can be told.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchParams {
    /// Hits to return.
    pub k: usize,
    /// Candidate sources.
    pub mode: Mode,
    /// Final ordering.
    pub rerank: Rerank,
    /// Per-stage candidate depths.
    pub depths: Depths,
    /// Fusion weights.
    pub fusion: FusionWeights,
    /// Fused candidates that are loaded, scored and (with `rerank: rcmd`) reranked.
    pub rerank_depth: usize,
    /// RCMD's token weights: for the RCMD stage's scores, the order by them and the
    /// explanations (P(duplicate) always reads uniform RCMD, which the calibration is fitted on).
    #[serde(default)]
    pub weights: Weighting,
    /// Attach an RCMD explanation to each hit.
    pub explain: bool,
    /// Most matrix cells ([`Explanation::cells`](crate::score::explain::Explanation::cells))
    /// the explanations of one answer may hold: hits are explained best first until the next
    /// would pass it; the rest are counted as `unexplained`. Bounds the answer's size.
    #[serde(default = "default_explain_cells")]
    pub explain_cells: usize,
    /// Keep only documents whose metadata meets these conditions, one per top-level key
    /// (equality, `{"in": [..]}`, numeric ranges; see [`Filter`]).
    pub filter: serde_json::Map<String, serde_json::Value>,
    /// Also check whether the text asks two stored questions at once (the answer's
    /// `compound`): only a text that splits at a join is checked, its halves encoded for it.
    /// Read by `Collection::search` and `Collection::search_beside` (the review queue's); a
    /// search of an already encoded query (`search_encoded`) does not check.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub compound: bool,
}

impl Default for SearchParams {
    fn default() -> Self {
        SearchParams {
            k: 10,
            mode: Mode::Hybrid,
            rerank: Rerank::Rcmd,
            depths: Depths::default(),
            fusion: FusionWeights::default(),
            rerank_depth: 100,
            weights: Weighting::Uniform,
            explain: false,
            explain_cells: DEFAULT_EXPLAIN_CELLS,
            filter: Default::default(),
            compound: false,
        }
    }
}

/// Default bound on the cells of one answer's explanations (about 10 MB of JSON); the
/// largest single explanation (512 x 512 wordpieces) fits.
pub const DEFAULT_EXPLAIN_CELLS: usize = 1_000_000;

fn default_explain_cells() -> usize {
    DEFAULT_EXPLAIN_CELLS
}

/// Largest k, per-stage depth and rerank depth a search accepts.
pub const MAX_DEPTH: usize = 1000;

/// Checks `p` before any work (bad requests cost no encoder time).
pub fn validate(p: &SearchParams) -> Result<()> {
    let bad = |name: &'static str, reason: String| -> Result<()> {
        Err(UserError::InvalidArgument { name, reason }.into())
    };
    if p.k == 0 || p.k > MAX_DEPTH {
        return bad("k", format!("{}; use 1-{MAX_DEPTH}", p.k));
    }
    for (name, d) in [
        ("depths.cosine", p.depths.cosine),
        ("depths.w2", p.depths.w2),
        ("depths.lexical", p.depths.lexical),
        ("rerank_depth", p.rerank_depth),
    ] {
        if d > MAX_DEPTH {
            return bad(name, format!("{d}; use at most {MAX_DEPTH}"));
        }
    }
    if p.rerank_depth == 0 {
        return bad(
            "rerank_depth",
            format!("0; use 1-{MAX_DEPTH} (the top k are always scored)"),
        );
    }
    p.fusion.validate(p.mode)?;
    Filter::parse(&p.filter)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_and_reranks_parse_with_helpful_errors() {
        assert_eq!("w2".parse::<Mode>().unwrap(), Mode::W2);
        assert_eq!("none".parse::<Rerank>().unwrap(), Rerank::None);
        assert_eq!(
            "probability".parse::<Rerank>().unwrap(),
            Rerank::Probability
        );
        let e = "bm25".parse::<Rerank>().unwrap_err().to_string();
        assert!(e.contains("use rcmd, probability, context or none"), "{e}");
        let e = "bm25".parse::<Mode>().unwrap_err().to_string();
        assert!(e.contains("cosine, w2, lexical or hybrid"), "{e}");
        assert_eq!("idf".parse::<Weighting>().unwrap(), Weighting::Idf);
        let e = "tfidf".parse::<Weighting>().unwrap_err().to_string();
        assert!(e.contains("use uniform or idf"), "{e}");
    }

    #[test]
    fn params_are_validated() {
        let ok = SearchParams::default();
        assert!(validate(&ok).is_ok());
        for bad in [
            SearchParams { k: 0, ..ok.clone() },
            SearchParams {
                k: MAX_DEPTH + 1,
                ..ok.clone()
            },
            SearchParams {
                rerank_depth: MAX_DEPTH + 1,
                ..ok.clone()
            },
            SearchParams {
                fusion: FusionWeights {
                    w2: -1.0,
                    ..Default::default()
                },
                ..ok.clone()
            },
        ] {
            assert!(validate(&bad).is_err(), "{bad:?}");
        }
    }
}
