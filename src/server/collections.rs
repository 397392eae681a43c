//! Handlers for collections: list, create, get, drop, and set or clear a collection's search
//! defaults.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::api::{
    CollectionInfo, FusionWeights, HnswParams, Mode, Precision, Rerank, SearchDefaultsInfo,
    Weighting,
};
use super::error::{ApiResult, ErrorBody};
use super::extract::{blocking, parse};
use super::AppState;
use crate::store::{self, CollectionSettings, DefaultsSource};

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
#[utoipa::path(get, tag = "collections", path = "/v1/collections", responses((status = 200, body = CollectionList)))]
pub async fn list_collections(
    State(state): State<Arc<AppState>>,
) -> ApiResult<Json<CollectionList>> {
    let db = state.db().clone();
    let collections = blocking(move || {
        db.collections()?
            .into_iter()
            .map(|(name, s)| {
                Ok(CollectionSummary {
                    documents: db.count(&name)?,
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
#[utoipa::path(post, tag = "collections", path = "/v1/collections", request_body = CreateCollection, responses(
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
#[utoipa::path(get, tag = "collections", path = "/v1/collections/{collection}", params(("collection" = String, Path)), responses(
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
#[utoipa::path(delete, tag = "collections", path = "/v1/collections/{collection}", params(("collection" = String, Path)), responses(
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

/// `PUT /v1/collections/{c}/search-defaults` body: the settings the collection's searches use
/// where a request does not say. A field left out takes what applies without collection
/// defaults (the server's `[search.fusion]`, the built-in mode hybrid, rerank rcmd, weights
/// uniform).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetSearchDefaults {
    /// cosine | w2 | lexical | hybrid.
    pub mode: Option<Mode>,
    /// rcmd | none.
    pub rerank: Option<Rerank>,
    /// uniform | idf.
    pub weights: Option<Weighting>,
    /// Fusion weights and k0 (hybrid: at least one stage weight above 0; k0 above 0).
    pub fusion: Option<FusionWeights>,
    /// Why these, for the people who read the collection's info (default "set by an
    /// operator").
    pub reason: Option<String>,
    /// What they were chosen from (free-form JSON, shown as is; default null).
    pub evidence: Option<serde_json::Value>,
}

impl SetSearchDefaults {
    /// The defaults, source `set`, chosen now for the model `fingerprint`; fields left out
    /// from `fallback` (the server's search defaults).
    fn into_defaults(
        self,
        fallback: &crate::search::SearchParams,
        fingerprint: String,
    ) -> store::SearchDefaults {
        let params = crate::search::SearchParams {
            mode: self.mode.map_or(fallback.mode, Into::into),
            rerank: self.rerank.map_or(fallback.rerank, Into::into),
            weights: self.weights.map_or(fallback.weights, Into::into),
            fusion: self.fusion.map_or(fallback.fusion, Into::into),
            ..fallback.clone()
        };
        store::SearchDefaults::from_params(
            &params,
            DefaultsSource::Set,
            self.reason.unwrap_or_else(|| "set by an operator".into()),
            fingerprint,
            self.evidence.unwrap_or_default(),
        )
    }
}

/// `PUT /v1/collections/{c}/search-defaults`: sets the collection's search defaults by hand
/// (source `set`, for its current model), replacing any; searches use them from now on where
/// a request does not say.
#[utoipa::path(put, tag = "collections", path = "/v1/collections/{collection}/search-defaults", params(("collection" = String, Path)),
    request_body = SetSearchDefaults,
    responses(
        (status = 200, description = "Stored", body = SearchDefaultsInfo),
        (status = 404, body = ErrorBody),
        (status = 422, description = "A value out of range, named", body = ErrorBody),
    ))]
pub async fn put_search_defaults(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<SearchDefaultsInfo>> {
    let req: SetSearchDefaults = parse(body)?;
    let fallback = crate::search::SearchParams {
        fusion: state.config.search.fusion,
        ..Default::default()
    };
    let db = state.db().clone();
    let defaults = blocking(move || {
        let model = db.settings(&name)?.model.fingerprint;
        let defaults = req.into_defaults(&fallback, model);
        db.set_search_defaults(&name, Some(defaults.clone()))?;
        Ok(defaults)
    })
    .await?;
    Ok(Json(SearchDefaultsInfo {
        defaults: defaults.into(),
        stale: false,
    }))
}

/// `DELETE /v1/collections/{c}/search-defaults` response.
#[derive(Debug, Serialize, ToSchema)]
pub struct DefaultsCleared {
    /// The collection.
    pub collection: String,
    /// True when it had search defaults (false: it had none; nothing changed).
    pub cleared: bool,
}

/// `DELETE /v1/collections/{c}/search-defaults`: clears the collection's search defaults;
/// its searches take the server's again.
#[utoipa::path(delete, tag = "collections", path = "/v1/collections/{collection}/search-defaults", params(("collection" = String, Path)), responses(
    (status = 200, body = DefaultsCleared),
    (status = 404, body = ErrorBody),
))]
pub async fn delete_search_defaults(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
) -> ApiResult<Json<DefaultsCleared>> {
    let db = state.db().clone();
    let n = name.clone();
    let cleared = blocking(move || {
        let had = db.search_defaults(&n)?.is_some();
        db.set_search_defaults(&n, None)?;
        Ok(had)
    })
    .await?;
    Ok(Json(DefaultsCleared {
        collection: name,
        cleared,
    }))
}
