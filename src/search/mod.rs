//! The search pipeline, shared by the server, the CLI and the UI (design.md §2):
//!
//! ```text
//! text ─► encode once ─► first stages (cosine HNSW, W2 HNSW, TF-IDF; each its own depth)
//!      ─► reciprocal-rank fusion ─► metadata filter ─► load the top candidates' records
//!      ─► every stage's exact score + RCMD both directions ─► P(duplicate) ─► order
//!      ─► top k, with explanations on request
//! ```
//!
//! The math lives in [`crate::score`], [`fusion`], [`features`] and [`calibration`]; this
//! module only wires the database and the encoder to it and times each stage.

pub mod fusion;

use std::collections::HashMap;
use std::str::FromStr;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::db::Database;
use crate::error::{Result, UserError};
use crate::index::lexical::terms;
use crate::model::heads::Classifier;
use crate::score::explain::{explain, Explanation, Sentence};
use crate::score::rerank::Reranker;
use crate::score::{dot, w2, Tokens, Weights};
use crate::store::StoredDoc;
use crate::{Encoded, Encoder};

pub use crate::score::calibration::Calibrator;
pub use crate::score::features::{self, PairFeatures};

/// Where candidates come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Cosine of sentence vectors (HNSW).
    Cosine,
    /// 2-Wasserstein distance of intents (HNSW on [μ;σ]).
    W2,
    /// TF-IDF over word uni- and bigrams.
    Lexical,
    /// All three, fused by reciprocal rank.
    #[default]
    Hybrid,
}

/// How candidates are ordered after the first stages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Rerank {
    /// By s_RCMD (relaxed optimal transport over token vectors).
    #[default]
    Rcmd,
    /// Keep the first-stage (fused) order.
    None,
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
            other => Err(UserError::InvalidArgument {
                name: "rerank",
                reason: format!("{other:?}; use rcmd or none"),
            }
            .into()),
        }
    }
}

/// How many candidates each first stage contributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
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
    /// The dense stages stop at the HNSW search width (ef 64): deeper asks widen every graph
    /// search and cost latency without improving the reranked list (EVALUATION.md, "First-stage
    /// depth"); the lexical stage runs while the query is encoded, so its depth is free.
    fn default() -> Self {
        Depths {
            cosine: 64,
            w2: 64,
            lexical: 100,
        }
    }
}

/// Reciprocal-rank fusion weights.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
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
            k0: fusion::DEFAULT_K0,
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
    /// Attach an RCMD explanation to each hit.
    pub explain: bool,
    /// Keep only documents whose metadata has these top-level key/value pairs.
    pub filter: serde_json::Map<String, serde_json::Value>,
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
            explain: false,
            filter: Default::default(),
        }
    }
}

/// A first stage's view of a hit: its exact score, and its rank if that stage retrieved it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Stage {
    /// The exact score (cosine: similarity; w2: distance, lower is closer; lexical: TF-IDF
    /// cosine; fused: RRF score).
    pub score: f32,
    /// 1-based rank in that stage's candidate list; absent when the stage did not retrieve it.
    pub rank: Option<usize>,
}

/// RCMD's view of a hit.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
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
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
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
}

/// One search result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Hit {
    /// External id.
    pub id: String,
    /// The stored question.
    pub text: String,
    /// Its metadata.
    #[schema(value_type = Object)]
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// The score the hits are ordered by: s_RCMD with `rerank: rcmd`, else the fused score.
    pub score: f32,
    /// P(duplicate) of (query, hit): from the model's variational-siamese classifier when the
    /// model carries one, else from the calibrated logistic model (`calibration` says which).
    pub probability: f32,
    /// Every stage's score and rank.
    pub stages: Stages,
    /// Why they match (when asked for).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub explanation: Option<Explanation>,
}

/// Milliseconds per pipeline stage.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, utoipa::ToSchema)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SearchOutcome {
    /// The hits, best first.
    pub hits: Vec<Hit>,
    /// Candidates scored.
    pub candidates: usize,
    /// Where the probabilities come from.
    pub calibration: String,
    /// The P(duplicate) threshold (a hit at or above it is a duplicate).
    pub threshold: f32,
    /// Stage timings.
    pub timings: Timings,
}

/// Where P(duplicate) comes from when the collection's model carries a variational-siamese
/// classifier: its probability, judged at 0.5 (it is trained with cross-entropy, so 0.5 is the
/// accuracy-optimal threshold for calibrated outputs).
pub const SIAMESE_THRESHOLD: f32 = 0.5;

fn siamese_name(model: &str) -> String {
    format!("variational-siamese classifier of {model}")
}

/// Whether a text duplicates stored questions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DuplicateVerdict {
    /// True when the best match's probability reaches the threshold.
    pub is_duplicate: bool,
    /// The best match's P(duplicate) (0 with no documents).
    pub probability: f32,
    /// The threshold used.
    pub threshold: f32,
    /// The best matches by probability, each marked against the threshold.
    pub matches: Vec<DuplicateMatch>,
    /// Where the probabilities come from.
    pub calibration: String,
    /// Stage timings.
    pub timings: Timings,
}

/// One candidate duplicate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DuplicateMatch {
    /// At or above the threshold.
    pub is_duplicate: bool,
    /// The hit (probability, scores, explanation).
    #[serde(flatten)]
    pub hit: Hit,
}

/// The calibrator a collection uses: its own if fitted (`kindred calibrate --collection`),
/// else the shipped default.
pub fn calibrator_for(db: &Database, collection: &str) -> Result<Calibrator> {
    match db.store().meta(collection, "calibration")? {
        Some(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            crate::InternalError::Corrupt(format!("calibration of {collection}: {e}")).into()
        }),
        None => Ok(Calibrator::default_for_minilm()),
    }
}

/// Stores a calibrator as the collection's own.
pub fn set_calibrator(db: &Database, collection: &str, c: &Calibrator) -> Result<()> {
    let bytes = serde_json::to_vec(c).expect("calibrator serialises");
    db.store().set_meta(collection, "calibration", &bytes)
}

/// Runs a search: encodes `text` and calls [`search_encoded`].
pub fn search(
    db: &Database,
    encoder: &Encoder,
    collection: &str,
    text: &str,
    params: &SearchParams,
) -> Result<SearchOutcome> {
    // Bad parameters, unknown collections and other models' collections fail before any
    // encoder time.
    validate(params)?;
    db.check_model(collection, encoder.identity())?;
    let start = Instant::now();
    // The lexical stage needs no vectors: it runs while the query is encoded.
    let (query, encode_ms, lexical) = std::thread::scope(|s| {
        let lexical = s.spawn(|| lexical_stage(db, collection, text, params));
        let query = encoder.encode_one(text);
        let encode_ms = ms(start);
        (query, encode_ms, lexical.join().expect("lexical stage"))
    });
    let query = query?;
    let stages_start = Instant::now();
    let (cosine, w2) = vector_stages(db, collection, &query, params)?;
    let stages = FirstStages {
        cosine,
        w2,
        lexical: lexical?,
    };
    let judge = Judge::of(encoder);
    let mut out = rank(
        db,
        collection,
        (text, &query),
        params,
        stages,
        stages_start,
        judge,
    )?;
    out.timings.encode_ms = encode_ms;
    out.timings.total_ms = ms(start);
    Ok(out)
}

/// Runs a search for an already encoded query (probabilities from the calibrated model).
pub fn search_encoded(
    db: &Database,
    collection: &str,
    text: &str,
    query: &Encoded,
    params: &SearchParams,
) -> Result<SearchOutcome> {
    search_judged(db, collection, text, query, params, None)
}

/// The model's variational-siamese classifier, named, if it carries one.
#[derive(Clone, Copy)]
struct Judge<'a> {
    classifier: &'a Classifier,
    model: &'a str,
}

impl<'a> Judge<'a> {
    fn of(encoder: &'a Encoder) -> Option<Self> {
        encoder.heads().classifier.as_ref().map(|classifier| Judge {
            classifier,
            model: &encoder.identity().id,
        })
    }
}

fn search_judged(
    db: &Database,
    collection: &str,
    text: &str,
    query: &Encoded,
    params: &SearchParams,
    judge: Option<Judge<'_>>,
) -> Result<SearchOutcome> {
    validate(params)?;
    let start = Instant::now();
    let (lexical, vectors) = std::thread::scope(|s| {
        let lexical = s.spawn(|| lexical_stage(db, collection, text, params));
        let vectors = vector_stages(db, collection, query, params);
        (lexical.join().expect("lexical stage"), vectors)
    });
    let (cosine, w2) = vectors?;
    let stages = FirstStages {
        cosine,
        w2,
        lexical: lexical?,
    };
    rank(db, collection, (text, query), params, stages, start, judge)
}

/// The lexical first stage (needs only the text, so it runs while the query is encoded).
fn lexical_stage(
    db: &Database,
    collection: &str,
    text: &str,
    params: &SearchParams,
) -> Result<Vec<String>> {
    if matches!(params.mode, Mode::Lexical | Mode::Hybrid) {
        db.lexical_ids(collection, text, params.depths.lexical)
    } else {
        Ok(Vec::new())
    }
}

/// The cosine and W2 first stages, side by side.
fn vector_stages(
    db: &Database,
    collection: &str,
    query: &Encoded,
    params: &SearchParams,
) -> Result<(Vec<String>, Vec<String>)> {
    let uses = |m: Mode| params.mode == m || params.mode == Mode::Hybrid;
    std::thread::scope(|s| {
        let w2 = uses(Mode::W2)
            .then(|| s.spawn(|| db.w2_ids(collection, &query.intent, params.depths.w2)));
        let cosine = if uses(Mode::Cosine) {
            db.cosine_ids(collection, &query.sentence, params.depths.cosine)?
        } else {
            Vec::new()
        };
        let w2 = match w2 {
            Some(h) => h.join().expect("w2 stage")?,
            None => Vec::new(),
        };
        Ok((cosine, w2))
    })
}

/// The first stages' candidate lists (external ids, best first).
struct FirstStages {
    cosine: Vec<String>,
    w2: Vec<String>,
    lexical: Vec<String>,
}

/// Fusion, filter, scoring, ordering and explanations, from the first stages' lists.
fn rank(
    db: &Database,
    collection: &str,
    (text, query): (&str, &Encoded),
    params: &SearchParams,
    stages: FirstStages,
    start: Instant,
    judge: Option<Judge<'_>>,
) -> Result<SearchOutcome> {
    let FirstStages {
        cosine: cosine_ids,
        w2: w2_ids,
        lexical: lexical_ids,
    } = stages;
    let calibrator = calibrator_for(db, collection)?;
    let weight = |m: Mode, w: f32| {
        if params.mode == Mode::Hybrid {
            w
        } else if params.mode == m {
            1.0
        } else {
            0.0
        }
    };
    let fused = fusion::rrf(
        &[
            fusion::Ranked {
                ids: &cosine_ids,
                weight: weight(Mode::Cosine, params.fusion.cosine),
            },
            fusion::Ranked {
                ids: &w2_ids,
                weight: weight(Mode::W2, params.fusion.w2),
            },
            fusion::Ranked {
                ids: &lexical_ids,
                weight: weight(Mode::Lexical, params.fusion.lexical),
            },
        ],
        params.fusion.k0,
    );

    // Load records down the fused list, filtering, until enough are scored.
    let wanted = match params.rerank {
        Rerank::Rcmd => params.rerank_depth.max(params.k),
        Rerank::None => params.k,
    };
    let mut candidates: Vec<(usize, f32, StoredDoc)> = Vec::with_capacity(wanted);
    for (fused_rank, (id, fused_score)) in fused.iter().enumerate() {
        if candidates.len() == wanted {
            break;
        }
        let Some(doc) = db.get(collection, id)? else {
            continue;
        };
        if !params.filter.is_empty() && !matches_filter(&doc, &params.filter) {
            continue;
        }
        candidates.push((fused_rank + 1, *fused_score, doc));
    }
    let candidates_ms = ms(start);

    // Score every candidate on every stage.
    let rank_in = |ids: &[String]| -> HashMap<String, usize> {
        ids.iter()
            .enumerate()
            .map(|(r, id)| (id.clone(), r + 1))
            .collect()
    };
    let (cos_rank, w2_rank, lex_rank) = (
        rank_in(&cosine_ids),
        rank_in(&w2_ids),
        rank_in(&lexical_ids),
    );
    let lexicon = db.lexical_index(collection)?;
    let query_terms = terms(text);
    let query_tokens = Tokens::new(&query.token_vectors, query.dim());
    let mut reranker = Reranker::new();
    let mut hits: Vec<Hit> = lexicon.with_idf(|idf| {
        candidates
            .into_iter()
            .map(|(fused_rank, fused_score, doc)| {
                let (forward, backward) =
                    reranker.directions_i8(query_tokens, &doc.token_vectors());
                let features = PairFeatures {
                    cosine: dot(&query.sentence, &doc.sentence),
                    w2: w2(&query.intent, &doc.intent()),
                    rcmd_forward: forward,
                    rcmd_backward: backward,
                    lexical: features::lexical_similarity(&query_terms, &terms(&doc.text), idf),
                    siamese: judge.map(|j| j.classifier.probability(&query.intent, &doc.intent())),
                };
                let rcmd = features.rcmd();
                Hit {
                    probability: features
                        .siamese
                        .unwrap_or_else(|| calibrator.probability(&features)),
                    score: match params.rerank {
                        Rerank::Rcmd => rcmd,
                        Rerank::None => fused_score,
                    },
                    stages: Stages {
                        cosine: Stage {
                            score: features.cosine,
                            rank: cos_rank.get(&doc.id).copied(),
                        },
                        w2: Stage {
                            score: features.w2,
                            rank: w2_rank.get(&doc.id).copied(),
                        },
                        lexical: Stage {
                            score: features.lexical,
                            rank: lex_rank.get(&doc.id).copied(),
                        },
                        fused: Stage {
                            score: fused_score,
                            rank: Some(fused_rank),
                        },
                        rcmd: RcmdStage {
                            score: rcmd,
                            forward,
                            backward,
                            rank: 0,
                        },
                    },
                    metadata: doc.metadata(),
                    explanation: None,
                    id: doc.id,
                    text: doc.text,
                }
            })
            .collect()
    });
    let candidates_scored = hits.len();

    // RCMD ranks, then the final order (stable: ties keep the fused order).
    let mut by_rcmd: Vec<usize> = (0..hits.len()).collect();
    by_rcmd.sort_by(|&a, &b| {
        hits[b]
            .stages
            .rcmd
            .score
            .total_cmp(&hits[a].stages.rcmd.score)
    });
    for (rank, i) in by_rcmd.into_iter().enumerate() {
        hits[i].stages.rcmd.rank = rank + 1;
    }
    if params.rerank == Rerank::Rcmd {
        hits.sort_by(|a, b| b.score.total_cmp(&a.score));
    }
    hits.truncate(params.k);
    if params.explain {
        for hit in &mut hits {
            hit.explanation = Some(explain_stored(db, collection, text, query, &hit.id)?);
        }
    }
    Ok(SearchOutcome {
        hits,
        candidates: candidates_scored,
        calibration: match judge {
            Some(j) => siamese_name(j.model),
            None => calibrator.fitted_on.clone(),
        },
        threshold: match judge {
            Some(_) => SIAMESE_THRESHOLD,
            None => calibrator.threshold as f32,
        },
        timings: Timings {
            encode_ms: 0.0,
            candidates_ms,
            rerank_ms: ms(start) - candidates_ms,
            total_ms: ms(start),
        },
    })
}

/// Is `text` a duplicate of stored questions? Runs a hybrid search with RCMD rerank and
/// judges its best `k` matches by probability against `threshold` (default: the calibrator's).
pub fn duplicates(
    db: &Database,
    encoder: &Encoder,
    collection: &str,
    text: &str,
    threshold: Option<f32>,
    params: &SearchParams,
) -> Result<DuplicateVerdict> {
    if let Some(t) = threshold {
        if !(0.0..=1.0).contains(&t) {
            return Err(UserError::InvalidArgument {
                name: "threshold",
                reason: format!("{t}; a probability between 0 and 1"),
            }
            .into());
        }
    }
    let judge = Judge::of(encoder);
    let threshold = match (threshold, judge) {
        (Some(t), _) => t,
        (None, Some(_)) => SIAMESE_THRESHOLD,
        (None, None) => calibrator_for(db, collection)?.threshold as f32,
    };
    validate(params)?;
    db.check_model(collection, encoder.identity())?;
    let start = Instant::now();
    let query = encoder.encode_one(text)?;
    let encode_ms = ms(start);
    // Score the whole candidate pool, then keep the k most probable.
    let k = params.k;
    let pool = SearchParams {
        k: params.rerank_depth.max(k),
        explain: false,
        ..params.clone()
    };
    let mut outcome = search_judged(db, collection, text, &query, &pool, judge)?;
    outcome.timings.encode_ms = encode_ms;
    outcome
        .hits
        .sort_by(|a, b| b.probability.total_cmp(&a.probability));
    outcome.hits.truncate(k);
    let mut matches = Vec::with_capacity(outcome.hits.len());
    for mut hit in outcome.hits {
        if params.explain {
            hit.explanation = Some(explain_stored(db, collection, text, &query, &hit.id)?);
        }
        matches.push(DuplicateMatch {
            is_duplicate: hit.probability >= threshold,
            hit,
        });
    }
    let probability = matches.first().map_or(0.0, |m| m.hit.probability);
    Ok(DuplicateVerdict {
        is_duplicate: probability >= threshold && !matches.is_empty(),
        probability,
        threshold,
        matches,
        calibration: outcome.calibration,
        timings: Timings {
            encode_ms,
            total_ms: ms(start),
            ..outcome.timings
        },
    })
}

/// The RCMD explanation of (query, stored document `id`).
pub fn explain_stored(
    db: &Database,
    collection: &str,
    text: &str,
    query: &Encoded,
    id: &str,
) -> Result<Explanation> {
    let doc = db
        .get(collection, id)?
        .ok_or_else(|| UserError::InvalidArgument {
            name: "id",
            reason: format!("no document {id:?} in {collection}"),
        })?;
    let vectors = doc.token_vectors().decode();
    let b = Sentence {
        text: &doc.text,
        tokens: &doc.tokens,
        vectors: Tokens::new(&vectors, doc.sentence.len()),
    };
    Ok(explain(Sentence::of(text, query), b, Weights::Uniform))
}

/// The explanation of two texts, with their cosine and W2.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PairExplanation {
    /// Cosine of the sentence vectors.
    pub cosine: f32,
    /// 2-Wasserstein distance of the intents.
    pub w2: f32,
    /// The RCMD explanation: both sides' words, per-direction scores, token and word
    /// alignments, contribution matrices (they sum to the score), chunk alignment.
    #[schema(value_type = Object)]
    pub explanation: Explanation,
}

/// Explains two texts.
pub fn explain_texts(encoder: &Encoder, a: &str, b: &str) -> Result<PairExplanation> {
    let enc = encoder.encode(&[a, b])?;
    Ok(PairExplanation {
        cosine: dot(&enc[0].sentence, &enc[1].sentence),
        w2: w2(&enc[0].intent, &enc[1].intent),
        explanation: explain(
            Sentence::of(a, &enc[0]),
            Sentence::of(b, &enc[1]),
            Weights::Uniform,
        ),
    })
}

/// Largest k, per-stage depth and rerank depth a search accepts.
pub const MAX_DEPTH: usize = 1000;

fn validate(p: &SearchParams) -> Result<()> {
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
    let f = p.fusion;
    if [f.cosine, f.w2, f.lexical]
        .iter()
        .chain([&f.k0])
        .any(|w| !w.is_finite() || *w < 0.0)
    {
        return bad(
            "fusion",
            "weights and k0 must be finite and non-negative".into(),
        );
    }
    Ok(())
}

fn matches_filter(doc: &StoredDoc, filter: &serde_json::Map<String, serde_json::Value>) -> bool {
    let meta = doc.metadata();
    filter.iter().all(|(k, v)| meta.get(k) == Some(v))
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_and_reranks_parse_with_helpful_errors() {
        assert_eq!("w2".parse::<Mode>().unwrap(), Mode::W2);
        assert_eq!("none".parse::<Rerank>().unwrap(), Rerank::None);
        let e = "bm25".parse::<Mode>().unwrap_err().to_string();
        assert!(e.contains("cosine, w2, lexical or hybrid"), "{e}");
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
