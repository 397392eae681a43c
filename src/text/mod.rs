//! Text processing that needs no model weights: wordpiece tokenization with offsets, and the
//! word uni- and bigram terms the lexical index and the lexical similarity count.
//! Knows nothing of burn, sled or indexes.

pub mod chunk;
pub mod tokenize;

pub use tokenize::{TextTokenizer, Tokenized};

/// Lower-cased word unigrams and bigrams ("how", "how do", …) of a text.
pub fn terms(text: &str) -> Vec<String> {
    let words: Vec<String> = text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    let bigrams = words.windows(2).map(|w| format!("{} {}", w[0], w[1]));
    words.iter().cloned().chain(bigrams).collect()
}
