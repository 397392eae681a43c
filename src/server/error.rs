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
                UserError::DeviceUnavailable { .. }
                | UserError::IncompatibleStore { .. }
                | UserError::InvalidModelDir { .. }
                | UserError::WeightsMismatch { .. }
                | UserError::FetchUnavailable { .. } => {
                    (StatusCode::INTERNAL_SERVER_ERROR, "server_misconfigured")
                }
            },
            Error::Internal(_) => {
                tracing::error!(error = %e, "internal error");
                (StatusCode::INTERNAL_SERVER_ERROR, "internal")
            }
        };
        ApiError::new(status, code, message)
    }
}

/// Handler result.
pub type ApiResult<T> = std::result::Result<T, ApiError>;
