//! The options every command takes (`--model`, `--home`, `--device`, `--data`, `--backend`,
//! `--relaxed`, `--batch-size`, `--precision`) and what commands build from them: the model directory,
//! encoders at the right precision, the database (index rebuilds drawn as a progress bar) and
//! an engine for one collection.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args as ClapArgs;
use indicatif::ProgressBar;

use kindred::db::{Database, Location, MilvusSettings};
use kindred::engine::Engine;
use kindred::model::{self, ModelDir};
use kindred::store::Durability;
use kindred::{Encoder, EncoderOptions, Precision};

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
    /// Where collections live: `embedded` (in --data) or `milvus://HOST:PORT` (a Milvus
    /// server or cluster; --data then holds only this node's review queue and jobs).
    /// [default: embedded]
    #[arg(long, env = "KINDRED_BACKEND", global = true)]
    pub backend: Option<Location>,
}

impl Global {
    pub fn home(&self) -> PathBuf {
        self.home.clone().unwrap_or_else(model::default_home)
    }

    pub fn data_dir(&self) -> PathBuf {
        self.data
            .clone()
            .unwrap_or_else(|| self.home().join("data"))
    }

    pub fn batch_size(&self) -> usize {
        self.batch_size.unwrap_or(32)
    }

    pub fn database(&self) -> Result<Database> {
        open_database(
            &self.data_dir(),
            self.relaxed,
            &self.backend.clone().unwrap_or_default(),
        )
    }

    pub fn model_dir(&self) -> Result<ModelDir> {
        Ok(model::resolve(self.model.as_deref(), &self.home(), true)?)
    }

    pub fn encoder(&self) -> Result<Encoder> {
        self.load_encoder(&self.model_dir()?, self.precision())
    }

    /// --precision, else int8 on the CPU and fp32 on a GPU (where only fp32 runs).
    pub fn precision(&self) -> Precision {
        self.precision.unwrap_or(match self.device.as_deref() {
            Some(d) if d.starts_with("cuda") => Precision::Fp32,
            _ => Precision::Int8,
        })
    }

    /// The encoder head trainers read vectors from: fp32 unless --precision says otherwise.
    pub fn training_encoder(&self) -> Result<Encoder> {
        self.load_encoder(
            &self.model_dir()?,
            self.precision.unwrap_or(Precision::Fp32),
        )
    }

    pub fn load_encoder(&self, dir: &ModelDir, precision: Precision) -> Result<Encoder> {
        let options = self.encoder_options(precision)?;
        Encoder::load(dir, options).with_context(|| format!("loading model {}", dir.path.display()))
    }

    /// How encoders are loaded: --device, --batch-size, `precision`, and the kernels and
    /// padding of KINDRED_KERNELS and KINDRED_PAD_MULTIPLE (the library reads no environment
    /// itself).
    pub fn encoder_options(&self, precision: Precision) -> Result<EncoderOptions> {
        Ok(EncoderOptions {
            device: self.device.as_deref().unwrap_or("cpu").parse()?,
            batch_size: self.batch_size(),
            precision,
            ..EncoderOptions::default().with_vars(|k| std::env::var(k).ok())
        })
    }

    /// The database with the encoder of `collection` ([`Global::collection_encoder`]).
    pub fn engine_for(&self, collection: &str) -> Result<Engine> {
        let db = self.database()?;
        let encoder = self.collection_encoder(&db, collection)?;
        if self.model.is_some() {
            // An explicit --model must be the collection's: refused (naming `kindred
            // reindex`) rather than swapped for the model the collection records.
            db.check_model(collection, encoder.identity())?;
        }
        Ok(Engine::with_encoder(Arc::new(db), Arc::new(encoder)))
    }

    /// The encoder for `collection`: --model when given, otherwise the model directory a
    /// reindex recorded for the collection, or the default model; at --precision when
    /// given, otherwise at the collection's own.
    pub fn collection_encoder(&self, db: &Database, collection: &str) -> Result<Encoder> {
        let settings = db.settings(collection).ok();
        let precision = self
            .precision
            .or(settings.as_ref().map(|s| s.model.precision))
            .unwrap_or_else(|| self.precision());
        self.load_encoder(&self.collection_model_dir(db, collection)?, precision)
    }

    /// The model directory of `collection`: --model when given, otherwise the one a reindex
    /// recorded for the collection, or the default model.
    pub fn collection_model_dir(&self, db: &Database, collection: &str) -> Result<ModelDir> {
        if self.model.is_none() {
            if let Ok(settings) = db.settings(collection) {
                if let Some(path) = &settings.model_path {
                    return Ok(model::open_recorded(
                        collection,
                        &settings.model,
                        Path::new(path),
                    )?);
                }
            }
        }
        self.model_dir()
    }
}

/// Opens the database, drawing index rebuilds as a progress bar.
pub fn open_database(dir: &Path, relaxed: bool, backend: &Location) -> Result<Database> {
    let durability = if relaxed {
        Durability::Relaxed
    } else {
        Durability::Flush
    };
    let bar = ProgressBar::hidden();
    bar.set_style(super::progress::style());
    let progress = Arc::new(move |what: &str, done: u64, total: u64| {
        if bar.is_hidden() && total > 0 {
            bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
        }
        bar.set_message(what.to_string());
        bar.set_length(total);
        bar.set_position(done);
        if done >= total {
            bar.finish_and_clear();
        }
    });
    // The Milvus node settings come from the environment (the library reads none itself).
    let milvus = MilvusSettings::from_vars(|k| std::env::var(k).ok())?;
    Database::open_backend(dir, durability, backend, &milvus)
        .with_context(|| match backend {
            Location::Embedded => format!("opening the database in {}", dir.display()),
            Location::Milvus(url) => format!("opening the Milvus backend at {url}"),
        })
        .map(|db| db.with_progress(progress))
}

/// `--weights`: uniform or idf.
pub(super) fn parse_weighting(s: &str) -> std::result::Result<kindred::search::Weighting, String> {
    s.parse().map_err(|e: kindred::Error| e.to_string())
}
