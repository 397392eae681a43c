//! Cosine similarity and the dot-product kernel every other score is built on: the one
//! implementation in [`crate::math`], under the names the scores have always used.

pub use crate::math::{cosine, dot, l2_normalize};
