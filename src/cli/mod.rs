//! Command-line interface: clap definitions and the glue from arguments to the library.
//! The only place (with main.rs) that uses anyhow, prints to stdout or draws progress bars.

mod calibrate;
mod db;
mod eval;
mod explain;
mod ingest;
mod serve;
mod train;

use std::path::PathBuf;
use std::process::ExitCode;

use std::time::Instant;

use anyhow::{Context, Result};
use clap::{Args as ClapArgs, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use kindred::model::{self, ModelDir};
use kindred::search::Depths;
use kindred::{Encoded, Encoder, EncoderOptions, Precision};

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

impl Command {
    /// Whether the command runs a server (its log defaults to info, not warn).
    pub fn serves(&self) -> bool {
        matches!(self, Command::Serve(_) | Command::Demo { .. })
    }
}

/// Options every command takes.
#[derive(Debug, ClapArgs)]
pub struct Global {
    /// A local BERT-family model directory (config.json, model.safetensors, tokenizer.json).
    /// Default: the cached sentence-transformers/all-MiniLM-L6-v2, fetched on first use.
    #[arg(long, env = "KINDRED_MODEL", global = true, value_name = "DIR")]
    pub model: Option<PathBuf>,
    /// kindred's home: the model cache, and data unless --data says otherwise. Default: <user cache dir>/kindred.
    #[arg(long, env = "KINDRED_HOME", global = true, value_name = "DIR")]
    pub home: Option<PathBuf>,
    /// Where the encoder runs: cpu, cuda or cuda:N (cuda needs a build with --features cuda).
    /// [default: cpu]
    #[arg(long, env = "KINDRED_DEVICE", global = true)]
    pub device: Option<String>,
    /// Database directory. Default: $KINDRED_HOME/data.
    #[arg(long, env = "KINDRED_DATA", global = true, value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// Acknowledge writes before they are flushed to disk (faster; a crash can lose the last
    /// ~500 ms of writes). Default: every acknowledged write is on disk.
    #[arg(long, env = "KINDRED_RELAXED_DURABILITY", global = true)]
    pub relaxed: bool,
    /// Texts per encoder forward pass [default: 32].
    #[arg(long, env = "KINDRED_BATCH_SIZE", global = true)]
    pub batch_size: Option<usize>,
    /// Encoder arithmetic: int8 (weights and activations quantised; about twice as fast) or
    /// fp32 (the model exactly). A collection keeps the precision it was created with, and
    /// commands on it use that one unless this is given (a different one is refused).
    /// Training always runs in fp32. [default: int8]
    #[arg(long, env = "KINDRED_PRECISION", global = true)]
    pub precision: Option<Precision>,
}

impl Global {
    fn home(&self) -> PathBuf {
        self.home.clone().unwrap_or_else(model::default_home)
    }

    fn data_dir(&self) -> PathBuf {
        self.data
            .clone()
            .unwrap_or_else(|| self.home().join("data"))
    }

    fn batch_size(&self) -> usize {
        self.batch_size.unwrap_or(32)
    }

    fn database(&self) -> Result<kindred::db::Database> {
        db::open(&self.data_dir(), self.relaxed)
    }

    fn model_dir(&self) -> Result<ModelDir> {
        Ok(model::resolve(self.model.as_deref(), &self.home(), true)?)
    }

    fn encoder(&self) -> Result<Encoder> {
        self.load_encoder(&self.model_dir()?, self.precision())
    }

    /// --precision, else int8 on the CPU and fp32 on a GPU (where only fp32 runs).
    fn precision(&self) -> Precision {
        self.precision.unwrap_or(match self.device.as_deref() {
            Some(d) if d.starts_with("cuda") => Precision::Fp32,
            _ => Precision::Int8,
        })
    }

    /// The encoder head trainers read vectors from: fp32 unless --precision says otherwise.
    fn training_encoder(&self) -> Result<Encoder> {
        self.load_encoder(
            &self.model_dir()?,
            self.precision.unwrap_or(Precision::Fp32),
        )
    }

    fn load_encoder(&self, dir: &ModelDir, precision: Precision) -> Result<Encoder> {
        let options = EncoderOptions {
            device: self.device.as_deref().unwrap_or("cpu").parse()?,
            batch_size: self.batch_size(),
            precision,
            ..EncoderOptions::default()
        };
        Encoder::load(dir, options).with_context(|| format!("loading model {}", dir.path.display()))
    }

    /// The encoder for `collection`: --model when given, otherwise the model directory a
    /// reindex recorded for the collection, or the default model; at --precision when
    /// given, otherwise at the collection's own.
    /// The database with the encoder of `collection` ([`Global::collection_encoder`]).
    fn engine_for(&self, collection: &str) -> Result<kindred::engine::Engine> {
        let db = self.database()?;
        let encoder = self.collection_encoder(&db, collection)?;
        if self.model.is_some() {
            // An explicit --model must be the collection's: refused (naming `kindred
            // reindex`) rather than swapped for the model the collection records.
            db.check_model(collection, encoder.identity())?;
        }
        Ok(kindred::engine::Engine::with_encoder(
            std::sync::Arc::new(db),
            std::sync::Arc::new(encoder),
        ))
    }

    fn collection_encoder(&self, db: &kindred::db::Database, collection: &str) -> Result<Encoder> {
        let settings = db.store().settings(collection).ok();
        let precision = self
            .precision
            .or(settings.as_ref().map(|s| s.model.precision))
            .unwrap_or_else(|| self.precision());
        if self.model.is_none() {
            if let Some(path) = settings.and_then(|s| s.model_path) {
                let dir = ModelDir::open(std::path::Path::new(&path))?;
                return self.load_encoder(&dir, precision);
            }
        }
        self.load_encoder(&self.model_dir()?, precision)
    }
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Manage the model: fetch the default one, show what is in use.
    Model {
        #[command(subcommand)]
        command: ModelCommand,
    },
    /// Encode texts and print their wordpieces, sentence vector and intent.
    Encode {
        /// The texts.
        #[arg(required_unless_present = "file")]
        texts: Vec<String>,
        /// Read texts from FILE, one per line (blank lines skipped), after any given inline.
        #[arg(long, value_name = "FILE")]
        file: Option<PathBuf>,
        /// Print only timing as JSON ({"texts", "seconds", "texts_per_sec"}), with a progress bar.
        #[arg(long, conflicts_with = "json")]
        stats: bool,
        /// Print JSON instead of a summary.
        #[arg(long)]
        json: bool,
        /// Include the content token vectors in the JSON.
        #[arg(long)]
        token_vectors: bool,
    },
    /// Manage collections.
    Collection {
        #[command(subcommand)]
        command: CollectionCommand,
    },
    /// Upsert documents from a JSONL file ({"id", "text", "metadata"} per line); prints
    /// `ack ID` once each batch is acknowledged.
    Add {
        /// Target collection.
        #[arg(long, short)]
        collection: String,
        /// The JSONL file.
        file: PathBuf,
    },
    /// Print a stored document as JSON.
    Get {
        /// Collection.
        #[arg(long, short)]
        collection: String,
        /// External id.
        id: String,
    },
    /// Delete a document.
    Delete {
        /// Collection.
        #[arg(long, short)]
        collection: String,
        /// External id.
        id: String,
    },
    /// Search a collection: first stages (cosine, W2, lexical, or all fused), RCMD rerank,
    /// every stage's score and P(duplicate) per hit.
    Search {
        /// Collection.
        #[arg(long, short)]
        collection: String,
        /// The question.
        text: String,
        /// cosine | w2 | lexical | hybrid.
        #[arg(long, default_value = "hybrid")]
        mode: String,
        /// rcmd | none.
        #[arg(long, default_value = "rcmd")]
        rerank: String,
        /// How many hits.
        #[arg(short, default_value_t = 10)]
        k: usize,
        /// Print the whole result (with timings) as JSON.
        #[arg(long)]
        json: bool,
    },
    /// A collection's size (bytes per document and per token vector) and index health.
    Stats {
        /// Collection.
        collection: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Explain why two texts match: RCMD score in both directions, word alignments, heatmap.
    Explain {
        /// First text (a).
        a: String,
        /// Second text (b).
        b: String,
        /// Print the whole Explanation as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Bulk-load a file into a collection: streamed, encoded in overlapped batches, with a
    /// progress bar, a reject file for bad rows, and resume after an interruption.
    Ingest {
        /// The input file.
        file: PathBuf,
        /// Target collection.
        #[arg(long, short)]
        collection: String,
        /// tsv | csv | jsonl | qqp [default: from the file extension]. qqp reads Quora pair
        /// files (label, q1, q2, id) and ingests each distinct question once (id: q + 16 hex
        /// digits of the text's SHA-256).
        #[arg(long)]
        format: Option<String>,
        /// Column (tsv/csv) or key (jsonl) of the id.
        #[arg(long, default_value = "id")]
        id_field: String,
        /// Column or key of the text.
        #[arg(long, default_value = "text")]
        text_field: String,
        /// Columns or keys copied into metadata (comma-separated). jsonl default: the
        /// `metadata` object.
        #[arg(long, value_delimiter = ',')]
        meta_fields: Vec<String>,
        /// Where bad rows go (line<TAB>reason) [default: FILE.rejects.tsv].
        #[arg(long, value_name = "FILE")]
        reject_file: Option<PathBuf>,
        /// Stop at the first bad row (what precedes it stays committed).
        #[arg(long)]
        strict: bool,
        /// Ignore saved progress and read the file from the start.
        #[arg(long)]
        restart: bool,
        /// Create the collection if it does not exist.
        #[arg(long)]
        create: bool,
        /// Documents per committed batch.
        #[arg(long, default_value_t = 256)]
        batch: usize,
        /// Print the summary as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Measure kindred on labelled data: pair classification, retrieval, STS correlation.
    Eval {
        #[command(subcommand)]
        command: EvalCommand,
    },
    /// Fit the duplicate model (logistic regression over cosine, W2, RCMD both ways and
    /// lexical TF-IDF) on labelled pairs; report AUC and accuracy; save it.
    Calibrate {
        /// Labelled pair files: label<TAB>question1<TAB>question2[<TAB>id], label 0 or 1
        /// (the Quora layout, e.g. ../shared/data/qqp_bimpm/dev.tsv).
        #[arg(long, required = true, num_args = 1.., value_name = "FILE")]
        pairs: Vec<PathBuf>,
        /// Held-out pair files to report on (never fitted on).
        #[arg(long, num_args = 1.., value_name = "FILE")]
        test: Vec<PathBuf>,
        /// Save the fit as this collection's calibration (IDF weights from the collection).
        #[arg(long, short)]
        collection: Option<String>,
        /// Write the fitted model as JSON to FILE.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// Print the model and the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Train: CLRCMD fine-tuning, the intent head with the variational-siamese classifier,
    /// the sentence transition matrix. Each writes a model directory (--model picks the base).
    Train {
        #[command(subcommand)]
        command: train::TrainCommand,
    },
    /// Re-encode a collection onto another model (--model DIR, e.g. a trained model
    /// directory): a new generation is built beside the current one, writes made meanwhile
    /// are caught up, then the collection switches to it. While a server runs on the data
    /// directory, ask it instead: POST /v1/collections/{c}/reindex (searches go on meanwhile).
    Reindex {
        /// The collection.
        #[arg(long, short)]
        collection: String,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run the REST API server (see docs/api.md).
    ///
    /// Configuration layers: defaults, then the TOML file (--config / KINDRED_CONFIG), then
    /// environment variables, then flags. Keys come from the file (admin_key, read_key) or the
    /// environment (KINDRED_ADMIN_KEY, KINDRED_READ_KEY), never from flags (they would show in
    /// `ps`). Global options (--data, --model, --home, --device, --batch-size, --relaxed) apply.
    Serve(serve::ServeArgs),
    /// The main job on a fresh machine: load the bundled demo FAQ into collection `faq`,
    /// answer a few sample (or your) questions, then serve the API on it.
    Demo {
        /// Questions to look up (default: a few samples).
        queries: Vec<String>,
        /// How many matches to show per question.
        #[arg(short, default_value_t = 3)]
        k: usize,
        /// Answer the questions and exit instead of serving.
        #[arg(long)]
        no_serve: bool,
        #[command(flatten)]
        serve: serve::ServeArgs,
    },
}

/// `kindred eval …`
#[derive(Debug, Subcommand)]
pub enum EvalCommand {
    /// AUC and accuracy (threshold chosen on dev) of cosine, W2, RCMD (both directions and
    /// symmetric), lexical and the calibrated probability (fitted on dev).
    Pairs {
        /// Dev pair files (label<TAB>q1<TAB>q2[<TAB>id]).
        #[arg(long, required = true, num_args = 1..)]
        dev: Vec<PathBuf>,
        /// Test pair files.
        #[arg(long, required = true, num_args = 1..)]
        test: Vec<PathBuf>,
        /// Where the JSON report goes.
        #[arg(long, value_name = "FILE", default_value = "kindred-eval-pairs.json")]
        out: PathBuf,
    },
    /// Recall@1/10, MRR@10, nDCG@10 and latency of each first stage, with and without RCMD
    /// rerank, over a temporary collection of every distinct question in the files.
    Retrieval {
        /// Pair files; duplicate pairs give the queries (first question) and relevant
        /// documents (second).
        #[arg(long, required = true, num_args = 1..)]
        pairs: Vec<PathBuf>,
        /// Evaluate only the first N queries.
        #[arg(long)]
        max_queries: Option<usize>,
        /// Fused candidates reranked.
        #[arg(long, default_value_t = 100)]
        rerank_depth: usize,
        /// Candidates from the cosine HNSW.
        #[arg(long, default_value_t = Depths::default().cosine)]
        cosine_depth: usize,
        /// Candidates from the W2 HNSW.
        #[arg(long, default_value_t = Depths::default().w2)]
        w2_depth: usize,
        /// Candidates from the lexical index.
        #[arg(long, default_value_t = Depths::default().lexical)]
        lexical_depth: usize,
        /// Where the JSON report goes.
        #[arg(
            long,
            value_name = "FILE",
            default_value = "kindred-eval-retrieval.json"
        )]
        out: PathBuf,
    },
    /// Spearman ×100 of cosine, W2 and RCMD against gold similarity (STS-B or SICK files).
    Sts {
        /// STS-B (sts-test.csv) or SICK (SICK_test_annotated.txt) files.
        #[arg(long, required = true, num_args = 1..)]
        data: Vec<PathBuf>,
        /// Where the JSON report goes.
        #[arg(long, value_name = "FILE", default_value = "kindred-eval-sts.json")]
        out: PathBuf,
    },
}

/// `kindred collection …`
#[derive(Debug, Subcommand)]
pub enum CollectionCommand {
    /// Create a collection for the current model.
    Create {
        /// Name: 1-64 ASCII letters, digits, '_' or '-'.
        name: String,
    },
    /// List collections.
    List,
    /// Drop a collection and everything in it.
    Drop {
        /// Name.
        name: String,
    },
}

/// `kindred model …`
#[derive(Debug, Subcommand)]
pub enum ModelCommand {
    /// Make sure the model is available (fetch the default model into the cache if needed).
    Fetch,
    /// Print the model's id, fingerprint, dimension and maximum length.
    Info {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Runs a parsed command line.
pub fn run(args: Args) -> Result<ExitCode> {
    let g = &args.global;
    match &args.command {
        Command::Model {
            command: ModelCommand::Fetch,
        } => {
            let dir = g.model_dir()?;
            println!("model ready: {} ({})", dir.path.display(), dir.id);
        }
        Command::Model {
            command: ModelCommand::Info { json },
        } => {
            let dir = g.model_dir()?;
            let identity = dir.identity()?;
            if *json {
                let out = json!({ "path": dir.path, "identity": identity, "config": dir.config });
                println!("{}", serde_json::to_string_pretty(&out)?);
            } else {
                println!("path:        {}", dir.path.display());
                println!("id:          {}", identity.id);
                println!("fingerprint: {}", identity.fingerprint);
                println!("precision:   {} (--precision picks)", g.precision());
                println!("dim:         {}", identity.dim);
                println!("intent dim:  {}", identity.intent_dim());
                println!("layers:      {}", dir.config.num_hidden_layers);
                println!("max length:  {} wordpieces", identity.max_len);
            }
        }
        Command::Encode {
            texts,
            file,
            stats,
            json,
            token_vectors,
        } => {
            let mut texts = texts.clone();
            if let Some(file) = file {
                let raw = std::fs::read_to_string(file)
                    .with_context(|| format!("reading texts from {}", file.display()))?;
                texts.extend(
                    raw.lines()
                        .filter(|l| !l.trim().is_empty())
                        .map(String::from),
                );
            }
            let encoder = g.encoder()?;
            if *stats {
                return encode_stats(&encoder, &texts);
            }
            let encoded = encoder.encode(&texts)?;
            if *json {
                let items: Vec<_> = texts
                    .iter()
                    .zip(&encoded)
                    .map(|(t, e)| encoded_json(t, e, *token_vectors))
                    .collect();
                let out = json!({ "model": encoder.identity(), "texts": items });
                println!("{}", serde_json::to_string_pretty(&out)?);
            } else {
                for (t, e) in texts.iter().zip(&encoded) {
                    print_encoded(t, e);
                }
            }
        }
        Command::Collection { command } => {
            let db = g.database()?;
            match command {
                CollectionCommand::Create { name } => db::create(&db, &g.encoder()?, name)?,
                CollectionCommand::List => db::list(&db)?,
                CollectionCommand::Drop { name } => {
                    db.drop_collection(name)?;
                    println!("dropped collection {name}");
                }
            }
        }
        Command::Add { collection, file } => {
            let engine = g.engine_for(collection)?;
            db::add(&engine, collection, file, g.batch_size())?
        }
        Command::Get { collection, id } => db::get(&g.database()?, collection, id)?,
        Command::Delete { collection, id } => db::delete(&g.database()?, collection, id)?,
        Command::Search {
            collection,
            text,
            mode,
            rerank,
            k,
            json,
        } => {
            let params = kindred::search::SearchParams {
                k: *k,
                mode: mode.parse()?,
                rerank: rerank.parse()?,
                ..Default::default()
            };
            let engine = g.engine_for(collection)?;
            db::search(&engine, collection, text, &params, *json)?
        }
        Command::Reindex { collection, json } => {
            let db = g.database()?;
            let dir = g.model_dir()?;
            // The collection keeps its precision unless --precision moves it.
            let precision = match g.precision {
                Some(p) => p,
                None => db.store().settings(collection)?.model.precision,
            };
            let encoder = g.load_encoder(&dir, precision)?;
            db::reindex(db, encoder, &dir, collection, *json)?
        }
        Command::Stats { collection, json } => db::stats(&g.database()?, collection, *json)?,
        Command::Explain { a, b, json } => explain::run(&g.encoder()?, a, b, *json)?,
        Command::Train { command } => {
            let base = g.model_dir()?;
            let device = g.device.as_deref().unwrap_or("cpu").parse()?;
            match command {
                train::TrainCommand::Clrcmd(a) => train::clrcmd(&base, device, a)?,
                train::TrainCommand::Intent(a) => train::intent(&base, &g.training_encoder()?, a)?,
                train::TrainCommand::Transition(a) => {
                    train::transition(&base, &g.training_encoder()?, a)?
                }
                train::TrainCommand::Blend(a) => train::blend(&base, a)?,
            }
        }
        Command::Ingest {
            file,
            collection,
            format,
            id_field,
            text_field,
            meta_fields,
            reject_file,
            strict,
            restart,
            create,
            batch,
            json,
        } => {
            let db = g.database()?;
            let encoder = g.collection_encoder(&db, collection)?;
            let req = ingest::Request {
                file,
                collection,
                format: format.as_deref(),
                fields: kindred::ingest::Fields {
                    id: id_field.clone(),
                    text: text_field.clone(),
                    meta: meta_fields.clone(),
                },
                reject_file: reject_file.as_deref(),
                strict: *strict,
                restart: *restart,
                create: *create,
                batch: *batch,
                json: *json,
            };
            ingest::run(&db, &g.data_dir(), &encoder, req)?
        }
        Command::Eval { command } => {
            let encoder = g.encoder()?;
            match command {
                EvalCommand::Pairs { dev, test, out } => eval::pairs(&encoder, dev, test, out)?,
                EvalCommand::Retrieval {
                    pairs,
                    max_queries,
                    rerank_depth,
                    cosine_depth,
                    w2_depth,
                    lexical_depth,
                    out,
                } => {
                    let depths = Depths {
                        cosine: *cosine_depth,
                        w2: *w2_depth,
                        lexical: *lexical_depth,
                    };
                    eval::retrieval(&encoder, pairs, *max_queries, *rerank_depth, depths, out)?
                }
                EvalCommand::Sts { data, out } => eval::sts(&encoder, data, out)?,
            }
        }
        Command::Calibrate {
            pairs,
            test,
            collection,
            out,
            json,
        } => {
            let db = match collection {
                Some(_) => Some(g.database()?),
                None => None,
            };
            // A collection's calibration is fitted on its own model and precision.
            let encoder = match (&db, collection) {
                (Some(db), Some(c)) => g.collection_encoder(db, c)?,
                _ => g.encoder()?,
            };
            let req = calibrate::Request {
                pairs,
                test,
                collection: collection.as_deref(),
                out: out.as_ref(),
                json: *json,
            };
            calibrate::run(&encoder, db.as_ref(), req)?
        }
        Command::Serve(a) => {
            let config = serve::config(g, a)?;
            let (encoder, db) = serve::open(&config)?;
            serve::serve(config, kindred::engine::Engine::with_encoder(db, encoder))?
        }
        Command::Demo {
            queries,
            k,
            no_serve,
            serve: a,
        } => serve::demo(serve::config(g, a)?, queries, *k, *no_serve)?,
    }
    Ok(ExitCode::SUCCESS)
}

fn encode_stats(encoder: &Encoder, texts: &[String]) -> Result<ExitCode> {
    let bar = ProgressBar::new(texts.len() as u64).with_style(ProgressStyle::with_template(
        "encoding {bar:30} {pos}/{len} {per_sec} eta {eta}",
    )?);
    let start = Instant::now();
    // Like sentence-transformers' encode: all texts in, sorted by length, cut into batches.
    encoder.encode_with_progress(texts, |n| bar.inc(n as u64))?;
    let seconds = start.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let out = json!({
        "texts": texts.len(),
        "batch_size": encoder.options().batch_size,
        "seconds": seconds,
        "texts_per_sec": texts.len() as f64 / seconds,
    });
    println!("{out}");
    Ok(ExitCode::SUCCESS)
}

fn encoded_json(text: &str, e: &Encoded, with_token_vectors: bool) -> serde_json::Value {
    let mut v = json!({
        "text": text,
        "tokens": e.tokens,
        "truncated": e.truncated,
        "sentence": e.sentence,
        "intent": e.intent,
    });
    if with_token_vectors {
        let rows: Vec<&[f32]> = (0..e.tokens.len()).map(|i| e.token_vector(i)).collect();
        v["token_vectors"] = json!(rows);
    }
    v
}

fn print_encoded(text: &str, e: &Encoded) {
    println!("{text:?}");
    let pieces: Vec<String> = e
        .tokens
        .iter()
        .map(|t| format!("{}[{}..{}]", t.text, t.start, t.end))
        .collect();
    println!(
        "  tokens ({}{}): {}",
        e.tokens.len(),
        if e.truncated { ", truncated" } else { "" },
        pieces.join(" ")
    );
    let head: Vec<String> = e
        .sentence
        .iter()
        .take(6)
        .map(|x| format!("{x:+.4}"))
        .collect();
    println!("  sentence (d={}): [{} …]", e.dim(), head.join(", "));
    let mean_sigma = e.intent.sigma.iter().sum::<f32>() / e.intent.sigma.len() as f32;
    println!(
        "  intent: ‖μ‖={:.4}, mean σ={mean_sigma:.4}",
        norm(&e.intent.mu)
    );
}

fn norm(v: &[f32]) -> f32 {
    v.iter().map(|x| x * x).sum::<f32>().sqrt()
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
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .init();
}
