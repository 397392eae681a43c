//! Handlers for collections: list, create, get, drop.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::api::{CollectionInfo, HnswParams, Precision};
use super::error::{ApiResult, ErrorBody};
use super::extract::{blocking, parse};
use super::AppState;
use crate::store::CollectionSettings;

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
    /// HNSW parameters (default m 16, ef_construction 200, ef_search 128).
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
