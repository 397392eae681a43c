//! The handlers: parse and check the request, run the library call off the async threads,
//! answer JSON. Nothing here computes a score.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::StreamExt;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::api::{
    CollectionInfo, Depths, DuplicateVerdict, FusionWeights, HnswParams, Mode, NewDocument,
    PairExplanation, Precision, Rerank, SearchOutcome,
};
use super::error::{ApiError, ApiResult, ErrorBody};
use super::AppState;
use crate::db;
use crate::search::SearchParams;
use crate::store::CollectionSettings;

/// Runs blocking work (encoding, searching, writing) on tokio's blocking pool.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> crate::Result<T> + Send + 'static,
) -> ApiResult<T> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(ApiError::from),
        Err(e) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("worker failed: {e}"),
        )),
    }
}

/// Parses a JSON body with errors that name the problem: 413 over the size limit, 400 for
/// bytes that are not UTF-8 or not JSON, 422 for JSON of the wrong shape.
pub fn parse<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> ApiResult<T> {
    let body = body.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                "the request body exceeds limits.max_body_bytes; send fewer documents per request or stream NDJSON",
            )
        } else {
            ApiError::new(r.status(), "bad_body", r.body_text())
        }
    })?;
    if let Err(e) = std::str::from_utf8(&body) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_utf8",
            format!(
                "the body is not valid UTF-8 (invalid byte at offset {}); send UTF-8 encoded JSON",
                e.valid_up_to()
            ),
        ));
    }
    serde_json::from_slice(&body).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => ApiError::invalid(format!("request body: {e}")),
        _ => ApiError::new(
            StatusCode::BAD_REQUEST,
            "malformed_json",
            format!("the body is not valid JSON: {e}"),
        ),
    })
}

fn check_text(state: &AppState, what: &str, text: &str) -> ApiResult<()> {
    let n = text.chars().count();
    let max = state.config.limits.max_text_chars;
    if n > max {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "text_too_long",
            format!("{what} is {n} characters; the limit is {max} (limits.max_text_chars)"),
        ));
    }
    Ok(())
}

fn check_k(state: &AppState, k: usize) -> ApiResult<()> {
    let max = state.config.limits.max_k;
    if k == 0 || k > max {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "k_out_of_range",
            format!("k = {k}; use 1-{max} (limits.max_k)"),
        ));
    }
    Ok(())
}

/// `GET /healthz`: the process is up.
#[utoipa::path(get, path = "/healthz", responses((status = 200, description = "Alive")))]
pub async fn healthz() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "status": "ok" }))
}

/// `GET /readyz`: every collection's indexes are loaded.
#[utoipa::path(get, path = "/readyz", responses(
    (status = 200, description = "Ready to serve"),
    (status = 503, description = "Still loading indexes", body = ErrorBody),
))]
pub async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    if state.ready.load(std::sync::atomic::Ordering::Acquire) {
        Json(serde_json::json!({ "status": "ready" })).into_response()
    } else {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "not_ready",
            "indexes are still loading; retry shortly",
        )
        .into_response()
    }
}

/// `GET /metrics`: Prometheus exposition.
#[utoipa::path(get, path = "/metrics", responses((status = 200, description = "Prometheus text format")))]
pub async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let s = state.clone();
    match tokio::task::spawn_blocking(move || s.metrics.render(s.db())).await {
        Ok(text) => ([("content-type", "text/plain; version=0.0.4")], text).into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

/// A collection in the list.
#[derive(Debug, Serialize, ToSchema)]
pub struct CollectionSummary {
    /// Name.
    pub name: String,
    /// Documents.
    pub documents: u64,
    /// Model id.
    pub model: String,
}

/// `GET /v1/collections` response.
#[derive(Debug, Serialize, ToSchema)]
pub struct CollectionList {
    /// Collections by name.
    pub collections: Vec<CollectionSummary>,
}

/// `GET /v1/collections`: every collection with its document count.
#[utoipa::path(get, path = "/v1/collections", responses((status = 200, body = CollectionList)))]
pub async fn list_collections(
    State(state): State<Arc<AppState>>,
) -> ApiResult<Json<CollectionList>> {
    let db = state.db().clone();
    let collections = blocking(move || {
        db.collections()?
            .into_iter()
            .map(|(name, s)| {
                Ok(CollectionSummary {
                    documents: db.store().count(&name)?,
                    name,
                    model: s.model.id,
                })
            })
            .collect::<crate::Result<Vec<_>>>()
    })
    .await?;
    Ok(Json(CollectionList { collections }))
}

/// `POST /v1/collections` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateCollection {
    /// 1-64 ASCII letters, digits, `_` or `-`.
    pub name: String,
    /// HNSW parameters (default m 16, ef_construction 200, ef_search 64).
    pub hnsw: Option<HnswParams>,
    /// Encoder arithmetic of the collection's vectors: `fp32` or `int8` (default: the
    /// server's `precision` setting). Fixed at creation; `reindex` moves a collection.
    pub precision: Option<Precision>,
}

/// `POST /v1/collections`: creates a collection for the server's model.
#[utoipa::path(post, path = "/v1/collections", request_body = CreateCollection, responses(
    (status = 201, body = CollectionInfo),
    (status = 409, description = "Exists", body = ErrorBody),
    (status = 422, description = "Bad name", body = ErrorBody),
))]
pub async fn create_collection(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<(StatusCode, Json<CollectionInfo>)> {
    let req: CreateCollection = parse(body)?;
    let db = state.db().clone();
    let precision = req
        .precision
        .map_or(state.encoder().options().precision, Into::into);
    let info = blocking(move || {
        // Loads the model's variant at that precision now, so queries find it ready.
        let model = state
            .engine
            .encoders()
            .at_precision(precision)?
            .identity()
            .clone();
        let mut settings = CollectionSettings::for_model(model);
        if let Some(h) = req.hnsw {
            settings.hnsw = h.into();
        }
        db.create_collection(&req.name, &settings)?;
        db.info(&req.name)
    })
    .await?;
    Ok((StatusCode::CREATED, Json(info.into())))
}

/// `GET /v1/collections/{c}`: settings, stats and index health.
#[utoipa::path(get, path = "/v1/collections/{collection}", params(("collection" = String, Path)), responses(
    (status = 200, body = CollectionInfo),
    (status = 404, body = ErrorBody),
))]
pub async fn get_collection(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
) -> ApiResult<Json<CollectionInfo>> {
    let db = state.db().clone();
    Ok(Json(blocking(move || db.info(&name)).await?.into()))
}

/// `DELETE /v1/collections/{c}`: drops a collection and everything in it.
#[utoipa::path(delete, path = "/v1/collections/{collection}", params(("collection" = String, Path)), responses(
    (status = 200, description = "Dropped"),
    (status = 404, body = ErrorBody),
))]
pub async fn drop_collection(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
) -> ApiResult<Json<serde_json::Value>> {
    let db = state.db().clone();
    let n = name.clone();
    blocking(move || db.drop_collection(&n)).await?;
    Ok(Json(serde_json::json!({ "dropped": name })))
}

/// Result of an upsert.
#[derive(Debug, Serialize, ToSchema)]
pub struct UpsertResult {
    /// Documents written (all acknowledged: durable unless the server runs relaxed).
    pub upserted: usize,
    /// Of those, how many replaced an existing id.
    pub replaced: usize,
    /// Batches committed (each all-or-nothing).
    pub batches: usize,
}

/// `POST /v1/collections/{c}/documents`: upserts a JSON array of documents (all or nothing),
/// or, with `Content-Type: application/x-ndjson`, a stream of one document per line committed
/// in batches of `limits.max_batch`. An error in a stream answers with how many documents were
/// committed before it; nothing after the bad line is written.
#[utoipa::path(post, path = "/v1/collections/{collection}/documents", params(("collection" = String, Path)),
    request_body(content = Vec<NewDocument>, description = "JSON array, or NDJSON with Content-Type application/x-ndjson"),
    responses(
        (status = 200, body = UpsertResult),
        (status = 413, description = "Too many documents or too large a body", body = ErrorBody),
        (status = 422, description = "A document is invalid", body = ErrorBody),
    ))]
pub async fn upsert_documents(
    State(state): State<Arc<AppState>>,
    Path(collection): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Json<UpsertResult>> {
    if is_ndjson(&headers) {
        return upsert_stream(state, collection, body).await.map(Json);
    }
    let limit = state.config.limits.max_body_bytes;
    let bytes = axum::body::to_bytes(body, limit).await;
    let bytes = bytes.map_err(|_| {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!("the request body exceeds limits.max_body_bytes ({limit}); send fewer documents per request or stream NDJSON"),
        )
    });
    let docs: Vec<NewDocument> = parse(Ok(bytes?))?;
    let docs: Vec<db::NewDocument> = docs.into_iter().map(Into::into).collect();
    let max = state.config.limits.max_batch;
    if docs.len() > max {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "batch_too_large",
            format!("{} documents in one request; the limit is {max} (limits.max_batch): split the batch or stream NDJSON", docs.len()),
        ));
    }
    let (upserted, replaced) = write_batch(&state, &collection, docs).await?;
    Ok(Json(UpsertResult {
        upserted,
        replaced,
        batches: usize::from(upserted > 0),
    }))
}

/// True for an NDJSON body (`application/x-ndjson` or `application/jsonl`).
pub fn is_ndjson(headers: &HeaderMap) -> bool {
    headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.starts_with("application/x-ndjson") || v.starts_with("application/jsonl")
        })
}

/// A query string, or 422 naming what is wrong with it.
pub(crate) fn query<T: serde::de::DeserializeOwned>(
    q: Result<axum::extract::Query<T>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<T> {
    q.map(|axum::extract::Query(t)| t)
        .map_err(|e| ApiError::invalid(format!("query string: {}", e.body_text())))
}

/// The collection exists and its model is available.
pub(crate) async fn check_collection(state: &Arc<AppState>, collection: &str) -> ApiResult<()> {
    let (s, c) = (state.clone(), collection.to_string());
    blocking(move || s.engine.collection(&c).map(drop)).await
}

async fn write_batch(
    state: &Arc<AppState>,
    collection: &str,
    docs: Vec<db::NewDocument>,
) -> ApiResult<(usize, usize)> {
    if docs.is_empty() {
        // Nothing to write, but an unknown collection is still a 404.
        check_collection(state, collection).await?;
        return Ok((0, 0));
    }
    for d in &docs {
        check_text(
            state,
            &format!("document {:?}", d.id.chars().take(40).collect::<String>()),
            &d.text,
        )?;
    }
    // One writer at a time: a large ingest leaves the other core to searches.
    let _permit = state.writers.acquire().await.expect("semaphore open");
    let (c, s) = (collection.to_string(), state.clone());
    let out = blocking(move || {
        s.engine
            .with_collection(&c, |col| s.write_pool.install(|| col.upsert(docs.clone())))
    })
    .await?;
    state.metrics.upserted(collection, out.len());
    Ok((
        out.len(),
        out.iter().filter(|u| u.replaced.is_some()).count(),
    ))
}

async fn upsert_stream(
    state: Arc<AppState>,
    collection: String,
    body: Body,
) -> ApiResult<UpsertResult> {
    // Fail fast on an unknown collection or another model, before reading the stream.
    check_collection(&state, &collection).await?;
    let max_line = state.config.limits.max_body_bytes;
    let batch_size = state.config.limits.max_batch;
    let mut stream = body.into_data_stream();
    let mut pending: Vec<u8> = Vec::new();
    let mut batch: Vec<db::NewDocument> = Vec::new();
    let mut result = UpsertResult {
        upserted: 0,
        replaced: 0,
        batches: 0,
    };
    let mut line_no = 0usize;
    let mut done = false;
    while !done {
        let chunk = match stream.next().await {
            Some(Ok(c)) => c,
            Some(Err(e)) => {
                return Err(stream_error(
                    &result,
                    format!("reading the body failed: {e}"),
                    StatusCode::BAD_REQUEST,
                    "bad_body",
                ))
            }
            None => {
                done = true;
                Bytes::new()
            }
        };
        pending.extend_from_slice(&chunk);
        let mut lines: Vec<Vec<u8>> = Vec::new();
        while let Some(pos) = pending.iter().position(|&b| b == b'\n') {
            lines.push(pending.drain(..=pos).collect());
        }
        if done && !pending.is_empty() {
            lines.push(std::mem::take(&mut pending));
        }
        if pending.len() > max_line {
            return Err(stream_error(
                &result,
                format!(
                    "line {} is longer than limits.max_body_bytes ({max_line})",
                    line_no + 1
                ),
                StatusCode::PAYLOAD_TOO_LARGE,
                "line_too_long",
            ));
        }
        for line in lines {
            line_no += 1;
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let doc: NewDocument = parse(Ok(Bytes::from(line))).map_err(|e| {
                stream_error(
                    &result,
                    format!("line {line_no}: {}", e.message),
                    e.status,
                    e.code,
                )
            })?;
            batch.push(doc.into());
            if batch.len() == batch_size {
                commit(&state, &collection, &mut batch, &mut result, line_no).await?;
            }
        }
    }
    commit(&state, &collection, &mut batch, &mut result, line_no).await?;
    Ok(result)
}

async fn commit(
    state: &Arc<AppState>,
    collection: &str,
    batch: &mut Vec<db::NewDocument>,
    result: &mut UpsertResult,
    line_no: usize,
) -> ApiResult<()> {
    if batch.is_empty() {
        return Ok(());
    }
    let docs = std::mem::take(batch);
    match write_batch(state, collection, docs).await {
        Ok((n, r)) => {
            result.upserted += n;
            result.replaced += r;
            result.batches += 1;
            Ok(())
        }
        Err(e) => Err(stream_error(
            result,
            format!("batch ending at line {line_no}: {}", e.message),
            e.status,
            e.code,
        )),
    }
}

fn stream_error(
    done: &UpsertResult,
    message: String,
    status: StatusCode,
    code: &'static str,
) -> ApiError {
    ApiError::new(
        status,
        code,
        format!(
            "{message}. {} documents in {} batches were committed before it; nothing after it was written",
            done.upserted, done.batches
        ),
    )
}

/// A stored document.
#[derive(Debug, Serialize, ToSchema)]
pub struct DocumentView {
    /// External id.
    pub id: String,
    /// The question.
    pub text: String,
    /// Metadata.
    #[schema(value_type = Object)]
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// Content wordpieces.
    pub tokens: usize,
    /// Truncated at the model's maximum length.
    pub truncated: bool,
}

/// `GET /v1/collections/{c}/documents/{id}`.
#[utoipa::path(get, path = "/v1/collections/{collection}/documents/{id}",
    params(("collection" = String, Path), ("id" = String, Path)),
    responses((status = 200, body = DocumentView), (status = 404, body = ErrorBody)))]
pub async fn get_document(
    State(state): State<Arc<AppState>>,
    Path((collection, id)): Path<(String, String)>,
) -> ApiResult<Json<DocumentView>> {
    let db = state.db().clone();
    let (c, i) = (collection.clone(), id.clone());
    match blocking(move || db.get(&c, &i)).await? {
        Some(d) => Ok(Json(DocumentView {
            metadata: d.metadata(),
            tokens: d.tokens.len(),
            truncated: d.truncated,
            id: d.id,
            text: d.text,
        })),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "document_not_found",
            format!("no document {id:?} in collection {collection:?}"),
        )),
    }
}

/// `DELETE /v1/collections/{c}/documents/{id}`.
#[utoipa::path(delete, path = "/v1/collections/{collection}/documents/{id}",
    params(("collection" = String, Path), ("id" = String, Path)),
    responses((status = 200, description = "Deleted"), (status = 404, body = ErrorBody)))]
pub async fn delete_document(
    State(state): State<Arc<AppState>>,
    Path((collection, id)): Path<(String, String)>,
) -> ApiResult<Json<serde_json::Value>> {
    let _permit = state.writers.acquire().await.expect("semaphore open");
    let (db, s) = (state.db().clone(), state.clone());
    let (c, i) = (collection.clone(), id.clone());
    // A delete can trigger a graph compaction: keep it on the write threads too.
    if blocking(move || s.write_pool.install(|| db.delete(&c, &i))).await? {
        Ok(Json(serde_json::json!({ "deleted": id })))
    } else {
        Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "document_not_found",
            format!("no document {id:?} in collection {collection:?}"),
        ))
    }
}

/// `POST /v1/collections/{c}/search` body; unset fields take the server's defaults.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchRequest {
    /// The question.
    pub text: String,
    /// Hits (default 10).
    pub k: Option<usize>,
    /// cosine | w2 | lexical | hybrid (default).
    pub mode: Option<Mode>,
    /// rcmd (default) | none.
    pub rerank: Option<Rerank>,
    /// Attach an RCMD explanation to each hit (default false).
    pub explain: Option<bool>,
    /// Keep only documents whose metadata has these top-level key/value pairs.
    #[schema(value_type = Option<Object>)]
    pub filter: Option<serde_json::Map<String, serde_json::Value>>,
    /// Per-stage candidate depths.
    pub depths: Option<Depths>,
    /// Reciprocal-rank fusion weights and k0.
    pub fusion: Option<FusionWeights>,
    /// Fused candidates scored and reranked (default 100).
    pub rerank_depth: Option<usize>,
}

impl SearchRequest {
    fn params(self, state: &AppState, default_k: usize) -> ApiResult<(String, SearchParams)> {
        check_text(state, "the query", &self.text)?;
        let d = &state.config.search;
        let k = self.k.unwrap_or(default_k);
        check_k(state, k)?;
        Ok((
            self.text,
            SearchParams {
                k,
                mode: self.mode.map(Into::into).unwrap_or_default(),
                rerank: self.rerank.map(Into::into).unwrap_or_default(),
                depths: self.depths.map_or(d.depths, Into::into),
                fusion: self.fusion.map_or(d.fusion, Into::into),
                rerank_depth: self.rerank_depth.unwrap_or(d.rerank_depth),
                explain: self.explain.unwrap_or(false),
                filter: self.filter.unwrap_or_default(),
            },
        ))
    }
}

/// `POST /v1/collections/{c}/search`: hybrid retrieval, RCMD rerank, every stage's score.
#[utoipa::path(post, path = "/v1/collections/{collection}/search", params(("collection" = String, Path)),
    request_body = SearchRequest,
    responses((status = 200, body = SearchOutcome), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn search_collection(
    State(state): State<Arc<AppState>>,
    Path(collection): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<SearchOutcome>> {
    let (text, params) = parse::<SearchRequest>(body)?.params(&state, 10)?;
    let s = state.clone();
    let out = blocking(move || {
        s.engine
            .with_collection(&collection, |col| col.search(&text, &params))
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
}

/// `POST /v1/collections/{c}/duplicates`: is this question already asked?
#[utoipa::path(post, path = "/v1/collections/{collection}/duplicates", params(("collection" = String, Path)),
    request_body = DuplicatesRequest,
    responses((status = 200, body = DuplicateVerdict), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn duplicates(
    State(state): State<Arc<AppState>>,
    Path(collection): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<DuplicateVerdict>> {
    let req: DuplicatesRequest = parse(body)?;
    let search = SearchRequest {
        text: req.text,
        k: req.k.or(Some(3)),
        mode: None,
        rerank: None,
        explain: Some(req.explain.unwrap_or(true)),
        filter: None,
        depths: None,
        fusion: None,
        rerank_depth: None,
    };
    let (text, params) = search.params(&state, 3)?;
    let (s, threshold) = (state.clone(), req.threshold);
    let out = blocking(move || {
        s.engine
            .with_collection(&collection, |col| col.duplicates(&text, threshold, &params))
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
}

/// `POST /v1/explain`: why two texts match (RCMD alignments and contributions).
#[utoipa::path(post, path = "/v1/explain", request_body = ExplainRequest,
    responses((status = 200, body = PairExplanation), (status = 422, body = ErrorBody)))]
pub async fn explain(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<PairExplanation>> {
    let req: ExplainRequest = parse(body)?;
    check_text(&state, "a", &req.a)?;
    check_text(&state, "b", &req.b)?;
    let s = state.clone();
    Ok(Json(
        blocking(move || s.engine.explain_texts(&req.a, &req.b))
            .await?
            .into(),
    ))
}
