//! Token weights for weighted RCMD (design.md §3, "optional weighting"): BERTScore-style IDF
//! weights per wordpiece, where a wordpiece weighs what the word it belongs to weighs.
//!
//! Words are wordpieces merged with the tokenizer's offsets ([`merge_words`]); a word's weight
//! is the largest `idf` of its lower-cased word terms ([`crate::text::terms`], the terms the
//! lexical index counts), so a piece of "unhappiness" weighs what "unhappiness" weighs in the
//! collection. A word with no term (punctuation only: "?", "-") is not counted by the lexical
//! index; it gets [`UNCOUNTED_IDF`], the weight of a term found in every document, since such
//! marks are about as common as words get. The weights are raw: [`rcmd`](super::rcmd::rcmd)
//! normalises each side to sum 1.

use super::words::merge_words;
use crate::types::Token;

/// The weight of a word the lexical index never counts (punctuation): 1, the lowest IDF,
/// that of a term in every document (idf(t) = ln((N + 1) / (df(t) + 1)) + 1 ≥ 1).
pub const UNCOUNTED_IDF: f32 = 1.0;

/// One weight per token of `tokens` (the content wordpieces of `text`, with char offsets into
/// it): the IDF of the word each belongs to, from `idf` over lower-cased word terms.
pub fn token_weights(text: &str, tokens: &[Token], idf: impl Fn(&str) -> f32) -> Vec<f32> {
    let mut weights = vec![UNCOUNTED_IDF; tokens.len()];
    for word in merge_words(text, tokens) {
        let weight = crate::text::terms(&word.text)
            .iter()
            .filter(|t| !t.contains(' '))
            .map(|t| idf(t))
            .fold(None, |best: Option<f32>, w| {
                Some(best.map_or(w, |b| b.max(w)))
            })
            .unwrap_or(UNCOUNTED_IDF);
        for w in
            &mut weights[word.tokens.start.min(tokens.len())..word.tokens.end.min(tokens.len())]
        {
            *w = weight;
        }
    }
    weights
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::score::words::tests::tok;

    #[test]
    fn pieces_take_their_words_idf_and_punctuation_the_floor() {
        // "Naïve unhappiness?" → naive | un ##hap ##piness | ?
        let text = "Naïve unhappiness?";
        let tokens = [
            tok("naive", 0, 5),
            tok("un", 6, 8),
            tok("##hap", 8, 11),
            tok("##piness", 11, 17),
            tok("?", 17, 18),
        ];
        let idf = |t: &str| match t {
            "naïve" | "naive" => 2.0,
            "unhappiness" => 5.0,
            _ => 9.0,
        };
        let w = token_weights(text, &tokens, idf);
        assert_eq!(w, [2.0, 5.0, 5.0, 5.0, UNCOUNTED_IDF]);
    }

    #[test]
    fn words_are_looked_up_lower_cased_and_empty_input_is_empty() {
        let text = "RUST Rust";
        let tokens = [tok("rust", 0, 4), tok("rust", 5, 9)];
        let seen = std::cell::RefCell::new(Vec::new());
        let w = token_weights(text, &tokens, |t| {
            seen.borrow_mut().push(t.to_string());
            3.0
        });
        assert_eq!(w, [3.0, 3.0]);
        assert_eq!(*seen.borrow(), ["rust", "rust"]);
        assert!(token_weights("", &[], |_| 1.0).is_empty());
    }
}
