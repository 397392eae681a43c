//! Chunkers scored against the gold chunks of SemEval-2016 iSTS: the `*.chunk.txt` files
//! read into sentences ([`read_ists_chunks`]), exact-chunk counts ([`ChunkCounts`]) of a
//! learned chunker or a baseline ([`Method`]), per genre and on the pairs held out of training.

use std::ops::Range;
use std::path::Path;

use crate::error::{io_err, Result, UserError};
use crate::text::chunk::{parse_bracketed, ptb_token, Chunker, Class, Context, UnitSentence};

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
/// genres in name order, both sentences of each pair), each file read as the iSTS reader reads
/// its files (UTF-8, a byte-order mark and CRLF line ends allowed).
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
        for (i, line) in super::ists::read_lines(&path)?.iter().enumerate() {
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
