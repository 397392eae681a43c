//! What the word chunker reads of a unit: its word class ([`Class`]: closed classes, shapes),
//! its neighbours and whether it is glued to the unit before ([`Context`]), the decisions made
//! so far ([`History`]), and the string features of all of it ([`features`]) that the
//! perceptron weighs. Pure.

use std::fmt::Write as _;

/// A coarse word class: closed-class words by list, the rest by shape and suffix. The lists
/// are the function words of English that begin or continue phrases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
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
    pub(crate) fn of(word: &str, lower: &str) -> Class {
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

    pub(crate) fn name(self) -> &'static str {
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
pub(crate) struct Context<'a> {
    pub(crate) lower: Vec<String>,
    pub(crate) class: Vec<Class>,
    pub(crate) shape: Vec<String>,
    pub(crate) glued: &'a [bool],
}

impl<'a> Context<'a> {
    pub(crate) fn new(units: &[impl AsRef<str>], glued: &'a [bool]) -> Self {
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

    pub(crate) fn word(&self, i: isize) -> &str {
        match usize::try_from(i) {
            Ok(i) if i < self.lower.len() => &self.lower[i],
            Ok(_) => "</s>",
            Err(_) => "<s>",
        }
    }

    pub(crate) fn class(&self, i: isize) -> &'static str {
        match usize::try_from(i) {
            Ok(i) if i < self.class.len() => self.class[i].name(),
            Ok(_) => "</s>",
            Err(_) => "<s>",
        }
    }

    pub(crate) fn shape(&self, i: isize) -> &str {
        match usize::try_from(i) {
            Ok(i) if i < self.shape.len() => &self.shape[i],
            _ => "-",
        }
    }

    pub(crate) fn glued(&self, i: usize) -> bool {
        self.glued.get(i).copied().unwrap_or(false)
    }
}

/// The decisions so far that the features of the next unit see.
#[derive(Debug, Clone, Copy)]
pub(crate) struct History {
    /// The unit before started a chunk.
    pub(crate) previous_started: bool,
    /// Units in the chunk so far.
    pub(crate) length: usize,
    /// Where the chunk so far started.
    pub(crate) chunk_start: usize,
}

impl History {
    /// Before the second unit.
    pub(crate) const START: History = History {
        previous_started: true,
        length: 1,
        chunk_start: 0,
    };
}

/// Calls `emit` with every feature of unit `i` (i ≥ 1) given the decisions so far: the unit
/// and its neighbours (words two either side; suffixes; shapes; classes and their n-grams),
/// whether it and the next unit are glued to the unit before, and the chunk so far (did the
/// unit before start it, its length, its first unit's class).
pub(crate) fn features(cx: &Context<'_>, i: usize, h: History, mut emit: impl FnMut(&str)) {
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

/// The history after deciding unit `i`.
pub(crate) fn advance(h: History, i: usize, start: bool) -> History {
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
