//! Handlers for duplicate review (the queue and the verdicts): parse, run the library call off
//! the async threads, answer JSON (or TSV for the export).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use utoipa::IntoParams;

use super::api::{ReviewPage, StoredVerdict, Verdict};
use super::error::{ApiError, ApiResult, ErrorBody};
use super::extract::{blocking, check_collection, check_text, parse, query};
use super::AppState;
use crate::review::{self, ReviewQuery};

/// `GET /v1/collections/{c}/review` query.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ReviewParams {
    /// P(duplicate) at or above which a pair is queued (default: the calibration's threshold).
    pub threshold: Option<f32>,
    /// Look at documents written before this position (a previous page's `next_before`).
    pub before: Option<u64>,
    /// Recent documents to look at (default 100, at most 1000).
    pub scan: Option<usize>,
    /// Attach explanations (default false).
    pub explain: Option<bool>,
}

/// `GET /v1/collections/{c}/review`: recently written questions whose best other match
/// reaches the threshold and has no verdict yet, newest first.
#[utoipa::path(get, tag = "review", path = "/v1/collections/{collection}/review",
    params(("collection" = String, Path), ReviewParams),
    responses((status = 200, body = ReviewPage), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn review_queue(
    State(state): State<Arc<AppState>>,
    Path(collection): Path<String>,
    q: Result<Query<ReviewParams>, QueryRejection>,
) -> ApiResult<Json<ReviewPage>> {
    let p: ReviewParams = query(q)?;
    let s = state.clone();
    let rq = ReviewQuery {
        threshold: p.threshold,
        before: p.before,
        scan: p.scan.unwrap_or(100),
        explain: p.explain.unwrap_or(false),
        explain_cells: state.config.limits.max_explain_cells,
    };
    Ok(Json(
        blocking(move || {
            s.engine
                .with_collection(&collection, |col| review::queue(col, &rq))
        })
        .await?
        .into(),
    ))
}

/// `GET /v1/collections/{c}/verdicts` query.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct VerdictsParams {
    /// `json` (default) or `tsv`: the QQP layout `label<TAB>q1<TAB>q2<TAB>key` that
    /// `kindred calibrate --pairs`, `kindred eval pairs` and training read.
    pub format: Option<String>,
}

/// `GET /v1/collections/{c}/verdicts`: every stored verdict, oldest first, as JSON or TSV.
#[utoipa::path(get, tag = "review", path = "/v1/collections/{collection}/verdicts",
    params(("collection" = String, Path), VerdictsParams),
    responses((status = 200, body = Vec<StoredVerdict>), (status = 404, body = ErrorBody)))]
pub async fn list_verdicts(
    State(state): State<Arc<AppState>>,
    Path(collection): Path<String>,
    q: Result<Query<VerdictsParams>, QueryRejection>,
) -> ApiResult<Response> {
    let p: VerdictsParams = query(q)?;
    let tsv = match p.format.as_deref() {
        None | Some("json") => false,
        Some("tsv") => true,
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "format {other:?}; use json or tsv"
            )))
        }
    };
    check_collection(&state, &collection).await?;
    let db = state.db().clone();
    let c = collection.clone();
    let all = blocking(move || review::verdicts(&db, &c)).await?;
    if tsv {
        let disposition = format!("attachment; filename=\"{collection}-verdicts.tsv\"");
        Ok((
            [
                (
                    "content-type",
                    "text/tab-separated-values; charset=utf-8".to_string(),
                ),
                ("content-disposition", disposition),
            ],
            review::to_tsv(&all),
        )
            .into_response())
    } else {
        let all: Vec<StoredVerdict> = all.into_iter().map(Into::into).collect();
        Ok(Json(all).into_response())
    }
}

/// `POST /v1/collections/{c}/verdicts`: stores an admin's verdict on a pair (a new verdict on
/// the same pair replaces the old one).
#[utoipa::path(post, tag = "review", path = "/v1/collections/{collection}/verdicts",
    params(("collection" = String, Path)), request_body = Verdict,
    responses((status = 201, body = StoredVerdict), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn put_verdict(
    State(state): State<Arc<AppState>>,
    Path(collection): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<(StatusCode, Json<StoredVerdict>)> {
    let v: Verdict = parse(body)?;
    check_text(&state, "a.text", &v.a.text)?;
    check_text(&state, "b.text", &v.b.text)?;
    check_collection(&state, &collection).await?;
    let db = state.db().clone();
    let stored = blocking(move || review::record(&db, &collection, v.into())).await?;
    Ok((StatusCode::CREATED, Json(stored.into())))
}

/// `DELETE /v1/collections/{c}/verdicts/{key}`: withdraws a verdict.
#[utoipa::path(delete, tag = "review", path = "/v1/collections/{collection}/verdicts/{key}",
    params(("collection" = String, Path), ("key" = String, Path)),
    responses((status = 200, description = "Removed"), (status = 404, body = ErrorBody)))]
pub async fn delete_verdict(
    State(state): State<Arc<AppState>>,
    Path((collection, key)): Path<(String, String)>,
) -> ApiResult<Json<serde_json::Value>> {
    check_collection(&state, &collection).await?;
    let (db, c, k) = (state.db().clone(), collection.clone(), key.clone());
    if blocking(move || review::remove(&db, &c, &k)).await? {
        Ok(Json(serde_json::json!({ "deleted": key })))
    } else {
        Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "verdict_not_found",
            format!("no verdict {key:?} in collection {collection:?}"),
        ))
    }
}
