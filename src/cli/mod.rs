//! Command-line interface: clap definitions and the glue from arguments to the library.
//! The only place (with main.rs) that uses anyhow, prints to stdout or draws progress bars.
//!
//! This module owns the top of the command line: [`Args`], the [`Command`] enum (one tuple
//! variant per command, carrying that command's own arguments), the dispatch in [`run`] and
//! the logging setup. Each command's arguments and behaviour live in its own module; the
//! options every command takes are [`Global`]'s (`global.rs`).

mod adapt;
mod calibrate;
mod clrcmd;
mod collection;
mod demo;
mod documents;
mod encode;
mod eval;
mod eval_alignment;
mod eval_compound;
mod eval_operators;
mod explain;
mod global;
mod ingest;
mod model;
mod ops;
mod progress;
mod reindex;
mod search;
mod serve;
mod shown;
mod train;
mod train_aligner;
mod train_context;
mod train_decoder;
mod train_operators;
mod tune;

use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};

pub use global::Global;

/// kindred: a duplicate-question search database with explainable reranking.
#[derive(Debug, Parser)]
#[command(name = "kindred", version, about, long_about = None)]
pub struct Args {
    #[command(flatten)]
    pub global: Global,
    /// More logging (-v info, -vv debug; default: warnings only, info for serve and demo);
    /// RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Manage the model: fetch the default one, show what is in use.
    #[command(subcommand)]
    Model(model::ModelCommand),
    /// Encode texts and print their wordpieces, sentence vector and intent.
    Encode(encode::EncodeArgs),
    /// Manage collections.
    #[command(subcommand)]
    Collection(collection::CollectionCommand),
    /// Upsert documents from a JSONL file ({"id", "text", "metadata"} per line); prints
    /// `ack ID` once each batch is acknowledged.
    Add(documents::AddArgs),
    /// Print a stored document as JSON.
    Get(documents::DocumentArgs),
    /// Delete a document.
    Delete(documents::DocumentArgs),
    /// Write every document of a collection as JSONL ({"id", "text", "metadata", "context"}
    /// per line): the format `add` and `ingest` read, e.g. to copy a collection to another
    /// data directory or to adapt a copy of it. While a server runs on the data directory,
    /// ask it instead: GET /v1/collections/{c}/export.
    Export(documents::ExportArgs),
    /// Search a collection: first stages (cosine, W2, lexical, or all fused), RCMD rerank,
    /// every stage's score and P(duplicate) per hit.
    Search(search::SearchArgs),
    /// A collection's size (bytes per document and per token vector) and index health.
    Stats(collection::StatsArgs),
    /// Explain why two texts match: RCMD score in both directions, word alignments, heatmap.
    Explain(explain::ExplainArgs),
    /// Operations on questions' vectors — fuse two, what one asks beyond another, compress a
    /// long one, decode one — read back as a collection's nearest stored questions.
    #[command(subcommand)]
    Ops(ops::OpsCommand),
    /// Bulk-load a file into a collection: streamed, encoded in overlapped batches, with a
    /// progress bar, a reject file for bad rows, and resume after an interruption.
    Ingest(ingest::IngestArgs),
    /// Measure kindred on labelled data: pair classification, retrieval, STS correlation.
    #[command(subcommand)]
    Eval(eval::EvalCommand),
    /// Fit the duplicate model (logistic regression over cosine, W2, RCMD both ways and
    /// lexical TF-IDF) on labelled pairs; report AUC and accuracy; save it.
    Calibrate(calibrate::CalibrateArgs),
    /// Train: CLRCMD fine-tuning, the intent head with the variational-siamese classifier,
    /// the sentence transition matrix. Each writes a model directory (--model picks the base).
    #[command(subcommand)]
    Train(train::TrainCommand),
    /// Re-encode a collection onto another model (--model DIR, e.g. a trained model
    /// directory): a new generation is built beside the current one, writes made meanwhile
    /// are caught up, then the collection switches to it. While a server runs on the data
    /// directory, ask it instead: POST /v1/collections/{c}/reindex (searches go on meanwhile).
    Reindex(reindex::ReindexArgs),
    /// Run the REST API server (see docs/api.md).
    ///
    /// Configuration layers: defaults, then the TOML file (--config / KINDRED_CONFIG), then
    /// environment variables, then flags. Keys come from the file (admin_key, read_key) or the
    /// environment (KINDRED_ADMIN_KEY, KINDRED_READ_KEY), never from flags (they would show in
    /// `ps`). Global options (--data, --model, --home, --device, --batch-size, --relaxed) apply.
    Serve(serve::ServeArgs),
    /// The main job on a fresh machine: load the bundled demo FAQ into collection `faq`,
    /// answer a few sample (or your) questions, then serve the API on it.
    Demo(demo::DemoArgs),
    /// Choose a collection's search defaults without labels: the configuration (first
    /// stages, fusion weights, rerank) that agrees best with grades harvested from its
    /// documents' context on a held-out slice; stored with the reason.
    Tune(tune::TuneArgs),
    /// Adapt kindred to a collection without labels, in one command: train context (learn
    /// from its documents' context), reindex onto the adapted model, tune its search defaults.
    Adapt(adapt::AdaptArgs),
}

impl Command {
    /// Whether the command runs a server (its log defaults to info, not warn).
    pub fn serves(&self) -> bool {
        matches!(self, Command::Serve(_) | Command::Demo(_))
    }
}

/// Runs a parsed command line.
pub fn run(args: Args) -> Result<ExitCode> {
    let g = &args.global;
    match &args.command {
        Command::Model(c) => model::run(g, c),
        Command::Encode(a) => encode::run(g, a),
        Command::Collection(c) => collection::run(g, c),
        Command::Add(a) => documents::add(g, a),
        Command::Get(a) => documents::get(g, a),
        Command::Delete(a) => documents::delete(g, a),
        Command::Export(a) => documents::export(g, a),
        Command::Search(a) => search::run(g, a),
        Command::Stats(a) => collection::stats(g, a),
        Command::Explain(a) => explain::run(g, a),
        Command::Ops(c) => ops::run(g, c),
        Command::Ingest(a) => ingest::run(g, a),
        Command::Eval(c) => eval::run(g, c),
        Command::Calibrate(a) => calibrate::run(g, a),
        Command::Train(c) => train::run(g, c),
        Command::Reindex(a) => reindex::run(g, a),
        Command::Serve(a) => serve::run(g, a),
        Command::Demo(a) => demo::run(g, a),
        Command::Tune(a) => tune::run(g, a),
        Command::Adapt(a) => adapt::run(g, a),
    }?;
    Ok(ExitCode::SUCCESS)
}

/// Installs the tracing subscriber: RUST_LOG if set, else warn/info/debug by -v count.
pub fn init_tracing(verbose: u8, serving: bool) {
    use std::io::IsTerminal;
    // A command prints its results; its log says only what went wrong unless asked (-v).
    // A server's log is its account of what it does.
    let default = match (verbose, serving) {
        (0, false) => "warn",
        (0, true) => "warn,kindred=info",
        (1, _) => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Colour only for a person at a terminal (https://no-color.org).
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    // At -vv, each closed span is a line too: its fields (collection, k, the stage timings)
    // and how long it ran.
    let spans = if verbose >= 2 {
        tracing_subscriber::fmt::format::FmtSpan::CLOSE
    } else {
        tracing_subscriber::fmt::format::FmtSpan::NONE
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_span_events(spans)
        .with_writer(std::io::stderr)
        .init();
}
