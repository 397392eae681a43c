//! Bulk ingest: a file into a collection, streamed, with reading + tokenizing, encoding and
//! writing overlapped on three threads joined by bounded channels (memory stays flat in the
//! file size), bad rows set aside with their line numbers, and resume after an interruption.
//!
//! Resume: after every committed batch (acknowledged by the store, durable unless relaxed),
//! the highest input line whose every record is committed is written atomically to
//! `<data>/ingest/<collection>/<key>.json`, keyed by the file's canonical path and size. A
//! re-run of the same file skips what is committed; a batch that was written but not yet
//! recorded when the process died is written again, which replaces each document by itself
//! (ids are the dedup key), so nothing is ever duplicated.
//!
//! A reindex may switch the collection's model while a file loads (an upload job on the
//! server): the store then refuses the batch encoded with the old model, and the ingest asks
//! for the collection's current encoder, encodes that batch again with it, and goes on with it.

pub(crate) mod delimited;
pub(crate) mod lines;
pub(crate) mod source;

use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::db::{Database, NewDocument};
use crate::error::{io_err, Result, UserError};
use crate::sync::MutexExt;
use crate::text::tokenize::Tokenized;
use crate::text::TextFormat;
use crate::Encoder;

pub use source::{Fields, Format, Record, Rejected};

/// What to ingest and how.
#[derive(Debug, Clone)]
pub struct IngestOptions {
    /// The input file.
    pub path: PathBuf,
    /// Its format.
    pub format: Format,
    /// Which fields make a document.
    pub fields: Fields,
    /// How the texts are written: for [`TextFormat::Html`], each document's stored text (and
    /// each context text) is the fragment's visible text (`kindred ingest --text-format html`).
    pub text_format: TextFormat,
    /// Documents per committed batch.
    pub batch: usize,
    /// Stop at the first bad row instead of setting it aside.
    pub strict: bool,
    /// Ignore any saved progress and start from the first line.
    pub restart: bool,
    /// Threads to encode on (the server's write pool); `None`: rayon's global pool.
    pub threads: Option<std::sync::Arc<rayon::ThreadPool>>,
    /// Longest text, in characters (Unicode scalar values), a document may have; a longer
    /// one is a rejected row. `kindred ingest --max-text-chars` (default 2000); the server
    /// passes its `limits.max_text_chars`, so a file loads as its documents would one by one.
    pub max_text_chars: usize,
    /// Set by another thread to stop the ingest after the batch being written (a server
    /// shutting down); what was committed stays, and the ingest answers an error saying so.
    pub cancel: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

/// Progress, reported after every committed batch.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// The input line up to which everything is committed.
    pub line: u64,
    /// Documents written in this run.
    pub written: u64,
    /// Rows rejected in this run.
    pub rejected: u64,
}

/// What an ingest did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// The input file.
    pub file: PathBuf,
    /// The collection.
    pub collection: String,
    /// Lines skipped because an earlier run committed them.
    pub resumed_after_line: u64,
    /// New documents.
    pub ingested: u64,
    /// Documents that replaced one with the same id.
    pub updated: u64,
    /// Rows set aside.
    pub rejected: u64,
    /// The first rejected rows (all of them are in the reject file).
    pub rejects: Vec<Rejected>,
    /// Seconds.
    pub seconds: f64,
    /// (ingested + updated) / seconds.
    pub docs_per_sec: f64,
}

/// How many rejected rows a [`Summary`] lists.
const LISTED_REJECTS: usize = 20;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct SavedState {
    file: PathBuf,
    size: u64,
    committed_line: u64,
}

fn state_path(data: &Path, collection: &str, file: &Path) -> Result<(PathBuf, PathBuf, u64)> {
    let canonical = file
        .canonicalize()
        .map_err(io_err(format!("opening {}", file.display())))?;
    let size = std::fs::metadata(&canonical)
        .map_err(io_err(format!("reading {}", file.display())))?
        .len();
    let key = Sha256::digest(format!("{}\0{size}", canonical.display()).as_bytes());
    let hex: String = key[..12].iter().map(|b| format!("{b:02x}")).collect();
    let folder = crate::store::names::child(&data.join("ingest"), collection)?;
    Ok((folder.join(format!("{hex}.json")), canonical, size))
}

fn save_state(path: &Path, state: &SavedState) -> Result<()> {
    let dir = path.parent().expect("state files live in a folder");
    std::fs::create_dir_all(dir).map_err(io_err(format!("creating {}", dir.display())))?;
    let tmp = path.with_extension("tmp");
    let bytes = serde_json::to_vec(state).expect("state serialises");
    {
        use std::io::Write;
        let mut f =
            std::fs::File::create(&tmp).map_err(io_err(format!("writing {}", tmp.display())))?;
        f.write_all(&bytes)
            .and_then(|_| f.sync_all())
            .map_err(io_err(format!("writing {}", tmp.display())))?;
    }
    std::fs::rename(&tmp, path).map_err(io_err(format!("replacing {}", path.display())))
}

/// The encoder of a collection's current model: asked once at the start, and again when the
/// store refuses a batch because a reindex switched the collection to another model.
pub type CurrentEncoder<'a> = &'a (dyn Fn() -> Result<Arc<Encoder>> + Sync);

/// A batch on its way from the reader to the writer.
struct Batch {
    /// The encoder whose tokenizer tokenized the batch and which encodes it.
    encoder: Arc<Encoder>,
    docs: Vec<(u64, NewDocument, Tokenized)>,
    rejected: Vec<Rejected>,
    /// Every record up to this line is in this batch or an earlier one.
    last_line: u64,
}

/// Stage 1: reads records after line `skip`, keeps the visible text of each (`text_format`:
/// of its text and its context texts),
/// validates documents (texts of at most `max_text_chars` characters, counted in the visible
/// text, as the server counts them) and tokenizes them, and sends them in batches of at least
/// `batch_size` documents, cut only at line boundaries (a QQP line yields two), each with the
/// encoder that is `latest` when it starts. Stops at the first read error (sent on) or when
/// the receiver is gone.
fn read_batches(
    records: impl Iterator<Item = Result<Record>>,
    skip: u64,
    batch_size: usize,
    max_text_chars: usize,
    text_format: TextFormat,
    latest: &Mutex<Arc<Encoder>>,
    to_encode: SyncSender<Result<Batch>>,
) {
    let empty = |last_line| Batch {
        encoder: latest.locked().clone(),
        docs: Vec::new(),
        rejected: Vec::new(),
        last_line,
    };
    let mut batch = empty(skip);
    let send = |b: Batch| to_encode.send(Ok(b)).is_ok();
    for rec in records {
        let rec = match rec {
            Ok(r) => r,
            Err(e) => {
                let _ = to_encode.send(Err(e));
                return;
            }
        };
        let line = rec.line();
        if line <= skip {
            continue;
        }
        if line > batch.last_line && batch.docs.len() >= batch_size {
            let last_line = batch.last_line;
            let full = std::mem::replace(&mut batch, empty(last_line));
            if !send(full) {
                return;
            }
        }
        batch.last_line = batch.last_line.max(line);
        match rec {
            Record::Bad(r) => batch.rejected.push(r),
            Record::Doc(line, doc) => {
                let doc = doc.in_format(text_format);
                if let Some(reason) = text_too_long(&doc, max_text_chars) {
                    batch.rejected.push(Rejected { line, reason });
                    continue;
                }
                batch.push(line, doc);
            }
        }
    }
    send(batch);
}

impl Batch {
    /// Adds document `doc` of input line `line`, tokenized by the batch's encoder, or sets it
    /// aside as a rejected row naming why.
    fn push(&mut self, line: u64, doc: NewDocument) {
        match check(&doc).and_then(|()| self.encoder.tokenizer().tokenize(&doc.text, 0)) {
            Ok(t) => self.docs.push((line, doc, t)),
            Err(e) => self.rejected.push(Rejected {
                line,
                reason: reason_of(&doc.id, &e),
            }),
        }
    }
}

/// Stage 2: encodes each batch with its encoder (on `threads` when given) and sends it on with
/// its vectors; stops after the first failure (sent on) or when the receiver is gone.
fn encode_batches(
    threads: Option<Arc<rayon::ThreadPool>>,
    batches: Receiver<Result<Batch>>,
    to_write: SyncSender<Result<(Batch, Vec<crate::Encoded>)>>,
) {
    for b in batches {
        let item = b.and_then(|b| {
            let tokens: Vec<&Tokenized> = b.docs.iter().map(|(_, _, t)| t).collect();
            let enc = encode_on(&threads, &b.encoder, &tokens)?;
            Ok((b, enc))
        });
        let failed = item.is_err();
        if to_write.send(item).is_err() || failed {
            return;
        }
    }
}

#[tracing::instrument(level = "debug", skip_all, fields(docs = tokens.len()))]
fn encode_on(
    threads: &Option<Arc<rayon::ThreadPool>>,
    encoder: &Encoder,
    tokens: &[&Tokenized],
) -> Result<Vec<crate::Encoded>> {
    match threads {
        Some(pool) => pool.install(|| encoder.encode_tokenized(tokens)),
        None => encoder.encode_tokenized(tokens),
    }
}

/// How many times one batch is encoded again after a reindex switched the collection's model
/// under it (each time needs another switch, i.e. another whole reindex, meanwhile).
const SWITCHES_PER_BATCH: usize = 3;

/// Ingests a file into collection `collection` (which must exist), encoding with `current()`,
/// which must give the encoder of the collection's model (and, after a reindex switched it,
/// the new one's). `on_reject` sees every bad row (the CLI writes them to the reject file);
/// `on_progress` is called after each committed batch.
pub fn ingest(
    db: &Database,
    data_dir: &Path,
    current: CurrentEncoder<'_>,
    collection: &str,
    opts: &IngestOptions,
    mut on_reject: impl FnMut(&Rejected) -> Result<()>,
    mut on_progress: impl FnMut(Progress),
) -> Result<Summary> {
    let latest = Mutex::new(current()?);
    db.check_model(collection, latest.locked().identity())?;
    check_options(opts)?;
    let (state_file, canonical, size) = state_path(data_dir, collection, &opts.path)?;
    let skip = committed_before(&state_file, &canonical, size, opts.restart);
    let records = source::records(&opts.path, opts.format, &opts.fields)?;
    let start = Instant::now();
    let mut summary = Summary {
        file: opts.path.clone(),
        collection: collection.into(),
        resumed_after_line: skip,
        ingested: 0,
        updated: 0,
        rejected: 0,
        rejects: Vec::new(),
        seconds: 0.0,
        docs_per_sec: 0.0,
    };
    let (batch_size, max_chars, text_format) = (opts.batch, opts.max_text_chars, opts.text_format);

    std::thread::scope(|scope| -> Result<()> {
        // Stage 1: read, parse, validate, tokenize. Stage 2: encode. Stage 3 (here): write.
        let (to_encode, encode_rx) = sync_channel::<Result<Batch>>(2);
        let latest = &latest;
        scope.spawn(move || {
            read_batches(
                records,
                skip,
                batch_size,
                max_chars,
                text_format,
                latest,
                to_encode,
            )
        });
        let (to_write, write_rx) = sync_channel::<Result<(Batch, Vec<crate::Encoded>)>>(2);
        let threads = opts.threads.clone();
        scope.spawn(move || encode_batches(threads, encode_rx, to_write));
        // Stage 3: write, in order, and record progress.
        let mut committed = skip;
        for item in write_rx {
            if opts
                .cancel
                .as_ref()
                .is_some_and(|c| c.load(std::sync::atomic::Ordering::Acquire))
            {
                return Err(stopped(committed, &opts.path, summary.written()));
            }
            let (mut batch, mut encoded) = item?;
            // --strict: commit what precedes the first bad row, then stop there.
            let first_bad = opts
                .strict
                .then(|| cut_at_first_bad(&mut batch, &mut encoded))
                .flatten();
            if !batch.docs.is_empty() {
                let threads = &opts.threads;
                let written = write_batch(
                    db, collection, &mut batch, encoded, current, latest, threads,
                )?;
                summary.count(&written);
            }
            for r in &batch.rejected {
                on_reject(r)?;
                summary.reject(r);
            }
            let state = SavedState {
                file: canonical.clone(),
                size,
                committed_line: batch.last_line,
            };
            save_state(&state_file, &state)?;
            committed = batch.last_line;
            on_progress(Progress {
                line: batch.last_line,
                written: summary.written(),
                rejected: summary.rejected,
            });
            if let Some(bad) = first_bad {
                return Err(stopped_at_bad_row(&bad, &opts.path, summary.written()));
            }
        }
        Ok(())
    })?;
    summary.seconds = start.elapsed().as_secs_f64();
    summary.docs_per_sec = summary.written() as f64 / summary.seconds.max(1e-9);
    Ok(summary)
}

impl Summary {
    /// Documents written (new or replacing one).
    fn written(&self) -> u64 {
        self.ingested + self.updated
    }

    fn count(&mut self, written: &[crate::store::Upserted]) {
        let replaced = written.iter().filter(|u| u.replaced.is_some()).count() as u64;
        self.updated += replaced;
        self.ingested += written.len() as u64 - replaced;
    }

    fn reject(&mut self, r: &Rejected) {
        self.rejected += 1;
        if self.rejects.len() < LISTED_REJECTS {
            self.rejects.push(r.clone());
        }
    }
}

/// Refuses options no ingest can run with.
fn check_options(opts: &IngestOptions) -> Result<()> {
    for (name, value) in [
        ("batch", opts.batch),
        ("max_text_chars", opts.max_text_chars),
    ] {
        if value == 0 {
            return Err(UserError::InvalidArgument {
                name,
                reason: "0; use at least 1".into(),
            }
            .into());
        }
    }
    Ok(())
}

/// The input line up to which an earlier run of the same file committed everything (0: none,
/// another file, or `restart`).
fn committed_before(state_file: &Path, canonical: &Path, size: u64, restart: bool) -> u64 {
    let saved: SavedState = match (restart, std::fs::read(state_file)) {
        (false, Ok(bytes)) => serde_json::from_slice(&bytes).unwrap_or_default(),
        _ => SavedState::default(),
    };
    if saved.file == canonical && saved.size == size {
        saved.committed_line
    } else {
        0
    }
}

/// `--strict`: keeps the documents of `batch` (and their vectors) before its first bad row,
/// ending the batch there; returns that row, if any.
fn cut_at_first_bad(batch: &mut Batch, encoded: &mut Vec<crate::Encoded>) -> Option<Rejected> {
    let bad = batch.rejected.iter().min_by_key(|r| r.line).cloned()?;
    let keep = batch
        .docs
        .iter()
        .take_while(|(l, _, _)| *l < bad.line)
        .count();
    batch.docs.truncate(keep);
    encoded.truncate(keep);
    batch.last_line = bad.line - 1;
    batch.rejected.clear();
    Some(bad)
}

/// The error of an ingest stopped (a server shutting down) after line `committed`.
fn stopped(committed: u64, path: &Path, written: u64) -> crate::Error {
    UserError::InvalidArgument {
        name: "ingest",
        reason: format!(
            "stopped before line {} of {} (the server is shutting down); {written} documents of this run are committed; load the file again to finish (committed documents are replaced by themselves)",
            committed + 1,
            path.display(),
        ),
    }
    .into()
}

/// The error of a `--strict` ingest stopped at its first bad row.
fn stopped_at_bad_row(bad: &Rejected, path: &Path, written: u64) -> crate::Error {
    UserError::InvalidArgument {
        name: "input row",
        reason: format!(
            "line {} of {}: {}. --strict stops at the first bad row; everything before it is committed ({written} documents in this run); fix the row and re-run to resume",
            bad.line,
            path.display(),
            bad.reason,
        ),
    }
    .into()
}

/// Stage 3's write of `batch` (`encoded` by its encoder). When the store refuses it because a
/// reindex switched the collection to another model meanwhile, the batch is tokenized and
/// encoded again with `current()` (a text the new tokenizer refuses becomes a rejected row of
/// the batch), written, and that encoder becomes the `latest` that later batches start with.
#[tracing::instrument(level = "debug", skip_all, fields(collection = collection, docs = batch.docs.len()))]
fn write_batch(
    db: &Database,
    collection: &str,
    batch: &mut Batch,
    mut encoded: Vec<crate::Encoded>,
    current: CurrentEncoder<'_>,
    latest: &Mutex<Arc<Encoder>>,
    threads: &Option<Arc<rayon::ThreadPool>>,
) -> Result<Vec<crate::store::Upserted>> {
    let mut switches = 0;
    loop {
        let docs = batch
            .docs
            .iter()
            .map(|(_, d, _)| d.clone())
            .zip(std::mem::take(&mut encoded))
            .collect();
        let refused = match db.upsert_encoded(collection, batch.encoder.identity(), docs) {
            Err(e @ crate::Error::User(UserError::ModelMismatch { .. })) => e,
            Ok(upserted) => {
                let written: Vec<(u64, &[String])> = upserted
                    .iter()
                    .zip(&batch.docs)
                    .map(|(u, (_, d, _))| (u.internal, d.context.as_slice()))
                    .collect();
                crate::engine::add_context_vectors(db, collection, &batch.encoder, &written);
                return Ok(upserted);
            }
            other => return other,
        };
        let fresh = current()?;
        if switches == SWITCHES_PER_BATCH
            || fresh.identity().fingerprint == batch.encoder.identity().fingerprint
        {
            return Err(refused);
        }
        switches += 1;
        tracing::info!(
            collection,
            model = %fresh.identity().id,
            "the collection was reindexed onto another model during the ingest; encoding with it from here"
        );
        *latest.locked() = fresh.clone();
        batch.encoder = fresh;
        for (line, doc, _) in std::mem::take(&mut batch.docs) {
            batch.push(line, doc);
        }
        if batch.docs.is_empty() {
            return Ok(Vec::new());
        }
        let tokens: Vec<&Tokenized> = batch.docs.iter().map(|(_, _, t)| t).collect();
        encoded = encode_on(threads, &batch.encoder, &tokens)?;
    }
}

/// Checks what the store would refuse, so one bad row never fails its batch.
fn check(doc: &NewDocument) -> Result<()> {
    crate::db::validate(doc)
}

/// Why a document's text is too long for `max` characters (`None`: it is not).
fn text_too_long(doc: &NewDocument, max: usize) -> Option<String> {
    // A character is at least a byte: short texts need no counting.
    if doc.text.len() <= max {
        return None;
    }
    let n = doc.text.chars().count();
    (n > max).then(|| {
        format!(
            "document {:?}: the text is {n} characters; the limit is {max} (--max-text-chars for kindred ingest, limits.max_text_chars for the server)",
            shown_id(&doc.id)
        )
    })
}

/// An id as a reason shows it: its first 40 characters.
fn shown_id(id: &str) -> String {
    id.chars().take(40).collect()
}

fn reason_of(id: &str, e: &crate::Error) -> String {
    let shown = shown_id(id);
    match e {
        crate::Error::User(UserError::EmptyText { .. }) => {
            format!("document {shown:?}: the text is empty")
        }
        crate::Error::User(UserError::NoContentTokens { .. }) => {
            format!("document {shown:?}: the text has no words (only special tokens)")
        }
        other => other.to_string(),
    }
}

/// Counts the lines of a file (for a progress bar's length), reading it once.
pub fn count_lines(path: &Path) -> Result<u64> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).map_err(io_err(format!("opening {}", path.display())))?;
    let mut buf = vec![0u8; 1 << 16];
    let mut n = 0u64;
    loop {
        let k = f
            .read(&mut buf)
            .map_err(io_err(format!("reading {}", path.display())))?;
        if k == 0 {
            return Ok(n);
        }
        n += buf[..k].iter().filter(|&&b| b == b'\n').count() as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(text: &str) -> NewDocument {
        NewDocument {
            id: "q1".into(),
            text: text.into(),
            metadata: serde_json::Value::Null,
            context: Vec::new(),
        }
    }

    #[test]
    fn a_text_over_max_text_chars_is_rejected_naming_count_limit_and_fix() {
        // Characters, not bytes: five two-byte characters are five.
        assert_eq!(
            text_too_long(&doc("\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}"), 5),
            None
        );
        assert_eq!(text_too_long(&doc("abcde"), 5), None);
        assert_eq!(
            text_too_long(&doc("abcd\u{e9}f"), 5).expect("too long"),
            "document \"q1\": the text is 6 characters; the limit is 5 (--max-text-chars for kindred ingest, limits.max_text_chars for the server)"
        );
    }
}
