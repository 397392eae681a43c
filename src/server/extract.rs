//! What every handler shares: running blocking work off the async threads, reading JSON
//! bodies and query strings with errors that name the problem, and the request limits
//! (text length, k) checked before any work.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode};
use serde::de::DeserializeOwned;

use super::error::{ApiError, ApiResult};
use super::AppState;

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

/// Whether a write may still be stored, shared by the timeout and the write it covers: the
/// timeout cancels it only while it has not begun to commit, and otherwise waits for its
/// answer, so a write is never answered `timeout` and then stored.
#[derive(Clone, Default)]
pub(crate) struct WriteTicket(Arc<std::sync::atomic::AtomicU8>);

impl WriteTicket {
    const PENDING: u8 = 0;
    const COMMITTING: u8 = 1;
    const CANCELLED: u8 = 2;

    /// Called by the write before it commits: false once the request was answered `timeout`.
    pub(crate) fn begin_commit(&self) -> bool {
        use std::sync::atomic::Ordering;
        match self.0.compare_exchange(
            Self::PENDING,
            Self::COMMITTING,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => true,
            Err(now) => now == Self::COMMITTING,
        }
    }

    /// Called by the timeout: true if the write will not be stored (it had not begun to
    /// commit), false if it is committing (its answer is worth waiting for).
    pub(crate) fn cancel(&self) -> bool {
        use std::sync::atomic::Ordering;
        match self.0.compare_exchange(
            Self::PENDING,
            Self::CANCELLED,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => true,
            Err(now) => now == Self::CANCELLED,
        }
    }
}

/// `body` as it reaches the handler, and a flag set once all of it has arrived (at once for a
/// request without a body), so a timeout can tell a slow client from a slow server.
pub(crate) fn watch_body(
    body: axum::body::Body,
) -> (axum::body::Body, Arc<std::sync::atomic::AtomicBool>) {
    use axum::body::HttpBody;
    use futures_util::StreamExt;
    use std::sync::atomic::{AtomicBool, Ordering};
    let arrived = Arc::new(AtomicBool::new(body.is_end_stream()));
    if arrived.load(Ordering::Relaxed) {
        return (body, arrived);
    }
    let flag = arrived.clone();
    let end = futures_util::stream::once(async move {
        flag.store(true, Ordering::Release);
        None::<Result<Bytes, axum::Error>>
    })
    .filter_map(std::future::ready);
    let stream = body.into_data_stream().chain(end);
    (axum::body::Body::from_stream(stream), arrived)
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

pub(crate) fn check_text(state: &AppState, what: &str, text: &str) -> ApiResult<()> {
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

pub(crate) fn check_k(state: &AppState, k: usize) -> ApiResult<()> {
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

/// True for an NDJSON body (`application/x-ndjson` or `application/jsonl`).
pub fn is_ndjson(headers: &HeaderMap) -> bool {
    super::guard::is_ndjson_type(&super::guard::essence(headers))
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
