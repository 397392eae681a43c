//! `kindred ingest`: a file into a collection with a progress bar (rate, ETA), a reject file
//! and a summary; re-running after an interruption resumes (see `kindred::ingest`).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};

use kindred::db::Database;
use kindred::ingest::{self, Fields, Format, IngestOptions};
use kindred::store::CollectionSettings;
use kindred::Encoder;

/// Parsed `kindred ingest` arguments.
pub struct Request<'a> {
    pub file: &'a Path,
    pub collection: &'a str,
    pub format: Option<&'a str>,
    pub fields: Fields,
    pub reject_file: Option<&'a Path>,
    pub strict: bool,
    pub restart: bool,
    pub create: bool,
    pub batch: usize,
    pub json: bool,
}

pub fn run(db: &Database, data_dir: &Path, encoder: &Encoder, req: Request<'_>) -> Result<()> {
    let format = match req.format {
        Some(f) => f.parse::<Format>()?,
        None => Format::from_path(req.file)?,
    };
    if req.create && !db.collections()?.iter().any(|(n, _)| n == req.collection) {
        db.create_collection(
            req.collection,
            &CollectionSettings::for_model(encoder.identity().clone()),
        )?;
        eprintln!("created collection {}", req.collection);
    }
    let reject_path: PathBuf = req
        .reject_file
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(format!("{}.rejects.tsv", req.file.display())));
    let mut rejects: Option<std::fs::File> = None;
    let lines = ingest::count_lines(req.file)?;
    let bar = ProgressBar::new(lines).with_style(ProgressStyle::with_template(
        "{spinner} {elapsed_precise} [{bar:30}] line {pos}/{len} · {msg} · eta {eta}",
    )?);
    let start = std::time::Instant::now();
    let opts = IngestOptions {
        path: req.file.to_path_buf(),
        format,
        fields: req.fields,
        batch: req.batch,
        strict: req.strict,
        restart: req.restart,
        threads: None,
    };
    let summary = ingest::ingest(
        db,
        data_dir,
        encoder,
        req.collection,
        &opts,
        |r| {
            let f = match &mut rejects {
                Some(f) => f,
                None => rejects.insert(
                    std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(&reject_path)
                        .map_err(|e| {
                            kindred::InternalError::io(
                                format!("opening {}", reject_path.display()),
                                e,
                            )
                        })?,
                ),
            };
            writeln!(f, "{}\t{}", r.line, r.reason.replace(['\t', '\n'], " "))
                .map_err(|e| kindred::InternalError::io("writing the reject file", e).into())
        },
        |p| {
            bar.set_position(p.line);
            let secs = start.elapsed().as_secs_f64().max(1e-9);
            bar.set_message(format!(
                "{} docs ({:.0}/s), {} rejected",
                p.written,
                p.written as f64 / secs,
                p.rejected
            ));
        },
    )
    .with_context(|| format!("ingesting {} into {}", req.file.display(), req.collection));
    bar.finish_and_clear();
    let summary = summary?;
    if req.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
        return Ok(());
    }
    if summary.resumed_after_line > 0 {
        println!(
            "resumed after line {} (committed by an earlier run)",
            summary.resumed_after_line
        );
    }
    println!(
        "ingested {} new, updated {}, rejected {} in {:.1} s ({:.0} documents/s)",
        summary.ingested, summary.updated, summary.rejected, summary.seconds, summary.docs_per_sec
    );
    for r in &summary.rejects {
        println!("  line {}: {}", r.line, r.reason);
    }
    if summary.rejected > 0 {
        println!("all rejected rows: {}", reject_path.display());
    }
    Ok(())
}
