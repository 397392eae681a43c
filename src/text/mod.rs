//! Text processing that needs no model weights: wordpiece tokenization with offsets.
//! Knows nothing of burn, sled or indexes.

pub mod tokenize;

pub use tokenize::{TextTokenizer, Tokenized};
