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
//! `types` holds the plain data every layer shares. The store, indexes, scoring, search and
//! server layers build on these.
#![warn(missing_docs)]

pub mod db;
pub mod encoder;
pub mod error;
pub mod eval;
pub mod index;
pub mod ingest;
pub mod model;
pub mod review;
pub mod score;
pub mod search;
pub mod server;
pub mod store;
pub mod text;
pub mod train;
pub mod types;

pub use encoder::{DeviceKind, Encoder, EncoderOptions};
pub use error::{Error, InternalError, Result, UserError};
pub use model::{ModelDir, ModelIdentity};
pub use types::{Encoded, Gaussian, Precision, Token};
