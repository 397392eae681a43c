//! File ingest over HTTP: an uploaded file is saved under `<data>/uploads/`, then loaded by
//! the same pipeline as `kindred ingest` ([`crate::ingest`]) on a background thread; its
//! progress is polled at `GET /v1/jobs/{id}`. Jobs live in memory: a restart forgets them
//! (what they committed stays committed; re-uploading the same file re-writes it as replaces).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::Serialize;
use utoipa::ToSchema;

use super::api::{format_name, IngestSummary, Rejected};
use crate::ingest::{self, Fields, Format, IngestOptions};

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Loading.
    Running,
    /// Finished; `summary` says what it did.
    Done,
    /// Stopped; `error` says why (batches committed before it stay).
    Failed,
}

/// A job as `GET /v1/jobs/{id}` shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct JobStatus {
    /// Job id.
    pub id: u64,
    /// Target collection.
    pub collection: String,
    /// The uploaded file's name.
    pub file: String,
    /// Its format.
    pub format: String,
    /// Running, done or failed.
    pub state: JobState,
    /// Lines in the file.
    pub total_lines: u64,
    /// The line up to which everything is committed.
    pub line: u64,
    /// Documents written so far.
    pub written: u64,
    /// Rows rejected so far.
    pub rejected: u64,
    /// The first rejected rows with their reasons.
    pub rejects: Vec<Rejected>,
    /// Seconds since the job started.
    pub seconds: f64,
    /// Documents per second so far.
    pub docs_per_sec: f64,
    /// What went wrong (state `failed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the ingest did (state `done`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<IngestSummary>,
}

/// A job's status and when it started.
type Job = Arc<Mutex<(JobStatus, Instant)>>;

/// Jobs of this server process.
#[derive(Default)]
pub struct Jobs {
    next: AtomicU64,
    jobs: Mutex<BTreeMap<u64, Job>>,
}

/// Rejected rows a job keeps to show.
const SHOWN_REJECTS: usize = 100;

/// What an upload asks for.
pub struct JobSpec {
    /// Target collection.
    pub collection: String,
    /// The uploaded file's name (for display).
    pub name: String,
    /// Where the upload was saved.
    pub path: PathBuf,
    /// Its format.
    pub format: Format,
    /// Which fields make a document.
    pub fields: Fields,
    /// Documents per committed batch.
    pub batch: usize,
}

impl Jobs {
    /// A fresh job id (also names the upload file).
    pub fn next_id(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Every job's status, newest first.
    pub fn list(&self) -> Vec<JobStatus> {
        let jobs = self.jobs.lock().expect("lock");
        jobs.values().rev().map(|j| snapshot(j)).collect()
    }

    /// One job's status.
    pub fn get(&self, id: u64) -> Option<JobStatus> {
        let jobs = self.jobs.lock().expect("lock");
        jobs.get(&id).map(|j| snapshot(j))
    }

    /// Starts loading `spec` on a background thread; returns its first status.
    pub fn start(&self, id: u64, spec: JobSpec, state: Arc<super::AppState>) -> JobStatus {
        let total_lines = ingest::count_lines(&spec.path).unwrap_or(0);
        let status = JobStatus {
            id,
            collection: spec.collection.clone(),
            file: spec.name.clone(),
            format: format_name(spec.format).to_string(),
            state: JobState::Running,
            total_lines,
            line: 0,
            written: 0,
            rejected: 0,
            rejects: Vec::new(),
            seconds: 0.0,
            docs_per_sec: 0.0,
            error: None,
            summary: None,
        };
        let job = Arc::new(Mutex::new((status.clone(), Instant::now())));
        self.jobs.lock().expect("lock").insert(id, job.clone());
        std::thread::Builder::new()
            .name(format!("kindred-ingest-{id}"))
            .spawn(move || run(spec, state, job))
            .expect("spawning an ingest thread");
        status
    }
}

fn snapshot(job: &Mutex<(JobStatus, Instant)>) -> JobStatus {
    let (status, started) = &*job.lock().expect("lock");
    let mut s = status.clone();
    if s.state == JobState::Running {
        s.seconds = started.elapsed().as_secs_f64();
        s.docs_per_sec = s.written as f64 / s.seconds.max(1e-9);
    }
    s
}

fn run(spec: JobSpec, state: Arc<super::AppState>, job: Job) {
    let opts = IngestOptions {
        path: spec.path.clone(),
        format: spec.format,
        fields: spec.fields,
        batch: spec.batch,
        strict: false,
        restart: true,
        threads: Some(state.write_pool.clone()),
    };
    let result = state.engine.collection(&spec.collection).and_then(|col| {
        let encoder = col.encoder().clone();
        drop(col);
        ingest::ingest(
            state.db(),
            state.db().dir(),
            &encoder,
            &spec.collection,
            &opts,
            |r| {
                let mut j = job.lock().expect("lock");
                if j.0.rejects.len() < SHOWN_REJECTS {
                    j.0.rejects.push(r.clone().into());
                }
                Ok(())
            },
            |p| {
                let mut j = job.lock().expect("lock");
                let before = j.0.written;
                j.0.line = p.line;
                j.0.written = p.written;
                j.0.rejected = p.rejected;
                drop(j);
                state
                    .metrics
                    .upserted(&spec.collection, (p.written - before) as usize);
            },
        )
    });
    let mut j = job.lock().expect("lock");
    let seconds = j.1.elapsed().as_secs_f64();
    j.0.seconds = seconds;
    j.0.docs_per_sec = j.0.written as f64 / seconds.max(1e-9);
    match result {
        Ok(summary) => {
            j.0.line = j.0.total_lines.max(j.0.line);
            j.0.state = JobState::Done;
            tracing::info!(job = j.0.id, collection = %spec.collection, written = j.0.written, rejected = summary.rejected, "ingest done");
            j.0.summary = Some(summary.into());
        }
        Err(e) => {
            tracing::warn!(job = j.0.id, error = %e, "ingest failed");
            j.0.state = JobState::Failed;
            j.0.error = Some(format!(
                "{e}. {} documents were committed before it",
                j.0.written
            ));
        }
    }
    drop(j);
    // The file is consumed; what it held is in the store now.
    let _ = std::fs::remove_file(&spec.path);
}
