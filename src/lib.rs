//! kindred: a duplicate-question search database with explainable reranking.
//!
//! Data flows one way (design.md §2):
//!
//! ```text
//! text ─► text::TextTokenizer (wordpieces + char offsets)
//!      ─► encoder::Encoder (BERT in burn) ─► contextual token vectors
//!             ├─ sentence vector (mean pool incl. [CLS]/[SEP], L2-normalised)
//!             ├─ Gaussian intent N(μ, diag σ²) (moment-matched)
//!             └─ content token vectors (L2-normalised)
//! ```
//!
//! `score` is the pure math on those vectors (cosine, W2, RCMD with alignments and
//! explanations). `model` finds and verifies model directories; `encoder` turns text into [`Encoded`];
//! `types` holds the plain data every layer shares. Above them: `store` (sled), `index` (HNSW,
//! BM25), `db` (the [`Database`]), `search` (the pipeline steps) and `engine` (the [`Engine`]
//! and its per-request [`Collection`] handle, the one place that encodes). ARCHITECTURE.md
//! draws the layers.
//!
//! ```no_run
//! use std::sync::Arc;
//! # fn main() -> kindred::Result<()> {
//! let model = kindred::model::resolve(None, &kindred::model::default_home(), true)?;
//! let encoder = Arc::new(kindred::Encoder::load(&model, Default::default())?);
//! let db = Arc::new(kindred::Database::open("data".as_ref(), Default::default())?);
//! let engine = kindred::Engine::with_encoder(db, encoder);
//! let found = engine.collection("faq")?.search("forgot my password", &Default::default())?;
//! println!("{} hits", found.hits.len());
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

pub mod db;
pub mod encoder;
pub mod engine;
pub mod error;
pub mod eval;
#[cfg(any(test, feature = "test-support"))]
pub mod fuzzing;
pub mod index;
pub mod ingest;
pub mod math;
pub mod model;
pub mod review;
pub mod score;
pub mod search;
#[cfg(feature = "server")]
pub mod server;
pub mod store;
pub(crate) mod sync;
pub mod text;
#[cfg(feature = "train")]
pub mod train;
pub mod types;

pub use db::{Database, NewDocument};
pub use encoder::{DeviceKind, Encoder, EncoderOptions};
pub use engine::{Collection, Engine};
pub use error::{Error, InternalError, Result, UserError};
pub use model::{ModelDir, ModelIdentity};
pub use search::{DuplicateVerdict, Hit, Mode, Rerank, SearchOutcome, SearchParams};
pub use store::Durability;
pub use types::{Encoded, Gaussian, Precision, Token};
