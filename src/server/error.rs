//! The API's one error shape, `{"error": {"code", "message"}}`, and the mapping from library
//! errors to status codes: the caller's mistakes are 4xx with a message saying how to fix
//! them; kindred's own failures are 500 (logged with their detail).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use crate::error::{Error, UserError};

/// An error response.
#[derive(Debug)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable machine-readable code (snake_case).
    pub code: &'static str,
    /// What went wrong and how to fix it.
    pub message: String,
}

/// The body of every error response.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// The error itself.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable machine-readable code, e.g. `collection_not_found`, `malformed_json`.
    pub code: String,
    /// Human-readable explanation with the fix.
    pub message: String,
}

impl ApiError {
    /// An error with a status, code and message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    /// 422 `invalid_request`.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_request", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.into(),
                message: self.message,
            },
        };
        (self.status, Json(body)).into_response()
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        let message = e.to_string();
        let (status, code) = match &e {
            Error::User(u) => match u {
                UserError::UnknownCollection { .. } => {
                    (StatusCode::NOT_FOUND, "collection_not_found")
                }
                UserError::CollectionExists { .. } => (StatusCode::CONFLICT, "collection_exists"),
                UserError::ModelMismatch { .. } => (StatusCode::CONFLICT, "model_mismatch"),
                UserError::EmptyText { .. } | UserError::NoContentTokens { .. } => {
                    (StatusCode::UNPROCESSABLE_ENTITY, "empty_text")
                }
                UserError::InvalidDocument { .. } => {
                    (StatusCode::UNPROCESSABLE_ENTITY, "invalid_document")
                }
                UserError::InvalidArgument { .. } => {
                    (StatusCode::UNPROCESSABLE_ENTITY, "invalid_request")
                }
                UserError::BackendUnavailable { .. } => {
                    (StatusCode::SERVICE_UNAVAILABLE, "backend_unavailable")
                }
                UserError::NotSupported { .. } => (StatusCode::NOT_IMPLEMENTED, "not_supported"),
                UserError::DeviceUnavailable { .. }
                | UserError::IncompatibleStore { .. }
                | UserError::InvalidModelDir { .. }
                | UserError::ModelMoved { .. }
                | UserError::WeightsMismatch { .. }
                | UserError::FetchUnavailable { .. } => {
                    return hidden(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "server_misconfigured",
                        &e,
                    );
                }
            },
            Error::Internal(i) if i.is_disk_full() => {
                tracing::error!(error = %e, "the disk is full");
                return ApiError::new(
                    StatusCode::INSUFFICIENT_STORAGE,
                    "insufficient_storage",
                    "the server's disk is full: this write was not acknowledged; free space on the server and retry (reads go on)",
                );
            }
            Error::Internal(crate::InternalError::StoreFailed(message)) => {
                tracing::error!(error = %e, "the store refuses writes");
                return ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "store_failed",
                    message.clone(),
                );
            }
            Error::Internal(_) => {
                return hidden(StatusCode::INTERNAL_SERVER_ERROR, "internal", &e);
            }
        };
        ApiError::new(status, code, message)
    }
}

/// A server-side failure: the detail (which may name server paths) goes to the log under a
/// reference the client gets in a fixed message.
fn hidden(status: StatusCode, code: &'static str, e: &Error) -> ApiError {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let reference = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    tracing::error!(error = %e, code, reference, "request failed on the server's side");
    let what = match code {
        "server_misconfigured" => "the server is misconfigured",
        _ => "the server failed to answer",
    };
    ApiError::new(
        status,
        code,
        format!("{what} (reference {reference}); its log has the detail under that reference"),
    )
}

/// Gives every error response the API's JSON shape. Handlers answer [`ApiError`]s already;
/// this catches what axum answers by itself before a handler runs (a path segment that does not
/// decode, a method the route does not take: plain text or an empty body).
pub async fn json_errors(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let method = req.method().clone();
    let response = next.run(req).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 4096)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let (code, message) = match status {
        StatusCode::METHOD_NOT_ALLOWED => {
            let allow = parts
                .headers
                .get(axum::http::header::ALLOW)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            (
                "method_not_allowed",
                format!("{method} is not allowed on this route (allowed: {allow}); see GET /openapi.json"),
            )
        }
        StatusCode::NOT_FOUND => ("not_found", or(text, "no such resource")),
        StatusCode::PAYLOAD_TOO_LARGE => ("body_too_large", or(text, "the request is too large")),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => (
            "unsupported_media_type",
            or(text, "send Content-Type: application/json"),
        ),
        s if s.is_client_error() => ("bad_request", or(text, "the request is malformed")),
        _ => return hidden_text(status, &text),
    };
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    let body = ErrorBody {
        error: ErrorDetail {
            code: code.into(),
            message,
        },
    };
    (parts, Json(body)).into_response()
}

fn or(text: String, fallback: &str) -> String {
    if text.is_empty() {
        fallback.to_string()
    } else {
        text
    }
}

/// A non-JSON server error from below the handlers: logged, answered in the API's shape.
fn hidden_text(status: StatusCode, text: &str) -> Response {
    tracing::error!(
        status = status.as_u16(),
        detail = text,
        "error response from below the handlers"
    );
    ApiError::new(
        status,
        "internal",
        "the server failed to answer; its log has the detail",
    )
    .into_response()
}

/// Handler result.
pub type ApiResult<T> = std::result::Result<T, ApiError>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::InternalError;

    #[test]
    fn server_side_errors_hide_their_detail() {
        let e = Error::Internal(InternalError::io(
            "writing /var/lib/kindred/indexes/faq/cosine.hnsw.data",
            std::io::Error::other("disk on fire"),
        ));
        let api = ApiError::from(e);
        assert_eq!(api.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(api.code, "internal");
        assert!(!api.message.contains("/var/lib"), "{}", api.message);
        assert!(!api.message.contains("disk on fire"), "{}", api.message);
        assert!(api.message.contains("reference"), "{}", api.message);
        let user = ApiError::from(Error::User(UserError::UnknownCollection {
            name: "faq".into(),
        }));
        assert!(
            user.message.contains("faq"),
            "user errors keep their message"
        );
    }
}
