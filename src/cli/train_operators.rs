//! `kindred train operators`: learns the compositional operators (fusion, difference,
//! compression) on the frozen model's vectors from WikiSplit and compression files, and writes
//! the model directory with them (`kindred-operators.safetensors`).

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args as ClapArgs;
use serde_json::json;

use kindred::eval::operators::{read_compression, read_wikisplit, Compression};
use kindred::train::operators::{train_operators, OperatorOptions, Progress};
use kindred::train::{write_model_dir, TrainedBy};

use super::Global;

#[derive(Debug, ClapArgs)]
pub struct OperatorsArgs {
    /// WikiSplit TSV files (`complex<TAB>part1 <::::> part2`) to learn fusion and difference
    /// from, e.g. ../shared/data/wikisplit/tune.tsv.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub wikisplit: Vec<PathBuf>,
    /// Compression CSV (`original,compressed`) to learn compression from, e.g.
    /// ../shared/data/google_compression/pairs.csv.
    #[arg(long, value_name = "FILE")]
    pub compression: Option<PathBuf>,
    /// Rows at the head of --compression left out of training: the rows `kindred eval
    /// operators --compression` measures (its --limit).
    #[arg(long, value_name = "N", default_value_t = 2000)]
    pub skip_compression: usize,
    /// The model directory to write (the base model's files plus the operators). The base's
    /// vectors do not change, so collections made with it keep working with the new directory.
    #[arg(long, required = true, value_name = "DIR")]
    pub out: PathBuf,
    /// Hidden units of the fusion and difference networks.
    #[arg(long, default_value_t = 256)]
    pub hidden: usize,
    /// Hidden units of the compression network.
    #[arg(long, default_value_t = 384)]
    pub compression_hidden: usize,
    /// Examples per batch.
    #[arg(long, default_value_t = 128)]
    pub batch: usize,
    /// Adam learning rate.
    #[arg(long, default_value_t = 3e-4)]
    pub lr: f64,
    /// Passes over the training rows.
    #[arg(long, default_value_t = 10)]
    pub epochs: usize,
    /// Share of the rows held out to choose the epoch on.
    #[arg(long, default_value_t = 0.1)]
    pub dev_share: f64,
    /// Seed of the dev split and the batch order.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(g: &Global, args: &OperatorsArgs) -> Result<()> {
    if args.wikisplit.is_empty() && args.compression.is_none() {
        bail!("give --wikisplit FILE (fusion, difference), --compression FILE, or both");
    }
    if !(0.0..1.0).contains(&args.dev_share) || args.dev_share == 0.0 {
        bail!(
            "--dev-share {} is not between 0 and 1 (exclusive)",
            args.dev_share
        );
    }
    let mut splits = Vec::new();
    for p in &args.wikisplit {
        splits.extend(read_wikisplit(p, None)?);
    }
    let compressions: Vec<Compression> = match &args.compression {
        Some(p) => read_compression(p, None)?
            .into_iter()
            .skip(args.skip_compression)
            .collect(),
        None => Vec::new(),
    };
    let options = OperatorOptions {
        hidden: args.hidden,
        compression_hidden: args.compression_hidden,
        batch_size: args.batch,
        learning_rate: args.lr,
        epochs: args.epochs,
        dev_share: args.dev_share,
        seed: args.seed,
        ..OperatorOptions::default()
    };
    let base = g.model_dir()?;
    let encoder = g.training_encoder()?;
    let encode = super::progress::bar(0, "encoding sentences");
    encode.set_length((splits.len() * 3 + compressions.len() * 2) as u64);
    let epochs = super::progress::bar(0, "training");
    let mut on = |p: Progress| match p {
        Progress::Encoded(n) => encode.inc(n as u64),
        Progress::Epoch {
            operation,
            epoch,
            loss,
            dev,
        } => {
            encode.finish_and_clear();
            epochs.set_length(options.epochs as u64);
            epochs.set_prefix(format!("training {}", operation.name()));
            epochs.set_position(epoch as u64);
            epochs.set_message(format!("loss {loss:.3}, dev R@1 {:.3}", dev.r1));
        }
    };
    let report = train_operators(&encoder, &splits, &compressions, &options, &mut on)?;
    epochs.finish_and_clear();
    let by = TrainedBy::Head {
        head: "operators",
        dev: None,
        options: serde_json::to_value(&options)?,
    };
    write_model_dir(&base, &args.out, None, None, &by)
        .and_then(|()| report.operators.save(&args.out))
        .with_context(|| format!("writing {}", args.out.display()))?;
    if args.json {
        let out = json!({
            "out": args.out,
            "operators": report.operators.names(),
            "operations": report.operations,
            "pool": report.pool,
            "train_seconds": report.seconds,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!(
        "wrote {} (operators: {})",
        args.out.display(),
        report.operators.names().join(", ")
    );
    for o in &report.operations {
        let kept = if o.best_epoch == 0 {
            "not kept: no epoch beat arithmetic".to_string()
        } else {
            format!("epoch {}", o.best_epoch)
        };
        println!(
            "{}: {} training examples, {} dev; dev R@1 {:.3} (arithmetic) → {:.3} ({kept})",
            o.operation.name(),
            o.examples.0,
            o.examples.1,
            o.dev_arithmetic.r1,
            o.dev_kept.r1
        );
    }
    println!(
        "{:.1} s of training, a dev pool of {} sentences",
        report.seconds, report.pool
    );
    Ok(())
}
