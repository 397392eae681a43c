//! File ingest over HTTP: an uploaded file is saved under `<data>/uploads/`, then loaded by
//! the same pipeline as `kindred ingest` ([`crate::ingest`]) on a background thread; its
//! progress is polled at `GET /v1/jobs/{id}`. Jobs live in memory: a restart forgets them
//! (what they committed stays committed; re-uploading the same file re-writes it as replaces),
//! and [`sweep`] removes the files a killed server's jobs left behind.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::Serialize;
use utoipa::ToSchema;

use super::api::{format_name, IngestSummary, Rejected};
use crate::ingest::{self, Fields, Format, IngestOptions};
use crate::sync::MutexExt;
use crate::text::TextFormat;

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
    /// Set at shutdown: every job stops after the batch it is writing.
    stopping: Arc<std::sync::atomic::AtomicBool>,
    /// The jobs' threads, joined at shutdown.
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

/// Rejected rows a job keeps to show.
const SHOWN_REJECTS: usize = 100;

/// Finished jobs kept to show (the oldest are forgotten first).
const KEPT_FINISHED: usize = 1000;

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
    /// How its texts are written.
    pub text_format: TextFormat,
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
        let jobs = self.jobs.locked();
        jobs.values().rev().map(|j| snapshot(j)).collect()
    }

    /// Jobs still loading.
    pub fn running(&self) -> usize {
        let jobs = self.jobs.locked();
        jobs.values()
            .filter(|j| j.locked().0.state == JobState::Running)
            .count()
    }

    /// Forgets the oldest finished jobs beyond [`KEPT_FINISHED`].
    fn prune(jobs: &mut BTreeMap<u64, Job>) {
        let finished: Vec<u64> = jobs
            .iter()
            .filter(|(_, j)| j.locked().0.state != JobState::Running)
            .map(|(id, _)| *id)
            .collect();
        for id in finished
            .iter()
            .take(finished.len().saturating_sub(KEPT_FINISHED))
        {
            jobs.remove(id);
        }
    }

    /// One job's status.
    pub fn get(&self, id: u64) -> Option<JobStatus> {
        let jobs = self.jobs.locked();
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
        {
            let mut jobs = self.jobs.locked();
            Self::prune(&mut jobs);
            jobs.insert(id, job.clone());
        }
        let stopping = self.stopping.clone();
        let thread = std::thread::Builder::new()
            .name(format!("kindred-ingest-{id}"))
            .spawn(move || run(spec, state, job, stopping))
            .expect("spawning an ingest thread");
        let mut threads = self.threads.locked();
        threads.retain(|t| !t.is_finished());
        threads.push(thread);
        status
    }

    /// At shutdown: stops every job after the batch it is writing (what is committed stays;
    /// its upload file is removed) and waits for their threads. Returns how many were stopped.
    pub fn stop_all(&self) -> usize {
        self.stopping
            .store(true, std::sync::atomic::Ordering::Release);
        let threads = std::mem::take(&mut *self.threads.locked());
        let running = threads.iter().filter(|t| !t.is_finished()).count();
        for t in threads {
            let _ = t.join();
        }
        running
    }
}

fn snapshot(job: &Mutex<(JobStatus, Instant)>) -> JobStatus {
    let (status, started) = &*job.locked();
    let mut s = status.clone();
    if s.state == JobState::Running {
        s.seconds = started.elapsed().as_secs_f64();
        s.docs_per_sec = s.written as f64 / s.seconds.max(1e-9);
    }
    s
}

fn run(
    spec: JobSpec,
    state: Arc<super::AppState>,
    job: Job,
    stopping: Arc<std::sync::atomic::AtomicBool>,
) {
    let opts = IngestOptions {
        path: spec.path.clone(),
        format: spec.format,
        text_format: spec.text_format,
        fields: spec.fields,
        batch: spec.batch,
        strict: false,
        restart: true,
        threads: Some(state.write_pool.clone()),
        max_text_chars: state.config.limits.max_text_chars,
        cancel: Some(stopping),
    };
    // The collection's encoder, looked up again when a reindex switches its model mid-file.
    let current = || Ok(state.engine.collection(&spec.collection)?.encoder().clone());
    let result = ingest::ingest(
        state.db(),
        state.db().dir(),
        &current,
        &spec.collection,
        &opts,
        |r| {
            let mut j = job.locked();
            if j.0.rejects.len() < SHOWN_REJECTS {
                j.0.rejects.push(r.clone().into());
            }
            Ok(())
        },
        |p| {
            let mut j = job.locked();
            let before = j.0.written;
            j.0.line = p.line;
            j.0.written = p.written;
            j.0.rejected = p.rejected;
            drop(j);
            state
                .metrics
                .upserted(&spec.collection, (p.written - before) as usize);
        },
    );
    let mut j = job.locked();
    let seconds = j.1.elapsed().as_secs_f64();
    j.0.seconds = seconds;
    j.0.docs_per_sec = j.0.written as f64 / seconds.max(1e-9);
    match result {
        Ok(summary) => {
            j.0.line = j.0.total_lines.max(j.0.line);
            j.0.state = JobState::Done;
            tracing::info!(job = j.0.id, collection = %spec.collection, written = j.0.written, rejected = summary.rejected, "ingest done");
            // The file is shown by the name it was uploaded under, never its server path.
            let mut summary: IngestSummary = summary.into();
            summary.file = PathBuf::from(&spec.name);
            j.0.summary = Some(summary);
        }
        Err(e) => {
            tracing::warn!(job = j.0.id, error = %e, "ingest failed");
            j.0.state = JobState::Failed;
            // What the client sees names the upload, never a server path; a server-side
            // failure's detail stays in the log.
            let what = match &e {
                crate::Error::User(_) => e
                    .to_string()
                    .replace(&spec.path.display().to_string(), &spec.name),
                crate::Error::Internal(_) => {
                    "the server failed while loading the file (see its log)".to_string()
                }
            };
            j.0.error = Some(format!(
                "{what}. {} documents were committed before it",
                j.0.written
            ));
        }
    }
    drop(j);
    // The file is consumed; what it held is in the store now.
    let _ = std::fs::remove_file(&spec.path);
}

/// Removes what jobs of an earlier server process left: their saved uploads
/// (`<data>/uploads/job-*`, which no job of this process will read) and the temporary files
/// of interrupted progress writes (`<data>/ingest/<collection>/*.tmp`). Returns how many.
pub fn sweep(data: &std::path::Path) -> usize {
    let mut removed = 0;
    let mine = format!("-{}", std::process::id());
    let mut remove = |path: PathBuf| match std::fs::remove_file(&path) {
        Ok(()) => removed += 1,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "could not remove a leftover file")
        }
    };
    let files = |dir: PathBuf| {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .collect::<Vec<_>>()
    };
    for path in files(data.join("uploads")) {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with("job-") && !name.ends_with(&mine) {
            remove(path);
        }
    }
    for dir in files(data.join("ingest")) {
        for path in files(dir) {
            if path.extension().is_some_and(|e| e == "tmp") {
                remove(path);
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_removes_what_dead_jobs_left_and_keeps_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("uploads")).unwrap();
        std::fs::create_dir_all(d.join("ingest/faq")).unwrap();
        let own = format!("job-1-{}", std::process::id());
        for f in [
            "uploads/job-3-999999",
            "ingest/faq/abc.json.tmp",
            "ingest/faq/abc.json",
        ] {
            std::fs::write(d.join(f), b"x").unwrap();
        }
        std::fs::write(d.join("uploads").join(&own), b"x").unwrap();
        assert_eq!(sweep(d), 2);
        assert!(d.join("ingest/faq/abc.json").exists(), "progress is kept");
        assert!(
            d.join("uploads").join(&own).exists(),
            "this process's job is kept"
        );
        assert!(!d.join("uploads/job-3-999999").exists());
        assert_eq!(sweep(&d.join("missing")), 0);
    }
}
