//! The search pipeline over one collection's [`View`], after the query is encoded
//! (design.md §2):
//!
//! ```text
//! scope (the metadata filter's documents, exactly, from the metadata index)
//!   ─► first stages within it (cosine HNSW, W2 HNSW, BM25; each its own depth; internal ids)
//!   ─► fuse (reciprocal rank) ─► load each candidate once
//!   ─► score (every stage's exact score, RCMD both directions, the judge's P(duplicate))
//!   ─► order ─► top k, explained from the records already loaded
//! ```
//!
//! Each step is a function here; [`crate::engine`] encodes the query and calls them. The math
//! lives in [`crate::score`] and `fusion`; where P(duplicate) comes from is the [`Judge`];
//! which mode, rerank, weights and fusion a request runs with (its own, its collection's
//! search defaults, the server's) is decided in one place, [`resolve()`].
//! This module never encodes, never looks a collection up by name and never decodes JSON
//! settings: the view carries all of that.

pub(crate) mod compound;
pub(crate) mod fusion;
pub(crate) mod hits;
pub(crate) mod judge;
pub(crate) mod params;
pub mod resolve;

use std::collections::HashMap;
use std::ops::Range;
use std::time::Instant;

use crate::db::View;
use crate::error::{Result, UserError};
use crate::index::{Filter, LexicalIndex};
use crate::score;
use crate::score::explain::{explain_chunked, explain_with_chunks, ChunkSource, Chunks, Sentence};
use crate::score::features::lexical_similarity;
pub use crate::score::features::PairFeatures;
use crate::score::quant::I8Tokens;
use crate::score::rcmd;
use crate::score::rerank::Reranker;
use crate::score::weights::token_weights;
use crate::score::{dot, w2, Tokens, Weights};
use crate::store::StoredDoc;
use crate::text::terms;
use crate::types::{Encoded, Gaussian, Token};

pub use crate::score::calibration::Calibrator;
pub use compound::{halves, Beyond, Compound, Covered, Nearest, Pairing};
pub use hits::{
    is_zero, DuplicateMatch, DuplicateVerdict, Explained, Filtered, Hit, PairExplanation,
    RcmdStage, SearchOutcome, Stage, Stages, Timings, Vectors,
};
pub use judge::{Judge, SIAMESE_THRESHOLD};
pub use params::{
    validate, Depths, FusionWeights, Mode, Rerank, SearchParams, Weighting, DEFAULT_EXPLAIN_CELLS,
    MAX_DEPTH,
};
pub use resolve::{resolve, Overrides, Settings, Source, Sources};

/// The first stages' candidate lists: internal ids, best first.
#[derive(Debug, Default)]
pub struct FirstStages {
    /// Cosine HNSW.
    pub cosine: Vec<u64>,
    /// W2 HNSW.
    pub w2: Vec<u64>,
    /// BM25.
    pub lexical: Vec<u64>,
}

/// The documents a search may return: all, or exactly those its metadata filter admits.
#[derive(Debug, Default)]
pub struct Scope {
    filter: Filter,
    /// The admitted internal ids, ascending (None without a filter, or when the backend
    /// applies the filter itself).
    admitted: Option<Vec<u64>>,
    /// How many documents the filter admits, when the backend applies it itself.
    pushed: Option<usize>,
}

impl Scope {
    /// The admitted ids (None: every document).
    pub fn admitted(&self) -> Option<&[u64]> {
        self.admitted.as_deref()
    }

    /// The filter, when the backend applies it inside its vector search.
    fn pushed(&self) -> Option<&Filter> {
        self.pushed.map(|_| &self.filter)
    }

    /// What the response says about the filter.
    fn report(&self, view: &View<'_>) -> Option<Filtered> {
        if let Some(matching) = self.pushed {
            return Some(Filtered {
                matching,
                exact: false,
            });
        }
        self.admitted.as_ref().map(|ids| Filtered {
            matching: ids.len(),
            exact: view.scans_exactly(ids.len()),
        })
    }
}

/// The scope of a search: its filter parsed, and the documents it admits looked up in the
/// metadata index — before any first stage, so no stage's depth cut can drop a match.
pub fn scope(view: &View<'_>, params: &SearchParams) -> Result<Scope> {
    let filter = Filter::parse(&params.filter)?;
    if !filter.is_empty() && view.pushes_filters() {
        let pushed = Some(view.matching(&filter)?);
        return Ok(Scope {
            filter,
            admitted: None,
            pushed,
        });
    }
    let admitted = (!filter.is_empty()).then(|| view.admitted(&filter));
    Ok(Scope {
        filter,
        admitted,
        pushed: None,
    })
}

/// The lexical first stage: it needs only the text, so the engine runs it while the query is
/// encoded.
pub fn lexical_stage(
    view: &View<'_>,
    text: &str,
    params: &SearchParams,
    scope: &Scope,
) -> Result<Vec<u64>> {
    if !matches!(params.mode, Mode::Lexical | Mode::Hybrid) {
        return Ok(Vec::new());
    }
    let depth = params.depths.lexical;
    Ok(ids(match scope.pushed() {
        Some(f) => view.lexical_filtered(text, depth, f)?,
        None => view.lexical(text, depth, scope.admitted())?,
    }))
}

/// The cosine and W2 first stages, side by side, within `scope`.
pub fn vector_stages(
    view: &View<'_>,
    query: &Encoded,
    params: &SearchParams,
    scope: &Scope,
) -> Result<(Vec<u64>, Vec<u64>)> {
    let uses = |m: Mode| params.mode == m || params.mode == Mode::Hybrid;
    let among = scope.admitted();
    let (d_cos, d_w2) = (params.depths.cosine, params.depths.w2);
    std::thread::scope(|s| {
        let w2 = uses(Mode::W2).then(|| {
            s.spawn(|| match scope.pushed() {
                Some(f) => view.w2_filtered(&query.intent, d_w2, f),
                None => view.w2(&query.intent, d_w2, among),
            })
        });
        let cosine = if uses(Mode::Cosine) {
            ids(match scope.pushed() {
                Some(f) => view.cosine_filtered(&query.sentence, d_cos, f)?,
                None => view.cosine(&query.sentence, d_cos, among)?,
            })
        } else {
            Vec::new()
        };
        let w2 = match w2 {
            Some(h) => ids(h.join().expect("w2 stage")?),
            None => Vec::new(),
        };
        Ok((cosine, w2))
    })
}

fn ids(hits: Vec<(u64, f32)>) -> Vec<u64> {
    hits.into_iter().map(|(id, _)| id).collect()
}

/// Scored candidates, each with the record it was scored from (so explaining needs no
/// second load), in the pipeline's final order.
#[derive(Debug)]
pub struct Scored {
    /// (hit, what explaining it needs), best first.
    pub hits: Vec<(Hit, Explainable)>,
    /// Milliseconds spent on first stages, fusion, filter and loading.
    pub candidates_ms: f64,
    /// What the filter admitted.
    pub filtered: Option<Filtered>,
    /// The query's token weights (with `weights: idf`; None: uniform).
    pub query_weights: Option<Vec<f32>>,
}

/// Fuses the first stages, loads candidates down the fused list (filtering) until enough are
/// found, scores each and orders them: by s_RCMD (under `params.weights`) with `rerank: rcmd`,
/// else fused order.
/// Returns every scored candidate (the caller cuts to k). `start` is when the first stages
/// began.
#[tracing::instrument(level = "debug", skip_all, fields(collection = view.name()))]
pub fn score(
    view: &View<'_>,
    judge: &Judge<'_>,
    (text, query): (&str, &Encoded),
    (params, scope): (&SearchParams, &Scope),
    stages: &FirstStages,
    start: Instant,
) -> Result<Scored> {
    let fused = fuse(stages, params);
    let candidates = load(view, query, &fused, (params, scope))?;
    let candidates_ms = ms(start);

    let ranks = Ranks::of(stages);
    let docs: Vec<(u64, &str)> = candidates
        .iter()
        .map(|c| (c.doc.internal, c.doc.text.as_str()))
        .collect();
    let lexical = view.lexical_similarities(text, &docs);
    let (query_weights, doc_weights) =
        token_weights_of(view, params.weights, (text, query), &candidates);
    let context = match params.rerank {
        Rerank::Context => Some(context_vectors(view, &candidates)?),
        _ => None,
    };
    let query_tokens = Tokens::new(&query.token_vectors, query.dim());
    let mut reranker = Reranker::new();
    let mut hits: Vec<(Hit, Explainable)> = candidates
        .into_iter()
        .zip(lexical)
        .zip(doc_weights)
        .map(|((c, lexical), weights)| {
            let doc = c.doc;
            let (intent, metadata) = (doc.intent(), doc.metadata());
            let (id, internal) = (doc.id.clone(), doc.internal);
            // The record's token codes move into the explainable form once, not cloned.
            let (explainable, sentence) = Explainable::take(doc, weights);
            let directions = reranker.directions_i8_weighted(
                query_tokens,
                &explainable.vectors,
                explainable.weights(query_weights.as_deref()),
            );
            // P(duplicate) reads uniform RCMD, which the calibration was fitted on.
            let features = pair_features(
                judge,
                (&query.sentence, &query.intent),
                (&sentence, &intent),
                directions.uniform,
                lexical,
            );
            let (forward, backward) = directions.weighted;
            let rcmd = 0.5 * (forward + backward);
            let probability = judge.probability(&features);
            let [cosine, w2, lexical] = ranks.first_stages(internal, &features);
            let hit = Hit {
                probability,
                score: match params.rerank {
                    Rerank::Rcmd => rcmd,
                    Rerank::None => c.fused_score,
                    Rerank::Probability => probability,
                    // Set over all candidates below.
                    Rerank::Context => 0.0,
                },
                stages: Stages {
                    cosine,
                    w2,
                    lexical,
                    fused: Stage {
                        score: c.fused_score,
                        rank: Some(c.fused_rank),
                    },
                    rcmd: RcmdStage {
                        score: rcmd,
                        forward,
                        backward,
                        rank: 0,
                    },
                    context: context
                        .as_ref()
                        .and_then(|v| v.get(&internal))
                        .map(|v| dot(&query.sentence, v)),
                },
                metadata,
                explanation: None,
                id,
                text: explainable.text.clone(),
            };
            (hit, explainable)
        })
        .collect();
    if params.rerank == Rerank::Context {
        score_by_context(&mut hits);
    }
    order(&mut hits, params.rerank);
    Ok(Scored {
        hits,
        candidates_ms,
        filtered: scope.report(view),
        query_weights,
    })
}

/// Each first stage's 1-based rank of every document it returned.
struct Ranks {
    cosine: HashMap<u64, usize>,
    w2: HashMap<u64, usize>,
    lexical: HashMap<u64, usize>,
}

impl Ranks {
    fn of(stages: &FirstStages) -> Ranks {
        let rank_in = |ids: &[u64]| -> HashMap<u64, usize> {
            ids.iter().enumerate().map(|(r, &id)| (id, r + 1)).collect()
        };
        Ranks {
            cosine: rank_in(&stages.cosine),
            w2: rank_in(&stages.w2),
            lexical: rank_in(&stages.lexical),
        }
    }

    /// A candidate's cosine, W2 and lexical stages: scores from its pair features, ranks
    /// where the stage returned it.
    fn first_stages(&self, internal: u64, features: &PairFeatures) -> [Stage; 3] {
        let stage = |ranks: &HashMap<u64, usize>, score: f32| Stage {
            score,
            rank: ranks.get(&internal).copied(),
        };
        [
            stage(&self.cosine, features.cosine),
            stage(&self.w2, features.w2),
            stage(&self.lexical, features.lexical),
        ]
    }
}

/// The query's and each candidate's token weights (`None`: uniform), all looked up under one
/// hold of the lexical index's lock.
fn token_weights_of(
    view: &View<'_>,
    weighting: Weighting,
    (text, query): (&str, &Encoded),
    candidates: &[Candidate],
) -> (Option<Vec<f32>>, Vec<Option<Vec<f32>>>) {
    match weighting {
        Weighting::Uniform => (None, vec![None; candidates.len()]),
        Weighting::Idf => view.lexical_index().with_idf(|idf| {
            let of = |text: &str, tokens: &[Token]| Some(token_weights(text, tokens, idf));
            (
                of(text, &query.tokens),
                candidates
                    .iter()
                    .map(|c| of(&c.doc.text, &c.doc.tokens))
                    .collect(),
            )
        }),
    }
}

/// `rerank: context`: each hit's score is its question cosine fused with its context score,
/// over all candidates at once.
fn score_by_context(hits: &mut [(Hit, Explainable)]) {
    let question: Vec<f32> = hits.iter().map(|(h, _)| h.stages.cosine.score).collect();
    let context: Vec<Option<f32>> = hits.iter().map(|(h, _)| h.stages.context).collect();
    for ((h, _), s) in hits
        .iter_mut()
        .zip(score::context::fused(&question, &context))
    {
        h.score = s;
    }
}

/// The candidates' context vectors (`rerank: context`); an error naming the fix when the
/// collection has none made with its model.
fn context_vectors(view: &View<'_>, candidates: &[Candidate]) -> Result<HashMap<u64, Vec<f32>>> {
    let ids: Vec<u64> = candidates.iter().map(|c| c.doc.internal).collect();
    view.context_vectors(&ids)?.ok_or_else(|| {
        let name = view.name();
        UserError::InvalidArgument {
            name: "rerank",
            reason: format!(
                "context: collection {name:?} has no context vectors made with its model; \
                 `kindred tune --collection {name}` makes them from its documents' context \
                 (answers, comments), or use rcmd, probability or none"
            ),
        }
        .into()
    })
}

/// A pair's features from its parts — what search and explain both hand the judge, so a pair
/// gets one probability whichever asks: the sentence vectors' cosine, the intents' W2, RCMD's
/// two directions (uniform: what the calibration reads), the lexical similarity and the
/// judge's classifier output on the intents.
pub fn pair_features(
    judge: &Judge<'_>,
    (sentence_a, intent_a): (&[f32], &Gaussian),
    (sentence_b, intent_b): (&[f32], &Gaussian),
    (rcmd_forward, rcmd_backward): (f32, f32),
    lexical: f32,
) -> PairFeatures {
    PairFeatures {
        cosine: dot(sentence_a, sentence_b),
        w2: w2(intent_a, intent_b),
        rcmd_forward,
        rcmd_backward,
        lexical,
        siamese: judge.siamese(intent_a, intent_b),
    }
}

/// Reciprocal-rank fusion of the stages the mode uses: (internal id, fused score), best first.
fn fuse(stages: &FirstStages, params: &SearchParams) -> Vec<(u64, f32)> {
    let weight = |m: Mode, w: f32| {
        if params.mode == Mode::Hybrid {
            w
        } else if params.mode == m {
            1.0
        } else {
            0.0
        }
    };
    let f = params.fusion;
    fusion::rrf(
        &[
            fusion::Ranked {
                ids: &stages.cosine,
                weight: weight(Mode::Cosine, f.cosine),
            },
            fusion::Ranked {
                ids: &stages.w2,
                weight: weight(Mode::W2, f.w2),
            },
            fusion::Ranked {
                ids: &stages.lexical,
                weight: weight(Mode::Lexical, f.lexical),
            },
        ],
        f.k0,
    )
}

/// A loaded candidate with its place in the fused list.
struct Candidate {
    fused_rank: usize,
    fused_score: f32,
    doc: StoredDoc,
}

/// Loads records down the fused list, each once, until enough are found. A record gone since
/// the first stages, replaced by one the filter refuses, or written by another model than the
/// query's (a reindex switching meanwhile), is skipped.
fn load(
    view: &View<'_>,
    query: &Encoded,
    fused: &[(u64, f32)],
    (params, scope): (&SearchParams, &Scope),
) -> Result<Vec<Candidate>> {
    let wanted = if params.rerank.reranks() {
        params.rerank_depth.max(params.k)
    } else {
        params.k
    };
    let mut out = Vec::with_capacity(wanted.min(fused.len()));
    // A remote backend loads the likely candidates in one call rather than one by one.
    let likely: Vec<u64> = fused.iter().take(wanted).map(|&(i, _)| i).collect();
    view.prefetch(&likely)?;
    for (i, &(internal, fused_score)) in fused.iter().enumerate() {
        if out.len() == wanted {
            break;
        }
        let Some(doc) = view.get_internal(internal)? else {
            continue;
        };
        if doc.sentence.len() != query.sentence.len()
            || !(scope.filter.is_empty() || scope.filter.matches(&doc.metadata()))
        {
            continue;
        }
        out.push(Candidate {
            fused_rank: i + 1,
            fused_score,
            doc,
        });
    }
    Ok(out)
}

/// Sets each hit's RCMD rank, then orders them (stable: ties keep the fused order).
fn order(hits: &mut [(Hit, Explainable)], rerank: Rerank) {
    let mut by_rcmd: Vec<usize> = (0..hits.len()).collect();
    by_rcmd.sort_by(|&a, &b| {
        hits[b]
            .0
            .stages
            .rcmd
            .score
            .total_cmp(&hits[a].0.stages.rcmd.score)
    });
    for (rank, i) in by_rcmd.into_iter().enumerate() {
        hits[i].0.stages.rcmd.rank = rank + 1;
    }
    if rerank.reranks() {
        hits.sort_by(|a, b| b.0.score.total_cmp(&a.0.score));
    }
}

/// The answer to a search: the top k of `scored`, explained when asked (phrase chunks from
/// `chunks`, the query's and every explained hit's in one call); with `pairing`, the
/// compound the scored candidates make, if any (judged against the judge's threshold).
pub fn outcome(
    scored: Scored,
    judge: &Judge<'_>,
    (text, query): (&str, &Encoded),
    params: &SearchParams,
    (chunks, pairing): (&dyn ChunkSource, Option<&Pairing<'_>>),
    start: Instant,
) -> SearchOutcome {
    // Only a text that splits at a join can be a compound: others are not chunked for it.
    let Some(pairing) = pairing.filter(|p| !p.halves.is_empty() && scored.hits.len() >= 2) else {
        return outcome_with(scored, judge, (text, query), params, (chunks, None), start);
    };
    let chunked = chunks.chunks(&[text]).swap_remove(0);
    let content = compound::content_tokens(text, query);
    let compound = compound::detect(
        judge,
        (text, query),
        &scored.hits,
        pairing,
        (&chunked, &content),
        judge.threshold(),
    );
    let mut out = outcome_with(
        scored,
        judge,
        (text, query),
        params,
        (chunks, Some(chunked)),
        start,
    );
    out.compound = compound;
    out
}

/// [`outcome`], given the query's phrase chunks when they are already known (then only the
/// explained hits are chunked).
fn outcome_with(
    scored: Scored,
    judge: &Judge<'_>,
    (text, query): (&str, &Encoded),
    params: &SearchParams,
    (chunks, query_chunks): (&dyn ChunkSource, Option<Vec<Range<usize>>>),
    start: Instant,
) -> SearchOutcome {
    let candidates = scored.hits.len();
    let mut budget = ExplainBudget::new(params.explain_cells);
    let top: Vec<(Hit, Explainable)> = scored.hits.into_iter().take(params.k).collect();
    let phrases: Vec<Vec<Range<usize>>> = match (params.explain, query_chunks) {
        (false, _) => Vec::new(),
        (true, Some(known)) => {
            let texts: Vec<&str> = top.iter().map(|(_, doc)| doc.text.as_str()).collect();
            std::iter::once(known)
                .chain(chunks.chunks(&texts))
                .collect()
        }
        (true, None) => {
            let texts: Vec<&str> = std::iter::once(text)
                .chain(top.iter().map(|(_, doc)| doc.text.as_str()))
                .collect();
            chunks.chunks(&texts)
        }
    };
    let query_weights = scored.query_weights.as_deref();
    let hits: Vec<Hit> = top
        .into_iter()
        .enumerate()
        .map(|(i, (mut hit, doc))| {
            if params.explain {
                let spans = (phrases[0].as_slice(), phrases[i + 1].as_slice());
                hit.explanation =
                    budget.admit(|| explain_doc(text, query, &doc, query_weights, spans));
            }
            hit
        })
        .collect();
    let total_ms = ms(start);
    SearchOutcome {
        hits,
        candidates,
        calibration: judge.name(),
        threshold: judge.threshold(),
        filtered: scored.filtered,
        unexplained: budget.refused,
        compound: None,
        settings: None,
        timings: Timings {
            encode_ms: 0.0,
            candidates_ms: scored.candidates_ms,
            rerank_ms: total_ms - scored.candidates_ms,
            total_ms,
        },
    }
}

/// A near-duplicate, for `beyond`: a match at least this share of the threshold.
pub const NEAR_DUPLICATE: f32 = 0.5;

/// The duplicate verdict on `scored` (a pool searched with k = rerank depth): its `k` most
/// probable matches, each marked against `threshold`, explained when asked; with `pairing`,
/// the compound the pool makes, if any, and for each near-duplicate match what the query
/// asks beyond it.
#[allow(clippy::too_many_arguments)]
pub fn verdict(
    mut scored: Scored,
    judge: &Judge<'_>,
    (text, query): (&str, &Encoded),
    params: &SearchParams,
    threshold: f32,
    chunks: &dyn ChunkSource,
    pairing: Option<&Pairing<'_>>,
    start: Instant,
) -> DuplicateVerdict {
    scored
        .hits
        .sort_by(|a, b| b.0.probability.total_cmp(&a.0.probability));
    // The query's chunks are chunked once, for the compound, `beyond` and the explanations.
    let query_chunks = match pairing {
        Some(_) if !scored.hits.is_empty() => Some(chunks.chunks(&[text]).swap_remove(0)),
        _ => None,
    };
    let chunked = query_chunks.as_deref().unwrap_or_default();
    let content = compound::content_tokens(text, query);
    let compound = pairing.and_then(|p| {
        compound::detect(
            judge,
            (text, query),
            &scored.hits,
            p,
            (chunked, &content),
            threshold,
        )
    });
    scored.hits.truncate(params.k);
    let beyond: Vec<Option<Beyond>> = scored
        .hits
        .iter()
        .map(|(hit, doc)| {
            let p = pairing?;
            if hit.probability < NEAR_DUPLICATE * threshold {
                return None;
            }
            let read_back = (p.difference, p.nearest, p.words);
            beyond_chunked(
                (text, query),
                (&hit.id, doc),
                (chunked, &content),
                read_back,
            )
        })
        .collect();
    let out = outcome_with(
        scored,
        judge,
        (text, query),
        params,
        (chunks, query_chunks),
        start,
    );
    let matches: Vec<DuplicateMatch> = out
        .hits
        .into_iter()
        .zip(beyond)
        .map(|(hit, beyond)| DuplicateMatch {
            is_duplicate: hit.probability >= threshold,
            hit,
            beyond,
        })
        .collect();
    let probability = matches.first().map_or(0.0, |m| m.hit.probability);
    DuplicateVerdict {
        is_duplicate: !matches.is_empty() && probability >= threshold,
        probability,
        threshold,
        compound,
        matches,
        calibration: out.calibration,
        filtered: out.filtered,
        unexplained: out.unexplained,
        settings: out.settings,
        timings: out.timings,
    }
}

/// How a difference is read back: the difference of two sentence vectors (`a ⊖ b`), the
/// stored questions nearest a vector, leaving out the document with the given id, and the
/// words a vector means (as [`Pairing`] gives them).
pub type ReadBack<'a> = (
    &'a compound::VectorOp<'a>,
    &'a dyn Fn(&[f32], &str) -> Vec<Nearest>,
    &'a dyn Fn(&[f32]) -> Vec<String>,
);

/// What `text` asks beyond the stored document `id`: the query's phrases with no close token
/// in it and the difference of the two sentence vectors read back (the `beyond` of a
/// near-duplicate match, and of a review queue's pair); None when every phrase is matched.
pub fn beyond(
    (text, query): (&str, &Encoded),
    (id, doc): (&str, &Explainable),
    chunks: &dyn ChunkSource,
    read_back: ReadBack<'_>,
) -> Option<Beyond> {
    let chunked = chunks.chunks(&[text]).swap_remove(0);
    let content = compound::content_tokens(text, query);
    beyond_chunked((text, query), (id, doc), (&chunked, &content), read_back)
}

/// [`beyond`] with the query's chunks and content tokens already made.
fn beyond_chunked(
    (text, query): (&str, &Encoded),
    (id, doc): (&str, &Explainable),
    (chunked, content): (&[Range<usize>], &[bool]),
    (difference, nearest, words): ReadBack<'_>,
) -> Option<Beyond> {
    let phrases = compound::unmatched_phrases((text, query), doc, (chunked, content));
    if phrases.is_empty() {
        return None;
    }
    let diff = difference(&query.sentence, &doc.sentence);
    Some(Beyond {
        phrases,
        nearest: nearest(&diff, id),
        words: compound::words_beyond(words(&diff), &doc.text),
    })
}

/// Explanations admitted best first while their cells fit a bound: once one does not fit,
/// it and every later one are refused (so the explained hits are always the top ones).
#[derive(Debug)]
pub struct ExplainBudget {
    left: usize,
    /// Explanations refused.
    pub refused: usize,
}

impl ExplainBudget {
    /// A budget of `cells`.
    pub fn new(cells: usize) -> Self {
        ExplainBudget {
            left: cells,
            refused: 0,
        }
    }

    /// The explanation `make` builds, if it fits what is left (and nothing was refused yet).
    pub fn admit(&mut self, make: impl FnOnce() -> Explained) -> Option<Explained> {
        self.try_admit(|| Ok(make()))
            .expect("an infallible explanation")
    }

    /// Like [`ExplainBudget::admit`] for a fallible `make`, which is not called once the
    /// budget has refused one.
    pub fn try_admit(
        &mut self,
        make: impl FnOnce() -> Result<Explained>,
    ) -> Result<Option<Explained>> {
        if self.refused == 0 {
            let e = make()?;
            if e.cells() <= self.left {
                self.left -= e.cells();
                return Ok(Some(e));
            }
        }
        self.refused += 1;
        Ok(None)
    }
}

/// A whole search for an already encoded query: first stages, [`score`], [`outcome`]
/// (explanations chunked by `chunks`).
pub fn search_encoded(
    view: &View<'_>,
    judge: &Judge<'_>,
    (text, query): (&str, &Encoded),
    params: &SearchParams,
    chunks: &dyn ChunkSource,
) -> Result<SearchOutcome> {
    validate(params)?;
    let start = Instant::now();
    let scope = scope(view, params)?;
    let (lexical, vectors) = std::thread::scope(|s| {
        let lexical = s.spawn(|| lexical_stage(view, text, params, &scope));
        let vectors = vector_stages(view, query, params, &scope);
        (lexical.join().expect("lexical stage"), vectors)
    });
    let (cosine, w2) = vectors?;
    let lexical = lexical?;
    let stages = FirstStages {
        cosine,
        w2,
        lexical,
    };
    let scored = score(view, judge, (text, query), (params, &scope), &stages, start)?;
    Ok(outcome(
        scored,
        judge,
        (text, query),
        params,
        (chunks, None),
        start,
    ))
}

/// Checks a duplicate threshold given by a user (a probability).
pub fn validate_threshold(threshold: Option<f32>) -> Result<()> {
    match threshold {
        Some(t) if !(0.0..=1.0).contains(&t) => Err(UserError::InvalidArgument {
            name: "threshold",
            reason: format!("{t}; a probability between 0 and 1"),
        }
        .into()),
        _ => Ok(()),
    }
}

/// What explaining a match needs of a stored document: its text, wordpieces and int8 token
/// vectors, moved out of the record, and its token weights when RCMD is weighted.
#[derive(Debug)]
pub struct Explainable {
    text: String,
    sentence: Vec<f32>,
    tokens: Vec<Token>,
    vectors: I8Tokens,
    weights: Option<Vec<f32>>,
}

impl Explainable {
    /// Takes what explaining needs from `doc`; `weights`: its token weights (None: uniform).
    pub fn of(doc: StoredDoc, weights: Option<Vec<f32>>) -> Self {
        Self::take(doc, weights).0
    }

    /// [`Explainable::of`], and the document's sentence vector.
    fn take(mut doc: StoredDoc, weights: Option<Vec<f32>>) -> (Self, Vec<f32>) {
        let sentence = std::mem::take(&mut doc.sentence);
        let vectors = I8Tokens::from_parts(doc.token_codes, doc.token_scales, sentence.len())
            .expect("records are written consistent");
        let explainable = Explainable {
            text: doc.text,
            sentence: sentence.clone(),
            tokens: doc.tokens,
            vectors,
            weights,
        };
        (explainable, sentence)
    }

    /// RCMD's weights for (the query, this document): given when both sides have them.
    fn weights<'a>(&'a self, query: Option<&'a [f32]>) -> Weights<'a> {
        match (query, self.weights.as_deref()) {
            (Some(q), Some(d)) => Weights::Given(q, d),
            _ => Weights::Uniform,
        }
    }
}

/// The RCMD explanation of (query, a stored document), from the document's stored int8 token
/// vectors (as its hit is scored); `query_weights` with the document's own weights make it
/// weighted; `chunks`: the query's and the document's phrase chunks.
pub fn explain_doc(
    text: &str,
    query: &Encoded,
    doc: &Explainable,
    query_weights: Option<&[f32]>,
    chunks: Chunks<'_>,
) -> Explained {
    let vectors = doc.vectors.decode();
    let b = Sentence {
        text: &doc.text,
        tokens: &doc.tokens,
        vectors: Tokens::new(&vectors, doc.vectors.dim()),
    };
    Explained {
        vectors: Vectors::StoredInt8,
        explanation: explain_with_chunks(
            Sentence::of(text, query),
            b,
            doc.weights(query_weights),
            Some(chunks),
        ),
    }
}

/// The explanation of two freshly encoded texts, with their other scores and P(duplicate):
/// `lexicon` gives the IDF (of the lexical similarity, and of the token weights with
/// `weights: idf`), `judge` the probability, `chunks` the phrase chunks.
pub fn explain_pair(
    judge: &Judge<'_>,
    lexicon: &LexicalIndex,
    weights: Weighting,
    (a, ea): (&str, &Encoded),
    (b, eb): (&str, &Encoded),
    chunks: &dyn ChunkSource,
) -> PairExplanation {
    let (lexical, token_weights) = lexicon.with_idf(|idf| {
        let lexical = lexical_similarity(&terms(a), &terms(b), idf);
        let weights = (weights == Weighting::Idf).then(|| {
            (
                token_weights(a, &ea.tokens, idf),
                token_weights(b, &eb.tokens, idf),
            )
        });
        (lexical, weights)
    });
    let (sa, sb) = (Sentence::of(a, ea), Sentence::of(b, eb));
    let explanation = match &token_weights {
        Some((wa, wb)) => explain_chunked(sa, sb, Weights::Given(wa, wb), chunks),
        None => explain_chunked(sa, sb, Weights::Uniform, chunks),
    };
    // P(duplicate) reads uniform RCMD, which the calibration was fitted on.
    let uniform = match token_weights {
        Some(_) => {
            let r = rcmd(sa.vectors, sb.vectors, Weights::Uniform);
            (r.forward, r.backward)
        }
        None => (explanation.forward, explanation.backward),
    };
    let features = pair_features(
        judge,
        (&ea.sentence, &ea.intent),
        (&eb.sentence, &eb.intent),
        uniform,
        lexical,
    );
    PairExplanation {
        cosine: features.cosine,
        w2: features.w2,
        lexical,
        probability: judge.probability(&features),
        calibration: judge.name(),
        explanation: Explained {
            vectors: Vectors::FreshF32,
            explanation,
        },
    }
}

/// Milliseconds since `since`.
pub fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}
