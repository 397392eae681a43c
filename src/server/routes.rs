//! Health, readiness and metrics: what operators and load balancers ask.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::error::{ApiError, ErrorBody};
use super::AppState;

/// `GET /healthz`: the process is up.
#[utoipa::path(get, tag = "health", path = "/healthz", responses((status = 200, description = "Alive")))]
pub async fn healthz() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "status": "ok" }))
}

/// `GET /readyz`: every collection's indexes are loaded.
#[utoipa::path(get, tag = "health", path = "/readyz", responses(
    (status = 200, description = "Ready to serve"),
    (status = 503, description = "Still loading indexes", body = ErrorBody),
))]
pub async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    if !state.ready.load(std::sync::atomic::Ordering::Acquire) {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "not_ready",
            "indexes are still loading; retry shortly",
        )
        .into_response();
    }
    // The store answers reads, and has met no I/O error it was not reopened after, nor damaged
    // data: otherwise this server is not ready, whatever else holds.
    let s = state.clone();
    let checked =
        tokio::task::spawn_blocking(move || s.db().collections().map(|_| s.db().load_failures()))
            .await;
    match checked {
        Ok(Ok(failed)) if !failed.is_empty() && !crate::error::storage_engine_failed() => {
            // The names only: the reasons name server paths (they are in the log).
            let names: Vec<&str> = failed.iter().map(|(n, _)| n.as_str()).collect();
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "collection_failed",
                format!(
                    "the indexes of collection(s) {names:?} cannot be loaded, so requests on them fail (the others are served); the server log says why and how to fix it"
                ),
            )
            .into_response()
        }
        Ok(Ok(_)) if !crate::error::storage_engine_failed() => {
            Json(serde_json::json!({ "status": "ready" })).into_response()
        }
        Ok(Ok(_)) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_failed",
            store_failure(),
        )
        .into_response(),
        Ok(Err(e)) => {
            tracing::error!(error = %e, "the store fails reads");
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_failed",
                store_failure(),
            )
            .into_response()
        }
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

/// What `/readyz` says of a failed store, and the way out.
fn store_failure() -> &'static str {
    if crate::error::storage_engine_io_failed() && !crate::error::storage_engine_disk_full() {
        "the store met an I/O error that is not a full disk (its files removed or unreadable?) and refuses writes: restart the server, after restoring the data directory from a backup if its files are gone (the log has the error)"
    } else if crate::error::storage_engine_io_failed() {
        "the store met a full disk; it refuses writes until it is reopened, which happens by itself within a second of space being freed (acknowledged writes are on disk)"
    } else if crate::error::storage_engine_failed() {
        "the store met damaged data; restore the data directory from a backup (see the log)"
    } else {
        "the store fails reads (see the log)"
    }
}

/// `GET /metrics`: Prometheus exposition.
#[utoipa::path(get, tag = "health", path = "/metrics", responses((status = 200, description = "Prometheus text format")))]
pub async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let s = state.clone();
    match tokio::task::spawn_blocking(move || s.metrics.render(s.db())).await {
        Ok(text) => ([("content-type", "text/plain; version=0.0.4")], text).into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}
