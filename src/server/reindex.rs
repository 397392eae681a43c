//! Reindex jobs: `POST /v1/collections/{c}/reindex` re-encodes a collection onto another
//! model ([`Database::reindex`](crate::db::Database::reindex)) on a background thread while
//! the collection keeps serving; `GET` on the same path shows its progress. Jobs live in
//! memory (a restart forgets them; an unfinished generation is dropped on the next open and
//! the collection stays on its old model).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::api::ReindexReport;
use super::error::{ApiError, ApiResult, ErrorBody};
use super::extract::{blocking, parse};
use super::jobs::JobState;
use super::AppState;
use crate::model::ModelDir;
use crate::sync::MutexExt;
use crate::Encoder;

/// `POST /v1/collections/{c}/reindex` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReindexRequest {
    /// A model directory on the server's machine (config.json, model.safetensors,
    /// tokenizer.json; a trained kindred model directory is one).
    pub model: String,
    /// Also make the collection's context vectors with the new model (`rerank: context`)
    /// when it has none; one that has them gets them made again either way.
    #[serde(default)]
    pub context_vectors: bool,
}

/// A reindex as `GET /v1/collections/{c}/reindex` shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ReindexStatus {
    /// The collection.
    pub collection: String,
    /// The model directory it is moving to.
    pub model: String,
    /// Running, done or failed.
    pub state: JobState,
    /// Documents encoded so far.
    pub encoded: u64,
    /// Documents to encode (grows if writes arrive meanwhile).
    pub total: u64,
    /// Seconds since it started.
    pub seconds: f64,
    /// What it did (state `done`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report: Option<ReindexReport>,
    /// What went wrong (state `failed`; the collection stays on its old model).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A reindex's status and when it started.
type Job = Arc<Mutex<(ReindexStatus, Instant)>>;

/// The latest reindex of each collection.
#[derive(Default)]
pub struct Reindexes {
    jobs: Mutex<HashMap<String, Job>>,
}

impl Reindexes {
    fn get(&self, collection: &str) -> Option<ReindexStatus> {
        let job = self.jobs.locked().get(collection).cloned()?;
        let (mut status, started) = job.locked().clone();
        if status.state == JobState::Running {
            status.seconds = started.elapsed().as_secs_f64();
        }
        Some(status)
    }
}

/// `POST /v1/collections/{c}/reindex`: starts re-encoding the collection onto another model;
/// searches and writes go on against the current model until the new generation is complete.
#[utoipa::path(post, tag = "reindex", path = "/v1/collections/{collection}/reindex",
    params(("collection" = String, Path)), request_body = ReindexRequest,
    responses((status = 202, body = ReindexStatus), (status = 404, body = ErrorBody),
        (status = 409, description = "A reindex of it is running", body = ErrorBody),
        (status = 422, description = "Not a model directory, or the model it already uses", body = ErrorBody)))]
pub async fn start(
    State(state): State<Arc<AppState>>,
    Path(collection): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<(StatusCode, Json<ReindexStatus>)> {
    let req: ReindexRequest = parse(body)?;
    // Before the model loads (seconds): a running reindex answers at once.
    refuse_if_running(&state.reindexes.jobs.locked(), &collection)?;
    let (s, c, path) = (state.clone(), collection.clone(), PathBuf::from(&req.model));
    // Validate and load here, so a wrong directory is an immediate 422.
    let loaded = blocking(move || {
        s.db().require(crate::db::Capability::Reindex)?;
        let settings = s.db().settings(&c)?;
        let dir = ModelDir::open(&path);
        let dir = match dir {
            Ok(dir) => dir,
            Err(e) => {
                return Ok(Err(ApiError::invalid(format!("model: {e}"))));
            }
        };
        // Recorded, and compared with the recorded place, as the CLI does: absolute and
        // without links, so a server restarted elsewhere finds it and the same directory
        // spelled another way is the same place.
        let path = crate::model::resolved(&dir.path);
        // The collection keeps its precision on the new model.
        let options = crate::EncoderOptions {
            precision: settings.model.precision,
            ..*s.encoder().options()
        };
        let encoder = Encoder::load(&dir, options)?;
        if let Err(e) = refuse_if_already_on(&c, &settings, &encoder, &path) {
            return Ok(Err(e));
        }
        Ok(Ok((Arc::new(encoder), path)))
    })
    .await??;
    let (encoder, path) = loaded;
    let job = {
        let mut jobs = state.reindexes.jobs.locked();
        refuse_if_running(&jobs, &collection)?;
        // A reindex that finished while the model loaded may have moved the collection onto
        // it: asked again under the lock, which every reindex starts under.
        let settings = state.db().settings(&collection)?;
        refuse_if_already_on(&collection, &settings, &encoder, &path)?;
        let status = ReindexStatus {
            collection: collection.clone(),
            model: req.model.clone(),
            state: JobState::Running,
            encoded: 0,
            total: 0,
            seconds: 0.0,
            report: None,
            error: None,
        };
        let job = Arc::new(Mutex::new((status, Instant::now())));
        jobs.insert(collection.clone(), job.clone());
        job
    };
    let shown = job.locked().0.clone();
    let s = state.clone();
    std::thread::Builder::new()
        .name(format!("kindred-reindex-{collection}"))
        .spawn(move || run(&s, &collection, (&path, req.context_vectors), encoder, &job))
        .map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                format!("starting the reindex thread: {e}"),
            )
        })?;
    Ok((StatusCode::ACCEPTED, Json(shown)))
}

/// 409 while a reindex of `collection` runs.
fn refuse_if_running(jobs: &HashMap<String, Job>, collection: &str) -> Result<(), ApiError> {
    match jobs.get(collection) {
        Some(j) if j.locked().0.state == JobState::Running => Err(ApiError::new(
            StatusCode::CONFLICT,
            "reindex_running",
            format!(
                "collection {collection:?} is being reindexed; follow GET /v1/collections/{collection}/reindex"
            ),
        )),
        _ => Ok(()),
    }
}

/// 422 when the collection already uses `encoder`'s weights at `path` ([`already_uses`]).
///
/// [`already_uses`]: crate::db::already_uses
fn refuse_if_already_on(
    collection: &str,
    settings: &crate::store::CollectionSettings,
    encoder: &Encoder,
    path: &std::path::Path,
) -> Result<(), ApiError> {
    if crate::db::already_uses(settings, encoder.identity(), Some(path)) {
        return Err(ApiError::invalid(format!(
            "model: collection {collection:?} already uses {} ({}); give the directory of another model",
            settings.model.id, settings.model.fingerprint
        )));
    }
    Ok(())
}

fn run(
    state: &AppState,
    collection: &str,
    (model, context_vectors): (&std::path::Path, bool),
    encoder: Arc<Encoder>,
    job: &Job,
) {
    let progress = |done: u64, total: u64| {
        let mut j = job.locked();
        j.0.encoded = done;
        j.0.total = total;
    };
    // On a pool of its own, as many threads as the write pool and as nice: the other cores
    // stay with searches, and writes go on meanwhile (the reindex catches them up). On the
    // write pool itself, a reindex held every write for its whole length (they timed out).
    let reindex = || {
        state.engine.reindex(
            collection,
            encoder,
            Some(model),
            crate::engine::OnReindex::from_flag(context_vectors),
            &progress,
        )
    };
    let nice = state.config.ingest_nice;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(state.config.writer_threads())
        .thread_name(|i| format!("kindred-reindex-{i}"))
        .start_handler(move |_| super::lower_thread_priority(nice))
        .build();
    let result = match pool {
        Ok(pool) => pool.install(reindex),
        Err(e) => {
            Err(crate::InternalError::Backend(format!("starting the reindex pool: {e}")).into())
        }
    };
    let mut j = job.locked();
    j.0.seconds = j.1.elapsed().as_secs_f64();
    match result {
        Ok(report) => {
            tracing::info!(
                collection,
                model = %model.display(),
                documents = report.documents,
                "reindex done"
            );
            j.0.state = JobState::Done;
            j.0.report = Some(report.into());
        }
        Err(e) => {
            tracing::warn!(collection, model = %model.display(), error = %e, "reindex failed");
            j.0.state = JobState::Failed;
            j.0.error = Some(e.to_string());
        }
    }
}

/// `GET /v1/collections/{c}/reindex`: the progress of the collection's latest reindex.
#[utoipa::path(get, tag = "reindex", path = "/v1/collections/{collection}/reindex",
    params(("collection" = String, Path)),
    responses((status = 200, body = ReindexStatus), (status = 404, body = ErrorBody)))]
pub async fn status(
    State(state): State<Arc<AppState>>,
    Path(collection): Path<String>,
) -> ApiResult<Json<ReindexStatus>> {
    state.reindexes.get(&collection).map(Json).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "reindex_not_found",
            format!(
                "no reindex of {collection:?} on this server since it started; start one with POST"
            ),
        )
    })
}
