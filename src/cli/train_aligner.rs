//! `kindred train aligner`: fits the phrase aligner's link, relation and score models on the
//! SemEval-2016 iSTS training pairs outside the held-out part, and writes them as JSON (the
//! shipped model is `src/score/aligner.json`).

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args as ClapArgs;

use kindred::encoder::Phrasing;
use kindred::eval::ists;
use kindred::score::align::Aligner;
use kindred::text::chunk::Chunker;
use kindred::train::aligner::fit_aligner;
use kindred::Encoder;

use super::Global;

#[derive(Debug, ClapArgs)]
pub struct AlignerArgs {
    /// Folder in the iSTS train layout: STSint.input.<genre>.{sent1,sent2}[.chunk].txt and .wa.
    #[arg(long, value_name = "DIR")]
    pub data: PathBuf,
    /// Where the fitted models go (JSON).
    #[arg(long, value_name = "FILE", default_value = "kindred-aligner.json")]
    pub out: PathBuf,
    /// A chunker model (from `kindred train chunker`) instead of the shipped ones (the
    /// contextual chunker where it reads the model's states, else the word chunker).
    #[arg(long, value_name = "FILE")]
    pub chunker: Option<PathBuf>,
}

pub fn run(g: &Global, args: &AlignerArgs) -> Result<()> {
    let encoder = g.encoder()?;
    let mut genres = Vec::new();
    for genre in ists::genres(&args.data)? {
        let pairs = ists::read_genre(&args.data, &genre)?;
        genres.push((genre, pairs));
    }
    if genres.is_empty() {
        bail!("no iSTS genre in {}", args.data.display());
    }
    let sentences: usize = genres.iter().map(|(_, p)| 2 * p.len()).sum();
    let b = super::progress::bar(sentences as u64, "encoding");
    let file = args.chunker.as_deref().map(load_chunker).transpose()?;
    let chunker = phrasing(&encoder, file.as_ref());
    let (aligner, fit) = fit_aligner(&encoder, &genres, &chunker, |n| b.inc(n as u64))?;
    b.finish_and_clear();
    for (genre, n) in &fit.pairs {
        eprintln!("{genre}: {n} training pairs");
    }
    for (t, f1) in &fit.f1_by_threshold {
        eprintln!("threshold {t:.2}: F1 Ali {f1:.4} (training pairs, gold and own chunks)");
    }
    let (best, f1) = fit
        .f1_by_thresholds
        .iter()
        .find(|((t, c), _)| (*t, *c) == (fit.threshold, fit.context_threshold))
        .copied()
        .unwrap_or(((fit.threshold, fit.context_threshold), f64::NAN));
    eprintln!(
        "with the context pass: chose link threshold {:.2} and context threshold {:.2} (F1 Ali \
         {f1:.4} on the training pairs, best of {} pairs of thresholds)",
        best.0,
        best.1,
        fit.f1_by_thresholds.len()
    );
    std::fs::write(&args.out, aligner.to_json() + "\n")
        .with_context(|| format!("writing {}", args.out.display()))?;
    eprintln!("wrote {}", args.out.display());
    Ok(())
}

/// Own chunks by the chunker in `file`, else by the shipped ones as explanations get them (the
/// contextual chunker where it reads `encoder`'s states, else the word chunker).
pub(super) fn phrasing<'a>(encoder: &'a Encoder, file: Option<&'a Chunker>) -> Phrasing<'a> {
    Phrasing {
        encoder,
        model: file.unwrap_or_else(|| Chunker::builtin_contextual()),
    }
}

/// The chunker model in file `p` (from `kindred train chunker`).
pub(super) fn load_chunker(p: &std::path::Path) -> Result<Chunker> {
    let text = std::fs::read_to_string(p)
        .with_context(|| format!("reading the chunker {}", p.display()))?;
    Chunker::from_text(&text).with_context(|| format!("reading {}", p.display()))
}

/// The aligner in `path`, or the shipped one.
pub(super) fn load_aligner(path: Option<&std::path::Path>) -> Result<Aligner> {
    match path {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("reading the aligner {}", p.display()))?;
            Ok(Aligner::from_json(&text).with_context(|| format!("reading {}", p.display()))?)
        }
        None => Ok(Aligner::builtin().clone()),
    }
}
