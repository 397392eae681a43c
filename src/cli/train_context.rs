//! `kindred train context`: the arguments of an adaptation to one collection without labels
//! (what is trained, which model grades the harvested pairs, the training settings), checked;
//! [`kindred::train::adapt`] runs it, its progress shown on the CLI's bars, and the result
//! reported (where the adapted model is, how to use it).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args as ClapArgs;

use kindred::model::ModelDir;
use kindred::train::adapt::{self, General, GradeWith, Method, Training};
use kindred::train::clrcmd::{self, ClrcmdOptions};
use kindred::train::context::{HarvestOptions, Signal};
use kindred::train::record::ContextRecord;
use kindred::{DeviceKind, Precision, UserError};

use super::shown::Shown;
use super::Global;

#[derive(Debug, Clone, ClapArgs)]
pub struct ContextArgs {
    /// The collection whose questions and context are learned from.
    #[arg(long, short, required = true)]
    pub collection: String,
    /// Metadata keys read as context too (tags, category, linked FAQ id), beside each
    /// document's `context` texts; each present value becomes one context text "KEY: VALUE".
    #[arg(long = "context-field", value_name = "KEY")]
    pub context_fields: Vec<String>,
    /// The model directory to write. Default: $KINDRED_HOME/models/COLLECTION-context-TIME.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// What is trained: the encoder (CLRCMD on the best pairs + CoSENT on every grade), only
    /// the sentence transition matrix (encoder frozen; seconds), or `thread`: only the
    /// contextual model `--grader thread` trains first (each question with its first 3 context
    /// texts, rehearsing --general), written as the model — no harvest, one run.
    /// Default: encoder for `train context`, thread for `adapt`.
    #[arg(long, value_enum)]
    pub method: Option<MethodArg>,
    /// The grade: context (cosine of the context vectors), retrieval (how well each question
    /// retrieves the other's context) or both.
    #[arg(long, default_value = "retrieval", value_parser = parse_signal)]
    pub signal: Signal,
    /// Nearest neighbours mined per question (by question and by context cosine each).
    #[arg(long, default_value_t = 10)]
    pub neighbours: usize,
    /// Share of the mined pairs, best graded first, that become InfoNCE positives (encoder)
    /// or duplicates (transition).
    #[arg(long, default_value_t = HarvestOptions::default().positive_share, value_name = "SHARE")]
    pub positive_share: f64,
    /// One question in N (by id hash) is held out: its pairs select the model (and `tune`
    /// searches them).
    #[arg(long, default_value_t = HarvestOptions::default().held_out_every, value_name = "N")]
    pub held_out_every: u64,
    /// Context texts per question (its first ones) that become InfoNCE positives of the
    /// question itself (encoder): the question learns to retrieve its own thread. 0: none.
    /// More positives make more steps.
    #[arg(long, default_value_t = HarvestOptions::default().thread_positives, value_name = "N")]
    pub thread_positives: usize,
    /// The model that grades the harvested pairs: `base` (the collection's own model),
    /// `thread` (first train a contextual model on the collection's own threads — each
    /// question with its first 3 context texts, no labels — and grade with it; it is kept in
    /// OUT/grader; with --general it rehearses the general pairs too) or a model directory.
    /// The collection's own model is what is trained either way. Default: base; for `adapt
    /// --method encoder` with --general, thread (training the grader first lengthens the run).
    #[arg(long, value_name = "base|thread|DIR", value_parser = parse_grader)]
    pub grader: Option<GraderArg>,
    /// Context texts per question (its first non-empty ones) the contextual model of
    /// `--method thread` and `--grader thread` learns to match to the question. More texts
    /// mean more pairs, so more steps (bounded by --max-steps).
    #[arg(long, default_value_t = THREAD_GRADER_TEXTS, value_name = "N",
          value_parser = parse_thread_texts)]
    pub thread_texts: usize,
    /// Passes over the positive pairs (encoder) or over all pairs (transition).
    #[arg(long, default_value_t = 1)]
    pub epochs: usize,
    /// Stop after N steps (encoder): bounds the run on a large collection.
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub max_steps: usize,
    /// Peak learning rate (encoder; the transition matrix uses 1e-3, the contextual model of
    /// `--method thread` and `--grader thread` 5e-5).
    #[arg(long, default_value_t = 1e-4)]
    pub lr: f64,
    /// Positive pairs per step (encoder).
    #[arg(long, default_value_t = 32)]
    pub batch: usize,
    /// Graded pairs per step (encoder).
    #[arg(long, default_value_t = 32)]
    pub graded_batch: usize,
    /// Weight of the CoSENT loss on the grades beside InfoNCE on the positives.
    #[arg(long, default_value_t = 1.0)]
    pub graded_weight: f32,
    /// General questions (a text file, one per line, no labels: another site's questions, a
    /// public dump) whose similarity order the adapted encoder keeps: each is paired with its
    /// nearest neighbours and a stranger, graded by the base model's cosine, and CoSENT holds
    /// that order beside the harvested loss — so that learning this site's notion of "same"
    /// does not undo the base model's elsewhere (EVALUATION.md). Encoder only.
    #[arg(long, value_name = "FILE")]
    pub general: Option<PathBuf>,
    /// Weight of the CoSENT loss on the general pairs (with --general): the higher, the more
    /// firmly the base model's order on them is held.
    #[arg(long, default_value_t = 3.0, value_name = "W")]
    pub general_weight: f32,
    /// General pairs per step (with --general). More pairs hold the order more closely and
    /// make each step longer.
    #[arg(long, default_value_t = 128, value_name = "N")]
    pub general_batch: usize,
    /// Seed of the batch order (encoder): runs with other seeds show how much of a difference
    /// between two settings is chance.
    #[arg(long, default_value_t = ClrcmdOptions::default().seed)]
    pub seed: u64,
    /// Train N runs (encoder), with seeds --seed, --seed + 1, …, and write the mean of their
    /// weights (a model soup): steadier than one run, whose gain depends on its batch order.
    /// Takes N times as long. Default: 1 for `train context`, 3 for `adapt` (with --method
    /// encoder).
    #[arg(long, value_name = "N")]
    pub runs: Option<usize>,
    /// Train even when the harvested grades hardly agree with the questions' own similarity
    /// (Spearman below 0.15: context that belongs to other questions, or a field every
    /// document shares), which is refused otherwise: such grades teach the encoder noise.
    #[arg(long)]
    pub allow_unrelated_context: bool,
    /// Train in about a third less memory for about a tenth more time: activations that are
    /// cheap to compute again are recomputed in the backward pass instead of kept (the same
    /// model results).
    #[arg(long)]
    pub low_memory: bool,
    /// Continue an interrupted run in --out (killed, or stopped by a fault): the grader's and
    /// each run's training go on from their last checkpoint, runs that had finished are kept,
    /// and the harvest is made again (it is deterministic). Give the same collection and flags.
    #[arg(long)]
    pub resume: bool,
    /// Measure the held-out agreement every N steps (the best model is kept).
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub eval_every: usize,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

impl ContextArgs {
    /// The runs averaged: `--runs`, or 1 when it is not given (`adapt` gives
    /// [`ADAPT_RUNS`](super::adapt::ADAPT_RUNS)).
    pub fn runs(&self) -> usize {
        self.runs.unwrap_or(1)
    }

    /// What is trained: `--method`, or the encoder when it is not given (`adapt` gives
    /// [`ADAPT_METHOD`](super::adapt::ADAPT_METHOD)).
    pub fn method(&self) -> MethodArg {
        self.method.unwrap_or(MethodArg::Encoder)
    }

    /// The grader: `--grader`, or the collection's model when it is not given.
    pub fn grader(&self) -> GraderArg {
        self.grader.clone().unwrap_or(GraderArg::Base)
    }
}

/// `--grader`: which model grades the harvest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GraderArg {
    /// The collection's own model (the one trained).
    Base,
    /// A contextual model trained first on the collection's own threads
    /// ([`context::thread_sets`]).
    Thread,
    /// A model directory.
    Dir(PathBuf),
}

fn parse_grader(s: &str) -> std::result::Result<GraderArg, String> {
    match s {
        "base" => Ok(GraderArg::Base),
        "thread" => Ok(GraderArg::Thread),
        "" => Err("give base, thread or a model directory".into()),
        dir => Ok(GraderArg::Dir(PathBuf::from(dir))),
    }
}

/// Context texts per question the contextual model is trained on by default (`--thread-texts`;
/// its first ones): the setting measured on Qatar Living (EVALUATION.md).
pub const THREAD_GRADER_TEXTS: usize = 3;

/// `--method`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MethodArg {
    /// Fine-tune the encoder.
    Encoder,
    /// Learn the sentence transition matrix only.
    Transition,
    /// Train only the contextual model on the collection's own threads, as the model.
    Thread,
}

fn parse_thread_texts(s: &str) -> std::result::Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("the contextual model needs at least 1 context text per question".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{e}: give a whole number of texts, e.g. 3")),
    }
}

pub(super) fn parse_signal(s: &str) -> std::result::Result<Signal, String> {
    s.parse().map_err(|e: kindred::Error| e.to_string())
}

impl ContextArgs {
    /// --out, or a new directory under kindred's home named after the collection (checked
    /// first: the name becomes part of the path).
    pub fn out(&self, g: &Global) -> kindred::Result<PathBuf> {
        if let Some(out) = &self.out {
            return Ok(out.clone());
        }
        kindred::store::validate_name(&self.collection)?;
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Ok(g.home()
            .join("models")
            .join(format!("{}-context-{secs}", self.collection)))
    }
}

/// Trains as `args` say; returns the model directory written.
pub fn run(g: &Global, args: &ContextArgs, device: DeviceKind) -> Result<PathBuf> {
    check_args(args)?;
    // Read before the harvest, so that a wrong path fails in a second, not after it.
    let general_text = match &args.general {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("reading --general {}", path.display()))?,
        ),
        None => None,
    };
    let grader = match args.grader() {
        GraderArg::Base => GradeWith::Base,
        GraderArg::Thread => GradeWith::Thread,
        GraderArg::Dir(dir) => GradeWith::Model(open_grader(&dir)?),
    };
    let out = checked_out(g, args)?;
    // The collection is read before anything is announced: a wrong name fails alone.
    let db = g.database()?;
    let base = g.collection_model_dir(&db, &args.collection)?;
    let docs = adapt::read_documents(&db, &args.collection, &args.context_fields)?;
    drop(db);
    eprintln!(
        "training into {} (if this is interrupted, the same command with --out {0} --resume \
         continues it)",
        out.display()
    );
    let encoder = g.load_encoder(&base, Precision::Fp32)?;
    let options = g.encoder_options(Precision::Fp32)?;
    let load_encoder = |dir: &ModelDir| kindred::Encoder::load(dir, options);
    let job = adapt::Job {
        collection: &args.collection,
        context_fields: &args.context_fields,
        docs: &docs,
        base: &base,
        encoder: &encoder,
        out: &out,
        method: match args.method() {
            MethodArg::Encoder => Method::Encoder { runs: args.runs() },
            MethodArg::Transition => Method::Transition,
            MethodArg::Thread => Method::Thread,
        },
        grader,
        harvest: HarvestOptions {
            neighbours: args.neighbours,
            signal: args.signal,
            held_out_every: args.held_out_every.max(2),
            positive_share: args.positive_share,
            thread_positives: args.thread_positives,
            ..HarvestOptions::default()
        },
        general: match (&args.general, &general_text) {
            (Some(file), Some(text)) => Some(General { file, text }),
            _ => None,
        },
        training: Training {
            epochs: args.epochs,
            max_steps: args.max_steps,
            lr: args.lr,
            batch: args.batch,
            graded_batch: args.graded_batch,
            graded_weight: args.graded_weight,
            general_batch: args.general_batch,
            general_weight: args.general_weight,
            seed: args.seed,
            eval_every: args.eval_every,
            thread_texts: args.thread_texts,
            low_memory: args.low_memory,
            resume: args.resume,
        },
        allow_unrelated_context: args.allow_unrelated_context,
        device,
        load_encoder: &load_encoder,
    };
    let mut shown = Shown::default();
    let record = adapt::run(&job, &mut |p| shown.on(p));
    shown.finish();
    report(args, &record?)?;
    Ok(out)
}

/// Reports the finished adaptation: as JSON with --json, else where the model is and how to
/// use it.
fn report(args: &ContextArgs, record: &ContextRecord) -> Result<()> {
    let out = &record.out;
    if args.json {
        println!("{}", serde_json::to_string_pretty(record)?);
    } else {
        println!(
            "wrote {} ({} adapted to collection {:?})",
            out.display(),
            record.trained.method(),
            args.collection
        );
        let v = serde_json::to_value(record)?;
        println!("held-out agreement: {}", v["selection"]);
        println!(
            "use it: kindred --model {} reindex --collection {} (or ingest into a new collection)",
            out.display(),
            args.collection
        );
    }
    Ok(())
}

/// The model directory `--grader DIR` names, or an error saying it is not one.
pub(super) fn open_grader(dir: &Path) -> Result<ModelDir> {
    ModelDir::open(dir)
        .with_context(|| format!("--grader {}: not a model directory", dir.display()))
}

/// OUT (`--out` or the default), checked: empty or, with --resume, an interrupted run of
/// this collection that the method can continue.
fn checked_out(g: &Global, args: &ContextArgs) -> Result<PathBuf> {
    let out = args.out(g)?;
    adapt::check_out(&out, &args.collection, args.resume)?;
    // --method thread trains into OUT itself; the checkpoints of an encoder run are in its
    // grader's and runs' directories (earlier versions of `adapt` trained the encoder by
    // default), which it would not continue but start over beside.
    if args.resume && args.method() == MethodArg::Thread && !clrcmd::has_checkpoint(&out) {
        return Err(kindred::Error::from(UserError::InvalidArgument {
            name: "--resume",
            reason: format!(
                "{} holds the checkpoints of a --method encoder run, which --method thread does \
                 not continue; give --method encoder to continue it, or choose another --out",
                out.display()
            ),
        })
        .into());
    }
    Ok(out)
}

/// The argument combinations `train context` refuses before it reads anything.
fn check_args(args: &ContextArgs) -> Result<()> {
    let negative_share = HarvestOptions::default().negative_share;
    if !(args.positive_share > 0.0 && args.positive_share < 1.0 - negative_share) {
        anyhow::bail!(
            "--positive-share {}: give a share of the mined pairs above 0 and below {} \
             (the worst {} are the hard negatives); the default is {}",
            args.positive_share,
            1.0 - negative_share,
            negative_share,
            HarvestOptions::default().positive_share
        );
    }
    if args.general.is_some() && args.method() == MethodArg::Transition {
        anyhow::bail!(
            "--general keeps the encoder's order on general text, and --method transition \
             leaves the encoder frozen; drop --general or train the encoder"
        );
    }
    if args.grader.is_some() && args.method() == MethodArg::Thread {
        anyhow::bail!(
            "--method thread trains the contextual model itself and harvests nothing to grade; \
             drop --grader (or use --method encoder --grader thread to grade a harvest with it)"
        );
    }
    if args.runs() == 0 {
        anyhow::bail!("--runs 0: give the number of runs to average, 1 or more (1: no soup)");
    }
    if args.runs() > 1 && args.method() != MethodArg::Encoder {
        anyhow::bail!(
            "--runs {} averages encoders trained on the harvest with other batch orders, which \
             --method {} does not train; drop --runs or use --method encoder",
            args.runs(),
            clap::ValueEnum::to_possible_value(&args.method())
                .map_or_else(String::new, |v| v.get_name().to_owned())
        );
    }
    if args.general.is_some()
        && args.general_weight.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater)
    {
        anyhow::bail!(
            "--general-weight {}: give a positive weight (3 is the measured setting), or drop --general",
            args.general_weight
        );
    }
    if args.general.is_some() && args.general_batch < 2 {
        anyhow::bail!(
            "--general-batch {}: CoSENT orders the general pairs within a step, so give at \
             least 2 (128 is the default)",
            args.general_batch
        );
    }
    Ok(())
}
