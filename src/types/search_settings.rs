//! The four search settings a request or a collection's search defaults may choose: where
//! candidates come from ([`Mode`]), how they are ordered ([`Rerank`]), how RCMD weighs tokens
//! ([`Weighting`]) and the fusion weights ([`FusionWeights`]). Plain data with their names:
//! the search layer acts on them, the store keeps a collection's choice of them
//! (`store::SearchDefaults`), so they live below both.

use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{Result, UserError};

/// The default RRF constant k0 (the constant of the original paper, Cormack et al., 2009).
pub const DEFAULT_K0: f32 = 60.0;

/// Where candidates come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Cosine of sentence vectors (HNSW).
    Cosine,
    /// 2-Wasserstein distance of intents (HNSW on `[μ;σ]`).
    W2,
    /// BM25 over word uni- and bigrams (the lexical index).
    Lexical,
    /// All three, fused by reciprocal rank.
    #[default]
    Hybrid,
}

impl Mode {
    /// Its name, as requests give it.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Cosine => "cosine",
            Mode::W2 => "w2",
            Mode::Lexical => "lexical",
            Mode::Hybrid => "hybrid",
        }
    }
}

/// How candidates are ordered after the first stages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rerank {
    /// By s_RCMD (relaxed optimal transport over token vectors).
    #[default]
    Rcmd,
    /// Keep the first-stage (fused) order.
    None,
    /// By P(duplicate), each hit's `probability` (the collection's calibrated model over
    /// s_RCMD and the other scores, or the model's classifier): the likeliest duplicates first.
    Probability,
    /// By the context channel: each candidate's question cosine and the cosine of the query
    /// to its context (the normalised mean of its answers' or comments' sentence vectors),
    /// each standardised over the candidates, summed ([`crate::score::context`]). Needs the
    /// collection's context vectors (`kindred tune` computes them).
    Context,
}

impl Rerank {
    /// Its name, as requests give it.
    pub fn name(self) -> &'static str {
        match self {
            Rerank::Rcmd => "rcmd",
            Rerank::None => "none",
            Rerank::Probability => "probability",
            Rerank::Context => "context",
        }
    }

    /// Whether candidates are scored beyond the first stages (RCMD at the rerank depth).
    pub fn reranks(self) -> bool {
        self != Rerank::None
    }
}

/// How RCMD weighs each sentence's tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Weighting {
    /// w = 1/L: every wordpiece counts the same.
    #[default]
    Uniform,
    /// BERTScore-style: each wordpiece weighs its word's IDF in the collection
    /// ([`crate::score::weights::token_weights`]), normalised per sentence.
    Idf,
}

impl Weighting {
    /// Its name, as requests give it and explanations report it (`weighting`).
    pub fn name(self) -> &'static str {
        match self {
            Weighting::Uniform => "uniform",
            Weighting::Idf => "idf",
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::fmt::Display for Rerank {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::fmt::Display for Weighting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Weighting {
    type Err = crate::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "uniform" => Ok(Weighting::Uniform),
            "idf" => Ok(Weighting::Idf),
            other => Err(UserError::InvalidArgument {
                name: "weights",
                reason: format!("{other:?}; use uniform or idf"),
            }
            .into()),
        }
    }
}

impl FromStr for Mode {
    type Err = crate::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "cosine" => Ok(Mode::Cosine),
            "w2" => Ok(Mode::W2),
            "lexical" => Ok(Mode::Lexical),
            "hybrid" => Ok(Mode::Hybrid),
            other => Err(UserError::InvalidArgument {
                name: "mode",
                reason: format!("{other:?}; use cosine, w2, lexical or hybrid"),
            }
            .into()),
        }
    }
}

impl FromStr for Rerank {
    type Err = crate::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "rcmd" => Ok(Rerank::Rcmd),
            "none" => Ok(Rerank::None),
            "probability" => Ok(Rerank::Probability),
            "context" => Ok(Rerank::Context),
            other => Err(UserError::InvalidArgument {
                name: "rerank",
                reason: format!("{other:?}; use rcmd, probability, context or none"),
            }
            .into()),
        }
    }
}

/// Reciprocal-rank fusion weights.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FusionWeights {
    /// Weight of the cosine stage.
    pub cosine: f32,
    /// Weight of the W2 stage.
    pub w2: f32,
    /// Weight of the lexical stage.
    pub lexical: f32,
    /// The RRF constant k0 in weight / (k0 + rank).
    pub k0: f32,
}

impl Default for FusionWeights {
    fn default() -> Self {
        FusionWeights {
            cosine: 1.0,
            w2: 1.0,
            lexical: 1.0,
            k0: DEFAULT_K0,
        }
    }
}

impl FusionWeights {
    /// Refuses weights no search can run with, naming the field: every stage weight finite
    /// and 0 or more, at least one positive in hybrid mode (else it finds nothing), k0 finite
    /// and above 0. The one check for a search request and for stored search defaults.
    pub fn validate(&self, mode: Mode) -> Result<()> {
        let bad = |name: &'static str, reason: String| -> Result<()> {
            Err(UserError::InvalidArgument { name, reason }.into())
        };
        for (name, w) in [
            ("fusion.cosine", self.cosine),
            ("fusion.w2", self.w2),
            ("fusion.lexical", self.lexical),
        ] {
            if !w.is_finite() || w < 0.0 {
                return bad(
                    name,
                    format!("{w}; a stage weight must be finite and 0 or more"),
                );
            }
        }
        if mode == Mode::Hybrid && self.cosine + self.w2 + self.lexical <= 0.0 {
            return bad(
                "fusion",
                "every stage weight is 0, so hybrid mode would find nothing; give at least one stage a positive weight, or choose that stage's mode".into(),
            );
        }
        if !self.k0.is_finite() || self.k0 <= 0.0 {
            return bad(
                "fusion.k0",
                format!(
                    "{}; k0 must be finite and above 0 (the default is {DEFAULT_K0})",
                    self.k0
                ),
            );
        }
        Ok(())
    }
}

impl std::fmt::Display for FusionWeights {
    /// `cosine 1 · w2 1 · lexical 0.5 · k0 60`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cosine {} · w2 {} · lexical {} · k0 {}",
            self.cosine, self.w2, self.lexical, self.k0
        )
    }
}
