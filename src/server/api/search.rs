//! Searches: what a search can be told (candidate sources, ordering, depths, fusion weights)
//! and what it answers (hits with every stage's score and rank, timings, duplicate verdicts,
//! pair explanations).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::score::explain::Explanation;
use crate::search;

/// Where candidates come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Cosine of sentence vectors (HNSW).
    Cosine,
    /// 2-Wasserstein distance of intents (HNSW on [μ;σ]).
    W2,
    /// BM25 over word uni- and bigrams (the lexical index).
    Lexical,
    /// All three, fused by reciprocal rank.
    #[default]
    Hybrid,
}

impl From<Mode> for search::Mode {
    fn from(m: Mode) -> Self {
        match m {
            Mode::Cosine => search::Mode::Cosine,
            Mode::W2 => search::Mode::W2,
            Mode::Lexical => search::Mode::Lexical,
            Mode::Hybrid => search::Mode::Hybrid,
        }
    }
}

impl From<search::Mode> for Mode {
    fn from(m: search::Mode) -> Self {
        match m {
            search::Mode::Cosine => Mode::Cosine,
            search::Mode::W2 => Mode::W2,
            search::Mode::Lexical => Mode::Lexical,
            search::Mode::Hybrid => Mode::Hybrid,
        }
    }
}

/// How candidates are ordered after the first stages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
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
    /// By the context channel: the question's cosine and the query's cosine to the
    /// candidate's context (its answers or comments), each standardised over the candidates,
    /// summed. Needs the collection's context vectors (`kindred tune` computes them; 422
    /// without).
    Context,
}

impl From<Rerank> for search::Rerank {
    fn from(r: Rerank) -> Self {
        match r {
            Rerank::Rcmd => search::Rerank::Rcmd,
            Rerank::None => search::Rerank::None,
            Rerank::Probability => search::Rerank::Probability,
            Rerank::Context => search::Rerank::Context,
        }
    }
}

impl From<search::Rerank> for Rerank {
    fn from(r: search::Rerank) -> Self {
        match r {
            search::Rerank::Rcmd => Rerank::Rcmd,
            search::Rerank::None => Rerank::None,
            search::Rerank::Probability => Rerank::Probability,
            search::Rerank::Context => Rerank::Context,
        }
    }
}

/// How RCMD weighs each sentence's tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Weighting {
    /// w = 1/L: every wordpiece counts the same.
    #[default]
    Uniform,
    /// BERTScore-style: each wordpiece weighs its word's IDF in the collection, normalised per
    /// sentence.
    Idf,
}

impl From<Weighting> for search::Weighting {
    fn from(w: Weighting) -> Self {
        match w {
            Weighting::Uniform => search::Weighting::Uniform,
            Weighting::Idf => search::Weighting::Idf,
        }
    }
}

impl From<search::Weighting> for Weighting {
    fn from(w: search::Weighting) -> Self {
        match w {
            search::Weighting::Uniform => Weighting::Uniform,
            search::Weighting::Idf => Weighting::Idf,
        }
    }
}

/// Which token vectors an explanation was computed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Vectors {
    /// Both texts encoded for this request, full f32 vectors (`POST /v1/explain`).
    FreshF32,
    /// The query encoded for this request; the document's vectors as the store keeps them,
    /// int8 with a per-vector scale (the ones its hit was scored from). Their s_RCMD differs
    /// from fresh f32 vectors' by 8e-5 on average, at most about 6e-4 (docs/api.md, "RCMD
    /// weights and vectors").
    StoredInt8,
}

impl From<search::Vectors> for Vectors {
    fn from(v: search::Vectors) -> Self {
        match v {
            search::Vectors::FreshF32 => Vectors::FreshF32,
            search::Vectors::StoredInt8 => Vectors::StoredInt8,
        }
    }
}

/// An RCMD explanation: `vectors`, then the explanation's own fields (both sides' words and
/// chunks, `weighting` (uniform or idf), per-direction scores, token, word and chunk
/// alignments, contribution matrices that sum to the score).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Explained {
    /// Which token vectors it was computed from.
    pub vectors: Vectors,
    /// The explanation's fields, at this level.
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub explanation: Explanation,
}

impl From<search::Explained> for Explained {
    fn from(e: search::Explained) -> Self {
        Explained {
            vectors: e.vectors.into(),
            explanation: e.explanation,
        }
    }
}

/// How many candidates each first stage contributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
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
    /// The library's defaults: a field left out of a request takes them.
    fn default() -> Self {
        search::Depths::default().into()
    }
}

impl From<Depths> for search::Depths {
    fn from(d: Depths) -> Self {
        search::Depths {
            cosine: d.cosine,
            w2: d.w2,
            lexical: d.lexical,
        }
    }
}

impl From<search::Depths> for Depths {
    fn from(d: search::Depths) -> Self {
        Depths {
            cosine: d.cosine,
            w2: d.w2,
            lexical: d.lexical,
        }
    }
}

/// Reciprocal-rank fusion weights.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
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
    /// The library's defaults: a field left out of a request takes them.
    fn default() -> Self {
        search::FusionWeights::default().into()
    }
}

impl From<FusionWeights> for search::FusionWeights {
    fn from(f: FusionWeights) -> Self {
        search::FusionWeights {
            cosine: f.cosine,
            w2: f.w2,
            lexical: f.lexical,
            k0: f.k0,
        }
    }
}

impl From<search::FusionWeights> for FusionWeights {
    fn from(f: search::FusionWeights) -> Self {
        FusionWeights {
            cosine: f.cosine,
            w2: f.w2,
            lexical: f.lexical,
            k0: f.k0,
        }
    }
}

/// Where a setting in force came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SettingSource {
    /// The request said it.
    Request,
    /// The collection's search defaults.
    Collection,
    /// The server's configuration or the built-in default.
    Default,
}

impl From<search::Source> for SettingSource {
    fn from(s: search::Source) -> Self {
        match s {
            search::Source::Request => SettingSource::Request,
            search::Source::Collection => SettingSource::Collection,
            search::Source::Default => SettingSource::Default,
        }
    }
}

/// Where each setting in force came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SettingSources {
    /// Of `mode`.
    pub mode: SettingSource,
    /// Of `rerank`.
    pub rerank: SettingSource,
    /// Of `weights`.
    pub weights: SettingSource,
    /// Of `fusion`.
    pub fusion: SettingSource,
}

impl From<search::Sources> for SettingSources {
    fn from(s: search::Sources) -> Self {
        SettingSources {
            mode: s.mode.into(),
            rerank: s.rerank.into(),
            weights: s.weights.into(),
            fusion: s.fusion.into(),
        }
    }
}

/// The settings a search ran with and where each came from: the request, the collection's
/// search defaults, or the server's defaults (in that order of precedence).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SearchSettings {
    /// Where candidates came from.
    pub mode: Mode,
    /// How candidates were ordered.
    pub rerank: Rerank,
    /// RCMD's token weights.
    pub weights: Weighting,
    /// Fusion weights (they act in hybrid mode only).
    pub fusion: FusionWeights,
    /// Where each came from.
    pub source: SettingSources,
    /// True when the collection has search defaults that were not applied because they were
    /// chosen for another model than its vectors now come from (absent when false).
    #[serde(default, skip_serializing_if = "is_false")]
    pub stale_defaults: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl From<search::Settings> for SearchSettings {
    fn from(s: search::Settings) -> Self {
        SearchSettings {
            mode: s.mode.into(),
            rerank: s.rerank.into(),
            weights: s.weights.into(),
            fusion: s.fusion.into(),
            source: s.source.into(),
            stale_defaults: s.stale_defaults,
        }
    }
}

/// A first stage's view of a hit: its exact score, and its rank if that stage retrieved it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Stage {
    /// The exact score (cosine: similarity; w2: distance, lower is closer; lexical: TF-IDF
    /// cosine; fused: RRF score).
    pub score: f32,
    /// 1-based rank in that stage's candidate list; absent when the stage did not retrieve it.
    pub rank: Option<usize>,
}

impl From<search::Stage> for Stage {
    fn from(s: search::Stage) -> Self {
        Stage {
            score: s.score,
            rank: s.rank,
        }
    }
}

/// RCMD's view of a hit.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
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

impl From<search::RcmdStage> for RcmdStage {
    fn from(s: search::RcmdStage) -> Self {
        RcmdStage {
            score: s.score,
            forward: s.forward,
            backward: s.backward,
            rank: s.rank,
        }
    }
}

/// Every stage's score and rank for one hit.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
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
    /// With `rerank: context`: the cosine of the query to the hit's context vector (its
    /// answers or comments); absent for a hit without one, or another rerank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<f32>,
}

impl From<search::Stages> for Stages {
    fn from(s: search::Stages) -> Self {
        Stages {
            cosine: s.cosine.into(),
            w2: s.w2.into(),
            lexical: s.lexical.into(),
            fused: s.fused.into(),
            rcmd: s.rcmd.into(),
            context: s.context,
        }
    }
}

/// One search result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Hit {
    /// External id.
    pub id: String,
    /// The stored question.
    pub text: String,
    /// Its metadata.
    #[schema(value_type = Object)]
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// The score the hits are ordered by: s_RCMD with `rerank: rcmd`, P(duplicate) with
    /// `rerank: probability`, the fused score with `rerank: none`.
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

impl From<search::Hit> for Hit {
    fn from(h: search::Hit) -> Self {
        Hit {
            id: h.id,
            text: h.text,
            metadata: h.metadata,
            score: h.score,
            probability: h.probability,
            stages: h.stages.into(),
            explanation: h.explanation.map(Into::into),
        }
    }
}

/// Milliseconds per pipeline stage.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, ToSchema)]
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

impl From<search::Timings> for Timings {
    fn from(t: search::Timings) -> Self {
        Timings {
            encode_ms: t.encode_ms,
            candidates_ms: t.candidates_ms,
            rerank_ms: t.rerank_ms,
            total_ms: t.total_ms,
        }
    }
}

/// A search's results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
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
    /// Hits left without the explanation asked for, because explaining them would pass
    /// `limits.max_explain_cells` (the best hits are the ones explained; absent when 0).
    #[serde(default, skip_serializing_if = "search::is_zero")]
    pub unexplained: usize,
    /// Two stored questions the query asks at once (as in `DuplicateVerdict.compound`; absent
    /// when there is none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compound: Option<Compound>,
    /// The mode, rerank, weights and fusion in force and where each came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<SearchSettings>,
    /// Stage timings.
    pub timings: Timings,
}

impl From<search::SearchOutcome> for SearchOutcome {
    fn from(o: search::SearchOutcome) -> Self {
        SearchOutcome {
            hits: o.hits.into_iter().map(Hit::from).collect(),
            candidates: o.candidates,
            calibration: o.calibration,
            threshold: o.threshold,
            filtered: o.filtered.map(Into::into),
            unexplained: o.unexplained,
            compound: o.compound.map(Into::into),
            settings: o.settings.map(Into::into),
            timings: o.timings.into(),
        }
    }
}

/// How a filtered search found its candidates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Filtered {
    /// Documents the filter admits (exact, from the metadata index).
    pub matching: usize,
    /// True when the vector stages scored every admitted document (exact); false when they
    /// searched the graphs for admitted ones (approximate, like an unfiltered search).
    pub exact: bool,
}

impl From<search::Filtered> for Filtered {
    fn from(f: search::Filtered) -> Self {
        Filtered {
            matching: f.matching,
            exact: f.exact,
        }
    }
}

/// Whether a text duplicates stored questions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DuplicateVerdict {
    /// True when the best match's probability reaches the threshold.
    pub is_duplicate: bool,
    /// The best match's P(duplicate) (0 with no documents).
    pub probability: f32,
    /// The threshold used.
    pub threshold: f32,
    /// The best matches by probability, each marked against the threshold.
    pub matches: Vec<DuplicateMatch>,
    /// Two stored questions the text asks at once: present when judging the two as one
    /// question (their fused vector, both token sets, both texts) reaches the threshold and
    /// beats every single match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compound: Option<Compound>,
    /// Where the probabilities come from.
    pub calibration: String,
    /// What the metadata filter admitted (absent without a filter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filtered: Option<Filtered>,
    /// Matches left without the explanation asked for (see `SearchOutcome.unexplained`).
    #[serde(default, skip_serializing_if = "search::is_zero")]
    pub unexplained: usize,
    /// The settings the candidate pool was searched with (see `SearchOutcome.settings`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<SearchSettings>,
    /// Stage timings.
    pub timings: Timings,
}

impl From<search::DuplicateVerdict> for DuplicateVerdict {
    fn from(v: search::DuplicateVerdict) -> Self {
        DuplicateVerdict {
            is_duplicate: v.is_duplicate,
            probability: v.probability,
            threshold: v.threshold,
            matches: v.matches.into_iter().map(DuplicateMatch::from).collect(),
            compound: v.compound.map(Into::into),
            calibration: v.calibration,
            filtered: v.filtered.map(Into::into),
            unexplained: v.unexplained,
            settings: v.settings.map(Into::into),
            timings: v.timings.into(),
        }
    }
}

/// One candidate duplicate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DuplicateMatch {
    /// At or above the threshold.
    pub is_duplicate: bool,
    /// The hit (probability, scores, explanation).
    #[serde(flatten)]
    pub hit: Hit,
    /// What the text asks beyond this match: present on near-duplicates (P(duplicate) at
    /// least half the threshold) that leave some of its phrases unmatched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beyond: Option<Beyond>,
}

impl From<search::DuplicateMatch> for DuplicateMatch {
    fn from(m: search::DuplicateMatch) -> Self {
        DuplicateMatch {
            is_duplicate: m.is_duplicate,
            hit: m.hit.into(),
            beyond: m.beyond.map(Into::into),
        }
    }
}

/// An operation on texts' sentence vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum OperationKind {
    /// Two texts asked as one (a ⊕ b).
    Fusion,
    /// What the first text asks beyond the second (a ⊖ b).
    Difference,
    /// One long text said short.
    Compression,
    /// One text's own vector, read back.
    Decode,
}

impl OperationKind {
    /// The library's operator (None: decoding).
    pub fn operator(self) -> Option<crate::model::operators::Operation> {
        use crate::model::operators::Operation;
        match self {
            OperationKind::Fusion => Some(Operation::Fusion),
            OperationKind::Difference => Some(Operation::Difference),
            OperationKind::Compression => Some(Operation::Compression),
            OperationKind::Decode => None,
        }
    }
}

/// The answer to an operation: its result read back as stored questions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct OperationAnswer {
    /// The operation asked.
    pub operation: OperationKind,
    /// Which operator ran: `learned` (the model's own, from `kindred train operators`),
    /// `arithmetic` (normalised sum or difference; compression is then the identity) or `none`
    /// (decode).
    pub operator: String,
    /// The collection's stored questions nearest the result, best first.
    pub nearest: Vec<Nearest>,
    /// The result read back as words by the model's decoder (from `kindred train decoder`),
    /// in their usual order; absent when the model carries no decoder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub words: Option<Vec<String>>,
}

/// A text that asks two stored questions at once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Compound {
    /// The two stored questions, each with the text's phrases it explains.
    pub covers: Vec<Covered>,
    /// P(duplicate) of (the text, both questions as one).
    pub probability: f32,
}

/// One part of a compound.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Covered {
    /// External id.
    pub id: String,
    /// The stored question.
    pub text: String,
    /// Its own P(duplicate) against the whole text.
    pub probability: f32,
    /// The text's phrases it explains (its tokens align better with this part).
    pub phrases: Vec<String>,
}

/// What a text asks beyond one match.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Beyond {
    /// The text's phrases none of whose tokens aligns closely with a token of the match.
    pub phrases: Vec<String>,
    /// Stored questions nearest the difference of the two vectors (text ⊖ match), the match
    /// left out: what the rest of the text is about, read back as questions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nearest: Vec<Nearest>,
    /// The same difference read back as words by the model's decoder, the match's own words
    /// and function words left out; absent without a decoder or when none is left.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub words: Vec<String>,
}

/// A stored question near a vector.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Nearest {
    /// External id.
    pub id: String,
    /// The stored question.
    pub text: String,
    /// Cosine with the vector.
    pub cosine: f32,
}

impl From<search::Compound> for Compound {
    fn from(c: search::Compound) -> Self {
        Compound {
            covers: c
                .covers
                .into_iter()
                .map(|p| Covered {
                    id: p.id,
                    text: p.text,
                    probability: p.probability,
                    phrases: p.phrases,
                })
                .collect(),
            probability: c.probability,
        }
    }
}

impl From<search::Nearest> for Nearest {
    fn from(n: search::Nearest) -> Self {
        Nearest {
            id: n.id,
            text: n.text,
            cosine: n.cosine,
        }
    }
}

impl From<search::Beyond> for Beyond {
    fn from(b: search::Beyond) -> Self {
        Beyond {
            phrases: b.phrases,
            nearest: b.nearest.into_iter().map(Into::into).collect(),
            words: b.words,
        }
    }
}

/// The explanation of two texts, with their other scores and P(duplicate).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PairExplanation {
    /// Cosine of the sentence vectors.
    pub cosine: f32,
    /// 2-Wasserstein distance of the intents.
    pub w2: f32,
    /// TF-IDF cosine over word uni- and bigrams (0-1), IDF from the collection when one is
    /// given, else from the two texts.
    pub lexical: f32,
    /// P(duplicate) (0-1), as a search in the collection would give it: its model's
    /// classifier or its calibration; without a collection, the server model's classifier or
    /// the default calibration. Reads uniform RCMD whatever `weights` asked for.
    pub probability: f32,
    /// Where the probability comes from.
    pub calibration: String,
    /// The RCMD explanation, from both texts' fresh token vectors (`vectors: fresh_f32`).
    pub explanation: Explained,
}

impl From<search::PairExplanation> for PairExplanation {
    fn from(p: search::PairExplanation) -> Self {
        PairExplanation {
            cosine: p.cosine,
            w2: p.w2,
            lexical: p.lexical,
            probability: p.probability,
            calibration: p.calibration,
            explanation: p.explanation.into(),
        }
    }
}
