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
//! it (`src/text/chunk_mlp.rs`), with no word features. Either needs the states of the model
//! it was trained on, which the caller computes ([`Chunker::chunk_with`]); without them the word
//! chunker is the one to use.
//!
//! Also reads the bracketed chunk format of the iSTS `*.chunk.txt` files, the chunker's
//! training data, and scores chunkers on the pairs held out of training ([`held_out_scores`]).
//! Pure: no model weights beyond the embedded files, no burn, no sled.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::ops::Range;
use std::path::Path;
use std::sync::OnceLock;

use tokenizers::normalizers::bert::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::{
    NormalizedString, Normalizer, OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer,
};

use crate::error::{io_err, InternalError, Result, UserError};
use crate::math::SplitMix64;
pub use crate::text::chunk_mlp::MlpOptions;
use crate::text::chunk_mlp::{self, Mlp};

/// One line of an iSTS `*.chunk.txt` file (`[ Former Nazi guard ] [ dead ] [ at 91 ]`): its
/// tokens, and its chunks as ranges of token indices covering every token in order. Read
/// leniently, as the released files need (one line of answers-students reads `[ in [ a closed
/// path ]`): a `[` inside a chunk starts the next chunk, a token outside brackets is a chunk of
/// its own, a stray `]` is ignored. None when the line has no token.
pub fn parse_bracketed(line: &str) -> Option<(Vec<String>, Vec<Range<usize>>)> {
    let mut tokens: Vec<String> = Vec::new();
    let mut chunks: Vec<Range<usize>> = Vec::new();
    let mut open: Option<usize> = None;
    let close = |start: usize, end: usize, chunks: &mut Vec<Range<usize>>| {
        if start < end {
            chunks.push(start..end);
        }
    };
    for piece in line.split_whitespace() {
        match piece {
            "[" => {
                if let Some(start) = open {
                    close(start, tokens.len(), &mut chunks);
                }
                open = Some(tokens.len());
            }
            "]" => {
                if let Some(start) = open.take() {
                    close(start, tokens.len(), &mut chunks);
                }
            }
            t => {
                tokens.push(t.to_string());
                if open.is_none() {
                    close(tokens.len() - 1, tokens.len(), &mut chunks);
                }
            }
        }
    }
    if let Some(start) = open {
        close(start, tokens.len(), &mut chunks);
    }
    (!tokens.is_empty()).then_some((tokens, chunks))
}

/// The word units of `text` as char ranges (Unicode scalar values, as kindred's tokens count),
/// cut as the BERT basic tokenizer cuts words before wordpieces: on whitespace; every
/// punctuation character (Unicode P*, and every ASCII symbol such as `$`, `+`, `^`) is a unit
/// of its own, as is every CJK ideograph; control characters belong to no unit. Case and
/// accents are kept, so a unit's range reads back the text as written.
pub fn units(text: &str) -> Vec<Range<usize>> {
    let mut normalized = NormalizedString::from(text);
    // Cleaning (control characters out) and spaces around CJK ideographs; no lower-casing and
    // no accent stripping, which would not change where words break.
    BertNormalizer::new(true, true, Some(false), false)
        .normalize(&mut normalized)
        .expect("the BERT normalizer cannot fail");
    let mut pieces = PreTokenizedString::from(normalized);
    BertPreTokenizer
        .pre_tokenize(&mut pieces)
        .expect("the BERT pre-tokenizer cannot fail");
    pieces
        .get_splits(OffsetReferential::Original, OffsetType::Char)
        .into_iter()
        .map(|(_, (start, end), _)| start..end)
        .filter(|r| !r.is_empty())
        .collect()
}

/// A sentence as the chunker sees it: its units, whether each is glued to the one before (no
/// space between them), and, in training data, whether each starts a chunk.
#[derive(Debug, Clone, Default, PartialEq)]
struct UnitSentence {
    units: Vec<String>,
    glued: Vec<bool>,
    starts: Vec<bool>,
}

impl UnitSentence {
    /// The units of a raw text.
    fn of_text(text: &str) -> (Self, Vec<Range<usize>>) {
        let chars: Vec<char> = text.chars().collect();
        let spans = units(text);
        let units = spans
            .iter()
            .map(|r| chars[r.clone()].iter().collect())
            .collect();
        let glued = spans
            .iter()
            .enumerate()
            .map(|(i, r)| i > 0 && spans[i - 1].end == r.start)
            .collect();
        let sentence = UnitSentence {
            units,
            glued,
            starts: Vec::new(),
        };
        (sentence, spans)
    }

    /// The units of iSTS tokens with gold chunks (token ranges): a token that starts a chunk
    /// makes its first unit start one; the other units of a token continue its chunk. Tokens
    /// are space-separated, so only units of one token are glued, except the clitics the
    /// Penn Treebank splits off (`'s`, `n't`), which raw text glues to the word before.
    fn of_tokens(tokens: &[String], chunks: &[Range<usize>]) -> Self {
        let mut chunk_starts = vec![false; tokens.len()];
        for c in chunks {
            if let Some(s) = chunk_starts.get_mut(c.start) {
                *s = true;
            }
        }
        let mut out = UnitSentence::default();
        let mut pending_start = false;
        for (token, &starts_chunk) in tokens.iter().zip(&chunk_starts) {
            let token = ptb_token(token);
            let chars: Vec<char> = token.chars().collect();
            let spans = units(token);
            pending_start |= starts_chunk;
            let clitic = is_clitic(token);
            for (j, r) in spans.iter().enumerate() {
                let first_unit = out.units.is_empty();
                out.units.push(chars[r.clone()].iter().collect());
                out.glued.push(match j {
                    0 => clitic && !first_unit,
                    _ => spans[j - 1].end == r.start,
                });
                out.starts.push(first_unit || j == 0 && pending_start);
            }
            if !spans.is_empty() {
                pending_start = false;
            }
        }
        out
    }

    /// Chunks as unit ranges, from per-unit start flags.
    fn ranges(starts: &[bool]) -> Vec<Range<usize>> {
        let mut out: Vec<Range<usize>> = Vec::new();
        for (i, &s) in starts.iter().enumerate() {
            match out.last_mut() {
                Some(last) if !s => last.end = i + 1,
                _ => out.push(i..i + 1),
            }
        }
        out
    }
}

/// The raw text of a Penn Treebank bracket or quote token (`-LRB-` → `(`, ``` `` ``` → `"`).
fn ptb_token(token: &str) -> &str {
    match token {
        "-LRB-" => "(",
        "-RRB-" => ")",
        "-LSB-" => "[",
        "-RSB-" => "]",
        "-LCB-" => "{",
        "-RCB-" => "}",
        "``" | "''" => "\"",
        t => t,
    }
}

/// Penn Treebank clitics, written glued to the word before.
fn is_clitic(token: &str) -> bool {
    matches!(
        token.to_lowercase().as_str(),
        "'s" | "'re" | "'ve" | "'ll" | "'d" | "'m" | "n't"
    )
}

/// A coarse word class: closed-class words by list, the rest by shape and suffix. The lists
/// are the function words of English that begin or continue phrases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Determiner,
    Possessive,
    Pronoun,
    Preposition,
    To,
    Modal,
    Auxiliary,
    Negation,
    Coordinator,
    Subordinator,
    Wh,
    Adverb,
    Punct,
    Number,
    Capitalized,
    Gerund,
    Past,
    Adverbly,
    Word,
}

/// True for a word that carries no content of its own — a determiner, pronoun, preposition,
/// modal or auxiliary, conjunction, wh-word, common adverb or punctuation — as the chunker's
/// word classes have it. Negations, numbers and every other word carry content.
pub fn is_function_word(word: &str) -> bool {
    let lower = word.to_lowercase();
    !matches!(
        Class::of(word, &lower),
        Class::Negation
            | Class::Number
            | Class::Capitalized
            | Class::Gerund
            | Class::Past
            | Class::Adverbly
            | Class::Word
    )
}

impl Class {
    fn of(word: &str, lower: &str) -> Class {
        match lower {
            "a" | "an" | "the" | "this" | "these" | "those" | "each" | "every" | "some" | "any"
            | "no" | "another" | "all" | "both" | "either" | "neither" | "several" | "many"
            | "few" | "much" | "more" | "most" => Class::Determiner,
            "my" | "your" | "his" | "her" | "its" | "our" | "their" => Class::Possessive,
            "i" | "you" | "he" | "she" | "it" | "we" | "they" | "me" | "him" | "us" | "them"
            | "there" | "someone" | "something" | "one" | "nothing" | "everyone" => Class::Pronoun,
            "about" | "above" | "across" | "after" | "against" | "along" | "amid" | "among"
            | "around" | "as" | "at" | "before" | "behind" | "below" | "beneath" | "beside"
            | "between" | "beyond" | "by" | "despite" | "down" | "during" | "except" | "for"
            | "from" | "in" | "inside" | "into" | "like" | "near" | "of" | "off" | "on"
            | "onto" | "out" | "outside" | "over" | "past" | "per" | "since" | "through"
            | "throughout" | "toward" | "towards" | "under" | "underneath" | "until" | "unlike"
            | "up" | "upon" | "via" | "with" | "within" | "without" => Class::Preposition,
            "to" => Class::To,
            "can" | "could" | "may" | "might" | "must" | "shall" | "should" | "will" | "would"
            | "ll" => Class::Modal,
            "am" | "is" | "are" | "was" | "were" | "be" | "been" | "being" | "has" | "have"
            | "had" | "having" | "do" | "does" | "did" | "get" | "gets" | "got" => Class::Auxiliary,
            "not" | "never" | "t" => Class::Negation,
            "and" | "or" | "but" | "nor" | "&" => Class::Coordinator,
            "because" | "if" | "although" | "though" | "while" | "whereas" | "unless" | "than"
            | "so" | "then" => Class::Subordinator,
            "who" | "whom" | "whose" | "which" | "what" | "where" | "when" | "why" | "how"
            | "that" | "whether" => Class::Wh,
            "still" | "also" | "just" | "very" | "only" | "already" | "even" | "too" | "now"
            | "again" | "ever" | "almost" | "yet" | "here" | "together" | "away" | "back" => {
                Class::Adverb
            }
            _ => {
                let first = word.chars().next().unwrap_or(' ');
                if !first.is_alphanumeric() {
                    Class::Punct
                } else if word.chars().any(|c| c.is_ascii_digit()) {
                    Class::Number
                } else if first.is_uppercase() {
                    Class::Capitalized
                } else if lower.ends_with("ing") && lower.chars().count() > 4 {
                    Class::Gerund
                } else if lower.ends_with("ed") && lower.chars().count() > 3 {
                    Class::Past
                } else if lower.ends_with("ly") && lower.chars().count() > 4 {
                    Class::Adverbly
                } else {
                    Class::Word
                }
            }
        }
    }

    fn name(self) -> &'static str {
        match self {
            Class::Determiner => "DT",
            Class::Possessive => "PS",
            Class::Pronoun => "PR",
            Class::Preposition => "IN",
            Class::To => "TO",
            Class::Modal => "MD",
            Class::Auxiliary => "AX",
            Class::Negation => "NG",
            Class::Coordinator => "CC",
            Class::Subordinator => "SC",
            Class::Wh => "WH",
            Class::Adverb => "RB",
            Class::Punct => "P",
            Class::Number => "D",
            Class::Capitalized => "C",
            Class::Gerund => "G",
            Class::Past => "V",
            Class::Adverbly => "LY",
            Class::Word => "W",
        }
    }
}

/// A word's shape: upper-case letters X, lower-case x, digits d, anything else itself; runs of
/// one kind collapsed, at most four kinds ("McDonald's" → "XxXx").
fn shape(word: &str) -> String {
    let mut out = String::new();
    for c in word.chars() {
        let k = if c.is_uppercase() {
            'X'
        } else if c.is_lowercase() {
            'x'
        } else if c.is_numeric() {
            'd'
        } else if c.is_alphabetic() {
            'a'
        } else {
            c
        };
        if !out.ends_with(k) {
            out.push(k);
        }
        if out.chars().count() >= 4 {
            break;
        }
    }
    out
}

/// What the features see of a sentence: each unit lower-cased, with its class and shape.
struct Context<'a> {
    lower: Vec<String>,
    class: Vec<Class>,
    shape: Vec<String>,
    glued: &'a [bool],
}

impl<'a> Context<'a> {
    fn new(units: &[impl AsRef<str>], glued: &'a [bool]) -> Self {
        let lower: Vec<String> = units.iter().map(|u| u.as_ref().to_lowercase()).collect();
        let class = units
            .iter()
            .zip(&lower)
            .map(|(u, l)| Class::of(u.as_ref(), l))
            .collect();
        let shape = units.iter().map(|u| shape(u.as_ref())).collect();
        Context {
            lower,
            class,
            shape,
            glued,
        }
    }

    fn word(&self, i: isize) -> &str {
        match usize::try_from(i) {
            Ok(i) if i < self.lower.len() => &self.lower[i],
            Ok(_) => "</s>",
            Err(_) => "<s>",
        }
    }

    fn class(&self, i: isize) -> &'static str {
        match usize::try_from(i) {
            Ok(i) if i < self.class.len() => self.class[i].name(),
            Ok(_) => "</s>",
            Err(_) => "<s>",
        }
    }

    fn shape(&self, i: isize) -> &str {
        match usize::try_from(i) {
            Ok(i) if i < self.shape.len() => &self.shape[i],
            _ => "-",
        }
    }

    fn glued(&self, i: usize) -> bool {
        self.glued.get(i).copied().unwrap_or(false)
    }
}

/// The decisions so far that the features of the next unit see.
#[derive(Debug, Clone, Copy)]
struct History {
    /// The unit before started a chunk.
    previous_started: bool,
    /// Units in the chunk so far.
    length: usize,
    /// Where the chunk so far started.
    chunk_start: usize,
}

impl History {
    /// Before the second unit.
    const START: History = History {
        previous_started: true,
        length: 1,
        chunk_start: 0,
    };
}

/// Feature template version, written in the model file: a model is read only by the code
/// whose features it was trained on.
const FORMAT: &str = "kindred-chunker 1";
/// The header of a model with a contextual term.
const FORMAT_CONTEXTUAL: &str = "kindred-chunker 2";
/// The header of a neural model (an MLP over the states, no word features).
const FORMAT_NEURAL: &str = "kindred-chunker 3";

/// Calls `emit` with every feature of unit `i` (i ≥ 1) given the decisions so far: the unit
/// and its neighbours (words two either side; suffixes; shapes; classes and their n-grams),
/// whether it and the next unit are glued to the unit before, and the chunk so far (did the
/// unit before start it, its length, its first unit's class).
fn features(cx: &Context<'_>, i: usize, h: History, mut emit: impl FnMut(&str)) {
    let mut buf = String::new();
    let mut f = |args: std::fmt::Arguments<'_>| {
        buf.clear();
        buf.write_fmt(args)
            .expect("writing to a String cannot fail");
        emit(&buf);
    };
    let (glued, next_glued) = (cx.glued(i), cx.glued(i + 1));
    let i = i as isize;
    let (w0, wp, wn) = (cx.word(i), cx.word(i - 1), cx.word(i + 1));
    let (c0, cp, cn) = (cx.class(i), cx.class(i - 1), cx.class(i + 1));
    f(format_args!("b"));
    f(format_args!("w {w0}"));
    f(format_args!("w-1 {wp}"));
    f(format_args!("w+1 {wn}"));
    f(format_args!("w-2 {}", cx.word(i - 2)));
    f(format_args!("w+2 {}", cx.word(i + 2)));
    f(format_args!("ww-1 {wp} {w0}"));
    f(format_args!("ww+1 {w0} {wn}"));
    for (name, word, k) in [
        ("s2", w0, 2),
        ("s3", w0, 3),
        ("s3-1", wp, 3),
        ("s3+1", wn, 3),
    ] {
        if let Some(s) = suffix(word, k) {
            f(format_args!("{name} {s}"));
        }
    }
    f(format_args!("sh {}", cx.shape(i)));
    f(format_args!("sh-1 {}", cx.shape(i - 1)));
    f(format_args!("sh+1 {}", cx.shape(i + 1)));
    f(format_args!("c {c0}"));
    f(format_args!("c-1 {cp}"));
    f(format_args!("c+1 {cn}"));
    f(format_args!("cc-1 {cp} {c0}"));
    f(format_args!("cc+1 {c0} {cn}"));
    f(format_args!("ccc {} {cp} {c0}", cx.class(i - 2)));
    f(format_args!("ccc+1 {cp} {c0} {cn}"));
    f(format_args!("cw-1 {cp} {w0}"));
    f(format_args!("wc+1 {w0} {cn}"));
    f(format_args!("g {glued} {c0}"));
    f(format_args!("g+1 {next_glued}"));
    let first = cx.class(h.chunk_start as isize);
    f(format_args!("h {} {c0}", h.previous_started));
    f(format_args!("len {}", h.length.min(4)));
    f(format_args!("first {first} {c0}"));
    f(format_args!("first {first} {c0} {cn}"));
}

/// The last `k` chars of a word longer than `k` chars.
fn suffix(word: &str, k: usize) -> Option<&str> {
    let n = word.chars().count();
    (n > k).then(|| {
        let (at, _) = word.char_indices().nth(n - k).expect("n > k chars");
        &word[at..]
    })
}

/// A phrase chunker: for every unit after the first, whether it starts a chunk; a linear model
/// over string features, decided greedily left to right.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Chunker {
    weights: HashMap<String, f32>,
    contextual: Option<Contextual>,
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
    term: Term,
}

/// The contextual term's function of the states.
#[derive(Debug, Clone, PartialEq)]
enum Term {
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
fn mlp_input(rows: &[f32], glued: &[bool], dim: usize, i: usize, out: &mut [f32]) {
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
fn mlp_width(dim: usize) -> usize {
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

/// How one epoch of training went.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Epoch {
    /// 1-based.
    pub epoch: usize,
    /// Decisions (units after a sentence's first) made in the epoch.
    pub decisions: usize,
    /// Of those, the ones the model got wrong (and learned from).
    pub mistakes: usize,
}

/// The shipped model: `kindred train chunker --data ../shared/data/ists2016_train --out
/// src/text/chunker.model`.
const BUILTIN: &str = include_str!("chunker.model");

/// The shipped contextual model: `kindred train chunker --contextual --data
/// ../shared/data/ists2016_train --out src/text/chunker-contextual.model`.
const BUILTIN_CONTEXTUAL: &str = include_str!("chunker-contextual.model");

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
    fn starts(&self, units: &[impl AsRef<str>], glued: &[bool], rows: Option<&[f32]>) -> Vec<bool> {
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

    /// Trains on iSTS sentences (tokens and gold chunks as [`parse_bracketed`] returns them)
    /// for `epochs` passes.
    pub fn train(sentences: &[(Vec<String>, Vec<Range<usize>>)], epochs: usize) -> Chunker {
        Chunker::train_with(sentences, epochs, |_| {})
    }

    /// [`Chunker::train`], reporting each epoch to `progress`. An averaged perceptron: the
    /// sentences in a fixed-seed shuffled order each epoch, each unit decided greedily with the
    /// model's own earlier decisions as history, every mistake adding the gold decision's
    /// sign (+1 starts a chunk) to its features' weights; the model is the average of the
    /// weights over all steps. Features seen only once are left out, and the model is pruned
    /// of its smallest weights. Deterministic: the same sentences give the same model.
    pub fn train_with(
        sentences: &[(Vec<String>, Vec<Range<usize>>)],
        epochs: usize,
        progress: impl FnMut(Epoch),
    ) -> Chunker {
        Chunker::fit(sentences, None, epochs, progress)
    }

    /// [`Chunker::train_with`] with a contextual term: `states[s]` holds sentence `s`'s unit
    /// states (`units × spec.dim`, the units of its tokens as [`IstsSentence::text`] cuts them);
    /// a sentence whose states do not have that size trains the word features only. The
    /// perceptron learns both kinds of weights together.
    pub fn train_contextual(
        sentences: &[(Vec<String>, Vec<Range<usize>>)],
        states: &[Vec<f32>],
        spec: ContextualSpec,
        epochs: usize,
        progress: impl FnMut(Epoch),
    ) -> Chunker {
        Chunker::fit(sentences, Some((states, spec)), epochs, progress)
    }

    /// A neural chunker: an [`Mlp`] over each boundary's [`mlp_input`] (the states of the
    /// units before, at and after it, and the glued flags), trained with `options` on every
    /// unit after a sentence's first whose sentence has states of `spec.dim` (`states[s]` as
    /// in [`Chunker::train_contextual`]; the others are left out). `spec.scale` is not used.
    /// `progress` gets each finished epoch of any of the ensemble's networks.
    pub fn train_neural(
        sentences: &[(Vec<String>, Vec<Range<usize>>)],
        states: &[Vec<f32>],
        spec: ContextualSpec,
        options: &MlpOptions,
        progress: impl Fn() + Sync,
    ) -> Chunker {
        let dim = spec.dim;
        let width = mlp_width(dim);
        let (mut xs, mut ys) = (Vec::new(), Vec::new());
        let mut x = vec![0f32; width];
        for ((tokens, chunks), rows) in sentences.iter().zip(states) {
            let sentence = UnitSentence::of_tokens(tokens, chunks);
            if rows.is_empty() || rows.len() != sentence.units.len() * dim {
                continue;
            }
            for i in 1..sentence.units.len() {
                mlp_input(rows, &sentence.glued, dim, i, &mut x);
                xs.extend_from_slice(&x);
                ys.push(sentence.starts[i]);
            }
        }
        let mut net = chunk_mlp::train(&xs, &ys, width, options, progress);
        // The values as the model file writes them, so that a model read back is this one.
        let all = (net.mean.iter_mut().chain(&mut net.inv_std))
            .chain(&mut net.w1)
            .chain(&mut net.b1)
            .chain(&mut net.w2);
        for w in all {
            *w = rounded(*w);
        }
        net.b2 = rounded(net.b2);
        Chunker {
            weights: HashMap::new(),
            contextual: Some(Contextual {
                layer: spec.layer,
                dim,
                model: spec.model,
                scale: 1.0,
                term: Term::Mlp(net),
            }),
        }
    }

    fn fit(
        sentences: &[(Vec<String>, Vec<Range<usize>>)],
        contextual: Option<(&[Vec<f32>], ContextualSpec)>,
        epochs: usize,
        mut progress: impl FnMut(Epoch),
    ) -> Chunker {
        let data: Vec<UnitSentence> = sentences
            .iter()
            .map(|(t, c)| UnitSentence::of_tokens(t, c))
            .collect();
        // Per sentence, its scaled states when they fit.
        let scaled: Vec<Option<Vec<f32>>> = match &contextual {
            Some((states, spec)) => data
                .iter()
                .enumerate()
                .map(|(s, sentence)| {
                    states
                        .get(s)
                        .filter(|r| !r.is_empty() && r.len() == sentence.units.len() * spec.dim)
                        .map(|r| r.iter().map(|v| v * spec.scale).collect())
                })
                .collect(),
            None => vec![None; data.len()],
        };
        let dim = contextual.as_ref().map_or(0, |(_, spec)| spec.dim);
        let contexts: Vec<Context<'_>> = data
            .iter()
            .map(|s| Context::new(&s.units, &s.glued))
            .collect();
        // Features seen fewer than MIN_COUNT times (along the gold decisions) are left out.
        let mut counts: HashMap<String, u32> = HashMap::new();
        for (sentence, cx) in data.iter().zip(&contexts) {
            let mut h = History::START;
            for i in 1..sentence.units.len() {
                features(cx, i, h, |f| match counts.get_mut(f) {
                    Some(n) => *n += 1,
                    None => {
                        counts.insert(f.to_string(), 1);
                    }
                });
                h = advance(h, i, sentence.starts[i]);
            }
        }
        let names: Vec<String> = counts
            .into_iter()
            .filter(|&(_, n)| n >= MIN_COUNT)
            .map(|(f, _)| f)
            .collect();
        let ids: HashMap<&str, usize> = names
            .iter()
            .enumerate()
            .map(|(id, f)| (f.as_str(), id))
            .collect();
        let mut perceptron = Perceptron::new(names.len(), 2 * dim);
        let mut dense = vec![0f32; 2 * dim];
        let mut rng = SplitMix64(0x0063_6875_6e6b_6572);
        let mut fired = Vec::new();
        for epoch in 1..=epochs {
            let mut report = Epoch {
                epoch,
                decisions: 0,
                mistakes: 0,
            };
            for s in rng.permutation(data.len()) {
                let (sentence, cx) = (&data[s], &contexts[s]);
                let mut h = History::START;
                for i in 1..sentence.units.len() {
                    fired.clear();
                    features(cx, i, h, |f| fired.extend(ids.get(f)));
                    let x = scaled[s].as_ref().map(|rows| {
                        dense[..dim].copy_from_slice(&rows[i * dim..(i + 1) * dim]);
                        dense[dim..].copy_from_slice(&rows[(i - 1) * dim..i * dim]);
                        dense.as_slice()
                    });
                    let gold = sentence.starts[i];
                    let start = perceptron.learn(&fired, x, gold);
                    report.decisions += 1;
                    report.mistakes += usize::from(start != gold);
                    h = advance(h, i, start);
                }
            }
            progress(report);
        }
        let (sparse, dense) = perceptron.averaged();
        let weights = names
            .iter()
            .zip(sparse)
            .filter(|&(_, w)| w != 0.0)
            .map(|(f, w)| (f.clone(), w))
            .collect();
        let contextual = contextual.map(|(_, spec)| Contextual {
            layer: spec.layer,
            dim: spec.dim,
            model: spec.model,
            scale: spec.scale,
            term: Term::Linear(dense),
        });
        Chunker {
            weights,
            contextual,
        }
        .quantized()
    }

    /// The word weights scaled to integers of at most [`QUANT`] and the contextual weights by
    /// the same factor (the decisions are the same up to rounding), the smallest word weights
    /// dropped: a compact model file.
    fn quantized(self) -> Chunker {
        let max = self.weights.values().fold(0.0f32, |m, w| m.max(w.abs()));
        if max == 0.0 {
            return self;
        }
        let factor = QUANT / max;
        let weights = self
            .weights
            .into_iter()
            .map(|(f, w)| (f, (w * factor).round()))
            .filter(|&(_, w)| w.abs() >= MIN_WEIGHT)
            .collect();
        let contextual = self.contextual.map(|mut c| {
            if let Term::Linear(weights) = &mut c.term {
                weights.iter_mut().for_each(|w| *w *= factor);
            }
            c
        });
        Chunker {
            weights,
            contextual,
        }
    }

    /// Features with a weight.
    pub fn len(&self) -> usize {
        self.weights.len()
    }

    /// True for a model with no weights (every unit continues the first chunk).
    pub fn is_empty(&self) -> bool {
        self.weights.is_empty()
    }

    /// The model as text: a header line, then one `weight feature` line per feature, sorted;
    /// a contextual model has a second header and its weights on two `@` lines before them.
    pub fn to_text(&self) -> String {
        if let Some(Contextual {
            term: Term::Mlp(net),
            ..
        }) = &self.contextual
        {
            return self.neural_text(net);
        }
        let mut lines: Vec<(&String, f32)> = self.weights.iter().map(|(f, &w)| (f, w)).collect();
        lines.sort_by(|a, b| a.0.cmp(b.0));
        let mut out = format!(
            "{FORMAT}\n# An averaged perceptron over unit features (src/text/chunk.rs): a unit \
             starts a chunk when its features' weights sum above 0. {} features.\n",
            lines.len()
        );
        if let Some(
            c @ Contextual {
                term: Term::Linear(weights),
                ..
            },
        ) = &self.contextual
        {
            out = format!(
                "{FORMAT_CONTEXTUAL}\n# An averaged perceptron over unit features and the \
                 hidden states of the model below (src/text/chunk.rs): a unit starts a chunk when \
                 its features' weights plus the states' term sum above 0. {} features.\n\
                 @contextual layer={} dim={} scale={} model={}\n@weights",
                lines.len(),
                c.layer,
                c.dim,
                c.scale,
                c.model
            );
            for w in weights {
                write!(out, " {w}").expect("writing to a String cannot fail");
            }
            out.push('\n');
        }
        for (f, w) in lines {
            writeln!(out, "{w} {f}").expect("writing to a String cannot fail");
        }
        out
    }

    /// A neural model's text: the header, a comment, its @contextual and @mlp lines and one
    /// @weights line ([`Mlp::values`], four significant digits).
    fn neural_text(&self, net: &Mlp) -> String {
        let c = self
            .contextual
            .as_ref()
            .expect("a neural model is contextual");
        let mut out = format!(
            "{FORMAT_NEURAL}\n# A neural chunker (src/text/chunk.rs, src/text/chunk_mlp.rs): a unit \
             starts a chunk when the MLP's logit over the states of the units before, at and after \
             it (and the glued flags) is above 0.\n@contextual layer={} dim={} scale={} model={}\n\
             @mlp inputs={} hidden={}\n@weights",
            c.layer, c.dim, c.scale, c.model, net.inputs, net.hidden
        );
        for w in net.values() {
            write!(out, " {w:.3e}").expect("writing to a String cannot fail");
        }
        out.push('\n');
        out
    }

    /// Reads a model written by [`Chunker::to_text`].
    pub fn from_text(text: &str) -> Result<Chunker> {
        let corrupt = |line: usize, why: &str| {
            InternalError::Corrupt(format!("chunker model, line {line}: {why}")).into()
        };
        let mut lines = text.lines().enumerate();
        let (with_contextual, neural) = match lines.next() {
            Some((_, header)) if header.trim_end() == FORMAT => (false, false),
            Some((_, header)) if header.trim_end() == FORMAT_CONTEXTUAL => (true, false),
            Some((_, header)) if header.trim_end() == FORMAT_NEURAL => (true, true),
            Some((_, header)) => {
                return Err(corrupt(
                    1,
                    &format!(
                        "header {header:?} is not {FORMAT:?}, {FORMAT_CONTEXTUAL:?} or \
                         {FORMAT_NEURAL:?}: a model of another kindred version"
                    ),
                ))
            }
            None => return Err(corrupt(1, "empty file")),
        };
        let mut weights = HashMap::new();
        let mut spec: Option<ContextualSpec> = None;
        let mut dense: Option<Vec<f32>> = None;
        let mut shape: Option<(usize, usize)> = None;
        for (n, line) in lines {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some(rest) = line.strip_prefix("@contextual ") {
                spec = Some(parse_spec(rest).map_err(|why| corrupt(n + 1, &why))?);
                continue;
            }
            if let Some(rest) = line.strip_prefix("@mlp ") {
                shape = Some(parse_shape(rest).map_err(|why| corrupt(n + 1, &why))?);
                continue;
            }
            if let Some(rest) = line.strip_prefix("@weights") {
                let parsed: Option<Vec<f32>> = rest
                    .split_whitespace()
                    .map(|w| w.parse().ok().filter(|w: &f32| w.is_finite()))
                    .collect();
                dense = Some(parsed.ok_or_else(|| corrupt(n + 1, "a weight is not a number"))?);
                continue;
            }
            let (w, feature) = line
                .split_once(' ')
                .ok_or_else(|| corrupt(n + 1, "expected `weight feature`"))?;
            let w: f32 = w
                .parse()
                .ok()
                .filter(|w: &f32| w.is_finite())
                .ok_or_else(|| corrupt(n + 1, &format!("weight {w:?} is not a number")))?;
            if weights.insert(feature.to_string(), w).is_some() {
                return Err(corrupt(
                    n + 1,
                    &format!("feature {feature:?} appears twice"),
                ));
            }
        }
        if neural {
            return neural_model(spec, shape, dense, weights.len()).map_err(|why| corrupt(1, &why));
        }
        if shape.is_some() {
            return Err(corrupt(
                1,
                &format!("an @mlp line goes with {FORMAT_NEURAL:?} and only with it"),
            ));
        }
        let contextual = match (with_contextual, spec, dense) {
            (false, None, None) => None,
            (true, Some(spec), Some(w)) if w.len() == 2 * spec.dim => {
                Some(Contextual {
                    layer: spec.layer,
                    dim: spec.dim,
                    model: spec.model,
                    scale: spec.scale,
                    term: Term::Linear(w),
                })
            }
            (true, Some(spec), Some(w)) => {
                return Err(corrupt(
                    3,
                    &format!("{} contextual weights, expected 2 × {}", w.len(), spec.dim),
                ))
            }
            _ => {
                return Err(corrupt(
                    1,
                    &format!("the contextual lines (@contextual, @weights) go with {FORMAT_CONTEXTUAL:?} and only with it"),
                ))
            }
        };
        Ok(Chunker {
            weights,
            contextual,
        })
    }
}

/// The neural chunker a [`FORMAT_NEURAL`] file describes, from its `@contextual`, `@mlp` and
/// `@weights` lines and the count of its word-feature lines (there must be none).
fn neural_model(
    spec: Option<ContextualSpec>,
    shape: Option<(usize, usize)>,
    values: Option<Vec<f32>>,
    word_features: usize,
) -> std::result::Result<Chunker, String> {
    let (Some(spec), Some((inputs, hidden)), Some(values)) = (spec, shape, values) else {
        return Err(format!(
            "{FORMAT_NEURAL:?} needs an @contextual, an @mlp and a @weights line"
        ));
    };
    if word_features > 0 {
        return Err(format!(
            "{FORMAT_NEURAL:?} has no word features, found {word_features}"
        ));
    }
    if inputs != mlp_width(spec.dim) {
        return Err(format!(
            "@mlp inputs={inputs}, expected 3 × dim + 2 = {}",
            mlp_width(spec.dim)
        ));
    }
    let count = values.len();
    let net = Mlp::from_values(inputs, hidden, &values).ok_or_else(|| {
        format!(
            "{count} weights, expected {} for inputs={inputs} hidden={hidden}",
            Mlp::size(inputs, hidden)
        )
    })?;
    Ok(Chunker {
        weights: HashMap::new(),
        contextual: Some(Contextual {
            layer: spec.layer,
            dim: spec.dim,
            model: spec.model,
            scale: spec.scale,
            term: Term::Mlp(net),
        }),
    })
}

/// Reads `inputs=1154 hidden=96`.
fn parse_shape(text: &str) -> std::result::Result<(usize, usize), String> {
    let mut inputs = None;
    let mut hidden = None;
    for pair in text.split_whitespace() {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| format!("expected key=value, got {pair:?}"))?;
        let v: usize = v
            .parse()
            .map_err(|_| format!("{k} is not a whole number"))?;
        match k {
            "inputs" => inputs = Some(v),
            "hidden" => hidden = Some(v),
            _ => return Err(format!("unknown @mlp key {k:?}")),
        }
    }
    Ok((
        inputs.ok_or("no inputs= in @mlp")?,
        hidden.ok_or("no hidden= in @mlp")?,
    ))
}

/// A weight as a model file writes it (four significant digits).
fn rounded(w: f32) -> f32 {
    format!("{w:.3e}").parse().unwrap_or(w)
}

/// Reads `layer=2 dim=384 scale=0.3 model=sha256:…`.
fn parse_spec(text: &str) -> std::result::Result<ContextualSpec, String> {
    let mut fields: HashMap<&str, &str> = HashMap::new();
    for pair in text.split_whitespace() {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| format!("expected key=value, got {pair:?}"))?;
        fields.insert(k, v);
    }
    let get = |k: &str| {
        fields
            .get(k)
            .copied()
            .ok_or_else(|| format!("no {k}= in @contextual"))
    };
    let number = |k: &str| -> std::result::Result<usize, String> {
        get(k)?
            .parse()
            .map_err(|_| format!("{k} is not a whole number"))
    };
    let scale: f32 = get("scale")?
        .parse()
        .ok()
        .filter(|s: &f32| s.is_finite())
        .ok_or("scale is not a number")?;
    let dim = number("dim")?;
    if dim == 0 {
        return Err("dim is 0".into());
    }
    Ok(ContextualSpec {
        layer: number("layer")?,
        dim,
        model: get("model")?.to_string(),
        scale,
    })
}

/// Features seen fewer times than this in training are left out of the model.
const MIN_COUNT: u32 = 2;
/// Largest quantized weight.
const QUANT: f32 = 999.0;
/// Quantized weights below this are dropped.
const MIN_WEIGHT: f32 = 30.0;

/// The history after deciding unit `i`.
fn advance(h: History, i: usize, start: bool) -> History {
    if start {
        History {
            previous_started: true,
            length: 1,
            chunk_start: i,
        }
    } else {
        History {
            previous_started: false,
            length: h.length + 1,
            chunk_start: h.chunk_start,
        }
    }
}

/// A binary averaged perceptron over feature ids, with the lazy-averaging trick (Daumé III):
/// `total[f]` sums `step × update`, so the average weight is `w − total / step`.
#[derive(Debug)]
struct Perceptron {
    w: Vec<f32>,
    total: Vec<f64>,
    /// Weights of the dense features, and their step-weighted sums.
    dense: Vec<f32>,
    dense_total: Vec<f64>,
    step: u64,
}

impl Perceptron {
    fn new(features: usize, dense: usize) -> Self {
        Perceptron {
            w: vec![0.0; features],
            total: vec![0.0; features],
            dense: vec![0.0; dense],
            dense_total: vec![0.0; dense],
            step: 0,
        }
    }

    /// Decides on `features` and the dense features `x` (when given), learns from `gold`,
    /// returns the decision made before learning.
    fn learn(&mut self, features: &[usize], x: Option<&[f32]>, gold: bool) -> bool {
        self.step += 1;
        let mut score: f32 = features.iter().map(|&f| self.w[f]).sum();
        if let Some(x) = x {
            score += self.dense.iter().zip(x).map(|(w, x)| w * x).sum::<f32>();
        }
        let predicted = score > 0.0;
        if predicted != gold {
            let y = if gold { 1.0 } else { -1.0 };
            let step = self.step as f64;
            for &f in features {
                self.w[f] += y;
                self.total[f] += step * y as f64;
            }
            if let Some(x) = x {
                for ((w, t), &x) in self.dense.iter_mut().zip(&mut self.dense_total).zip(x) {
                    *w += y * x;
                    *t += step * f64::from(y * x);
                }
            }
        }
        predicted
    }

    /// The averaged word and dense weights.
    fn averaged(&self) -> (Vec<f32>, Vec<f32>) {
        let step = self.step.max(1) as f64;
        let average = |w: &[f32], total: &[f64]| -> Vec<f32> {
            w.iter()
                .zip(total)
                .map(|(&w, &t)| (w as f64 - t / step) as f32)
                .collect()
        };
        (
            average(&self.w, &self.total),
            average(&self.dense, &self.dense_total),
        )
    }
}

/// Exact-chunk counts: a predicted chunk is correct when both its boundaries match a gold
/// chunk's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChunkCounts {
    /// Predicted chunks that match a gold chunk.
    pub correct: usize,
    /// Predicted chunks.
    pub predicted: usize,
    /// Gold chunks.
    pub gold: usize,
}

impl ChunkCounts {
    /// Counts of one sentence's chunks (unit ranges).
    pub fn of(predicted: &[Range<usize>], gold: &[Range<usize>]) -> Self {
        let correct = predicted.iter().filter(|p| gold.contains(p)).count();
        ChunkCounts {
            correct,
            predicted: predicted.len(),
            gold: gold.len(),
        }
    }

    /// Correct / predicted.
    pub fn precision(&self) -> f64 {
        ratio(self.correct, self.predicted)
    }

    /// Correct / gold.
    pub fn recall(&self) -> f64 {
        ratio(self.correct, self.gold)
    }

    /// Harmonic mean of precision and recall.
    pub fn f1(&self) -> f64 {
        ratio(2 * self.correct, self.predicted + self.gold)
    }
}

impl std::ops::AddAssign for ChunkCounts {
    fn add_assign(&mut self, o: Self) {
        self.correct += o.correct;
        self.predicted += o.predicted;
        self.gold += o.gold;
    }
}

fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// One sentence of an iSTS chunk file.
#[derive(Debug, Clone, PartialEq)]
pub struct IstsSentence {
    /// The data set (`headlines`, `images`, `answers-students`, …).
    pub genre: String,
    /// The pair id: the 1-based line number.
    pub pair: usize,
    /// Tokens and gold chunks, as [`parse_bracketed`] reads the line.
    pub tokens: Vec<String>,
    /// Gold chunks as token ranges.
    pub chunks: Vec<Range<usize>>,
    /// Each unit's hidden-state row, for scoring or training a contextual chunker (empty:
    /// none; [`read_ists_chunks`] leaves it empty).
    pub states: Vec<f32>,
}

impl IstsSentence {
    /// Pairs whose id is divisible by 5 are held out of training, fixed up front so every
    /// chunker is measured on the same unseen pairs.
    pub fn held_out(&self) -> bool {
        self.pair.is_multiple_of(5)
    }

    /// The sentence as raw text: its tokens joined by spaces, Penn Treebank brackets and
    /// quotes written as characters. Its [`units`] are the units the chunker sees of the
    /// tokens, in order (the clitics the treebank split off are spaced here, glued there).
    pub fn text(&self) -> String {
        self.tokens
            .iter()
            .map(|t| ptb_token(t))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Every sentence of the iSTS chunk files in `dir` (`STSint.input.GENRE.sent{1,2}.chunk.txt`,
/// genres in name order, both sentences of each pair).
pub fn read_ists_chunks(dir: &Path) -> Result<Vec<IstsSentence>> {
    let read_dir = std::fs::read_dir(dir).map_err(io_err(format!("reading {}", dir.display())))?;
    let mut files: Vec<(String, std::path::PathBuf)> = Vec::new();
    for entry in read_dir {
        let path = entry
            .map_err(io_err(format!("reading {}", dir.display())))?
            .path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let genre = name
            .strip_prefix("STSint.input.")
            .and_then(|n| n.strip_suffix(".chunk.txt"))
            .and_then(|n| {
                n.strip_suffix(".sent1")
                    .or_else(|| n.strip_suffix(".sent2"))
            });
        if let Some(genre) = genre {
            files.push((genre.to_string(), path.clone()));
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(UserError::InvalidArgument {
            name: "iSTS data directory",
            reason: format!(
                "{} holds no STSint.input.GENRE.sent1.chunk.txt file: give the directory of the \
                 SemEval-2016 iSTS training files (e.g. ../shared/data/ists2016_train)",
                dir.display()
            ),
        }
        .into());
    }
    let mut out = Vec::new();
    for (genre, path) in files {
        let raw = std::fs::read(&path).map_err(io_err(format!("reading {}", path.display())))?;
        for (i, line) in String::from_utf8_lossy(&raw).lines().enumerate() {
            if let Some((tokens, chunks)) = parse_bracketed(line) {
                out.push(IstsSentence {
                    genre: genre.clone(),
                    pair: i + 1,
                    tokens,
                    chunks,
                    states: Vec::new(),
                });
            }
        }
    }
    Ok(out)
}

/// A way of chunking, to score side by side.
#[derive(Debug, Clone, Copy)]
pub enum Method<'a> {
    /// A learned chunker (a contextual one with the states of sentences that have them).
    Model(&'a Chunker),
    /// Every unit a chunk of its own.
    EveryUnit,
    /// Hand-written rules over the word classes: a chunk starts at a preposition, "to", a
    /// conjunction, a wh-word, a determiner or pronoun not after a preposition, an auxiliary
    /// or modal not after another, a word ending in -ing or -ed not after an auxiliary, "to"
    /// or a determiner, a spaced punctuation mark and the unit after it.
    Rules,
}

impl Method<'_> {
    fn starts(&self, s: &UnitSentence) -> Vec<bool> {
        match self {
            Method::Model(c) => c.starts(&s.units, &s.glued, None),
            Method::EveryUnit => vec![true; s.units.len()],
            Method::Rules => rule_starts(s),
        }
    }
}

fn rule_starts(s: &UnitSentence) -> Vec<bool> {
    let cx = Context::new(&s.units, &s.glued);
    (0..s.units.len())
        .map(|i| {
            if i == 0 {
                return true;
            }
            let (c, p) = (cx.class[i], cx.class[i - 1]);
            let spaced_punct = |j: usize| cx.class[j] == Class::Punct && !cx.glued(j);
            use Class::*;
            spaced_punct(i)
                || spaced_punct(i - 1)
                || matches!(c, Preposition | To | Coordinator | Subordinator | Wh)
                || matches!(c, Determiner | Possessive | Pronoun)
                    && !matches!(p, Preposition | To | Determiner)
                || matches!(c, Auxiliary | Modal) && !matches!(p, Auxiliary | Modal | Negation)
                || matches!(c, Gerund | Past)
                    && !matches!(
                        p,
                        Auxiliary | Modal | Negation | To | Determiner | Possessive
                    )
        })
        .collect()
}

/// Exact-chunk counts of `method` on `sentences` (chunks over units).
pub fn score(method: Method<'_>, sentences: &[&IstsSentence]) -> ChunkCounts {
    let mut counts = ChunkCounts::default();
    for s in sentences {
        let units = UnitSentence::of_tokens(&s.tokens, &s.chunks);
        let starts = match method {
            Method::Model(c) if !s.states.is_empty() => {
                c.starts(&units.units, &units.glued, Some(&s.states))
            }
            _ => method.starts(&units),
        };
        let predicted = UnitSentence::ranges(&starts);
        counts += ChunkCounts::of(&predicted, &UnitSentence::ranges(&units.starts));
    }
    counts
}

/// Scores of `method` on the held-out sentences: per genre in order, then all together
/// (genre `"all"`).
pub fn held_out_scores(
    method: Method<'_>,
    sentences: &[IstsSentence],
) -> Vec<(String, ChunkCounts)> {
    scores_by_genre(method, sentences.iter().filter(|s| s.held_out()).collect())
}

/// Scores of `method` on `held`: per genre in order, then all together (genre `"all"`).
pub fn scores_by_genre(method: Method<'_>, held: Vec<&IstsSentence>) -> Vec<(String, ChunkCounts)> {
    let mut genres: Vec<&str> = held.iter().map(|s| s.genre.as_str()).collect();
    genres.dedup();
    let mut out: Vec<(String, ChunkCounts)> = genres
        .into_iter()
        .map(|g| {
            let of_genre: Vec<&IstsSentence> =
                held.iter().copied().filter(|s| s.genre == g).collect();
            (g.to_string(), score(method, &of_genre))
        })
        .collect();
    out.push(("all".to_string(), score(method, &held)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_bracketed_chunks() {
        let (tokens, chunks) =
            parse_bracketed("[ Former Nazi guard ] [ dead ] [ at 91 ] ").expect("parses");
        assert_eq!(tokens, ["Former", "Nazi", "guard", "dead", "at", "91"]);
        assert_eq!(chunks, [0..3, 3..4, 4..6]);
        // The released files' oddities.
        let chunks_of = |l: &str| parse_bracketed(l).expect("parses").1;
        assert_eq!(
            chunks_of("[ is ] [ in [ a path ] [ but ]"),
            [0..1, 1..2, 2..4, 4..5]
        );
        assert_eq!(chunks_of("[ a ] b ] [ c"), [0..1, 1..2, 2..3]);
        assert!(parse_bracketed(" [ ] ").is_none());
    }

    fn unit_texts(text: &str) -> Vec<String> {
        let chars: Vec<char> = text.chars().collect();
        units(text)
            .into_iter()
            .map(|r| chars[r].iter().collect())
            .collect()
    }

    #[test]
    fn units_split_like_bert() {
        assert_eq!(units("Hello, world!"), [0..5, 5..6, 7..12, 12..13]);
        assert_eq!(
            unit_texts("U.S. don't pay $5+tax"),
            ["U", ".", "S", ".", "don", "'", "t", "pay", "$", "5", "+", "tax"]
        );
        // Char offsets, not bytes: "é" is two bytes, one char.
        assert_eq!(units("café au lait."), [0..4, 5..7, 8..12, 12..13]);
        assert_eq!(
            unit_texts("naïve «quote» — yes"),
            ["naïve", "«", "quote", "»", "—", "yes"]
        );
        // Every CJK ideograph is a unit; kana and hangul words are not cut.
        assert_eq!(unit_texts("我爱北京 ok"), ["我", "爱", "北", "京", "ok"]);
        assert_eq!(units("  \t\n "), Vec::<Range<usize>>::new());
        // Control characters belong to no unit and do not cut a word.
        assert_eq!(units("a\u{0}b c"), [0..3, 4..5]);
    }

    #[test]
    fn tokens_become_units_with_their_chunk_starts() {
        let (tokens, chunks) = parse_bracketed(
            "[ The U.S. ] [ is ] [ in a closed path. ] [ Japan 's yuan ] [ -LRB- up -RRB- ]",
        )
        .expect("parses");
        let s = UnitSentence::of_tokens(&tokens, &chunks);
        assert_eq!(
            s.units,
            [
                "The", "U", ".", "S", ".", "is", "in", "a", "closed", "path", ".", "Japan", "'",
                "s", "yuan", "(", "up", ")"
            ]
        );
        let starts: Vec<usize> = (0..s.starts.len()).filter(|&i| s.starts[i]).collect();
        assert_eq!(starts, [0, 5, 6, 11, 15]);
        let glued: Vec<usize> = (0..s.glued.len()).filter(|&i| s.glued[i]).collect();
        // Inside "U.S." and "path.", and the clitic "'s" glued to "Japan" as raw text has it.
        assert_eq!(glued, [2, 3, 4, 10, 12, 13]);
        assert_eq!(
            UnitSentence::ranges(&s.starts),
            [0..5, 5..6, 6..11, 11..15, 15..18]
        );
    }

    /// Sentences of filler words where a chunk starts at every "the" and at every "on".
    fn toy_sentences(n: usize) -> Vec<(Vec<String>, Vec<Range<usize>>)> {
        let fillers = ["dog", "cat", "runs", "sleeps", "big", "red", "house", "mat"];
        let mut rng = SplitMix64(7);
        (0..n)
            .map(|_| {
                let mut tokens = vec!["the".to_string()];
                for _ in 0..3 + rng.below(8) {
                    let t = match rng.below(6) {
                        0 => "the",
                        1 => "on",
                        _ => fillers[rng.below(fillers.len())],
                    };
                    tokens.push(t.to_string());
                }
                let mut starts: Vec<usize> = (0..tokens.len())
                    .filter(|&i| i == 0 || tokens[i] == "the" || tokens[i] == "on")
                    .collect();
                starts.push(tokens.len());
                let chunks = starts.windows(2).map(|w| w[0]..w[1]).collect();
                (tokens, chunks)
            })
            .collect()
    }

    #[test]
    fn learns_an_obvious_rule() {
        let chunker = Chunker::train(&toy_sentences(200), 5);
        let units = [
            "the", "red", "cat", "sleeps", "on", "the", "mat", "the", "dog",
        ];
        assert_eq!(chunker.chunk_units(&units), [0..4, 4..5, 5..7, 7..9]);
        assert_eq!(chunker.chunk("the big dog  runs the mat"), [0..17, 18..25]);
        assert_eq!(chunker.chunk("the cat on the mat"), [0..7, 8..10, 11..18]);
        // Held-out toy sentences: every chunk right.
        let test = toy_sentences(250).split_off(200);
        let scored: Vec<IstsSentence> = test
            .into_iter()
            .map(|(tokens, chunks)| IstsSentence {
                genre: "toy".into(),
                pair: 5,
                tokens,
                chunks,
                states: Vec::new(),
            })
            .collect();
        let all: Vec<&IstsSentence> = scored.iter().collect();
        let counts = score(Method::Model(&chunker), &all);
        assert_eq!(counts.correct, counts.gold, "{counts:?}");
        assert_eq!(counts.f1(), 1.0);
        // Training is deterministic.
        assert_eq!(Chunker::train(&toy_sentences(200), 5), chunker);
        assert!(chunker.chunk_units(&[]).is_empty());
        assert_eq!(chunker.chunk("  "), Vec::<Range<usize>>::new());
    }

    #[test]
    fn model_text_round_trips() {
        let chunker = Chunker::train(&toy_sentences(100), 3);
        assert!(!chunker.is_empty());
        let text = chunker.to_text();
        assert!(text.starts_with("kindred-chunker 1\n"));
        let back = Chunker::from_text(&text).expect("parses");
        assert_eq!(back, chunker);
        assert_eq!(back.to_text(), text);

        let err = |t: &str| Chunker::from_text(t).expect_err("refused").to_string();
        assert_eq!(
            err("kindred-chunker 9\n1 b\n"),
            "corrupt data: chunker model, line 1: header \"kindred-chunker 9\" is not \
             \"kindred-chunker 1\", \"kindred-chunker 2\" or \"kindred-chunker 3\": a model of \
             another kindred version"
        );
        assert_eq!(
            err("kindred-chunker 1\n# note\nx b\n"),
            "corrupt data: chunker model, line 3: weight \"x\" is not a number"
        );
        assert_eq!(
            err("kindred-chunker 1\n3\n"),
            "corrupt data: chunker model, line 2: expected `weight feature`"
        );
        assert_eq!(
            err("kindred-chunker 1\n3 w a\n4 w a\n"),
            "corrupt data: chunker model, line 3: feature \"w a\" appears twice"
        );
        assert!(err("").contains("empty file"));
    }

    /// Sentences (tokens, gold chunks) and each one's unit states.
    type Stateful = (Vec<(Vec<String>, Vec<Range<usize>>)>, Vec<Vec<f32>>);

    /// Toy sentences of words that say nothing, where a chunk starts wherever a unit's
    /// "state" (dimension 0 of a 2-d row) is positive: only the contextual term can learn it.
    fn stateful_sentences(n: usize) -> Stateful {
        let mut rng = SplitMix64(11);
        let mut sentences = Vec::new();
        let mut states = Vec::new();
        for _ in 0..n {
            let len = 4 + rng.below(6);
            let tokens: Vec<String> = (0..len).map(|_| "w".to_string()).collect();
            let starts: Vec<bool> = (0..len).map(|i| i == 0 || rng.below(3) == 0).collect();
            let rows: Vec<f32> = starts
                .iter()
                .flat_map(|&s| [if s { 1.0 } else { -1.0 }, 0.5])
                .collect();
            let mut bounds: Vec<usize> = (0..len).filter(|&i| starts[i]).collect();
            bounds.push(len);
            sentences.push((tokens, bounds.windows(2).map(|w| w[0]..w[1]).collect()));
            states.push(rows);
        }
        (sentences, states)
    }

    /// What the toy models read: two-value states of layer 2 of a model "sha256:toy".
    fn toy_spec() -> ContextualSpec {
        ContextualSpec {
            layer: 2,
            dim: 2,
            model: "sha256:toy".into(),
            scale: 1.0,
        }
    }

    #[test]
    fn a_contextual_chunker_learns_from_states_and_round_trips() {
        let (sentences, states) = stateful_sentences(200);
        let spec = toy_spec();
        let model = Chunker::train_contextual(&sentences, &states, spec, 5, |_| {});
        let c = model.contextual().expect("contextual");
        assert_eq!((c.layer, c.dim, c.model.as_str()), (2, 2, "sha256:toy"));
        // Every chunk of unseen sentences right with their states; words alone cannot tell.
        let (test, test_states) = stateful_sentences(240);
        let text = |tokens: &[String]| tokens.join(" ");
        for ((tokens, gold), rows) in test.iter().zip(&test_states).skip(200) {
            let t = text(tokens);
            let spans = units(&t);
            let chunks = model.chunk_with(&t, |s| {
                assert_eq!(s, spans.as_slice(), "the units' spans");
                Some(rows.clone())
            });
            let expected: Vec<Range<usize>> = gold
                .iter()
                .map(|r| spans[r.start].start..spans[r.end - 1].end)
                .collect();
            assert_eq!(chunks, expected, "{t}");
        }
        let scored: Vec<IstsSentence> = test
            .into_iter()
            .zip(test_states)
            .skip(200)
            .map(|((tokens, chunks), states)| IstsSentence {
                genre: "toy".into(),
                pair: 5,
                tokens,
                chunks,
                states,
            })
            .collect();
        let all: Vec<&IstsSentence> = scored.iter().collect();
        assert_eq!(score(Method::Model(&model), &all).f1(), 1.0);
        // Without states (or with rows of the wrong size) the term is left out.
        assert_eq!(
            model.chunk("w w w w"),
            model.chunk_with("w w w w", |_| Some(vec![1.0; 3]))
        );

        let text = model.to_text();
        assert!(text.starts_with("kindred-chunker 2\n"), "{text}");
        let back = Chunker::from_text(&text).expect("parses");
        assert_eq!(back, model);
        assert_eq!(back.to_text(), text);
        assert_eq!(
            Chunker::train_contextual(&sentences, &states, model_spec(&model), 5, |_| {}),
            model,
            "training is deterministic"
        );

        let err = |t: &str| Chunker::from_text(t).expect_err("refused").to_string();
        let header = "kindred-chunker 2\n@contextual layer=2 dim=2 scale=1 model=m\n";
        assert!(err(&format!("{header}@weights 1 2 3\n"))
            .contains("3 contextual weights, expected 2 × 2"));
        assert!(err(&format!("{header}@weights 1 x 3 4\n")).contains("a weight is not a number"));
        assert!(
            err("kindred-chunker 2\n@contextual layer=2 dim=2 model=m\n@weights 1 2 3 4\n")
                .contains("no scale=")
        );
        assert!(err("kindred-chunker 2\n3 b\n")
            .contains("go with \"kindred-chunker 2\" and only with it"));
        assert!(err(
            "kindred-chunker 1\n@contextual layer=2 dim=1 scale=1 model=m\n@weights 1 2\n"
        )
        .contains("only with it"));
    }

    fn model_spec(c: &Chunker) -> ContextualSpec {
        let c = c.contextual().expect("contextual");
        ContextualSpec {
            layer: c.layer,
            dim: c.dim,
            model: c.model.clone(),
            scale: c.scale,
        }
    }

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

    #[test]
    fn a_neural_chunker_learns_from_states_and_round_trips() {
        let (sentences, states) = stateful_sentences(200);
        let spec = toy_spec();
        let options = MlpOptions {
            hidden: 8,
            nets: 2,
            epochs: 20,
            batch: 16,
            lr: 1e-2,
            ..MlpOptions::default()
        };
        let model = Chunker::train_neural(&sentences, &states, spec.clone(), &options, || {});
        let c = model.contextual().expect("contextual");
        assert!(c.is_neural() && model.is_empty());
        // Every chunk of unseen sentences right with their states.
        let (test, test_states) = stateful_sentences(240);
        for ((tokens, gold), rows) in test.iter().zip(&test_states).skip(200) {
            let t = tokens.join(" ");
            let spans = units(&t);
            let expected: Vec<Range<usize>> = gold
                .iter()
                .map(|r| spans[r.start].start..spans[r.end - 1].end)
                .collect();
            assert_eq!(
                model.chunk_with(&t, |_| Some(rows.clone())),
                expected,
                "{t}"
            );
            // Without states (or with rows of the wrong size): the word chunker's chunks.
            let words = Chunker::builtin().chunk(&t);
            assert_eq!(model.chunk(&t), words);
            assert_eq!(model.chunk_with(&t, |_| Some(vec![1.0; 3])), words);
            // Units without a state (zero rows, as past the encoder's truncation) take the word
            // chunker's decisions; the others keep the model's.
            let mut cut = rows.clone();
            let kept = 2;
            cut[kept * 2..].fill(0.0);
            let starts_of = |chunks: &[Range<usize>]| -> Vec<bool> {
                spans
                    .iter()
                    .map(|s| chunks.iter().any(|c| c.start == s.start))
                    .collect()
            };
            let (ours, theirs) = (starts_of(&expected), starts_of(&words));
            let mixed: Vec<bool> = (0..spans.len())
                .map(|u| if u < kept { ours[u] } else { theirs[u] })
                .collect();
            assert_eq!(
                starts_of(&model.chunk_with(&t, |_| Some(cut.clone()))),
                mixed,
                "{t}"
            );
        }

        let text = model.to_text();
        assert!(text.starts_with("kindred-chunker 3\n"), "{}", &text[..80]);
        let back = Chunker::from_text(&text).expect("parses");
        assert_eq!(back, model);
        assert_eq!(back.to_text(), text);
        assert_eq!(
            Chunker::train_neural(&sentences, &states, spec, &options, || {}),
            model,
            "training is deterministic"
        );

        let err = |t: &str| Chunker::from_text(t).expect_err("refused").to_string();
        let header = "kindred-chunker 3\n@contextual layer=2 dim=1 scale=1 model=m\n";
        // dim 1: inputs 5; hidden 1: 2 × 5 + 5 + 1 + 1 + 1 = 18 values.
        let values: Vec<String> = (1..=18).map(|v| v.to_string()).collect();
        let ok = format!(
            "{header}@mlp inputs=5 hidden=1\n@weights {}\n",
            values.join(" ")
        );
        assert!(Chunker::from_text(&ok).is_ok());
        assert!(
            err(&format!("{header}@mlp inputs=5 hidden=1\n@weights 1 2 3\n"))
                .contains("3 weights, expected 18")
        );
        assert!(
            err(&format!("{header}@mlp inputs=6 hidden=1\n@weights 1 2 3\n"))
                .contains("expected 3 × dim + 2 = 5")
        );
        assert!(err(&format!("{header}@weights 1 2 3\n")).contains("needs an @contextual, an @mlp"));
        assert!(err(&format!("{ok}3 b\n")).contains("has no word features, found 1"));
        assert!(err(&format!("{header}@mlp inputs=5\n@weights 1\n")).contains("no hidden="));
        assert!(err(&ok.replace("kindred-chunker 3", "kindred-chunker 2"))
            .contains("an @mlp line goes with \"kindred-chunker 3\" and only with it"));
    }

    #[test]
    fn counts_exact_chunks() {
        let c = ChunkCounts::of(&[0..2, 2..3, 3..5], &[0..2, 2..5]);
        assert_eq!(
            c,
            ChunkCounts {
                correct: 1,
                predicted: 3,
                gold: 2
            }
        );
        assert!((c.precision() - 1.0 / 3.0).abs() < 1e-12);
        assert!((c.recall() - 0.5).abs() < 1e-12);
        assert!((c.f1() - 0.4).abs() < 1e-12);
        assert_eq!(ChunkCounts::default().f1(), 0.0);
    }
}
