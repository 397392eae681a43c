//! Handlers for file ingest over HTTP: the upload (streamed to a file under the data
//! directory, then ingested as a background job) and the jobs' status.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use futures_util::StreamExt;
use serde::Deserialize;
use tokio::io::AsyncWriteExt;
use utoipa::IntoParams;

use super::error::{ApiError, ApiResult, ErrorBody};
use super::extract::{blocking, check_collection, query};
use super::jobs::{JobSpec, JobStatus};
use super::AppState;
use crate::ingest::{Fields, Format};
use crate::text::TextFormat;

/// `POST /v1/collections/{c}/ingest` query: how to read the uploaded file.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct IngestParams {
    /// tsv | csv | jsonl | qqp (default: from `name`'s extension).
    pub format: Option<String>,
    /// How the texts are written: `text` (default) or `html` (each document's visible text
    /// is stored).
    pub text_format: Option<String>,
    /// The file's name (for display and the default format).
    pub name: Option<String>,
    /// Id column / key (default `id`).
    pub id_field: Option<String>,
    /// Text column / key (default `text`).
    pub text_field: Option<String>,
    /// Comma-separated columns / keys copied into metadata.
    pub meta_fields: Option<String>,
    /// Comma-separated columns / keys whose texts are each document's context (tsv/csv: each
    /// non-empty cell is one text; jsonl: a string or a list of strings; jsonl default: the
    /// `context` key).
    pub context_fields: Option<String>,
    /// Documents per committed batch (default 256).
    pub batch: Option<usize>,
}

/// `POST /v1/collections/{c}/ingest`: uploads a TSV, CSV, JSON Lines or QQP file (the raw file
/// as the body) and loads it in the background with the same pipeline as `kindred ingest`;
/// answers 202 with the job to poll at `GET /v1/jobs/{id}`.
#[utoipa::path(post, tag = "ingest", path = "/v1/collections/{collection}/ingest",
    params(("collection" = String, Path), IngestParams),
    request_body(content = String, description = "The file's bytes"),
    responses((status = 202, body = JobStatus), (status = 404, body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn upload(
    State(state): State<Arc<AppState>>,
    Path(collection): Path<String>,
    q: Result<Query<IngestParams>, QueryRejection>,
    body: Body,
) -> ApiResult<(StatusCode, Json<JobStatus>)> {
    let p: IngestParams = query(q)?;
    let name = p.name.unwrap_or_else(|| "upload".into());
    let format = match p.format.as_deref() {
        Some(f) => f.parse::<Format>(),
        None => Format::from_path(std::path::Path::new(&name)),
    }
    .map_err(ApiError::from)?;
    let text_format = match p.text_format.as_deref() {
        Some(f) => f.parse::<TextFormat>().map_err(ApiError::from)?,
        None => TextFormat::Text,
    };
    let batch = p.batch.unwrap_or(256);
    if batch == 0 || batch > state.config.limits.max_batch {
        return Err(ApiError::invalid(format!(
            "batch = {batch}; use 1-{} (limits.max_batch)",
            state.config.limits.max_batch
        )));
    }
    let defaults = Fields::default();
    let names = |list: Option<String>| -> Vec<String> {
        list.map(|m| {
            m.split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect()
        })
        .unwrap_or_default()
    };
    let fields = Fields {
        id: p.id_field.unwrap_or(defaults.id),
        text: p.text_field.unwrap_or(defaults.text),
        meta: names(p.meta_fields),
        context: names(p.context_fields),
    };
    check_collection(&state, &collection).await?;
    let max_jobs = state.config.limits.max_jobs;
    if state.jobs.running() >= max_jobs {
        return Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_jobs",
            format!("{max_jobs} upload jobs are loading (limits.max_jobs); wait for one to finish (GET /v1/jobs) and upload again"),
        ));
    }

    let id = state.jobs.next_id();
    let dir = state.db().dir().join("uploads");
    let path = dir.join(format!("job-{id}-{}", std::process::id()));
    save(&state, body, &dir, &path).await?;
    let spec = JobSpec {
        collection,
        name,
        path,
        format,
        text_format,
        fields,
        batch,
    };
    // Counting the file's lines reads it: off the async threads.
    let s = state.clone();
    let status = blocking(move || Ok(s.jobs.start(id, spec, s.clone()))).await?;
    Ok((StatusCode::ACCEPTED, Json(status)))
}

/// Streams the body to `path`, refusing more than `limits.max_upload_bytes`.
async fn save(
    state: &AppState,
    body: Body,
    dir: &std::path::Path,
    path: &std::path::Path,
) -> ApiResult<()> {
    // The detail names server paths: it goes to the log, the client gets a reference (and
    // 507 when the disk is full).
    let io = |what: &str, e: std::io::Error| {
        ApiError::from(crate::Error::from(crate::InternalError::io(
            format!("{what} {}", path.display()),
            e,
        )))
    };
    tokio::fs::create_dir_all(dir)
        .await
        .map_err(|e| io("creating the folder of", e))?;
    let mut file = tokio::fs::File::create(path)
        .await
        .map_err(|e| io("creating", e))?;
    let max = state.config.limits.max_upload_bytes;
    let mut size = 0u64;
    let mut stream = body.into_data_stream();
    let fail = |e: ApiError| {
        let _ = std::fs::remove_file(path);
        e
    };
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| {
            fail(ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_body",
                format!("reading the upload failed: {e}"),
            ))
        })?;
        size += chunk.len() as u64;
        if size > max {
            return Err(fail(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "upload_too_large",
                format!("the file exceeds limits.max_upload_bytes ({max}); split it or load it with `kindred ingest` on the server"),
            )));
        }
        file.write_all(&chunk)
            .await
            .map_err(|e| fail(io("writing", e)))?;
    }
    file.sync_all().await.map_err(|e| fail(io("syncing", e)))?;
    if size == 0 {
        return Err(fail(ApiError::invalid(
            "the upload is empty; send the file's bytes as the request body",
        )));
    }
    Ok(())
}

/// `GET /v1/jobs`: this server's ingest jobs, newest first.
#[utoipa::path(get, tag = "ingest", path = "/v1/jobs", responses((status = 200, body = Vec<JobStatus>)))]
pub async fn list_jobs(State(state): State<Arc<AppState>>) -> Json<Vec<JobStatus>> {
    Json(state.jobs.list())
}

/// `GET /v1/jobs/{id}`: one ingest job's progress.
#[utoipa::path(get, tag = "ingest", path = "/v1/jobs/{id}", params(("id" = u64, Path)),
    responses((status = 200, body = JobStatus), (status = 404, body = ErrorBody)))]
pub async fn get_job(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> ApiResult<Json<JobStatus>> {
    let job = id.parse::<u64>().ok().and_then(|n| state.jobs.get(n));
    job.map(Json).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "job_not_found",
            format!("no job {id:?} on this server (jobs are forgotten on restart)"),
        )
    })
}
