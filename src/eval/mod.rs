//! Evaluation: the metrics kindred reports about itself (pair classification now; retrieval
//! and correlation with the evaluation commands), labelled pair files, and scoring labelled
//! pairs with every feature the duplicate model reads.

pub mod metrics;
pub mod pairs;

use std::collections::HashMap;

use crate::error::Result;
use crate::index::lexical::terms;
use crate::index::LexicalIndex;
use crate::score::{dot, rcmd, w2, Tokens, Weights};
use crate::search::features::{lexical_similarity, PairFeatures};
use crate::Encoder;

pub use pairs::{read_pairs, LabelledPair};

/// Scores labelled pairs: encodes each distinct text once (reporting texts done to
/// `progress`) and computes every [`PairFeatures`]. IDF comes from `lexicon` (a collection's),
/// or, without one, from the distinct texts of the pairs themselves.
pub fn score_pairs(
    encoder: &Encoder,
    pairs: &[LabelledPair],
    lexicon: Option<&LexicalIndex>,
    progress: impl FnMut(usize),
) -> Result<Vec<PairFeatures>> {
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut texts: Vec<&str> = Vec::new();
    for p in pairs {
        for t in [p.a.as_str(), p.b.as_str()] {
            index.entry(t).or_insert_with(|| {
                texts.push(t);
                texts.len() - 1
            });
        }
    }
    let encoded = encoder.encode_with_progress(&texts, progress)?;
    let own;
    let lexicon = match lexicon {
        Some(l) => l,
        None => {
            own = LexicalIndex::new();
            for (i, t) in texts.iter().enumerate() {
                own.upsert(&i.to_string(), t);
            }
            &own
        }
    };
    let term_lists: Vec<Vec<String>> = texts.iter().map(|t| terms(t)).collect();
    Ok(pairs
        .iter()
        .map(|p| {
            let (i, j) = (index[p.a.as_str()], index[p.b.as_str()]);
            let (a, b) = (&encoded[i], &encoded[j]);
            let r = rcmd(
                Tokens::new(&a.token_vectors, a.dim()),
                Tokens::new(&b.token_vectors, b.dim()),
                Weights::Uniform,
            );
            PairFeatures {
                cosine: dot(&a.sentence, &b.sentence),
                w2: w2(&a.intent, &b.intent),
                rcmd_forward: r.forward,
                rcmd_backward: r.backward,
                lexical: lexical_similarity(&term_lists[i], &term_lists[j], |t| lexicon.idf(t)),
            }
        })
        .collect())
}
