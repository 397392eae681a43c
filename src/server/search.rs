//! Handlers for search, duplicate detection, pair explanations and operations on texts'
//! vectors: parse the request into
//! the library's parameters (mode, rerank, weights and fusion left unset take the collection's
//! search defaults, else the server's; other unset fields the server's configured defaults),
//! run it through the engine off the async threads, answer the wire types.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::Json;
use serde::Deserialize;
use utoipa::ToSchema;

use super::api::{
    Depths, DuplicateVerdict, FusionWeights, Mode, OperationAnswer, OperationKind, PairExplanation,
    Rerank, SearchOutcome, Weighting,
};
use super::error::{ApiResult, ErrorBody};
use super::extract::{blocking, check_k, check_text, parse};
use super::AppState;
use crate::search::{Overrides, SearchParams};

/// `POST /v1/collections/{c}/search` body. Unset `mode`, `rerank`, `weights` and `fusion` take
/// the collection's search defaults (unless stale), else the server's; other unset fields the
/// server's. The answer's `settings` says which were in force and where each came from.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchRequest {
    /// The question.
    pub text: String,
    /// Hits (default 10).
    pub k: Option<usize>,
    /// cosine | w2 | lexical | hybrid (default: the collection's search defaults, else hybrid).
    pub mode: Option<Mode>,
    /// rcmd | none (default: the collection's search defaults, else rcmd).
    pub rerank: Option<Rerank>,
    /// Attach an RCMD explanation to each hit (default false).
    pub explain: Option<bool>,
    /// Keep only documents whose metadata meets these conditions, one per top-level key:
    /// a value (`{"site": "faq"}`; a metadata list matches if any element does), any of a
    /// list (`{"lang": {"in": ["en", "de"]}}`) or a numeric range (`{"year": {"gte": 2020,
    /// "lt": 2024}}`; gt, gte, lt, lte). Applied exactly, before every first stage.
    #[schema(value_type = Option<Object>)]
    pub filter: Option<serde_json::Map<String, serde_json::Value>>,
    /// Per-stage candidate depths.
    pub depths: Option<Depths>,
    /// Reciprocal-rank fusion weights and k0, as a whole (fields left out of the object take
    /// the built-in values; the object left out: the collection's search defaults, else the
    /// server's `[search.fusion]`).
    pub fusion: Option<FusionWeights>,
    /// Fused candidates scored and reranked (default 100).
    pub rerank_depth: Option<usize>,
    /// RCMD's token weights: uniform | idf (each wordpiece weighs its word's IDF in the
    /// collection; default: the collection's search defaults, else uniform). They set the
    /// RCMD stage's scores, the order by them and the explanations; P(duplicate) reads
    /// uniform RCMD either way.
    pub weights: Option<Weighting>,
    /// Also check whether the text asks two stored questions at once: the answer then carries
    /// `compound` when it does (default false; only a text with a join, such as " and " or
    /// "? ", is checked, its two halves encoded for it).
    pub compound: Option<bool>,
}

impl SearchRequest {
    /// The query, the settings it chose itself (mode, rerank, weights, fusion: the rest take
    /// the collection's search defaults, else the server's) and the parameters for everything
    /// else, with the server's defaults as the fallback for those four.
    fn params(
        self,
        state: &AppState,
        default_k: usize,
    ) -> ApiResult<(String, Overrides, SearchParams)> {
        check_text(state, "the query", &self.text)?;
        let d = &state.config.search;
        let k = self.k.unwrap_or(default_k);
        check_k(state, k)?;
        let asked = Overrides {
            mode: self.mode.map(Into::into),
            rerank: self.rerank.map(Into::into),
            weights: self.weights.map(Into::into),
            fusion: self.fusion.map(Into::into),
        };
        let fallback = SearchParams {
            k,
            depths: self.depths.map_or(d.depths, Into::into),
            fusion: d.fusion,
            rerank_depth: self.rerank_depth.unwrap_or(d.rerank_depth),
            explain: self.explain.unwrap_or(false),
            explain_cells: state.config.limits.max_explain_cells,
            filter: self.filter.unwrap_or_default(),
            compound: self.compound.unwrap_or(false),
            ..SearchParams::default()
        };
        Ok((self.text, asked, fallback))
    }
}

/// `POST /v1/collections/{c}/search`: hybrid retrieval, RCMD rerank, every stage's score.
#[utoipa::path(post, tag = "search", path = "/v1/collections/{collection}/search", params(("collection" = String, Path)),
    request_body = SearchRequest,
    responses((status = 200, body = SearchOutcome), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn search_collection(
    State(state): State<Arc<AppState>>,
    Path(collection): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<SearchOutcome>> {
    let (text, asked, fallback) = parse::<SearchRequest>(body)?.params(&state, 10)?;
    let s = state.clone();
    let out = blocking(move || {
        s.engine.with_collection(&collection, |col| {
            col.search_with_defaults(&text, &asked, &fallback)
        })
    })
    .await?;
    state.metrics.search(&out.timings);
    Ok(Json(out.into()))
}

/// `POST /v1/collections/{c}/duplicates` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DuplicatesRequest {
    /// The new question.
    pub text: String,
    /// P(duplicate) at or above which a match is a duplicate (default: the calibration's).
    pub threshold: Option<f32>,
    /// Matches to return (default 3).
    pub k: Option<usize>,
    /// Attach explanations (default true).
    pub explain: Option<bool>,
    /// RCMD's token weights: uniform | idf, as for a search (default: the collection's search
    /// defaults, else uniform). The verdict and the matches' order follow P(duplicate), which
    /// reads uniform RCMD either way; the candidate pool is searched with the collection's
    /// search defaults' mode and fusion, else the server's.
    pub weights: Option<Weighting>,
    /// Only documents whose metadata match, as for a search (the answer's `filtered` says how
    /// many the filter admits).
    #[schema(value_type = Option<Object>)]
    pub filter: Option<serde_json::Map<String, serde_json::Value>>,
}

/// `POST /v1/collections/{c}/duplicates`: is this question already asked?
#[utoipa::path(post, tag = "search", path = "/v1/collections/{collection}/duplicates", params(("collection" = String, Path)),
    request_body = DuplicatesRequest,
    responses((status = 200, body = DuplicateVerdict), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn duplicates(
    State(state): State<Arc<AppState>>,
    Path(collection): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<DuplicateVerdict>> {
    let req: DuplicatesRequest = parse(body)?;
    // A duplicate check is a search with the collection's (else the server's) defaults, 3
    // matches and explanations.
    let search = SearchRequest {
        text: req.text,
        k: req.k,
        explain: Some(req.explain.unwrap_or(true)),
        weights: req.weights,
        filter: req.filter,
        ..SearchRequest::default()
    };
    let (text, asked, fallback) = search.params(&state, 3)?;
    let (s, threshold) = (state.clone(), req.threshold);
    let out = blocking(move || {
        s.engine.with_collection(&collection, |col| {
            col.duplicates_with_defaults(&text, threshold, &asked, &fallback)
        })
    })
    .await?;
    state.metrics.search(&out.timings);
    Ok(Json(out.into()))
}

/// `POST /v1/explain` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExplainRequest {
    /// First text.
    pub a: String,
    /// Second text.
    pub b: String,
    /// Explain as this collection sees the pair: its model, its IDF (lexical similarity,
    /// `weights: idf`) and its P(duplicate). Without one: the server's model, IDF from the two
    /// texts, the default calibration.
    pub collection: Option<String>,
    /// RCMD's token weights: uniform (default) | idf (needs `collection`).
    pub weights: Option<Weighting>,
}

/// `POST /v1/explain`: why two texts match (RCMD alignments and contributions), with their
/// cosine, W2, lexical similarity and P(duplicate).
#[utoipa::path(post, tag = "search", path = "/v1/explain", request_body = ExplainRequest,
    responses((status = 200, body = PairExplanation), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn explain(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<PairExplanation>> {
    let req: ExplainRequest = parse(body)?;
    check_text(&state, "a", &req.a)?;
    check_text(&state, "b", &req.b)?;
    let weights = req.weights.map(Into::into).unwrap_or_default();
    let s = state.clone();
    let out = blocking(move || match &req.collection {
        Some(c) => s
            .engine
            .with_collection(c, |col| col.explain_texts(&req.a, &req.b, weights)),
        None => s.engine.explain_texts(&req.a, &req.b, weights),
    })
    .await?;
    Ok(Json(out.into()))
}

/// `POST /v1/collections/{c}/operations` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OperationRequest {
    /// fusion (two texts asked as one) | difference (what the first text asks beyond the
    /// second) | compression (one long text said short) | decode (one text's own vector).
    pub operation: OperationKind,
    /// The texts: two for fusion and difference, one for compression and decode.
    pub texts: Vec<String>,
    /// Nearest stored questions to return (default 5).
    pub k: Option<usize>,
}

/// `POST /v1/collections/{c}/operations`: a compositional operation on texts' sentence
/// vectors (the model's learned operator when it carries one, else arithmetic), read back as
/// the collection's nearest stored questions.
#[utoipa::path(post, tag = "search", path = "/v1/collections/{collection}/operations", params(("collection" = String, Path)),
    request_body = OperationRequest,
    responses((status = 200, body = OperationAnswer), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn operations(
    State(state): State<Arc<AppState>>,
    Path(collection): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<OperationAnswer>> {
    let req: OperationRequest = parse(body)?;
    for (i, t) in req.texts.iter().enumerate() {
        check_text(&state, &format!("texts[{i}]"), t)?;
    }
    let k = req.k.unwrap_or(5);
    check_k(&state, k)?;
    let op = req.operation.operator();
    let out = blocking(move || {
        let texts: Vec<&str> = req.texts.iter().map(String::as_str).collect();
        state
            .engine
            .with_collection(&collection, |col| col.operate(op, &texts, k))
    })
    .await?;
    Ok(Json(OperationAnswer {
        operation: req.operation,
        operator: out.operator.to_string(),
        nearest: out.nearest.into_iter().map(Into::into).collect(),
        words: out.words,
    }))
}
