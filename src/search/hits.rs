//! What a search answers: hits with every stage's score and rank, timings, and the duplicate
//! verdict built from them. Plain data, serialisable.

use serde::{Deserialize, Serialize};

use super::compound::{Beyond, Compound};
use super::resolve::Settings;
use crate::score::explain::Explanation;

/// A first stage's view of a hit: its exact score, and its rank if that stage retrieved it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Stage {
    /// The exact score (cosine: similarity; w2: distance, lower is closer; lexical: TF-IDF
    /// cosine; fused: RRF score).
    pub score: f32,
    /// 1-based rank in that stage's candidate list; absent when the stage did not retrieve it.
    pub rank: Option<usize>,
}

/// RCMD's view of a hit.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RcmdStage {
    /// s_RCMD = (forward + backward) / 2.
    pub score: f32,
    /// RCMD_1, query → document.
    pub forward: f32,
    /// RCMD_2, document → query.
    pub backward: f32,
    /// 1-based rank by s_RCMD among the scored candidates.
    pub rank: usize,
}

/// Every stage's score and rank for one hit.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Stages {
    /// Cosine of sentence vectors.
    pub cosine: Stage,
    /// 2-Wasserstein distance of intents.
    pub w2: Stage,
    /// TF-IDF cosine.
    pub lexical: Stage,
    /// Reciprocal-rank fusion of the stages the mode uses.
    pub fused: Stage,
    /// RCMD rerank.
    pub rcmd: RcmdStage,
    /// With `rerank: context`: the cosine of the query to the hit's context vector (absent
    /// for a hit without one, or another rerank).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<f32>,
}

/// One search result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hit {
    /// External id.
    pub id: String,
    /// The stored question.
    pub text: String,
    /// Its metadata.
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// The score the hits are ordered by: s_RCMD with `rerank: rcmd`, P(duplicate) with
    /// `rerank: probability`, the context channel's standardised sum with `rerank: context`,
    /// the fused score with `rerank: none`.
    pub score: f32,
    /// P(duplicate) of (query, hit): from the model's variational-siamese classifier when the
    /// model carries one, else from the calibrated logistic model (`calibration` says which).
    pub probability: f32,
    /// Every stage's score and rank.
    pub stages: Stages,
    /// Why they match (when asked for), computed from the query's fresh token vectors and the
    /// document's stored int8 ones (`vectors: stored_int8`), like the scores.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explanation: Option<Explained>,
}

/// Which token vectors an explanation was computed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Vectors {
    /// Both texts encoded for this request, full f32 vectors (`POST /v1/explain`).
    FreshF32,
    /// The query encoded for this request; the document's vectors as the store keeps them,
    /// int8 with a per-vector scale (the same ones its hit was scored from).
    StoredInt8,
}

/// An [`Explanation`] and the token vectors it was computed from; serialised as the
/// explanation's fields plus `vectors`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Explained {
    /// Which token vectors.
    pub vectors: Vectors,
    /// The explanation.
    #[serde(flatten)]
    pub explanation: Explanation,
}

impl Explained {
    /// Matrix cells it holds ([`Explanation::cells`]).
    pub fn cells(&self) -> usize {
        self.explanation.cells()
    }
}

/// Milliseconds per pipeline stage.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Timings {
    /// Encoding the query.
    pub encode_ms: f64,
    /// First stages, fusion, filter and loading records.
    pub candidates_ms: f64,
    /// Scoring (RCMD both directions, exact stage scores, probability), ordering, explaining.
    pub rerank_ms: f64,
    /// All of it.
    pub total_ms: f64,
}

/// A search's results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchOutcome {
    /// The hits, best first.
    pub hits: Vec<Hit>,
    /// Candidates scored.
    pub candidates: usize,
    /// Where the probabilities come from.
    pub calibration: String,
    /// The P(duplicate) threshold (a hit at or above it is a duplicate).
    pub threshold: f32,
    /// What the metadata filter admitted (absent without a filter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filtered: Option<Filtered>,
    /// Hits left without the explanation asked for, because explaining them would pass the
    /// bound on an answer's explanations (`explain_cells`; absent when 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unexplained: usize,
    /// Two stored questions the query asks at once, when judging them as one question beats
    /// every single hit and reaches the threshold (absent otherwise; see
    /// [`DuplicateVerdict::compound`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compound: Option<Compound>,
    /// The mode, rerank, weights and fusion in force and where each came from (the request,
    /// the collection's search defaults, the server's defaults): set by a search that
    /// resolved them ([`super::resolve()`]; absent for one given explicit parameters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<Settings>,
    /// Stage timings.
    pub timings: Timings,
}

/// For `skip_serializing_if`.
pub fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// How a filtered search found its candidates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Filtered {
    /// Documents the filter admits (exact, from the metadata index).
    pub matching: usize,
    /// True when the vector stages scored every admitted document (exact); false when they
    /// searched the graphs for admitted ones (approximate, like an unfiltered search).
    pub exact: bool,
}

/// Whether a text duplicates stored questions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DuplicateVerdict {
    /// True when the best match's probability reaches the threshold.
    pub is_duplicate: bool,
    /// The best match's P(duplicate) (0 with no documents).
    pub probability: f32,
    /// The threshold used.
    pub threshold: f32,
    /// The best matches by probability, each marked against the threshold.
    pub matches: Vec<DuplicateMatch>,
    /// Two stored questions the text asks at once, when judging them as one question beats
    /// every single match and reaches the threshold (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compound: Option<Compound>,
    /// Where the probabilities come from.
    pub calibration: String,
    /// What the metadata filter admitted (absent without a filter; see
    /// [`SearchOutcome::filtered`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filtered: Option<Filtered>,
    /// Matches left without the explanation asked for (see [`SearchOutcome::unexplained`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unexplained: usize,
    /// The settings the candidate pool was searched with (see [`SearchOutcome::settings`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<Settings>,
    /// Stage timings.
    pub timings: Timings,
}

/// One candidate duplicate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DuplicateMatch {
    /// At or above the threshold.
    pub is_duplicate: bool,
    /// The hit (probability, scores, explanation).
    #[serde(flatten)]
    pub hit: Hit,
    /// What the text asks beyond this match (near-duplicates with unmatched phrases only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beyond: Option<Beyond>,
}

/// The explanation of two texts, with their other scores and P(duplicate).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairExplanation {
    /// Cosine of the sentence vectors.
    pub cosine: f32,
    /// 2-Wasserstein distance of the intents.
    pub w2: f32,
    /// TF-IDF cosine over word uni- and bigrams, IDF from the collection when one is given,
    /// else from the two texts.
    pub lexical: f32,
    /// P(duplicate) of the pair, as a search in the collection would give it (its model's
    /// classifier or its calibration; the process's model and the default calibration
    /// without a collection). Reads uniform RCMD whatever the weighting.
    pub probability: f32,
    /// Where the probability comes from.
    pub calibration: String,
    /// The RCMD explanation (`vectors: fresh_f32`): both sides' words, per-direction scores,
    /// token and word alignments, contribution matrices (they sum to the score), chunk
    /// alignment.
    pub explanation: Explained,
}
