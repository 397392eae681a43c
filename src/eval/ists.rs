//! SemEval-2016 Task 2, interpretable STS (iSTS), without a model: reading the task's files,
//! writing system alignments in its `.wa` layout, and its official F1s.
//!
//! A data directory holds, per genre (`headlines`, `images`, `answers-students`), the sentence
//! files `PREFIX.GENRE.sent1.txt` and `.sent2.txt` (one sentence a line, tokens separated by
//! spaces), optionally the gold chunks `.sent1.chunk.txt` / `.sent2.chunk.txt` (bracketed, read
//! with [`parse_bracketed`]) and the gold alignment `PREFIX.GENRE.wa` (or `STSint.gs.GENRE.wa`,
//! as the 2015 test data names it); PREFIX is `STSint.input` (training data) or
//! `STSint.testinput` (test data).
//!
//! [`evaluate`] is a port of the task's official scorer `evalF1.pl` (Agirre et al., SemEval-2016
//! Task 2; after Melamed 1998, "Manual annotation of translational equivalence", eqs. 1–4):
//! chunk alignments become token:token links, each weighted by 1 / max(fan-out of its two
//! tokens), and precision and recall are pooled over all pairs.
//!
//! Owns the file layout and the scoring arithmetic; knows no encoder, chunker or store.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::{Display, Write as _};
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{io_err, Error, Result, UserError};
use crate::text::chunk::parse_bracketed;

/// File-name prefixes of the sentence files: training data, then test data.
const PREFIXES: [&str; 2] = ["STSint.input.", "STSint.testinput."];

/// What the `.wa` comment shows for the empty side of an unaligned chunk.
const NOT_ALIGNED: &str = "-not aligned-";

/// One gold or system chunk alignment line.
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkAlignment {
    /// 1-based token ids of the chunk of sentence 1; empty for none (written as `0`).
    pub a: Vec<usize>,
    /// 1-based token ids of the chunk of sentence 2; empty for none (written as `0`).
    pub b: Vec<usize>,
    /// Alignment types, e.g. `["SPE1", "FACT"]` (written joined by `_`).
    pub types: Vec<String>,
    /// The similarity score, 0–5; None for `NIL`.
    pub score: Option<f32>,
}

/// One pair of the task.
#[derive(Debug, Clone, PartialEq)]
pub struct IstsPair {
    /// The pair id: the gold `.wa`'s `<sentence id=..>`, or without one the 1-based line number.
    pub id: u32,
    /// Tokens of sentence 1.
    pub tokens1: Vec<String>,
    /// Tokens of sentence 2.
    pub tokens2: Vec<String>,
    /// Gold chunks of sentence 1 as 0-based token index ranges (None without `.chunk.txt`).
    pub chunks1: Option<Vec<Range<usize>>>,
    /// Gold chunks of sentence 2 as 0-based token index ranges (None without `.chunk.txt`).
    pub chunks2: Option<Vec<Range<usize>>>,
    /// The gold alignment lines (None without a gold `.wa`).
    pub gold: Option<Vec<ChunkAlignment>>,
}

/// One `<sentence>` block of a `.wa` file.
#[derive(Debug, Clone, PartialEq)]
pub struct WaPair {
    /// The pair id.
    pub id: u32,
    /// Tokens of sentence 1 (the first `//` line split on single spaces).
    pub tokens1: Vec<String>,
    /// Tokens of sentence 2 (the second `//` line).
    pub tokens2: Vec<String>,
    /// The alignment lines, in file order.
    pub alignments: Vec<ChunkAlignment>,
}

/// The four official F1s of `evalF1.pl`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct F1s {
    /// F1 Ali: token links only.
    pub ali: f64,
    /// F1 Type: each link weighted by the Jaccard of the two type sets.
    #[serde(rename = "type")]
    pub type_: f64,
    /// F1 Score: each link weighted by 1 − |score difference| / 5.
    pub score: f64,
    /// F1 Type+Score: both weights multiplied.
    pub type_score: f64,
}

/// The held-out part of a genre, fixed up front: pair ids divisible by 5.
pub fn held_out(id: u32) -> bool {
    id.is_multiple_of(5)
}

// ---------------------------------------------------------------------------------------------
// Reading a data directory

/// Genres present in `dir` (a genre has both a `sent1.txt` and a `sent2.txt` file), sorted.
pub fn genres(dir: &Path) -> Result<Vec<String>> {
    let context = || format!("reading {}", dir.display());
    let mut found = BTreeSet::new();
    for entry in std::fs::read_dir(dir).map_err(io_err(context()))? {
        let name = entry.map_err(io_err(context()))?.file_name();
        let Some(name) = name.to_str() else { continue };
        for prefix in PREFIXES {
            let genre = name
                .strip_prefix(prefix)
                .and_then(|n| n.strip_suffix(".sent1.txt"));
            if let Some(genre) = genre {
                if dir.join(format!("{prefix}{genre}.sent2.txt")).is_file() {
                    found.insert(genre.to_string());
                }
            }
        }
    }
    Ok(found.into_iter().collect())
}

/// Whether genre `genre` of `dir` comes in the task's test files (`STSint.testinput.*`), not
/// its training files.
pub fn is_test_genre(dir: &Path, genre: &str) -> bool {
    dir.join(format!("STSint.testinput.{genre}.sent1.txt"))
        .is_file()
}

/// The pairs of one genre of `dir`, with gold chunks and alignments where the files exist.
///
/// Tokens are the sentence line split on spaces (a run of spaces counts as one: some released
/// lines have double spaces the gold `.wa` does not). With a gold `.wa`, it must hold one pair
/// per sentence line, in order, with as many tokens; its tokens and ids are used.
pub fn read_genre(dir: &Path, genre: &str) -> Result<Vec<IstsPair>> {
    let files = GenreFiles::find(dir, genre)?;
    let (sent1, sent2) = files.sentences()?;
    let mut pairs = match &files.gold {
        Some(gold) => pairs_with_gold(gold, &files.sent, sent1, sent2)?,
        None => (1u32..)
            .zip(sent1.into_iter().zip(sent2))
            .map(|(id, (tokens1, tokens2))| IstsPair {
                id,
                tokens1,
                tokens2,
                chunks1: None,
                chunks2: None,
                gold: None,
            })
            .collect(),
    };
    for (side, path) in files.chunks.iter().enumerate() {
        if let Some(path) = path {
            attach_chunks(path, side, &mut pairs)?;
        }
    }
    Ok(pairs)
}

/// The token lists of a sentence file, one per line.
type Sentences = Vec<Vec<String>>;

/// The files of one genre.
struct GenreFiles {
    sent: [PathBuf; 2],
    chunks: [Option<PathBuf>; 2],
    gold: Option<PathBuf>,
}

impl GenreFiles {
    fn find(dir: &Path, genre: &str) -> Result<GenreFiles> {
        let name = |prefix: &str, suffix: &str| dir.join(format!("{prefix}{genre}.{suffix}"));
        let prefix = PREFIXES
            .into_iter()
            .find(|p| name(p, "sent1.txt").is_file())
            .ok_or_else(|| {
                bad_file(
                    &name(PREFIXES[0], "sent1.txt"),
                    format!(
                        "no such file (nor {}): give the directory of the SemEval-2016 iSTS files \
                         and a genre it holds",
                        name(PREFIXES[1], "sent1.txt").display()
                    ),
                )
            })?;
        let existing = |path: PathBuf| path.is_file().then_some(path);
        Ok(GenreFiles {
            sent: [name(prefix, "sent1.txt"), name(prefix, "sent2.txt")],
            chunks: [
                existing(name(prefix, "sent1.chunk.txt")),
                existing(name(prefix, "sent2.chunk.txt")),
            ],
            gold: existing(name(prefix, "wa")).or_else(|| existing(name("STSint.gs.", "wa"))),
        })
    }

    /// Both sentence files' tokens, checked to have as many lines.
    fn sentences(&self) -> Result<(Sentences, Sentences)> {
        let read = |path: &Path| -> Result<Sentences> {
            Ok(read_lines(path)?
                .iter()
                .map(|l| sentence_tokens(l))
                .collect())
        };
        let (sent1, sent2) = (read(&self.sent[0])?, read(&self.sent[1])?);
        if sent1.len() != sent2.len() {
            return Err(bad_file(
                &self.sent[1],
                format!(
                    "{} lines but {} has {}: the two sentence files of a genre pair up line by line",
                    sent2.len(),
                    self.sent[0].display(),
                    sent1.len()
                ),
            ));
        }
        Ok((sent1, sent2))
    }
}

/// The pairs of a genre with a gold `.wa`, checked against the sentence files.
fn pairs_with_gold(
    gold: &Path,
    sent: &[PathBuf; 2],
    sent1: Sentences,
    sent2: Sentences,
) -> Result<Vec<IstsPair>> {
    let wa = parse_wa_text(&read_lines(gold)?.join("\n"))
        .map_err(|(line, problem)| bad_file(gold, format!("line {line}: {problem}")))?;
    if wa.len() != sent1.len() {
        return Err(bad_file(
            gold,
            format!(
                "{} pairs but {} has {} lines: the gold alignment holds one pair per sentence \
                 line, in order",
                wa.len(),
                sent[0].display(),
                sent1.len()
            ),
        ));
    }
    let mut pairs = Vec::with_capacity(wa.len());
    for (line, (w, (t1, t2))) in (1..).zip(wa.into_iter().zip(sent1.into_iter().zip(sent2))) {
        check_token_count(gold, &w, 1, t1.len(), (&sent[0], line))?;
        check_token_count(gold, &w, 2, t2.len(), (&sent[1], line))?;
        pairs.push(IstsPair {
            id: w.id,
            tokens1: w.tokens1,
            tokens2: w.tokens2,
            chunks1: None,
            chunks2: None,
            gold: Some(w.alignments),
        });
    }
    Ok(pairs)
}

/// Checks that sentence `k` of a gold pair has the `count` tokens of its line in a sentence file.
fn check_token_count(
    gold: &Path,
    pair: &WaPair,
    k: usize,
    count: usize,
    (file, line): (&Path, usize),
) -> Result<()> {
    let listed = if k == 1 { &pair.tokens1 } else { &pair.tokens2 };
    if listed.len() == count {
        return Ok(());
    }
    Err(bad_file(
        gold,
        format!(
            "pair {}: sentence {k} has {} tokens here but {count} in {} line {line}: the gold \
             alignment and the sentence files must come from the same release",
            pair.id,
            listed.len(),
            file.display(),
        ),
    ))
}

/// Reads the gold chunks of sentence `side` (0 or 1) of every pair from a `.chunk.txt` file.
fn attach_chunks(path: &Path, side: usize, pairs: &mut [IstsPair]) -> Result<()> {
    let lines = read_lines(path)?;
    if lines.len() != pairs.len() {
        return Err(bad_file(
            path,
            format!(
                "{} lines but the genre has {} pairs: the chunk file holds one line per sentence",
                lines.len(),
                pairs.len()
            ),
        ));
    }
    for (n, (line, pair)) in lines.iter().zip(pairs.iter_mut()).enumerate() {
        let (tokens, chunks) = match side {
            0 => (&pair.tokens1, &mut pair.chunks1),
            _ => (&pair.tokens2, &mut pair.chunks2),
        };
        let (chunk_tokens, ranges) = parse_bracketed(line).unwrap_or_default();
        if chunk_tokens.len() != tokens.len() {
            return Err(bad_file(
                path,
                format!(
                    "line {}: {} tokens in the chunks but {} in sentence {} of pair {}: the chunk \
                     files and the sentence files must come from the same release",
                    n + 1,
                    chunk_tokens.len(),
                    tokens.len(),
                    side + 1,
                    pair.id
                ),
            ));
        }
        *chunks = Some(ranges);
    }
    Ok(())
}

/// The lines of a UTF-8 text file, without line ends (LF or CRLF), a byte-order mark, or blank
/// lines at the end.
pub(super) fn read_lines(path: &Path) -> Result<Vec<String>> {
    let raw = std::fs::read(path).map_err(io_err(format!("reading {}", path.display())))?;
    let text = String::from_utf8(raw)
        .map_err(|e| bad_file(path, format!("not UTF-8 ({e}): save it as UTF-8")))?;
    let mut lines: Vec<String> = text
        .trim_start_matches('\u{feff}')
        .lines()
        .map(|l| l.trim_end_matches('\r').to_string())
        .collect();
    while lines.last().is_some_and(|l| l.trim().is_empty()) {
        lines.pop();
    }
    Ok(lines)
}

/// A sentence line's tokens: split on spaces, a run of spaces counting as one.
fn sentence_tokens(line: &str) -> Vec<String> {
    line.split(' ')
        .filter(|t| !t.is_empty())
        .map(String::from)
        .collect()
}

/// A bad input file, as the error the user reads.
fn bad_file(path: &Path, problem: impl Display) -> Error {
    UserError::InvalidArgument {
        name: "iSTS file",
        reason: format!("{}: {problem}", path.display()),
    }
    .into()
}

// ---------------------------------------------------------------------------------------------
// The .wa format

/// Parses the text of a `.wa` file: its `<sentence id=..>` blocks, each block's two `//` token
/// lines and its alignment lines (`1 2 <==> 3 // EQUI // 5 // comment`); the `<source>` and
/// `<translation>` listings are not read. Token ids must lie within the block's sentences.
pub fn parse_wa(text: &str) -> Result<Vec<WaPair>> {
    parse_wa_text(text).map_err(|(line, problem)| {
        UserError::InvalidArgument {
            name: "iSTS alignment (.wa)",
            reason: format!("line {line}: {problem}"),
        }
        .into()
    })
}

/// [`parse_wa`] with errors as (1-based line, problem).
fn parse_wa_text(text: &str) -> Result<Vec<WaPair>, (usize, String)> {
    let mut pairs: Vec<WaPair> = Vec::new();
    let mut lines = (1..).zip(text.trim_start_matches('\u{feff}').lines());
    while let Some((n, line)) = lines.next() {
        let line = line.trim_end_matches('\r');
        if let Some(id) = sentence_id(line) {
            let id = id.map_err(|p| (n, p))?;
            let tokens1 = token_line(lines.next(), n, 1)?;
            let tokens2 = token_line(lines.next(), n, 2)?;
            pairs.push(WaPair {
                id,
                tokens1,
                tokens2,
                alignments: Vec::new(),
            });
        } else if line.contains("<==>") {
            let pair = pairs.last_mut().ok_or_else(|| {
                (
                    n,
                    "an alignment line before any <sentence id=\"..\"> line".to_string(),
                )
            })?;
            let alignment = parse_alignment(line, pair).map_err(|p| (n, p))?;
            pair.alignments.push(alignment);
        }
    }
    Ok(pairs)
}

/// The id of a `<sentence id="N" ..>` line; None for any other line.
fn sentence_id(line: &str) -> Option<Result<u32, String>> {
    const OPEN: &str = "sentence id=\"";
    let start = line.find(OPEN)? + OPEN.len();
    let value = line[start..].split('"').next().unwrap_or("");
    Some(
        value
            .trim()
            .parse()
            .map_err(|_| format!("sentence id {value:?} is not a whole number")),
    )
}

/// The tokens of the `k`th `//` line after the sentence line `at`: split on single spaces as
/// the scorer splits them (trailing empty fields dropped, as Perl's `split` does).
fn token_line(
    line: Option<(usize, &str)>,
    at: usize,
    k: usize,
) -> Result<Vec<String>, (usize, String)> {
    let missing = || {
        (
            at + k,
            format!("expected sentence {k} as a `// tokens` line after line {at}"),
        )
    };
    let (_, line) = line.ok_or_else(missing)?;
    let text = line
        .trim_end_matches('\r')
        .strip_prefix("//")
        .ok_or_else(missing)?;
    let text = text.strip_prefix(' ').unwrap_or(text);
    let mut tokens: Vec<String> = text.split(' ').map(String::from).collect();
    while tokens.last().is_some_and(String::is_empty) {
        tokens.pop();
    }
    Ok(tokens)
}

/// One alignment line of `pair`: `IDS <==> IDS // TYPES // SCORE // comment`.
fn parse_alignment(line: &str, pair: &WaPair) -> Result<ChunkAlignment, String> {
    let mut fields = line.split("//");
    let expected = || format!("expected `ids <==> ids // TYPE // score // comment`, got {line:?}");
    let ids = fields.next().ok_or_else(expected)?;
    let types = fields.next().ok_or_else(expected)?;
    let score = fields.next().ok_or_else(expected)?;
    let (a, b) = ids.split_once("<==>").ok_or_else(expected)?;
    Ok(ChunkAlignment {
        a: token_ids(a, pair.tokens1.len(), 1)?,
        b: token_ids(b, pair.tokens2.len(), 2)?,
        types: types
            .trim()
            .split('_')
            .filter(|t| !t.is_empty())
            .map(String::from)
            .collect(),
        score: parse_score(score.trim())?,
    })
}

/// The 1-based token ids of one side (`0` alone or nothing: no chunk), within `1..=len`.
fn token_ids(side: &str, len: usize, k: usize) -> Result<Vec<usize>, String> {
    let ids = side
        .split_whitespace()
        .map(|t| {
            t.parse::<usize>()
                .map_err(|_| format!("token id {t:?} is not a whole number"))
        })
        .collect::<Result<Vec<usize>, String>>()?;
    if ids == [0] {
        return Ok(Vec::new());
    }
    match ids.iter().find(|&&t| t == 0 || t > len) {
        Some(0) => Err("token id 0 (no chunk) stands alone on its side".into()),
        Some(t) => Err(format!("token id {t} but sentence {k} has {len} tokens")),
        None => Ok(ids),
    }
}

/// A score field: a number or `NIL`.
fn parse_score(field: &str) -> Result<Option<f32>, String> {
    if field.eq_ignore_ascii_case("NIL") {
        return Ok(None);
    }
    match field.parse::<f32>() {
        Ok(s) if s.is_finite() => Ok(Some(s)),
        _ => Err(format!("score {field:?} is neither a number nor NIL")),
    }
}

/// The `.wa` text of `pairs` in the task's layout (what `evalF1.pl` and `wellformed.pl` read):
/// the token lines and listings, and one alignment line per [`ChunkAlignment`] with the two
/// chunks' texts as its comment. [`parse_wa`] reads it back unchanged.
pub fn write_wa(pairs: &[WaPair]) -> String {
    let mut out = String::new();
    for pair in pairs {
        write_pair(&mut out, pair).expect("writing to a String cannot fail");
    }
    out
}

/// One `<sentence>` block of [`write_wa`].
fn write_pair(out: &mut String, pair: &WaPair) -> std::fmt::Result {
    writeln!(out, "<sentence id=\"{}\" status=\"\">", pair.id)?;
    writeln!(out, "// {}", pair.tokens1.join(" "))?;
    writeln!(out, "// {}", pair.tokens2.join(" "))?;
    for (tag, tokens) in [("source", &pair.tokens1), ("translation", &pair.tokens2)] {
        writeln!(out, "<{tag}>")?;
        for (i, t) in tokens.iter().enumerate() {
            writeln!(out, "{} {t} : ", i + 1)?;
        }
        writeln!(out, "</{tag}>")?;
    }
    writeln!(out, "<alignment>")?;
    for line in &pair.alignments {
        let score = line
            .score
            .map_or_else(|| "NIL".to_string(), |s| s.to_string());
        writeln!(
            out,
            "{} <==> {} // {} // {score} // {} <==> {} ",
            ids_field(&line.a),
            ids_field(&line.b),
            line.types.join("_"),
            chunk_text(&pair.tokens1, &line.a),
            chunk_text(&pair.tokens2, &line.b),
        )?;
    }
    writeln!(out, "</alignment>\n</sentence>\n\n")
}

/// A side's token ids as the task writes them (`0` for none).
fn ids_field(ids: &[usize]) -> String {
    if ids.is_empty() {
        return "0".into();
    }
    ids.iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(" ")
}

/// A chunk's words for the comment part (`-not aligned-` for none).
fn chunk_text(tokens: &[String], ids: &[usize]) -> String {
    if ids.is_empty() {
        return NOT_ALIGNED.into();
    }
    let word = |&i: &usize| {
        i.checked_sub(1)
            .and_then(|i| tokens.get(i))
            .map_or("?", String::as_str)
    };
    ids.iter().map(word).collect::<Vec<_>>().join(" ")
}

// ---------------------------------------------------------------------------------------------
// Scoring: the port of evalF1.pl

/// The official F1s of a system's alignments against the gold ones (`evalF1.pl gold sys`).
///
/// Every chunk:chunk line with two chunks links all tokens of one to all of the other, after
/// dropping punctuation tokens (`. , : ' ` ? ; " -`, judged on the *gold* pair's tokens for
/// both files); a later line overrides the type and score of a link met before. A link
/// (t1, t2) weighs w = 1 / max(fanout₁₂(t1), fanout₂₁(t2)) within its own file. Then
/// P = Σ_sys∩gold w_sys·f / Σ_sys w_sys, R = Σ_gold∩sys w_gold·f / Σ_gold w_gold, pooled over
/// all pairs, F1 = 2PR/(P+R); the factor f is 1 (Ali), the Jaccard of the lower-cased type sets
/// (Type), 1 − |s_sys − s_gold|/5 with NIL as 0 (Score), or their product (Type+Score). The
/// released script's special cases for Type+Score all fall back to plain Jaccard, as here.
/// Pairs in one file only add to that file's total.
pub fn evaluate(gold: &[WaPair], sys: &[WaPair]) -> F1s {
    let gold_tokens: HashMap<u32, &WaPair> = gold.iter().map(|p| (p.id, p)).collect();
    let gold_links = links_by_pair(gold, Some);
    let sys_links = links_by_pair(sys, |p| gold_tokens.get(&p.id).copied());
    let (sys_total, sys_overlap) = measure(&sys_links, &gold_links);
    let (gold_total, gold_overlap) = measure(&gold_links, &sys_links);
    let f1 = |m: usize| {
        let precision = ratio(sys_overlap[m], sys_total);
        let recall = ratio(gold_overlap[m], gold_total);
        if precision + recall == 0.0 {
            0.0
        } else {
            2.0 * precision * recall / (precision + recall)
        }
    };
    F1s {
        ali: f1(0),
        type_: f1(1),
        score: f1(2),
        type_score: f1(3),
    }
}

/// One token link's type set (lower-cased) and score (NIL as 0).
#[derive(Debug, Clone, PartialEq)]
struct Link {
    types: BTreeSet<String>,
    score: f64,
}

/// The token links of one pair, keyed by (t1, t2).
type Links = BTreeMap<(usize, usize), Link>;

/// The links of every pair of a file, by pair id; `strings` gives the pair whose token strings
/// decide punctuation (the gold pair of that id).
fn links_by_pair<'a>(
    pairs: &'a [WaPair],
    strings: impl Fn(&'a WaPair) -> Option<&'a WaPair>,
) -> BTreeMap<u32, Links> {
    let mut out: BTreeMap<u32, Links> = BTreeMap::new();
    for pair in pairs {
        let links = out.entry(pair.id).or_default();
        let tokens = strings(pair).map(|p| (&p.tokens1[..], &p.tokens2[..]));
        for line in &pair.alignments {
            add_links(links, line, tokens);
        }
    }
    out
}

/// The links of one chunk alignment line (none when a side is empty, before or after dropping
/// punctuation).
fn add_links(links: &mut Links, line: &ChunkAlignment, tokens: Option<(&[String], &[String])>) {
    let kept = |ids: &[usize], strings: Option<&[String]>| -> Vec<usize> {
        let punctuation = |&t: &usize| {
            let word = t.checked_sub(1).and_then(|i| strings?.get(i));
            word.is_some_and(|w| is_punctuation(w))
        };
        ids.iter().copied().filter(|t| !punctuation(t)).collect()
    };
    let a = kept(&line.a, tokens.map(|t| t.0));
    let b = kept(&line.b, tokens.map(|t| t.1));
    let link = Link {
        types: line.types.iter().map(|t| t.to_lowercase()).collect(),
        score: line.score.map_or(0.0, f64::from),
    };
    for &t1 in &a {
        for &t2 in &b {
            links.insert((t1, t2), link.clone());
        }
    }
}

/// The scorer's punctuation: a token that is one of `. , : ' ` ? ; " -`.
fn is_punctuation(token: &str) -> bool {
    let mut chars = token.chars();
    matches!(
        (chars.next(), chars.next()),
        (
            Some('.' | ',' | ':' | '\'' | '`' | '?' | ';' | '"' | '-'),
            None
        )
    )
}

/// Each link with its fan-out weight 1 / max(fanout₁₂(t1), fanout₂₁(t2)).
fn weighted(links: &Links) -> impl Iterator<Item = ((usize, usize), f64, &Link)> {
    let mut fan12: HashMap<usize, usize> = HashMap::new();
    let mut fan21: HashMap<usize, usize> = HashMap::new();
    for &(t1, t2) in links.keys() {
        *fan12.entry(t1).or_default() += 1;
        *fan21.entry(t2).or_default() += 1;
    }
    links.iter().map(move |(&(t1, t2), link)| {
        let fanout = fan12[&t1].max(fan21[&t2]);
        ((t1, t2), 1.0 / fanout as f64, link)
    })
}

/// Σ w over `own`'s links, and per mode (Ali, Type, Score, Type+Score) Σ w·f over those also
/// in `other`, w being `own`'s weight.
fn measure(own: &BTreeMap<u32, Links>, other: &BTreeMap<u32, Links>) -> (f64, [f64; 4]) {
    let mut total = 0.0;
    let mut overlap = [0.0; 4];
    for (id, links) in own {
        for (key, w, link) in weighted(links) {
            total += w;
            let Some(theirs) = other.get(id).and_then(|l| l.get(&key)) else {
                continue;
            };
            for (o, f) in overlap.iter_mut().zip(factors(link, theirs)) {
                *o += w * f;
            }
        }
    }
    (total, overlap)
}

/// The factor of a link present in both files, per mode: Ali, Type, Score, Type+Score.
fn factors(a: &Link, b: &Link) -> [f64; 4] {
    let union = a.types.union(&b.types).count();
    let jaccard = if union == 0 {
        1.0 // both untyped; the Perl script divides by zero here
    } else {
        a.types.intersection(&b.types).count() as f64 / union as f64
    };
    let score = 1.0 - (a.score - b.score).abs() / 5.0;
    [1.0, jaccard, score, score * jaccard]
}

/// a / b, or 0 when b is 0 (as the script guards its divisions).
fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 {
        0.0
    } else {
        a / b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(a: &[usize], b: &[usize], types: &str, score: Option<f32>) -> ChunkAlignment {
        ChunkAlignment {
            a: a.to_vec(),
            b: b.to_vec(),
            types: types.split('_').map(String::from).collect(),
            score,
        }
    }

    fn pair(id: u32, s1: &str, s2: &str, alignments: Vec<ChunkAlignment>) -> WaPair {
        let split = |s: &str| s.split(' ').map(String::from).collect();
        WaPair {
            id,
            tokens1: split(s1),
            tokens2: split(s2),
            alignments,
        }
    }

    fn assert_f1s(got: F1s, want: [f64; 4]) {
        let got_all = [got.ali, got.type_, got.score, got.type_score];
        for (g, w) in got_all.iter().zip(want) {
            assert!((g - w).abs() < 1e-12, "got {got:?}, want {want:?}");
        }
    }

    #[test]
    fn a_token_linked_twice_splits_its_weight() {
        // Gold: a↔x, and the 2:1 chunk "b c"↔y: links (1,1) w 1, (2,2) and (3,2) w 1/2 each
        // (y's fan-out is 2), |g| = 2. System: a↔x, b↔y, each w 1, |s| = 2.
        // overlapSYS = 1 + 1 = 2 → P = 1; overlapGS = 1 + 1/2 → R = 3/4; F1 = 2·(3/4)/(7/4) = 6/7.
        let gold = [pair(
            1,
            "a b c",
            "x y",
            vec![
                line(&[1], &[1], "EQUI", Some(5.0)),
                line(&[2, 3], &[2], "SPE1", Some(4.0)),
            ],
        )];
        let sys = [pair(
            1,
            "a b c",
            "x y",
            vec![
                line(&[1], &[1], "EQUI", Some(5.0)),
                line(&[2], &[2], "SPE1", Some(4.0)),
            ],
        )];
        assert_f1s(evaluate(&gold, &sys), [6.0 / 7.0; 4]);
    }

    #[test]
    fn types_count_by_jaccard_and_scores_by_their_difference() {
        // Two 1:1 links, w 1 each, |s| = |g| = 2, both in both files.
        // Type: {spe1,fact} vs {spe1} = 1/2, EQUI vs equi = 1 (lower-cased) → 3/2 / 2 = 0.75.
        // Score: 1 − |4−3|/5 = 0.8, and 1 → 1.8 / 2 = 0.9. Type+Score: 0.8·0.5 + 1 = 1.4 → 0.7.
        let gold = [pair(
            1,
            "a b",
            "x y",
            vec![
                line(&[1], &[1], "SPE1_FACT", Some(3.0)),
                line(&[2], &[2], "EQUI", Some(5.0)),
            ],
        )];
        let sys = [pair(
            1,
            "a b",
            "x y",
            vec![
                line(&[1], &[1], "SPE1", Some(4.0)),
                line(&[2], &[2], "equi", Some(5.0)),
            ],
        )];
        assert_f1s(evaluate(&gold, &sys), [1.0, 0.75, 0.9, 0.7]);
    }

    #[test]
    fn punctuation_is_dropped_by_the_gold_pairs_tokens() {
        // Gold tokens: 1 Hello 2 , 3 world 4 . | 1 Hi 2 world 3 ! ("!" is not punctuation to
        // the scorer). Gold links: (1,1) ("," dropped), (3,2); "." ↔ "!" drops to nothing; the
        // NOALI line links nothing. |g| = 2.
        // The system's own tokens (X, Y) are ignored: gold's decide. System links: (1,1) w 1,
        // (3,2) and (3,3) w 1/2 each (token 3 fans out to two); "Y"(= ".") ↔ "!" nothing.
        // |s| = 2; overlapSYS = 1 + 1/2 → P = 3/4; overlapGS = 1 + 1 → R = 1; F1 = 6/7.
        let gold = [pair(
            1,
            "Hello , world .",
            "Hi world !",
            vec![
                line(&[1, 2], &[1], "EQUI", Some(5.0)),
                line(&[3], &[2], "EQUI", Some(5.0)),
                line(&[4], &[3], "EQUI", Some(5.0)),
                line(&[], &[3], "NOALI", None),
            ],
        )];
        let sys = [pair(
            1,
            "Hello X world Y",
            "Hi world !",
            vec![
                line(&[1, 2], &[1], "EQUI", Some(5.0)),
                line(&[3], &[2, 3], "EQUI", Some(5.0)),
                line(&[4], &[3], "EQUI", Some(5.0)),
            ],
        )];
        assert_f1s(evaluate(&gold, &sys), [6.0 / 7.0; 4]);
    }

    #[test]
    fn pairs_in_one_file_only_count_in_its_total() {
        // Gold pairs 1 and 2, one link each: |g| = 2. The system has pair 1 (right) and pair 3
        // (not in gold): |s| = 2. Overlaps 1 each → P = R = 1/2 → F1 = 1/2.
        let one = || vec![line(&[1], &[1], "EQUI", Some(5.0))];
        let gold = [pair(1, "a", "x", one()), pair(2, "b", "y", one())];
        let sys = [pair(1, "a", "x", one()), pair(3, "c", "z", one())];
        assert_f1s(evaluate(&gold, &sys), [0.5; 4]);
        assert_f1s(evaluate(&gold, &[]), [0.0; 4]);
        assert_f1s(evaluate(&[], &sys), [0.0; 4]);
    }

    #[test]
    fn later_lines_override_a_link_and_nil_scores_count_as_zero() {
        // Pair 1: gold's second line overrides the first → SIMI 3 on (1,1), as the system says.
        // Pair 2: NIL against 5 → score factor 1 − 5/5 = 0. |s| = |g| = 2.
        // Ali = Type = 1; Score = Type+Score = (1 + 0) / 2 = 1/2.
        let gold = [
            pair(
                1,
                "a",
                "x",
                vec![
                    line(&[1], &[1], "EQUI", Some(5.0)),
                    line(&[1], &[1], "SIMI", Some(3.0)),
                ],
            ),
            pair(2, "b", "y", vec![line(&[1], &[1], "EQUI", Some(5.0))]),
        ];
        let sys = [
            pair(1, "a", "x", vec![line(&[1], &[1], "SIMI", Some(3.0))]),
            pair(2, "b", "y", vec![line(&[1], &[1], "EQUI", None)]),
        ];
        assert_f1s(evaluate(&gold, &sys), [1.0, 1.0, 0.5, 0.5]);
    }

    const EXAMPLE: &str = "<sentence id=\"1\" status=\"\">\r
// Former Nazi death camp guard Demjanjuk dead at 91\r
// John Demjanjuk , convicted Nazi death camp guard , dies aged 91\r
<source>\r
1 Former : \r
</source>\r
<translation>\r
1 John : \r
</translation>\r
<alignment>\r
8 9 <==> 11 12 // EQUI // 5 // at 91 <==> aged 91 \r
1 2 3 4 5 6 <==> 1 2 4 5 6 7 8 // SPE1_FACT // 3 // Former Nazi <==> John \r
0 <==> 3 // NOALI // NIL // -not aligned- <==> , \r
</alignment>\r
</sentence>\r
";

    #[test]
    fn parse_wa_reads_the_task_layout() {
        let pairs = parse_wa(EXAMPLE).expect("parses");
        assert_eq!(pairs.len(), 1);
        let p = &pairs[0];
        assert_eq!((p.id, p.tokens1.len(), p.tokens2.len()), (1, 9, 12));
        assert_eq!(p.tokens2[2], ",");
        assert_eq!(
            p.alignments,
            [
                line(&[8, 9], &[11, 12], "EQUI", Some(5.0)),
                line(
                    &[1, 2, 3, 4, 5, 6],
                    &[1, 2, 4, 5, 6, 7, 8],
                    "SPE1_FACT",
                    Some(3.0)
                ),
                line(&[], &[3], "NOALI", None),
            ]
        );
    }

    #[test]
    fn parse_wa_errors_name_the_line_and_the_problem() {
        let err = |text: &str| parse_wa(text).expect_err("rejected").to_string();
        assert_eq!(
            err("1 <==> 1 // EQUI // 5 // a <==> b"),
            "invalid iSTS alignment (.wa): line 1: an alignment line before any \
             <sentence id=\"..\"> line"
        );
        let head = "<sentence id=\"7\" status=\"\">\n// a b\n// x\n";
        assert_eq!(
            err(&format!("{head}1 <==> 2 // EQUI // 5 // a <==> ?")),
            "invalid iSTS alignment (.wa): line 4: token id 2 but sentence 2 has 1 tokens"
        );
        assert_eq!(
            err(&format!("{head}1 <==> 1 // EQUI // five // a <==> x")),
            "invalid iSTS alignment (.wa): line 4: score \"five\" is neither a number nor NIL"
        );
        assert_eq!(
            err(&format!("{head}0 1 <==> 1 // EQUI // 5 // a <==> x")),
            "invalid iSTS alignment (.wa): line 4: token id 0 (no chunk) stands alone on its side"
        );
        assert!(err("<sentence id=\"7\">\n// a b\n").contains("line 3: expected sentence 2"));
    }

    #[test]
    fn write_wa_round_trips_through_parse_wa() {
        let pairs = vec![
            pair(
                3,
                "Saudis to permit women",
                "Saudi Women Allowed",
                vec![
                    line(&[1], &[1, 2], "REL", Some(3.0)),
                    line(&[2, 3], &[3], "SPE2_POL", Some(2.5)),
                    line(&[4], &[], "NOALI", None),
                    line(&[], &[2], "ALIC", None),
                ],
            ),
            pair(10, "Café ?", "über alles", vec![]),
        ];
        let text = write_wa(&pairs);
        assert!(text.contains(
            "2 3 <==> 3 // SPE2_POL // 2.5 // to permit <==> Allowed \n\
             4 <==> 0 // NOALI // NIL // women <==> -not aligned- \n"
        ));
        assert!(text.contains("<source>\n1 Saudis : \n2 to : \n"));
        assert_eq!(parse_wa(&text).expect("parses"), pairs);
    }

    /// Writes `files` (name, content) into a fresh directory.
    fn data_dir(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        for (name, content) in files {
            std::fs::write(dir.path().join(name), content).expect("write");
        }
        dir
    }

    const GOLD_2: &str = "<sentence id=\"1\" status=\"\">\n// a b\n// x\n\
        <alignment>\n1 2 <==> 1 // EQUI // 5 // a b <==> x\n</alignment>\n</sentence>\n\n\
        <sentence id=\"2\" status=\"\">\n// c\n// ü y\n\
        <alignment>\n1 <==> 2 // SIMI // 4 // c <==> y\n0 <==> 1 // NOALI // NIL // <==> ü\n\
        </alignment>\n</sentence>\n";

    #[test]
    fn read_genre_reads_test_layout_with_crlf_and_2015_gold_name() {
        let dir = data_dir(&[
            ("STSint.testinput.news.sent1.txt", "a  b\r\nc\r\n"),
            ("STSint.testinput.news.sent2.txt", "x\r\nü y\r\n\r\n"),
            (
                "STSint.testinput.news.sent1.chunk.txt",
                "[ a b ]\r\n[ c ]\r\n",
            ),
            ("STSint.gs.news.wa", GOLD_2),
            ("STSint.input.other.sent1.txt", "lonely\n"),
        ]);
        assert_eq!(genres(dir.path()).expect("lists"), ["news"]);
        let pairs = read_genre(dir.path(), "news").expect("reads");
        assert_eq!(pairs.len(), 2);
        assert_eq!(pairs[0].tokens1, ["a", "b"]);
        assert_eq!(pairs[1].tokens2, ["ü", "y"]);
        let chunks1 = pairs[0].chunks1.as_deref().expect("chunks");
        assert_eq!((chunks1.len(), chunks1[0].clone()), (1, 0..2));
        assert_eq!(pairs[1].chunks2, None);
        assert_eq!(
            pairs[1].gold,
            Some(vec![
                line(&[1], &[2], "SIMI", Some(4.0)),
                line(&[], &[1], "NOALI", None),
            ])
        );
        assert!(read_genre(dir.path(), "sports").is_err());
    }

    #[test]
    fn read_genre_without_gold_numbers_pairs_by_line() {
        let dir = data_dir(&[
            ("STSint.input.news.sent1.txt", "a b\nc\nd\n"),
            ("STSint.input.news.sent2.txt", "x\ny\nz\n"),
        ]);
        let pairs = read_genre(dir.path(), "news").expect("reads");
        let ids: Vec<u32> = pairs.iter().map(|p| p.id).collect();
        assert_eq!(ids, [1, 2, 3]);
        assert!(pairs
            .iter()
            .all(|p| p.gold.is_none() && p.chunks1.is_none()));
    }

    #[test]
    fn read_genre_names_the_file_and_place_of_a_mismatch() {
        let base = [
            ("STSint.input.news.sent1.txt", "a b\nc\n"),
            ("STSint.input.news.sent2.txt", "x\nü y\n"),
        ];
        let err = |extra: (&str, &str)| {
            let mut files = base.to_vec();
            files.push(extra);
            let dir = data_dir(&files);
            let e = read_genre(dir.path(), "news")
                .expect_err("rejected")
                .to_string();
            e.replace(&format!("{}/", dir.path().display()), "")
        };
        assert_eq!(
            err((
                "STSint.input.news.sent2.chunk.txt",
                "[ x ]\n[ ü ] [ y ] [ z ]\n"
            )),
            "invalid iSTS file: STSint.input.news.sent2.chunk.txt: line 2: 3 tokens in the chunks \
             but 2 in sentence 2 of pair 2: the chunk files and the sentence files must come \
             from the same release"
        );
        let wrong = GOLD_2.replace("// c\n", "// c d\n");
        assert_eq!(
            err(("STSint.input.news.wa", &wrong)),
            "invalid iSTS file: STSint.input.news.wa: pair 2: sentence 1 has 2 tokens here but 1 \
             in STSint.input.news.sent1.txt line 2: the gold alignment and the sentence files \
             must come from the same release"
        );
    }

    /// The SemEval-2016 iSTS training data beside the checkout, or None (with a note) when it
    /// is not there outside CI.
    fn shared_ists_train() -> Option<PathBuf> {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data/ists2016_train");
        if dir.is_dir() {
            return Some(dir);
        }
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "missing {} in CI: the iSTS tests read ../shared/data beside the checkout",
            dir.display()
        );
        eprintln!(
            "note: {} is missing; skipping the iSTS data test",
            dir.display()
        );
        None
    }

    #[test]
    fn released_gold_scores_one_against_itself_and_round_trips() {
        let Some(dir) = shared_ists_train() else {
            return;
        };
        let found = genres(&dir).expect("lists genres");
        assert_eq!(found, ["answers-students", "headlines", "images"]);
        for (genre, expected) in [
            ("headlines", 756),
            ("images", 750),
            ("answers-students", 330),
        ] {
            let pairs = read_genre(&dir, genre).expect("reads the genre");
            eprintln!("{genre}: {} pairs", pairs.len());
            assert_eq!(pairs.len(), expected, "{genre}");
            assert!(pairs
                .iter()
                .all(|p| p.chunks1.is_some() && p.chunks2.is_some()));
            let gold: Vec<WaPair> = pairs
                .iter()
                .map(|p| WaPair {
                    id: p.id,
                    tokens1: p.tokens1.clone(),
                    tokens2: p.tokens2.clone(),
                    alignments: p.gold.clone().expect("gold alignment"),
                })
                .collect();
            assert_f1s(evaluate(&gold, &gold), [1.0; 4]);
            assert_eq!(parse_wa(&write_wa(&gold)).expect("parses"), gold, "{genre}");
        }
    }
}
