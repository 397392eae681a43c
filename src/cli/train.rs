//! `kindred train …`: the trainers' command lines — data files in, progress bar with the loss
//! and dev metric while it runs, a summary (and the model directory) out. `train chunker`
//! learns the phrase chunker (no encoder involved).

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args as ClapArgs, Subcommand};
use indicatif::ProgressBar;
use serde_json::json;

use kindred::eval::chunks::{self, ChunkCounts, IstsSentence, Method};
use kindred::eval::LabelledPair;
use kindred::model::heads::Heads;
use kindred::model::ModelDir;
use kindred::text::chunk::{self, Chunker, ContextualSpec};
use kindred::train::chunker::{Epoch, MlpOptions};
use kindred::train::clrcmd::{self, ClrcmdOptions, GradedScore};
use kindred::train::intent::{train_intent, IntentOptions};
use kindred::train::transition::{train_transition, TransitionOptions};
use kindred::train::{read_graded_training, read_training_pairs, write_model_dir, TrainedBy};
use kindred::{DeviceKind, Encoder};

use super::Global;

/// `kindred train …`
#[derive(Debug, Subcommand)]
pub enum TrainCommand {
    /// Fine-tune the encoder with CLRCMD (InfoNCE on s_RCMD, τ = 0.05, in-batch and hard
    /// negatives, Adam with linear decay) and write the best model (by dev AUC) to --out.
    Clrcmd(ClrcmdArgs),
    /// Adapt the model to a collection without labels: harvest graded question pairs from
    /// their context (answers, comments, tags) and train on them (encoder or transition).
    Context(super::train_context::ContextArgs),
    /// Learn the intent head (μ, log σ² from the moment-matched intent) and the
    /// variational-siamese classifier on [(μ1−μ2)² + (σ1−σ2)², μ1⊙μ2] → P(duplicate), with the
    /// encoder frozen; write the model plus these heads to --out.
    Intent(IntentArgs),
    /// Learn the d×d sentence transition matrix on duplicate pairs (encoder frozen; seconds on
    /// a CPU once the sentences are encoded); write the model plus the matrix to --out.
    Transition(TransitionArgs),
    /// Blend a tuned encoder back toward its base (--model): every weight becomes
    /// (1 − α)·base + α·tuned (WiSE-FT). Keeps much of fine-tuning's gain and gives back much
    /// of what it cost elsewhere (e.g. STS-B after CLRCMD on QQP). With --tuned given several
    /// times, tuned is their mean (a model soup: e.g. `train context` runs with other --seed
    /// values, --alpha 1). Heads are not carried over: train them again on the blend. When every
    /// tuned model was graded by one model (`train context`), the blend records it, and `tune`
    /// grades with it.
    Blend(BlendArgs),
    /// Fit the phrase aligner (chunk links, relation types, 0–5 scores) on SemEval-2016 iSTS
    /// training pairs outside the held-out part; write it as JSON to --out.
    Aligner(super::train_aligner::AlignerArgs),
    /// Learn the phrase chunker (an averaged perceptron over word features; seconds) from the
    /// gold chunks of SemEval-2016 iSTS, print its exact-chunk precision, recall and F1 per
    /// genre on the held-out pairs (ids divisible by 5) beside two baselines, and write the
    /// model file with --out (kindred ships src/text/chunker.model). Needs no encoder, except
    /// with --contextual (the model's hidden states as features too).
    Chunker(ChunkerArgs),
    /// Learn the compositional operators — fusion (two questions as one), difference (what one
    /// asks beyond another) and compression (a long text said short) — on the frozen model's
    /// vectors, from WikiSplit and compression files; write the model plus the operators to
    /// --out. Vectors do not change: collections keep working with the new directory.
    Operators(super::train_operators::OperatorsArgs),
    /// Learn the decoder that reads a vector back as words (a bag-of-words head over the
    /// frequent words of the texts given), on the frozen model's vectors; write the model plus
    /// the decoder to --out. Vectors do not change: collections keep working with the new
    /// directory.
    Decoder(super::train_decoder::DecoderArgs),
}

/// Runs a trainer on the base model (--model) and --device.
pub fn run(g: &Global, command: &TrainCommand) -> Result<()> {
    let device = g.device.as_deref().unwrap_or("cpu").parse()?;
    let base = || g.model_dir();
    match command {
        TrainCommand::Clrcmd(a) => clrcmd(&base()?, device, a),
        TrainCommand::Intent(a) => intent(&base()?, &g.training_encoder()?, a),
        TrainCommand::Transition(a) => transition(&base()?, &g.training_encoder()?, a),
        TrainCommand::Blend(a) => blend(&base()?, a),
        TrainCommand::Chunker(a) => chunker(g, a),
        TrainCommand::Aligner(a) => super::train_aligner::run(g, a),
        TrainCommand::Context(a) => super::train_context::run(g, a, device).map(drop),
        TrainCommand::Operators(a) => super::train_operators::run(g, a),
        TrainCommand::Decoder(a) => super::train_decoder::run(g, a),
    }
}

#[derive(Debug, ClapArgs)]
pub struct BlendArgs {
    /// The tuned model directory (trained from --model); give it several times to average
    /// several (a model soup).
    #[arg(long, required = true, value_name = "DIR")]
    pub tuned: Vec<PathBuf>,
    /// Weight of the tuned model (of their mean, with several), 0 to 1.
    #[arg(long, required = true)]
    pub alpha: f32,
    /// The model directory to write.
    #[arg(long, required = true, value_name = "DIR")]
    pub out: PathBuf,
}

fn blend(base: &ModelDir, args: &BlendArgs) -> Result<()> {
    kindred::train::blend::check_alpha(args.alpha)?;
    // The same directory however it is spelled ("m", "./m").
    let real: Vec<PathBuf> = args
        .tuned
        .iter()
        .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()))
        .collect();
    for (i, path) in args.tuned.iter().enumerate() {
        if real[..i].contains(&real[i]) {
            return Err(kindred::UserError::InvalidArgument {
                name: "--tuned",
                reason: format!(
                    "{} is given twice; name each tuned model once (a soup weighs them equally)",
                    path.display()
                ),
            }
            .into());
        }
    }
    let tuned = args
        .tuned
        .iter()
        .map(|p| ModelDir::open(p))
        .collect::<kindred::Result<Vec<_>>>()?;
    kindred::train::blend::write_blend(base, &tuned, args.alpha, &args.out)
        .with_context(|| format!("writing {}", args.out.display()))?;
    kindred::train::adapt::record_shared_grader(&tuned, &args.out)?;
    let names: Vec<&str> = tuned.iter().map(|t| t.id.as_str()).collect();
    let what = match names.as_slice() {
        [one] => one.to_string(),
        many => format!("the mean of {}", many.join(", ")),
    };
    println!(
        "wrote {} ({:.2} × {} + {:.2} × {what})",
        args.out.display(),
        1.0 - args.alpha,
        base.id,
        args.alpha,
    );
    Ok(())
}

/// What every head trainer takes: the pairs, where the model goes, and the optimiser's settings.
#[derive(Debug, ClapArgs)]
pub struct HeadArgs {
    #[command(flatten)]
    pub data: PairArgs,
    /// The model directory to write (the base model's files plus the learned heads).
    #[arg(long, required = true, value_name = "DIR")]
    pub out: PathBuf,
    /// Pairs per batch.
    #[arg(long, default_value_t = 64)]
    pub batch: usize,
    /// Adam learning rate.
    #[arg(long, default_value_t = 1e-3)]
    pub lr: f64,
    /// Passes over the pairs.
    #[arg(long, default_value_t = 10)]
    pub epochs: usize,
    /// Seed of the batch order and the dev split.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, ClapArgs)]
pub struct IntentArgs {
    #[command(flatten)]
    pub head: HeadArgs,
    /// Intent dimension k (μ and σ each; the W2 index holds 2k). Default: the model dimension,
    /// starting from the moment-matched intents; a smaller k starts from their top-k principal
    /// directions (μ) and group means (log σ²).
    #[arg(long, value_name = "K")]
    pub dim: Option<usize>,
    /// Hidden units of the classifier.
    #[arg(long, default_value_t = 128)]
    pub hidden: usize,
}

#[derive(Debug, ClapArgs)]
pub struct TransitionArgs {
    #[command(flatten)]
    pub head: HeadArgs,
    /// λ, the weight of the off-diagonal term of the loss.
    #[arg(long, default_value_t = 0.5)]
    pub lambda: f32,
}

fn encode_bar(what: &str) -> ProgressBar {
    super::progress::bar(0, &format!("{what} (texts)"))
}

/// Loads the pairs and runs `train` (which reports encoded texts to its callback) under a
/// progress bar.
fn run_head<R>(
    args: &HeadArgs,
    train: impl FnOnce(&[LabelledPair], &[LabelledPair], &mut dyn FnMut(usize)) -> kindred::Result<R>,
) -> Result<(R, usize, usize)> {
    let (train_pairs, dev) = args.data.load(args.seed)?;
    let bar = encode_bar("encoding pairs");
    bar.set_length(distinct_texts(&train_pairs, &dev));
    let report = train(&train_pairs, &dev, &mut |n| bar.inc(n as u64))?;
    bar.finish_and_clear();
    Ok((report, train_pairs.len(), dev.len()))
}

/// Writes the model with `heads` and prints the summary (`summary` as JSON, or `lines`).
fn finish_head(
    base: &ModelDir,
    args: &HeadArgs,
    heads: &Heads,
    by: &TrainedBy,
    mut summary: serde_json::Value,
    lines: [String; 2],
) -> Result<()> {
    write_model_dir(base, &args.out, None, Some(heads), by)
        .with_context(|| format!("writing {}", args.out.display()))?;
    if args.json {
        summary["out"] = json!(args.out);
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        lines.iter().for_each(|l| println!("{l}"));
    }
    Ok(())
}

fn intent(base: &ModelDir, encoder: &Encoder, args: &IntentArgs) -> Result<()> {
    let h = &args.head;
    let options = IntentOptions {
        dim: args.dim,
        hidden: args.hidden,
        batch_size: h.batch,
        learning_rate: h.lr,
        epochs: h.epochs,
        seed: h.seed,
        ..IntentOptions::default()
    };
    let (report, train, dev) = run_head(h, |t, d, p| train_intent(encoder, t, d, &options, p))?;
    let mut heads = encoder.heads().clone();
    heads.intent = Some(report.intent.clone());
    heads.classifier = Some(report.classifier.clone());
    let by = TrainedBy::Head {
        head: "intent+classifier",
        dev: Some(("classifier_auc".into(), report.dev_auc)),
        options: serde_json::to_value(&options)?,
    };
    let summary = json!({
        "train_pairs": train,
        "dev_pairs": dev,
        "dev_classifier_auc": report.dev_auc,
        "dev_classifier_accuracy": report.dev_accuracy,
        "dev_w2_auc_before": report.dev_w2_auc_before,
        "dev_w2_auc_after": report.dev_w2_auc_after,
        "best_epoch": report.best_epoch,
        "losses": report.losses,
        "train_seconds": report.seconds,
    });
    let lines = [
        format!(
            "wrote {} (intent head + variational-siamese classifier)",
            h.out.display()
        ),
        format!(
            "dev: classifier AUC {:.4}, accuracy {:.4}; −W2 AUC {:.4} → {:.4} (epoch {}, {:.1} s)",
            report.dev_auc,
            report.dev_accuracy,
            report.dev_w2_auc_before,
            report.dev_w2_auc_after,
            report.best_epoch,
            report.seconds
        ),
    ];
    finish_head(base, h, &heads, &by, summary, lines)
}

fn transition(base: &ModelDir, encoder: &Encoder, args: &TransitionArgs) -> Result<()> {
    let h = &args.head;
    let options = TransitionOptions {
        lambda: args.lambda,
        batch_size: h.batch,
        learning_rate: h.lr,
        epochs: h.epochs,
        seed: h.seed,
    };
    let (report, train, dev) = run_head(h, |t, d, p| train_transition(encoder, t, d, &options, p))?;
    let mut heads = encoder.heads().clone();
    heads.transition = Some(report.head.clone());
    let by = TrainedBy::Head {
        head: "transition",
        dev: Some(("cosine_auc".into(), report.dev_auc_after)),
        options: serde_json::to_value(&options)?,
    };
    let summary = json!({
        "train_pairs": train,
        "dev_pairs": dev,
        "dev_cosine_auc_before": report.dev_auc_before,
        "dev_cosine_auc_after": report.dev_auc_after,
        "best_epoch": report.best_epoch,
        "losses": report.losses,
        "train_seconds": report.seconds,
    });
    let lines = [
        format!("wrote {} (sentence transition matrix)", h.out.display()),
        format!(
            "dev cosine AUC {:.4} → {:.4} (epoch {}; {:.1} s of training)",
            report.dev_auc_before, report.dev_auc_after, report.best_epoch, report.seconds
        ),
    ];
    finish_head(base, h, &heads, &by, summary, lines)
}

fn distinct_texts(train: &[LabelledPair], dev: &[LabelledPair]) -> u64 {
    let set: std::collections::HashSet<&str> = train
        .iter()
        .chain(dev)
        .flat_map(|p| [p.a.as_str(), p.b.as_str()])
        .collect();
    set.len() as u64
}

/// Where the labelled pairs come from, for every trainer.
#[derive(Debug, ClapArgs)]
pub struct PairArgs {
    /// Labelled pair files to train on: label<TAB>question1<TAB>question2[<TAB>id], e.g.
    /// ../shared/data/qqp_bimpm/dev.tsv or a verdicts export of the review UI. STS-B and SICK
    /// files (e.g. ../shared/data/stsb/sts-train.csv) are read too: gold >= 4 is a duplicate,
    /// <= 2 a non-duplicate, the rest left out. Files named like a test split are refused.
    #[arg(long, required = true, num_args = 1.., value_name = "FILE")]
    pub pairs: Vec<PathBuf>,
    /// Labelled pairs to select the best model on. Default: the last --dev-split of the
    /// shuffled training pairs, held out from training.
    #[arg(long, value_name = "FILE")]
    pub dev: Option<PathBuf>,
    /// Pairs held out for dev when --dev is not given.
    #[arg(long, default_value_t = 1000)]
    pub dev_split: usize,
}

impl PairArgs {
    /// Training and dev pairs.
    pub fn load(&self, seed: u64) -> Result<(Vec<LabelledPair>, Vec<LabelledPair>)> {
        let mut train = read_training_pairs(&self.pairs)?;
        match &self.dev {
            Some(dev) => Ok((train, read_training_pairs(std::slice::from_ref(dev))?)),
            None => {
                let order = kindred::train::data::SplitMix64(seed).permutation(train.len());
                let held: std::collections::HashSet<usize> = order
                    .into_iter()
                    .take(self.dev_split.min(train.len() / 5))
                    .collect();
                let mut dev = Vec::new();
                let mut kept = Vec::new();
                for (i, p) in train.drain(..).enumerate() {
                    if held.contains(&i) {
                        dev.push(p)
                    } else {
                        kept.push(p)
                    }
                }
                Ok((kept, dev))
            }
        }
    }
}

#[derive(Debug, ClapArgs)]
pub struct ClrcmdArgs {
    #[command(flatten)]
    pub data: PairArgs,
    /// The trained model directory (created; holds `checkpoint/` while training).
    #[arg(long, required = true, value_name = "DIR")]
    pub out: PathBuf,
    /// Continue the run whose checkpoint is in --out (same data and flags).
    #[arg(long)]
    pub resume: bool,
    /// Train in about a third less memory for about a tenth more time: activations that are
    /// cheap to compute again are recomputed in the backward pass instead of kept (the same
    /// model results; EVALUATION.md).
    #[arg(long)]
    pub low_memory: bool,
    /// Duplicate pairs per step.
    #[arg(long, default_value_t = 32)]
    pub batch: usize,
    /// Peak Adam learning rate (decays linearly to 0).
    #[arg(long, default_value_t = 5e-5)]
    pub lr: f64,
    /// InfoNCE temperature.
    #[arg(long, default_value_t = 0.05)]
    pub tau: f32,
    /// Passes over the duplicate pairs.
    #[arg(long, default_value_t = 1)]
    pub epochs: usize,
    /// Stop after N steps.
    #[arg(long, value_name = "N")]
    pub max_steps: Option<usize>,
    /// Measure dev AUC every N steps (the best model is kept).
    #[arg(long, default_value_t = 100, value_name = "N")]
    pub eval_every: usize,
    /// Write a resumable checkpoint every N steps.
    #[arg(long, default_value_t = 100, value_name = "N")]
    pub checkpoint_every: usize,
    /// No hard negatives (in-batch negatives only).
    #[arg(long)]
    pub no_hard_negatives: bool,
    /// Mine hard negatives: for pairs without a labelled non-duplicate, the base model's
    /// nearest question that is not a known duplicate (encodes every question once first).
    #[arg(long, conflicts_with = "no_hard_negatives")]
    pub mine_negatives: bool,
    /// Seed of the batch order and the dev split.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Graded pairs (STS-B or SICK train files) trained beside the duplicates with CoSENT on
    /// sentence-vector cosines, so graded similarity survives fine-tuning (test splits refused).
    #[arg(long, num_args = 1.., value_name = "FILE")]
    pub graded: Vec<PathBuf>,
    /// Graded pairs per step.
    #[arg(long, default_value_t = 16, value_name = "N")]
    pub graded_batch: usize,
    /// Weight of the CoSENT loss beside the InfoNCE loss.
    #[arg(long, default_value_t = 0.2)]
    pub graded_weight: f32,
    /// Which similarity CoSENT ranks on graded pairs: cosine (sentence vectors), rcmd (s_RCMD
    /// over token vectors) or both (the two losses added).
    #[arg(long, value_enum, default_value = "cosine")]
    pub graded_score: GradedScoreArg,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `--graded-score`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum GradedScoreArg {
    Cosine,
    Rcmd,
    Both,
}

fn clrcmd(base: &ModelDir, device: DeviceKind, args: &ClrcmdArgs) -> Result<()> {
    let (train, dev) = args.data.load(args.seed)?;
    let graded = read_graded_training(&args.graded)?;
    let options = args.options();
    let run = clrcmd::ClrcmdRun {
        base,
        train: &train,
        dev: &dev,
        graded: &graded,
        keep: &[],
        out: &args.out,
        options: &options,
        device,
        low_memory: args.low_memory,
        resume: args.resume,
    };
    let report = super::clrcmd::run_clrcmd(&run)?;
    print_clrcmd_report(args, &report)
}

/// What a CLRCMD run did: JSON with `--json`, else a few lines.
fn print_clrcmd_report(args: &ClrcmdArgs, report: &clrcmd::ClrcmdReport) -> Result<()> {
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({ "out": args.out, "report": report }))?
        );
    } else {
        println!("trained {} steps into {}", report.steps, args.out.display());
        println!(
            "loss {:.4} → {:.4}; {:.1} pairs/s",
            report.first_loss, report.last_loss, report.pairs_per_sec
        );
        if let Some((step, auc)) = report.best {
            let before = report
                .dev_auc_before
                .map(|a| format!("{a:.4} → "))
                .unwrap_or_default();
            if step == 0 {
                println!(
                    "dev s_RCMD AUC {before}{auc:.4}: no step beat the base model, so {} holds \
                     its weights; try another --lr, more pairs or --mine-negatives",
                    args.out.display()
                );
            } else {
                println!("dev s_RCMD AUC {before}{auc:.4} (best at step {step})");
            }
        }
    }
    Ok(())
}

impl ClrcmdArgs {
    /// The trainer's options these arguments give.
    fn options(&self) -> ClrcmdOptions {
        ClrcmdOptions {
            batch_size: self.batch,
            learning_rate: self.lr,
            tau: self.tau,
            epochs: self.epochs,
            max_steps: self.max_steps,
            eval_every: self.eval_every,
            checkpoint_every: self.checkpoint_every,
            hard_negatives: !self.no_hard_negatives,
            mine_negatives: self.mine_negatives,
            seed: self.seed,
            graded_batch: self.graded_batch,
            graded_weight: self.graded_weight,
            graded_score: match self.graded_score {
                GradedScoreArg::Cosine => GradedScore::Cosine,
                GradedScoreArg::Rcmd => GradedScore::Rcmd,
                GradedScoreArg::Both => GradedScore::Both,
            },
            // `train clrcmd` keeps no general pairs (`train context --general` does).
            ..ClrcmdOptions::default()
        }
    }
}

#[derive(Debug, ClapArgs)]
pub struct ChunkerArgs {
    /// The SemEval-2016 iSTS training files' directory (STSint.input.GENRE.sent1.chunk.txt and
    /// sent2, every genre there), e.g. ../shared/data/ists2016_train.
    #[arg(long, required = true, value_name = "DIR")]
    pub data: PathBuf,
    /// Where to write the model. Without it nothing is written; `--out src/text/chunker.model`
    /// in a checkout replaces the model kindred is built with.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Passes over the training sentences (default: 10; 30 with --neural).
    #[arg(long, value_name = "N")]
    pub epochs: Option<usize>,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
    /// Learn a contextual chunker: word features plus the model's (--model) hidden states
    /// after --layer layers for each unit and the unit before. kindred ships one as
    /// src/text/chunker-contextual.model, used wherever the model's states are its own.
    #[arg(long)]
    pub contextual: bool,
    /// With --contextual: the hidden states after this many transformer layers.
    #[arg(long, default_value_t = 2, value_name = "N")]
    pub layer: usize,
    /// With --contextual: what the states are multiplied by against the 0/1 word features.
    #[arg(long, default_value_t = 0.3, value_name = "X")]
    pub scale: f32,
    /// With --contextual: learn the neural chunker instead (what kindred ships as
    /// src/text/chunker-contextual.model): an MLP over the states of the units before, at and
    /// after each boundary, no word features; an ensemble of --nets networks of --hidden units.
    #[arg(long, requires = "contextual")]
    pub neural: bool,
    /// With --neural: hidden units per network.
    #[arg(long, default_value_t = 32, value_name = "N", requires = "neural")]
    pub hidden: usize,
    /// With --neural: networks in the ensemble, each from its own seed (their mean logit
    /// decides).
    #[arg(long, default_value_t = 3, value_name = "N", requires = "neural")]
    pub nets: usize,
    /// Score on development pairs (id % 5 == 1, then left out of training too) instead of the
    /// held-out ones: for choosing --layer, --scale and --neural's settings without looking at
    /// the held-out pairs.
    #[arg(long)]
    pub dev: bool,
}

fn chunker(g: &Global, args: &ChunkerArgs) -> Result<()> {
    let mut data = chunks::read_ists_chunks(&args.data)?;
    let scored = |s: &IstsSentence| match args.dev {
        true => s.pair % 5 == 1,
        false => s.held_out(),
    };
    let trains = |s: &IstsSentence| !s.held_out() && !scored(s);
    let spec = match args.contextual {
        true => Some(add_unit_states(g, args, &mut data)?),
        false => None,
    };
    let train: Vec<_> = data
        .iter()
        .filter(|s| trains(s))
        .map(|s| (s.tokens.clone(), s.chunks.clone()))
        .collect();
    let states: Vec<Vec<f32>> = data
        .iter()
        .filter(|s| trains(s))
        .map(|s| s.states.clone())
        .collect();
    let held_out = data.iter().filter(|s| scored(s)).count();
    eprintln!(
        "{} training sentences, {held_out} {}",
        train.len(),
        match args.dev {
            true => "development sentences (pairs whose id is 1 mod 5; held-out pairs unused)",
            false => "held out (pairs whose id is divisible by 5)",
        }
    );
    let started = std::time::Instant::now();
    let epochs = args.epochs.unwrap_or(if args.neural { 30 } else { 10 });
    if epochs == 0 || args.hidden == 0 || args.nets == 0 {
        bail!("--epochs, --hidden and --nets must be at least 1");
    }
    let report = |e: Epoch| {
        eprintln!(
            "epoch {}/{epochs}: {} of {} decisions wrong",
            e.epoch, e.mistakes, e.decisions
        )
    };
    let model = match spec {
        Some(spec) if args.neural => {
            let options = MlpOptions {
                hidden: args.hidden,
                nets: args.nets,
                epochs,
                ..MlpOptions::default()
            };
            let b = super::progress::bar((epochs * args.nets) as u64, "network epochs");
            let model = Chunker::train_neural(&train, &states, spec, &options, || b.inc(1));
            b.finish_and_clear();
            model
        }
        Some(spec) => Chunker::train_contextual(&train, &states, spec, epochs, report),
        None => Chunker::train_with(&train, epochs, report),
    };
    let seconds = started.elapsed().as_secs_f64();
    let text = model.to_text();
    if let Some(out) = &args.out {
        std::fs::write(out, &text).with_context(|| format!("writing {}", out.display()))?;
    }
    let mut methods = vec![("model", Method::Model(&model))];
    if args.contextual && !args.dev {
        methods.push(("words", Method::Model(Chunker::builtin())));
    }
    methods.extend([("rules", Method::Rules), ("every_unit", Method::EveryUnit)]);
    let scores: Vec<(&str, Vec<(String, ChunkCounts)>)> = methods
        .into_iter()
        .map(|(name, m)| {
            (
                name,
                chunks::scores_by_genre(m, data.iter().filter(|s| scored(s)).collect()),
            )
        })
        .collect();
    let summary = ChunkerSummary {
        epochs,
        train_sentences: train.len(),
        held_out_sentences: held_out,
        features: model.len(),
        model_bytes: text.len(),
        seconds,
    };
    match args.json {
        true => print_chunker_json(args, &summary, &scores),
        false => print_chunker_table(args, &summary, &scores),
    }
}

/// Computes each sentence's unit states (`--contextual`) with the model's first `--layer`
/// layers, and says which states the contextual chunker reads.
fn add_unit_states(
    g: &Global,
    args: &ChunkerArgs,
    data: &mut [IstsSentence],
) -> Result<ContextualSpec> {
    let encoder = g.encoder()?;
    let texts: Vec<String> = data.iter().map(|s| s.text()).collect();
    let b = super::progress::bar(texts.len() as u64, "hidden states");
    for (batch, sentences) in texts.chunks(64).zip(data.chunks_mut(64)) {
        let refs: Vec<&str> = batch.iter().map(String::as_str).collect();
        let spans: Vec<_> = refs.iter().map(|t| chunk::units(t)).collect();
        let states = encoder.unit_states(&refs, &spans, args.layer)?;
        for (s, rows) in sentences.iter_mut().zip(states) {
            s.states = rows;
        }
        b.inc(refs.len() as u64);
    }
    b.finish_and_clear();
    Ok(ContextualSpec {
        layer: args.layer,
        dim: encoder.identity().dim,
        model: encoder.weights_fingerprint().to_string(),
        scale: args.scale,
    })
}

/// What `train chunker` reports beside the scores.
struct ChunkerSummary {
    epochs: usize,
    train_sentences: usize,
    held_out_sentences: usize,
    features: usize,
    model_bytes: usize,
    seconds: f64,
}

/// Each chunker's exact-chunk counts per genre.
type ChunkScores<'a> = [(&'a str, Vec<(String, ChunkCounts)>)];

fn print_chunker_json(args: &ChunkerArgs, s: &ChunkerSummary, scores: &ChunkScores) -> Result<()> {
    let held: serde_json::Map<String, serde_json::Value> = scores
        .iter()
        .map(|(name, per_genre)| {
            let genres: serde_json::Map<String, serde_json::Value> = per_genre
                .iter()
                .map(|(g, c)| (g.clone(), counts_json(c)))
                .collect();
            (name.to_string(), genres.into())
        })
        .collect();
    let summary = json!({
        "train_sentences": s.train_sentences,
        "held_out_sentences": s.held_out_sentences,
        "epochs": s.epochs,
        "features": s.features,
        "model_bytes": s.model_bytes,
        "train_seconds": s.seconds,
        "out": args.out,
        "held_out": held,
    });
    println!("{}", serde_json::to_string_pretty(&summary)?);
    Ok(())
}

fn print_chunker_table(args: &ChunkerArgs, s: &ChunkerSummary, scores: &ChunkScores) -> Result<()> {
    println!(
        "{} exact-chunk scores ({} features, {} bytes, {:.1} s of training):",
        if args.dev { "development" } else { "held-out" },
        s.features,
        s.model_bytes,
        s.seconds
    );
    println!(
        "{:<18} {:<11} {:>9} {:>9} {:>9}",
        "genre", "chunker", "precision", "recall", "F1"
    );
    for (name, per_genre) in scores {
        for (genre, c) in per_genre {
            println!(
                "{genre:<18} {name:<11} {:>9.4} {:>9.4} {:>9.4}",
                c.precision(),
                c.recall(),
                c.f1()
            );
        }
    }
    match &args.out {
        Some(out) => println!("wrote {}", out.display()),
        None => println!("model not written: pass --out FILE (e.g. src/text/chunker.model)"),
    }
    Ok(())
}

fn counts_json(c: &ChunkCounts) -> serde_json::Value {
    json!({
        "precision": c.precision(),
        "recall": c.recall(),
        "f1": c.f1(),
        "correct": c.correct,
        "predicted": c.predicted,
        "gold": c.gold,
    })
}
