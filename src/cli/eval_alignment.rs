//! `kindred eval alignment`: kindred's phrase alignment against SemEval-2016 iSTS gold
//! alignments — the official F1 Ali, Type, Score and Type+Score per genre, next to the
//! word-overlap baseline — and, with `--out-wa`, the alignments in the task's own format.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Args as ClapArgs, ValueEnum};
use serde_json::json;

use kindred::eval::alignment::{encode_pairs, kindred_pair, report, Chunking, GenreReport, Models};
use kindred::eval::ists::{self, IstsPair, WaPair};
use kindred::index::LexicalIndex;
use kindred::score::{weights, Weights};
use kindred::search::Weighting;
use kindred::{Encoded, Encoder};

use super::train_aligner::{load_aligner, load_chunker, phrasing};

#[derive(Debug, ClapArgs)]
pub struct AlignmentArgs {
    /// Folder in the iSTS layout: STSint.input.<genre>.{sent1,sent2}[.chunk].txt and .wa
    /// (train), or STSint.testinput.<genre>.* (test).
    #[arg(long, value_name = "DIR")]
    pub data: PathBuf,
    /// Genres to score (default: every genre in DIR).
    #[arg(long = "genre", value_name = "G")]
    pub genres: Vec<String>,
    /// Use the gold chunks (*.chunk.txt) instead of kindred's own chunker.
    #[arg(long)]
    pub gold_chunks: bool,
    /// Which pairs [default: all of a genre in the task's test files (STSint.testinput.*);
    /// of one in the training files, the part held out of kindred's own fitting (ids
    /// divisible by 5)].
    #[arg(long, value_enum)]
    pub part: Option<Part>,
    /// RCMD's token weights: uniform, or idf (each wordpiece weighs its word's IDF over the
    /// genre's sentences).
    #[arg(long, value_name = "uniform|idf", default_value = "uniform", value_parser = super::global::parse_weighting)]
    pub weights: Weighting,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// A phrase aligner (from `kindred train aligner`) instead of the shipped one.
    #[arg(long, value_name = "FILE")]
    pub aligner: Option<PathBuf>,
    /// A chunker (from `kindred train chunker`) instead of the shipped ones (the contextual
    /// chunker where it reads the model's states, else the word chunker).
    #[arg(long, value_name = "FILE")]
    pub chunker: Option<PathBuf>,
    /// Also write kindred's alignments as DIR/<genre>.wa (the task's format; evalF1.pl reads
    /// them).
    #[arg(long, value_name = "DIR")]
    pub out_wa: Option<PathBuf>,
}

/// Which pairs of the data are scored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Part {
    /// Pair ids divisible by 5 (what kindred's chunker and aligner never saw in fitting).
    HeldOut,
    /// The other pairs (what they were fitted on).
    Train,
    /// Pair ids that are 1 mod 5: what `kindred train chunker --dev` scores and leaves out of
    /// its training, for choosing settings without the held-out pairs.
    Dev,
    /// Every pair.
    All,
}

impl Part {
    fn keeps(self, id: u32) -> bool {
        match self {
            Part::HeldOut => ists::held_out(id),
            Part::Train => !ists::held_out(id),
            Part::Dev => id % 5 == 1,
            Part::All => true,
        }
    }
}

pub fn run(encoder: &Encoder, args: &AlignmentArgs) -> Result<()> {
    let genres = if args.genres.is_empty() {
        ists::genres(&args.data)?
    } else {
        args.genres.clone()
    };
    if genres.is_empty() {
        bail!(
            "no iSTS genre in {}: expected STSint.input.<genre>.sent1.txt and .sent2.txt (or \
             STSint.testinput.…)",
            args.data.display()
        );
    }
    let chunking = if args.gold_chunks {
        Chunking::Gold
    } else {
        Chunking::Own
    };
    let file = args.chunker.as_deref().map(load_chunker).transpose()?;
    let aligner = load_aligner(args.aligner.as_deref())?;
    let chunker = phrasing(encoder, file.as_ref());
    let models = Models {
        chunker: &chunker,
        aligner: &aligner,
    };
    let mut reports = Vec::new();
    for genre in &genres {
        let part = args
            .part
            .unwrap_or(if ists::is_test_genre(&args.data, genre) {
                Part::All
            } else {
                Part::HeldOut
            });
        let pairs: Vec<IstsPair> = ists::read_genre(&args.data, genre)?
            .into_iter()
            .filter(|p| part.keeps(p.id))
            .collect();
        if pairs.iter().any(|p| p.gold.is_none()) {
            bail!(
                "{genre}: no gold alignment (.wa) to score against in {}",
                args.data.display()
            );
        }
        if chunking == Chunking::Gold
            && pairs
                .iter()
                .any(|p| p.chunks1.is_none() || p.chunks2.is_none())
        {
            bail!(
                "{genre}: --gold-chunks needs the *.chunk.txt files in {}",
                args.data.display()
            );
        }
        let b = super::progress::bar(2 * pairs.len() as u64, &format!("encoding {genre}"));
        let encoded = encode_pairs(encoder, &pairs, |n| b.inc(n as u64))?;
        b.finish_and_clear();
        let weights = token_weights(&pairs, &encoded, args.weights);
        let system: Vec<WaPair> = pairs
            .iter()
            .zip(&encoded)
            .zip(&weights)
            .map(|((p, (ea, eb)), w)| {
                let w = match w {
                    Some((wa, wb)) => Weights::Given(wa, wb),
                    None => Weights::Uniform,
                };
                kindred_pair(p, (ea, eb), chunking, w, models)
            })
            .collect();
        if let Some(dir) = &args.out_wa {
            write_wa(dir, genre, &system)?;
        }
        reports.push(report(genre, &pairs, &system, chunking, &chunker));
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({ "genres": reports }))?
        );
    } else {
        print_table(&reports);
    }
    Ok(())
}

/// Per pair, both sentences' token weights under `weighting` (None: uniform); IDF over the
/// sentences of `pairs`.
fn token_weights(
    pairs: &[IstsPair],
    encoded: &[(Encoded, Encoded)],
    weighting: Weighting,
) -> Vec<Option<(Vec<f32>, Vec<f32>)>> {
    if weighting == Weighting::Uniform {
        return vec![None; pairs.len()];
    }
    let lexicon = LexicalIndex::new();
    for (k, p) in pairs.iter().enumerate() {
        lexicon.upsert(2 * k as u64, &p.tokens1.join(" "));
        lexicon.upsert(2 * k as u64 + 1, &p.tokens2.join(" "));
    }
    lexicon.with_idf(|idf| {
        pairs
            .iter()
            .zip(encoded)
            .map(|(p, (ea, eb))| {
                Some((
                    weights::token_weights(&p.tokens1.join(" "), &ea.tokens, idf),
                    weights::token_weights(&p.tokens2.join(" "), &eb.tokens, idf),
                ))
            })
            .collect()
    })
}

fn write_wa(dir: &Path, genre: &str, pairs: &[WaPair]) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(format!("{genre}.wa"));
    std::fs::write(&path, ists::write_wa(pairs))
        .with_context(|| format!("writing {}", path.display()))?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

fn print_table(reports: &[GenreReport]) {
    println!("| genre | pairs | chunks | system | F1 Ali | F1 Type | F1 Score | F1 Type+Score |");
    println!("|---|---:|---|---|---:|---:|---:|---:|");
    for r in reports {
        let chunks = match r.chunking {
            Chunking::Own => "kindred",
            Chunking::Gold => "gold",
        };
        for (system, f) in [("kindred", &r.kindred), ("word overlap", &r.word_overlap)] {
            println!(
                "| {} | {} | {chunks} | {system} | {:.4} | {:.4} | {:.4} | {:.4} |",
                r.genre, r.pairs, f.ali, f.type_, f.score, f.type_score
            );
        }
    }
}
