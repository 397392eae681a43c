//! Text processing that needs no model weights: normalisation (HTML character references,
//! whitespace, markup), wordpiece tokenization with offsets into the original text, and the
//! word uni- and bigram terms the lexical index and the lexical similarity count.
//! Knows nothing of burn, sled or indexes.

pub mod chunk;
pub mod normalize;
pub(crate) mod tokenize;

pub use normalize::{normalize, strip_markup, Normalized, TextFormat};
pub use tokenize::{TextTokenizer, Tokenized};

/// Lower-cased word unigrams and bigrams ("how", "how do", …) of a text, normalized first
/// ([`normalize()`]: `What&#39;s` is the words `what` and `s`, never `39`).
pub fn terms(text: &str) -> Vec<String> {
    let words: Vec<String> = normalize::normalize_text(text)
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    let bigrams = words.windows(2).map(|w| format!("{} {}", w[0], w[1]));
    words.iter().cloned().chain(bigrams).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_are_those_of_the_normalized_text() {
        assert_eq!(
            terms("What&#39;s  caf&eacute;&nbsp;au lait"),
            ["what", "s", "café", "au", "lait", "what s", "s café", "café au", "au lait"]
        );
        assert!(terms("&nbsp; &#32;").is_empty());
        assert_eq!(terms("AT&T"), terms("at t"));
    }
}
