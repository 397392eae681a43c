//! Phrase chunks: splitting a text into the short phrases people align
//! (`[ the black dog ] [ runs ] [ on the beach ]`), learned from the gold chunks of
//! SemEval-2016 iSTS.
//!
//! A text is first cut into word *units* ([`units`]) as the BERT basic tokenizer cuts it: on
//! whitespace, every punctuation character on its own, every CJK ideograph on its own. The
//! [`Chunker`] then decides, left to right, whether each unit starts a new chunk: an averaged
//! perceptron (Collins 2002) over string features of the unit and its neighbours (lower-cased
//! words, suffixes, word shapes, closed word classes, whether it is glued to the unit before)
//! and of its own earlier decisions. The shipped model ([`Chunker::builtin`]) is a small text
//! file compiled into the binary, made by `kindred train chunker`.
//!
//! A *contextual* chunker reads the encoder's hidden states after an early layer
//! ([`Contextual`]): those states know the words' syntax in context, which word features guess
//! at (title-cased headlines above all). Two kinds: `kindred train chunker --contextual` adds a
//! linear term over the states of the unit and the unit before it to the perceptron's word
//! features; `--contextual --neural` ([`Chunker::builtin_contextual`], the shipped one) decides
//! each boundary by a small neural network over the states of the units before, at and after
//! it ([`mlp`]), with no word features. Either needs the states of the model
//! it was trained on, which the caller computes ([`Chunker::chunk_with`]); without them the word
//! chunker is the one to use.
//!
//! Its parts: [`units`] (word units, the bracketed iSTS format), [`features`] (what the word
//! model reads), `mlp` (the neural boundary model's forward pass), `format` (the model file).
//! Training lives in `crate::train::chunker`, scoring against gold chunks in
//! `crate::eval::chunks`. Pure: no model weights beyond the embedded files, no burn, no sled.

mod features;
mod format;
pub(crate) mod mlp;
mod units;

use std::collections::HashMap;
use std::ops::Range;
use std::sync::OnceLock;

pub use features::is_function_word;
pub(crate) use features::{advance, features, Class, Context, History};
use format::{BUILTIN, BUILTIN_CONTEXTUAL};
use mlp::Mlp;
pub use units::{parse_bracketed, units};
pub(crate) use units::{ptb_token, UnitSentence};

/// A phrase chunker: for every unit after the first, whether it starts a chunk; a linear model
/// over string features, decided greedily left to right.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Chunker {
    pub(crate) weights: HashMap<String, f32>,
    pub(crate) contextual: Option<Contextual>,
}

/// The contextual term of a chunker: `weights · scale·[h_i; h_(i−1)]`, where `h_i` is unit
/// `i`'s hidden state after `layer` transformer layers of model `model` (the mean over the
/// unit's wordpieces; zeros for a unit without one).
#[derive(Debug, Clone, PartialEq)]
pub struct Contextual {
    /// Hidden states after this many transformer layers (0: the embeddings).
    pub layer: usize,
    /// Hidden size.
    pub dim: usize,
    /// Fingerprint of the network weights whose states the weights read (`sha256:` of
    /// model.safetensors; the int8 variant's states are close enough to share them, and heads
    /// do not change them).
    pub model: String,
    /// Multiplies the states in training, so that they weigh against the 0/1 word features
    /// (the linear term's; 1 and unused in a neural model).
    pub scale: f32,
    /// What the term computes from the states.
    pub(crate) term: Term,
}

/// The contextual term's function of the states.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Term {
    /// `weights · scale·[h_i; h_(i−1)]` (`2 × dim` weights: the unit's state, then the state
    /// of the unit before), added to the word features' sum.
    Linear(Vec<f32>),
    /// A neural model ([`Mlp`]) over [`mlp_input`]: its logit decides alone (the model has no
    /// word features; without states the shipped word chunker decides instead).
    Mlp(Mlp),
}

/// The linear term for unit `i` (≥ 1): `scale · weights · [h_i; h_(i−1)]` over every unit's
/// state row (`units × dim`).
fn linear_term(weights: &[f32], scale: f32, dim: usize, rows: &[f32], i: usize) -> f32 {
    let (own, before) = weights.split_at(dim);
    let dot = |w: &[f32], r: &[f32]| w.iter().zip(r).map(|(w, r)| w * r).sum::<f32>();
    scale * (dot(own, &rows[i * dim..(i + 1) * dim]) + dot(before, &rows[(i - 1) * dim..i * dim]))
}

/// The neural model's input for the boundary before unit `i` (≥ 1): the states of units
/// `i − 1`, `i` and `i + 1` (zeros past the end), then whether unit `i` and unit `i + 1` are
/// glued to the unit before (1 or 0): `3 × dim + 2` values into `out`.
pub(crate) fn mlp_input(rows: &[f32], glued: &[bool], dim: usize, i: usize, out: &mut [f32]) {
    let units = rows.len() / dim;
    for (k, block) in out[..3 * dim].chunks_exact_mut(dim).enumerate() {
        let u = i + k - 1;
        match u < units {
            true => block.copy_from_slice(&rows[u * dim..(u + 1) * dim]),
            false => block.fill(0.0),
        }
    }
    let flag = |u: usize| f32::from(u8::from(glued.get(u).copied().unwrap_or(false)));
    out[3 * dim] = flag(i);
    out[3 * dim + 1] = flag(i + 1);
}

/// Per unit, whether it starts a chunk by the neural model (the first always does), given
/// every unit's state row (`units × dim`). A boundary next to a unit without a state (an
/// all-zero row: past the encoder's truncation) is the word chunker's decision instead.
fn neural_starts(
    net: &Mlp,
    units: &[impl AsRef<str>],
    rows: &[f32],
    glued: &[bool],
    dim: usize,
) -> Vec<bool> {
    let n = units.len();
    let width = mlp_width(dim);
    let mut xs = vec![0f32; n.saturating_sub(1) * width];
    for (i, x) in (1..n).zip(xs.chunks_exact_mut(width)) {
        mlp_input(rows, glued, dim, i, x);
    }
    let mut out = Vec::with_capacity(n);
    out.extend((n > 0).then_some(true));
    out.extend(net.logits(&xs).into_iter().map(|l| l > 0.0));
    let stateless = |u: usize| rows[u * dim..(u + 1) * dim].iter().all(|&v| v == 0.0);
    if (0..n).any(stateless) {
        let words = Chunker::builtin().starts(units, glued, None);
        for i in (1..n).filter(|&i| stateless(i - 1) || stateless(i)) {
            out[i] = words[i];
        }
    }
    out
}

/// The neural model's input width for states of `dim` values.
pub(crate) fn mlp_width(dim: usize) -> usize {
    3 * dim + 2
}

impl Contextual {
    /// Whether this is the neural model (no word features of its own).
    pub fn is_neural(&self) -> bool {
        matches!(self.term, Term::Mlp(_))
    }
}

/// What a contextual chunker is trained on: the states' layer, size and model, and their scale.
#[derive(Debug, Clone, PartialEq)]
pub struct ContextualSpec {
    /// See [`Contextual::layer`].
    pub layer: usize,
    /// See [`Contextual::dim`].
    pub dim: usize,
    /// See [`Contextual::model`].
    pub model: String,
    /// See [`Contextual::scale`].
    pub scale: f32,
}

impl Chunker {
    /// The model compiled into kindred, trained on the SemEval-2016 iSTS training pairs
    /// (pairs whose id is divisible by 5 held out), parsed on first use.
    pub fn builtin() -> &'static Chunker {
        static MODEL: OnceLock<Chunker> = OnceLock::new();
        MODEL
            .get_or_init(|| Chunker::from_text(BUILTIN).expect("the embedded chunker model parses"))
    }

    /// The contextual model compiled into kindred, trained like [`Chunker::builtin`] with the
    /// hidden states of the default model (all-MiniLM-L6-v2), parsed on first use.
    pub fn builtin_contextual() -> &'static Chunker {
        static MODEL: OnceLock<Chunker> = OnceLock::new();
        MODEL.get_or_init(|| {
            Chunker::from_text(BUILTIN_CONTEXTUAL).expect("the embedded contextual chunker parses")
        })
    }

    /// The contextual term, for a model that has one.
    pub fn contextual(&self) -> Option<&Contextual> {
        self.contextual.as_ref()
    }

    /// Chunks of `units` (words, each separated from the next by a space), as ranges of unit
    /// indices covering every unit in order.
    pub fn chunk_units(&self, units: &[&str]) -> Vec<Range<usize>> {
        UnitSentence::ranges(&self.starts(units, &vec![false; units.len()], None))
    }

    /// Chunks of `text` as char ranges, each from its first unit's start to its last unit's
    /// end (so the spaces between chunks belong to none). A contextual model decides on its
    /// word features alone here (a neural one, which has none, leaves the decisions to the
    /// shipped word chunker): see [`Chunker::chunk_with`].
    pub fn chunk(&self, text: &str) -> Vec<Range<usize>> {
        self.chunk_with(text, |_| None)
    }

    /// [`Chunker::chunk`] with the contextual term: `states` gets the char spans of the text's
    /// units ([`units`]) and returns each unit's hidden-state row (`units × dim`, as
    /// [`Contextual`] reads them), or None to leave the term out.
    pub fn chunk_with(
        &self,
        text: &str,
        states: impl FnOnce(&[Range<usize>]) -> Option<Vec<f32>>,
    ) -> Vec<Range<usize>> {
        let (sentence, spans) = UnitSentence::of_text(text);
        let rows = match &self.contextual {
            Some(_) if !spans.is_empty() => states(&spans),
            _ => None,
        };
        UnitSentence::ranges(&self.starts(&sentence.units, &sentence.glued, rows.as_deref()))
            .into_iter()
            .map(|r| spans[r.start].start..spans[r.end - 1].end)
            .collect()
    }

    /// Per unit, whether it starts a chunk (the first always does); `rows`: the units' states
    /// for the contextual term (left out when None or not `units × dim`).
    pub(crate) fn starts(
        &self,
        units: &[impl AsRef<str>],
        glued: &[bool],
        rows: Option<&[f32]>,
    ) -> Vec<bool> {
        let cx = Context::new(units, glued);
        let fitting = |c: &Contextual| rows.filter(|rows| rows.len() == units.len() * c.dim);
        // The linear term's weights, scale and the states it reads, when it applies.
        let linear = match &self.contextual {
            Some(
                c @ Contextual {
                    term: Term::Mlp(net),
                    ..
                },
            ) => {
                return match fitting(c) {
                    Some(rows) => neural_starts(net, units, rows, glued, c.dim),
                    None => Chunker::builtin().starts(units, glued, None),
                }
            }
            Some(
                c @ Contextual {
                    term: Term::Linear(weights),
                    ..
                },
            ) => fitting(c).map(|rows| (weights.as_slice(), c.scale, c.dim, rows)),
            None => None,
        };
        let mut out = Vec::with_capacity(units.len());
        out.extend(units.first().map(|_| true));
        let mut h = History::START;
        for i in 1..units.len() {
            let mut score = linear.map_or(0.0, |(w, scale, dim, rows)| {
                linear_term(w, scale, dim, rows, i)
            });
            features(&cx, i, h, |f| {
                score += self.weights.get(f).copied().unwrap_or(0.0)
            });
            let start = score > 0.0;
            h = advance(h, i, start);
            out.push(start);
        }
        out
    }

    /// Features with a weight.
    pub fn len(&self) -> usize {
        self.weights.len()
    }

    /// True for a model with no weights (every unit continues the first chunk).
    pub fn is_empty(&self) -> bool {
        self.weights.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_model_chunks_a_sentence() {
        let chunker = Chunker::builtin();
        assert!(chunker.len() > 1000, "{} features", chunker.len());
        let text = "A black dog is running on the beach.";
        let chars: Vec<char> = text.chars().collect();
        let chunks: Vec<String> = chunker
            .chunk(text)
            .into_iter()
            .map(|r| chars[r].iter().collect())
            .collect();
        assert_eq!(chunks, ["A black dog", "is running", "on the beach."]);
        let units = ["Two", "women", "sitting", "outside", "laughing", "."];
        assert_eq!(chunker.chunk_units(&units), [0..2, 2..3, 3..4, 4..5, 5..6]);
    }

    #[test]
    fn the_builtin_contextual_model_is_the_neural_one_over_the_default_models_second_layer() {
        let model = Chunker::builtin_contextual();
        let c = model.contextual().expect("contextual");
        assert_eq!((c.layer, c.dim), (2, 384));
        assert!(
            c.model.starts_with("sha256:") && !c.model.ends_with("+int8"),
            "{}",
            c.model
        );
        assert!(c.is_neural());
        assert!(model.is_empty(), "{} word features", model.len());
        // Without states it leaves the decisions to the word chunker.
        let text = "A black dog is running on the beach.";
        assert_eq!(model.chunk(text), Chunker::builtin().chunk(text));
    }
}
