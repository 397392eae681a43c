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

/// The words of a text as ROUGE counts them: lower-cased, every run of characters other than
/// ASCII letters and digits a separator (rouge-score's tokenizer without its stemmer, so
/// `Café's` is `caf` and `s`). The decoder's vocabulary is made of these words.
pub fn plain_words(text: &str) -> Vec<String> {
    text.to_lowercase()
        .split(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit()))
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_words_are_rouge_tokens() {
        assert_eq!(
            plain_words("How do I reset my PASSWORD? (It's 2FA.) Café"),
            ["how", "do", "i", "reset", "my", "password", "it", "s", "2fa", "caf"]
        );
        assert!(plain_words("¿—!").is_empty());
    }

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
