//! `kindred train decoder`: learns the bag-of-words decoder (a vector read back as words) on
//! the frozen model's vectors from the texts of question-pair, line, WikiSplit and compression
//! files, and writes the model directory with it (`kindred-decoder.safetensors`).

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args as ClapArgs;
use serde_json::json;

use kindred::eval::operators::{read_compression, read_wikisplit};
use kindred::eval::read_pairs;
use kindred::train::decoder::{train_decoder, DecoderOptions, Progress};
use kindred::train::{write_model_dir, TrainedBy};

use super::Global;

#[derive(Debug, ClapArgs)]
pub struct DecoderArgs {
    /// Question-pair files (`label<TAB>q1<TAB>q2`) whose questions are texts to learn from,
    /// e.g. ../shared/data/qqp_deep1994_split/dev.tsv.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub pairs: Vec<PathBuf>,
    /// Text files of one text per line.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub lines: Vec<PathBuf>,
    /// WikiSplit TSV files whose sentences (complex and parts) are texts to learn from.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub wikisplit: Vec<PathBuf>,
    /// A compression CSV (`original,compressed`) whose sentences are texts to learn from.
    #[arg(long, value_name = "FILE")]
    pub compression: Option<PathBuf>,
    /// Rows at the head of --compression left out: the rows `kindred eval operators
    /// --compression` measures (its --limit).
    #[arg(long, value_name = "N", default_value_t = 2000)]
    pub skip_compression: usize,
    /// The model directory to write (the base model's files, its operators, plus the decoder).
    #[arg(long, required = true, value_name = "DIR")]
    pub out: PathBuf,
    /// Words in the vocabulary at most (the most frequent of the texts).
    #[arg(long, default_value_t = DecoderOptions::default().vocabulary)]
    pub vocabulary: usize,
    /// Times a word must occur to be in the vocabulary.
    #[arg(long, default_value_t = DecoderOptions::default().min_count)]
    pub min_count: usize,
    /// Texts per batch.
    #[arg(long, default_value_t = DecoderOptions::default().batch_size)]
    pub batch: usize,
    /// Adam learning rate.
    #[arg(long, default_value_t = DecoderOptions::default().learning_rate)]
    pub lr: f64,
    /// Passes over the texts.
    #[arg(long, default_value_t = DecoderOptions::default().epochs)]
    pub epochs: usize,
    /// Share of the texts held out to choose the epoch and the cut on.
    #[arg(long, default_value_t = DecoderOptions::default().dev_share)]
    pub dev_share: f64,
    /// Seed of the dev split and the batch order.
    #[arg(long, default_value_t = DecoderOptions::default().seed)]
    pub seed: u64,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Every text of the files given, in file order.
fn texts(args: &DecoderArgs) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for p in &args.pairs {
        out.extend(read_pairs(p)?.into_iter().flat_map(|pair| [pair.a, pair.b]));
    }
    for p in &args.lines {
        let text =
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        out.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(String::from),
        );
    }
    for p in &args.wikisplit {
        out.extend(
            read_wikisplit(p, None)?
                .into_iter()
                .flat_map(|s| [s.complex, s.part1, s.part2]),
        );
    }
    if let Some(p) = &args.compression {
        out.extend(
            read_compression(p, None)?
                .into_iter()
                .skip(args.skip_compression)
                .flat_map(|c| [c.original, c.compressed]),
        );
    }
    Ok(out)
}

pub fn run(g: &Global, args: &DecoderArgs) -> Result<()> {
    if args.pairs.is_empty()
        && args.lines.is_empty()
        && args.wikisplit.is_empty()
        && args.compression.is_none()
    {
        bail!("give texts to learn from: --pairs, --lines, --wikisplit or --compression FILE");
    }
    if !(0.0..1.0).contains(&args.dev_share) || args.dev_share == 0.0 {
        bail!(
            "--dev-share {} is not between 0 and 1 (exclusive)",
            args.dev_share
        );
    }
    if args.vocabulary == 0 || args.batch == 0 {
        bail!("--vocabulary and --batch must be at least 1");
    }
    let texts = texts(args)?;
    let options = DecoderOptions {
        vocabulary: args.vocabulary,
        min_count: args.min_count,
        batch_size: args.batch,
        learning_rate: args.lr,
        epochs: args.epochs,
        dev_share: args.dev_share,
        seed: args.seed,
    };
    let base = g.model_dir()?;
    let encoder = g.training_encoder()?;
    let encode = super::progress::bar(texts.len() as u64, "encoding texts");
    let epochs = super::progress::bar(options.epochs as u64, "training the decoder");
    let mut on = |p: Progress| match p {
        Progress::Encoded(n) => encode.inc(n as u64),
        Progress::Epoch { epoch, loss, dev } => {
            encode.finish_and_clear();
            epochs.set_position(epoch as u64);
            epochs.set_message(format!("loss {loss:.3}, dev ROUGE-1 {:.3}", dev.rouge1));
        }
    };
    let report = train_decoder(&encoder, &texts, &options, &mut on)?;
    epochs.finish_and_clear();
    let by = TrainedBy::Head {
        head: "decoder",
        dev: None,
        options: serde_json::to_value(&options)?,
    };
    write_model_dir(&base, &args.out, None, None, &by)
        .and_then(|()| report.decoder.save(&args.out))
        .with_context(|| format!("writing {}", args.out.display()))?;
    if args.json {
        let out = json!({
            "out": args.out,
            "words": report.decoder.words.len(),
            "cut": report.decoder.cut,
            "texts": {"train": report.texts.0, "dev": report.texts.1},
            "dev": report.dev,
            "best_epoch": report.best_epoch,
            "losses": report.losses,
            "train_seconds": report.seconds,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!(
        "wrote {} (a decoder over {} words, cut {})",
        args.out.display(),
        report.decoder.words.len(),
        report.decoder.cut
    );
    println!(
        "{} training texts, {} held out; held-out texts read back: ROUGE-1 {:.3}, ROUGE-2 {:.3}, \
         ROUGE-L {:.3} (epoch {})",
        report.texts.0,
        report.texts.1,
        report.dev.rouge1,
        report.dev.rouge2,
        report.dev.rouge_l,
        report.best_epoch
    );
    println!("{:.1} s of training", report.seconds);
    Ok(())
}
