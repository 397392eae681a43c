//! `kindred ingest`: a file into a collection with a progress bar (rate, ETA), a reject file
//! and a summary; re-running after an interruption resumes (see `kindred::ingest`).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args as ClapArgs;
use indicatif::ProgressBar;

use kindred::ingest::{self, Fields, Format, IngestOptions, Rejected, Summary};
use kindred::store::CollectionSettings;
use kindred::text::TextFormat;

use super::Global;

#[derive(Debug, ClapArgs)]
pub struct IngestArgs {
    /// The input file.
    pub file: PathBuf,
    /// Target collection.
    #[arg(long, short)]
    pub collection: String,
    /// tsv | csv | jsonl | qqp [default: from the file extension]. qqp reads Quora pair
    /// files (label, q1, q2, id) and ingests each distinct question once (id: q + 16 hex
    /// digits of the text's SHA-256).
    #[arg(long)]
    pub format: Option<String>,
    /// How the texts are written: text (stored as given) or html (each text is an HTML
    /// fragment; its visible text is stored: tags, scripts, styles and comments removed).
    /// Either way, character references (&eacute; &#39;) are decoded when texts are
    /// tokenized.
    #[arg(long, value_name = "FORMAT", default_value = "text")]
    pub text_format: String,
    /// Column (tsv/csv) or key (jsonl) of the id.
    #[arg(long, default_value = "id")]
    pub id_field: String,
    /// Column or key of the text.
    #[arg(long, default_value = "text")]
    pub text_field: String,
    /// Columns or keys copied into metadata (comma-separated). jsonl default: the
    /// `metadata` object.
    #[arg(long, value_delimiter = ',')]
    pub meta_fields: Vec<String>,
    /// Columns or keys whose texts are the document's context: stored and returned with it,
    /// never encoded or searched (comma-separated or repeated; `--context-column` works too).
    /// tsv/csv: each named column's non-empty cell is one context text. jsonl: each key's
    /// value is a string or a list of strings [jsonl default: the `context` key].
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "NAMES",
        visible_alias = "context-column"
    )]
    pub context_fields: Vec<String>,
    /// Where bad rows go (line<TAB>reason) [default: FILE.rejects.tsv].
    #[arg(long, value_name = "FILE")]
    pub reject_file: Option<PathBuf>,
    /// Stop at the first bad row (what precedes it stays committed).
    #[arg(long)]
    pub strict: bool,
    /// Ignore saved progress and read the file from the start.
    #[arg(long)]
    pub restart: bool,
    /// Create the collection if it does not exist.
    #[arg(long)]
    pub create: bool,
    /// Documents per committed batch.
    #[arg(long, default_value_t = 256)]
    pub batch: usize,
    /// Longest text in characters; a longer one is a rejected row. The default is the
    /// server's limits.max_text_chars default, so what loads here can also be sent to it.
    #[arg(long, value_name = "N", default_value_t = kindred::server::config::Limits::default().max_text_chars)]
    pub max_text_chars: usize,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(g: &Global, args: &IngestArgs) -> Result<()> {
    let db = g.database()?;
    // The collection's own model and precision (a new one's: --model and --precision).
    let encoder = g.collection_encoder(&db, &args.collection)?;
    let format = match &args.format {
        Some(f) => f.parse::<Format>()?,
        None => Format::from_path(&args.file)?,
    };
    let text_format: TextFormat = args.text_format.parse()?;
    // Read before anything is created: a file that cannot be opened leaves no empty collection.
    let lines = ingest::count_lines(&args.file)?;
    if args.create && !db.collections()?.iter().any(|(n, _)| *n == args.collection) {
        db.create_collection(
            &args.collection,
            &CollectionSettings::for_model(encoder.identity().clone()),
        )?;
        eprintln!("created collection {}", args.collection);
    }
    let reject_path: PathBuf = args
        .reject_file
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("{}.rejects.tsv", args.file.display())));
    let mut rejects = RejectFile {
        path: reject_path.clone(),
        file: None,
    };
    let bar = super::progress::bar(lines, "ingesting (lines)");
    let start = std::time::Instant::now();
    let opts = options(args, format, text_format);
    // The CLI holds the store alone: no reindex can switch the model under it.
    let encoder = std::sync::Arc::new(encoder);
    let summary = ingest::ingest(
        &db,
        &g.data_dir(),
        &|| Ok(encoder.clone()),
        &args.collection,
        &opts,
        |r| rejects.write(r),
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
    .with_context(|| format!("ingesting {} into {}", args.file.display(), args.collection));
    bar.finish_and_clear();
    let summary = summary?;
    save_indexes(&db);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print_summary(&summary, &reject_path);
    }
    Ok(())
}

/// The library's ingest options from the command line's.
fn options(args: &IngestArgs, format: Format, text_format: TextFormat) -> IngestOptions {
    IngestOptions {
        path: args.file.clone(),
        format,
        text_format,
        fields: Fields {
            id: args.id_field.clone(),
            text: args.text_field.clone(),
            meta: args.meta_fields.clone(),
            context: args.context_fields.clone(),
        },
        batch: args.batch,
        strict: args.strict,
        restart: args.restart,
        threads: None,
        max_text_chars: args.max_text_chars,
        cancel: None,
    }
}

/// The reject file (`line<TAB>reason` per rejected row), created at the first reject.
struct RejectFile {
    path: PathBuf,
    file: Option<std::fs::File>,
}

impl RejectFile {
    fn write(&mut self, r: &Rejected) -> kindred::Result<()> {
        let f = match &mut self.file {
            Some(f) => f,
            None => self.file.insert(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&self.path)
                    .map_err(|e| {
                        kindred::InternalError::io(format!("opening {}", self.path.display()), e)
                    })?,
            ),
        };
        writeln!(f, "{}\t{}", r.line, r.reason.replace(['\t', '\n'], " "))
            .map_err(|e| kindred::InternalError::io("writing the reject file", e).into())
    }
}

/// The summary for a person: counts, speed, the first rejects and where the rest are.
fn print_summary(summary: &Summary, reject_path: &std::path::Path) {
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
}

/// Saves the vector indexes now, under a spinner, rather than silently when the database
/// closes (about 25 s for 1M documents on 2 cores). A failed save loses nothing: the store
/// has every document, and the next open rebuilds the indexes from it.
fn save_indexes(db: &kindred::Database) {
    let spinner = ProgressBar::new_spinner().with_message("saving the vector indexes");
    spinner.enable_steady_tick(std::time::Duration::from_millis(200));
    if let Err(e) = db.checkpoint() {
        eprintln!("warning: could not save the vector indexes ({e}); the next start rebuilds them from the store");
    }
    spinner.finish_and_clear();
}
