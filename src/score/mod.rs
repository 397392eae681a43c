//! The scoring math, pure: slices in, numbers and an [`Explanation`] out. No I/O, no burn, no
//! sled, no async — everything here is a function of its arguments, which is what lets the
//! property tests pin it down.
//!
//! - [`mod@cosine`]: cosine similarity and dot products of token rows;
//! - [`wasserstein`]: the 2-Wasserstein distance between diagonal Gaussian intents;
//! - [`mod@rcmd`]: relaxed optimal transport (RCMD) between two sentences' token vectors, sparse,
//!   with optional IDF weights, its transport plans and token-pair contributions;
//! - [`words`]: wordpieces merged into words and word-level contributions;
//! - [`weights`]: per-token IDF weights for weighted RCMD (a wordpiece weighs what its word does);
//! - [`align`]: phrase alignment — chunk pairs with a relation type and a 0–5 score;
//! - [`mod@explain`]: the serialisable [`Explanation`] a UI renders;
//! - [`rerank`]: the scores-only fast path over many candidates, on f32 or int8 token vectors;
//! - [`features`], [`calibration`]: a pair's scores and the logistic model that turns them
//!   into a calibrated P(duplicate);
//! - [`context`]: the context channel — a candidate's context vector against the query,
//!   standardised and added to its question's cosine;
//! - [`stats`]: pair-classification and correlation metrics (AUC, accuracy, thresholds, Spearman).

pub mod align;
pub mod calibration;
pub mod context;
pub mod cosine;
pub mod explain;
pub mod features;
pub mod quant;
pub mod rcmd;
pub mod rerank;
pub mod stats;
pub mod wasserstein;
pub mod weights;
pub mod words;

pub use cosine::{cosine, dot};
pub use explain::{explain, Explanation};
pub use rcmd::{rcmd, Rcmd, Tokens, Weights};
pub use wasserstein::{w2, w2_squared};
