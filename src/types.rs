//! Plain data shared by every layer: what the encoder produces and what later layers store.
//! No behaviour beyond trivial accessors; nothing here knows burn, sled or HTTP.
//! `search_settings` holds the four settings a search request or a collection's search
//! defaults may choose (mode, rerank, RCMD weights, fusion weights).

mod search_settings;

use serde::{Deserialize, Serialize};

pub use search_settings::{FusionWeights, Mode, Rerank, Weighting, DEFAULT_K0};

/// One wordpiece of a text, with its span in the original text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Token {
    /// The wordpiece as the tokenizer spells it (`##ing` for a continuation piece).
    pub text: String,
    /// Vocabulary id.
    pub id: u32,
    /// Start offset into the original text, in Unicode scalar values (chars), inclusive.
    pub start: usize,
    /// End offset into the original text, in chars, exclusive.
    pub end: usize,
}

/// A diagonal Gaussian N(μ, diag σ²): a sentence's "intent" (design.md §3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Gaussian {
    /// Mean μ.
    pub mu: Vec<f32>,
    /// Per-dimension standard deviation σ (not the variance), each ≥ the floor it was made with.
    pub sigma: Vec<f32>,
}

/// Everything the encoder produces for one text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Encoded {
    /// The content wordpieces (no `[CLS]`/`[SEP]`/`[PAD]`) with char offsets, in text order.
    pub tokens: Vec<Token>,
    /// True when the text was cut at the model's maximum length.
    pub truncated: bool,
    /// One L2-normalised vector per entry of `tokens`, row-major: `tokens.len() × dim`.
    pub token_vectors: Vec<f32>,
    /// The sentence vector as sentence-transformers computes it: mean over all non-pad tokens
    /// (including `[CLS]` and `[SEP]`) of the last hidden states, then L2-normalised.
    pub sentence: Vec<f32>,
    /// The default (moment-matched) intent of the content token vectors.
    pub intent: Gaussian,
}

impl Encoded {
    /// Vector dimension.
    pub fn dim(&self) -> usize {
        self.sentence.len()
    }

    /// The token vector of content token `i`.
    pub fn token_vector(&self, i: usize) -> &[f32] {
        let d = self.dim();
        &self.token_vectors[i * d..(i + 1) * d]
    }
}

/// Arithmetic of the encoder's linear layers. Vectors of one precision are not those of the
/// other (int8 moves a sentence vector by a cosine of about 0.001), so a collection records
/// the precision it was encoded with and refuses the other.
///
/// The default is int8: about twice as fast on a CPU, and within 0.0002 AUC and 0.1 Spearman
/// of fp32 on every evaluation (EVALUATION.md, "Precision"). Stores older than the choice
/// record nothing and mean fp32 ([`Precision::fp32`] is their serde default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// f32 weights and activations: the model exactly (cosine ≥ 0.9999 to sentence-transformers).
    Fp32,
    /// Weights quantised to int8 per output channel at load, activations per row at run time.
    #[default]
    Int8,
}

impl Precision {
    /// fp32 (a function, for serde defaults).
    pub fn fp32() -> Self {
        Precision::Fp32
    }

    /// The name used in options, settings and fingerprints.
    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Int8 => "int8",
        }
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Precision {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "fp32" | "f32" => Ok(Precision::Fp32),
            "int8" | "i8" => Ok(Precision::Int8),
            _ => Err(format!("unknown precision {s:?}; use fp32 or int8")),
        }
    }
}

/// HNSW parameters of a collection's vector indexes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HnswParams {
    /// Links per node (M).
    pub m: usize,
    /// Candidate list size while building.
    pub ef_construction: usize,
    /// Candidate list size while searching (at least k).
    pub ef_search: usize,
    /// How the graphs keep their vectors (absent in settings older than the choice: `f32`).
    #[serde(default, skip_serializing_if = "GraphVectors::is_f32")]
    pub vectors: GraphVectors,
}

/// How a vector index keeps its points' vectors in memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GraphVectors {
    /// 4 bytes a dimension, exact.
    #[default]
    F32,
    /// 1 byte a dimension and 4 bytes of scale a vector (scalar quantisation, one scale per
    /// vector); distances are from the query's exact vector to the coded one, and a search's
    /// candidates are scored exactly from their stored vectors afterwards.
    Sq8,
}

impl GraphVectors {
    /// True for the default.
    pub fn is_f32(&self) -> bool {
        *self == GraphVectors::F32
    }

    /// The name in settings and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            GraphVectors::F32 => "f32",
            GraphVectors::Sq8 => "sq8",
        }
    }
}

impl std::str::FromStr for GraphVectors {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "f32" | "fp32" => Ok(GraphVectors::F32),
            "sq8" | "int8" | "i8" => Ok(GraphVectors::Sq8),
            _ => Err(format!("unknown graph vectors {s:?}; use f32 or sq8")),
        }
    }
}

impl HnswParams {
    /// Refuses parameters no graph should be built with (m 2-128, ef_construction and
    /// ef_search 1-4096), naming the bad one.
    pub fn validate(&self) -> crate::Result<()> {
        for (name, value, low, high) in [
            ("hnsw.m", self.m, 2, 128),
            ("hnsw.ef_construction", self.ef_construction, 1, 4096),
            ("hnsw.ef_search", self.ef_search, 1, 4096),
        ] {
            if !(low..=high).contains(&value) {
                return Err(crate::error::UserError::InvalidArgument {
                    name,
                    reason: format!("{value}; use {low}-{high} (default {:?})", Self::default()),
                }
                .into());
            }
        }
        Ok(())
    }
}

impl Default for HnswParams {
    fn default() -> Self {
        HnswParams {
            m: 16,
            ef_construction: 200,
            // 64 left one of 715 near-duplicate questions unfound by its own text
            // (tests/it/filter.rs); 128 costs about 0.17 ms more per cosine graph search at 50k
            // points (`cargo bench --bench ann`: 5,022 QPS at ef 64, 2,701 at ef 128).
            ef_search: 128,
            vectors: GraphVectors::F32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hnsw_params_out_of_range_are_refused_by_name() {
        assert!(HnswParams::default().validate().is_ok());
        for (bad, name) in [
            (
                HnswParams {
                    m: 0,
                    ..Default::default()
                },
                "hnsw.m",
            ),
            (
                HnswParams {
                    m: 1000,
                    ..Default::default()
                },
                "hnsw.m",
            ),
            (
                HnswParams {
                    ef_construction: 0,
                    ..Default::default()
                },
                "hnsw.ef_construction",
            ),
            (
                HnswParams {
                    ef_search: 1 << 20,
                    ..Default::default()
                },
                "hnsw.ef_search",
            ),
        ] {
            let e = bad.validate().unwrap_err().to_string();
            assert!(e.contains(name) && e.contains("use "), "{e}");
        }
    }
}
