//! Health, readiness and metrics: what operators and load balancers ask.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::error::{ApiError, ErrorBody};
use super::AppState;

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
