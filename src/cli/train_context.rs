//! `kindred train context`: adapts the model to one collection without labels — reads its
//! documents and their context, harvests graded pairs ([`kindred::train::context`]; graded by
//! the collection's model, another model directory, or a contextual model it first trains on
//! the collection's own threads: `--grader`), and trains on them with the existing trainers
//! (CLRCMD + CoSENT, or the transition matrix), writing a normal model directory plus
//! `kindred-context.json` saying what it learned from.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args as ClapArgs;
use indicatif::ProgressBar;

use kindred::eval::ScoredPair;
use kindred::model::ModelDir;
use kindred::train::clrcmd::{self, ClrcmdOptions};
use kindred::train::context::{self, ContextDoc, GeneralOptions, HarvestOptions, Signal};
use kindred::train::record::{
    self, BlendRecord, ClrcmdSelection, ContextRecord, GeneralRecord, GraderKind, GraderRecord,
    HarvestRecord, SoupRun, SoupSelection, ThreadSelection, Trained, TransitionSelection,
    RECORD_VERSION,
};
use kindred::train::transition::{train_transition, TransitionOptions};
use kindred::train::{write_model_dir, TrainedBy};
use kindred::{DeviceKind, Precision, UserError};

use super::Global;

/// The file a context-trained model directory gets beside `kindred-model.json`.
pub use kindred::train::record::RECORD_FILE as HARVEST_FILE;

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

/// Every live document as a [`ContextDoc`]: its context texts, then "KEY: VALUE" for each
/// named metadata key it has (arrays give one text per element).
pub(super) fn read_documents(
    db: &kindred::Database,
    collection: &str,
    fields: &[String],
) -> Result<Vec<ContextDoc>> {
    let mut docs = Vec::new();
    for d in db.documents(collection)? {
        let d = d?;
        let mut ctx = d.context.clone();
        if !fields.is_empty() {
            let meta = d.metadata();
            for key in fields {
                let values: Vec<&serde_json::Value> = match meta.get(key) {
                    Some(serde_json::Value::Array(a)) => a.iter().collect(),
                    Some(v) => vec![v],
                    None => Vec::new(),
                };
                for v in values {
                    let text = v.as_str().map_or_else(|| v.to_string(), str::to_string);
                    if !text.trim().is_empty() {
                        ctx.push(format!("{key}: {text}"));
                    }
                }
            }
        }
        docs.push(ContextDoc {
            id: d.id,
            text: d.text,
            context: ctx,
        });
    }
    Ok(docs)
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

/// The progress bar the harvest steps draw on (its message names the step).
pub(super) fn step_bar() -> Result<ProgressBar> {
    Ok(super::progress::bar(0, ""))
}

/// A harvest's `progress(what, done, total)` drawing on `bar`.
pub(super) fn on_step(bar: &ProgressBar) -> impl FnMut(&str, u64, u64) + '_ {
    move |what, done, total| {
        bar.set_message(what.to_string());
        bar.set_length(total);
        bar.set_position(done);
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
    if let GraderArg::Dir(dir) = args.grader() {
        open_grader(&dir)?;
    }
    let out = checked_out(g, args)?;
    // The collection is read before anything is announced: a wrong name fails alone.
    let db = g.database()?;
    let base = g.collection_model_dir(&db, &args.collection)?;
    let docs = read_documents(&db, &args.collection, &args.context_fields)?;
    drop(db);
    eprintln!(
        "training into {} (if this is interrupted, the same command with --out {0} --resume \
         continues it)",
        out.display()
    );
    let encoder = g.load_encoder(&base, Precision::Fp32)?;
    let options = HarvestOptions {
        neighbours: args.neighbours,
        signal: args.signal,
        held_out_every: args.held_out_every.max(2),
        positive_share: args.positive_share,
        thread_positives: args.thread_positives,
        ..HarvestOptions::default()
    };
    let refuse = |why: String| unrelated(&args.collection, why);
    let bar = step_bar()?;
    // The precheck grades with the base: a grader trained on unrelated context would agree
    // with itself.
    if !args.allow_unrelated_context {
        let sample = context::PRECHECK_DOCUMENTS;
        if let Some(why) = context::precheck(&encoder, &docs, &options, sample, &mut on_step(&bar))?
        {
            bar.finish_and_clear();
            return Err(refuse(why));
        }
    }
    bar.finish_and_clear();
    // Before the grader: a `thread` grader rehearses the same general pairs as the runs.
    let general_options = GeneralOptions::default();
    let general = match &general_text {
        Some(text) => general_pairs(args, &encoder, text, &general_options)?,
        None => Vec::new(),
    };
    // What every method records beside what it trained and how.
    let record = |trained: Trained| -> Result<ContextRecord> {
        Ok(ContextRecord {
            version: RECORD_VERSION,
            collection: args.collection.clone(),
            context_fields: args.context_fields.clone(),
            base: base.identity()?,
            general: args.general.as_ref().map(|path| GeneralRecord {
                file: path.clone(),
                options: general_options.clone(),
                pairs: general.len(),
                weight: args.general_weight,
                batch: args.general_batch,
            }),
            out: out.clone(),
            trained,
        })
    };
    if args.method() == MethodArg::Thread {
        eprintln!(
            "training the contextual model on the collection's own threads (each question with \
             its first {} context texts) as the model",
            args.thread_texts
        );
        let started = std::time::Instant::now();
        let selection = train_thread_grader(args, &base, &docs, &general, &out, device)?;
        let trained = Trained::Thread {
            texts_per_question: args.thread_texts,
            selection,
            train_seconds: started.elapsed().as_secs_f64(),
        };
        finish(args, &record(trained)?)?;
        return Ok(out);
    }
    let inputs = Inputs {
        base: &base,
        encoder: &encoder,
        docs: &docs,
        general: &general,
        out: &out,
        options: &options,
    };
    let trained = train_on_harvest(g, args, &inputs, device, &refuse)?;
    finish(args, &record(trained)?)?;
    Ok(out)
}

/// OUT (`--out` or the default), checked: empty or, with --resume, an interrupted run of
/// this collection that the method can continue.
fn checked_out(g: &Global, args: &ContextArgs) -> Result<PathBuf> {
    let out = args.out(g)?;
    check_out(&out, &args.collection, args.resume)?;
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

/// The refusal of a collection whose context does not relate to its questions.
fn unrelated(collection: &str, why: String) -> anyhow::Error {
    kindred::Error::from(UserError::InvalidArgument {
        name: "collection",
        reason: format!(
            "{collection:?}: {why}; nothing was trained (pass --allow-unrelated-context to train \
             on these grades anyway)"
        ),
    })
    .into()
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

/// The general text's pairs to keep in order (`--general`), graded by the base model.
fn general_pairs(
    args: &ContextArgs,
    encoder: &kindred::Encoder,
    text: &str,
    options: &GeneralOptions,
) -> Result<Vec<ScoredPair>> {
    let bar = step_bar()?;
    let pairs = context::general_training_pairs(encoder, text, options, &mut on_step(&bar))?;
    bar.finish_and_clear();
    eprintln!(
        "general text: {} pairs to keep in order, {} per step, weight {}",
        pairs.len(),
        args.general_batch,
        args.general_weight
    );
    Ok(pairs)
}

/// What a harvest-and-train run reads: the base model (directory and fp32 encoder), the
/// collection's documents, the general pairs, where it writes, and the harvest options.
struct Inputs<'a> {
    base: &'a ModelDir,
    encoder: &'a kindred::Encoder,
    docs: &'a [ContextDoc],
    general: &'a [ScoredPair],
    out: &'a Path,
    options: &'a HarvestOptions,
}

/// `--method encoder` and `transition`: grades a harvest of the collection's pairs (with the
/// base or the `--grader`), refuses unrelated context unless allowed, trains on it, and
/// returns what the record adds (method, grader, harvest, selection, time).
fn train_on_harvest(
    g: &Global,
    args: &ContextArgs,
    inputs: &Inputs<'_>,
    device: DeviceKind,
    refuse: &dyn Fn(String) -> anyhow::Error,
) -> Result<Trained> {
    let (grader, grader_record) = load_grader(
        g,
        args,
        inputs.base,
        inputs.docs,
        inputs.general,
        inputs.out,
        device,
    )?;
    let bar = step_bar()?;
    let started = std::time::Instant::now();
    let harvest = context::harvest(
        grader.as_ref().unwrap_or(inputs.encoder),
        inputs.docs,
        inputs.options,
        &mut on_step(&bar),
    )?;
    drop(grader);
    bar.finish_and_clear();
    let harvest_seconds = started.elapsed().as_secs_f64();
    if let Some(why) = harvest.unrelated() {
        if !args.allow_unrelated_context {
            return Err(refuse(why));
        }
        eprintln!("warning: {why}; training anyway (--allow-unrelated-context)");
    }
    let sets = context::training_sets(inputs.docs, &harvest, inputs.options);
    let positives = sets.train.iter().filter(|p| p.duplicate).count();
    eprintln!(
        "harvested {} pairs from {} of {} questions ({} context texts) in {:.0} s: {} positives, \
         {} hard negatives, {} graded, {} held out; grade vs the model's cosine: Spearman {:.3}",
        harvest.pairs.len(),
        harvest.with_context,
        harvest.documents,
        harvest.context_texts,
        harvest_seconds,
        positives,
        sets.train.len() - positives,
        sets.graded.len(),
        sets.dev.len(),
        harvest.grade_vs_question_spearman
    );
    let harvest_record = HarvestRecord {
        options: inputs.options.clone(),
        documents: harvest.documents,
        with_context: harvest.with_context,
        context_texts: harvest.context_texts,
        pairs: harvest.pairs.len(),
        positives,
        hard_negatives: sets.train.len() - positives,
        graded: sets.graded.len(),
        held_out_pairs: sets.dev.len(),
        grade_vs_question_spearman: harvest.grade_vs_question_spearman,
        seconds: harvest_seconds,
    };
    let (base, general, out) = (inputs.base, inputs.general, inputs.out);
    let started = std::time::Instant::now();
    let seconds = || started.elapsed().as_secs_f64();
    Ok(match args.method() {
        MethodArg::Encoder if args.runs() == 1 => {
            let selection = train_encoder(args, args.seed, base, &sets, general, out, device)?;
            Trained::Encoder {
                grader: grader_record,
                harvest: harvest_record,
                selection,
                train_seconds: seconds(),
            }
        }
        MethodArg::Encoder => {
            let selection = train_soup(args, base, &sets, general, out, device)?;
            Trained::Soup {
                grader: grader_record,
                harvest: harvest_record,
                selection,
                train_seconds: seconds(),
            }
        }
        MethodArg::Transition => {
            let selection = train_transition_head(args, base, inputs.encoder, &sets, out)?;
            Trained::Transition {
                grader: grader_record,
                harvest: harvest_record,
                selection,
                train_seconds: seconds(),
            }
        }
        MethodArg::Thread => unreachable!("--method thread returned above"),
    })
}

/// Writes `record` as its OUT's [`HARVEST_FILE`] (what makes OUT a finished adapted model)
/// and reports it: as JSON with --json, else where the model is and how to use it.
fn finish(args: &ContextArgs, record: &ContextRecord) -> Result<()> {
    let out = &record.out;
    record::write(out, record)?;
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

/// When every model of a soup was trained on grades of one model (the same grader identity in
/// each one's [`record::recorded_grader`]), records that grader in the soup's own [`HARVEST_FILE`], so
/// that `tune` grades the soup as it would grade its runs; writes nothing otherwise.
pub(super) fn record_shared_grader(tuned: &[ModelDir], out: &Path) -> Result<()> {
    let graders: Vec<Option<GraderRecord>> = tuned
        .iter()
        .map(|m| record::recorded_grader(&m.path))
        .collect();
    let Some(Some(first)) = graders.first() else {
        return Ok(());
    };
    let fingerprint = &first.identity.fingerprint;
    if !graders.iter().all(|g| {
        g.as_ref()
            .is_some_and(|g| &g.identity.fingerprint == fingerprint)
    }) {
        return Ok(());
    }
    let blend = BlendRecord {
        version: RECORD_VERSION,
        method: "blend".into(),
        blend_of: tuned
            .iter()
            .map(|m| kindred::model::resolved(&m.path))
            .collect(),
        grader: first.clone(),
    };
    Ok(record::write(out, &blend)?)
}

/// Refuses an --out that would lose work or could not be resumed: one holding a finished
/// adapted model, one holding an interrupted run's checkpoints without --resume, and --resume
/// where there is nothing to continue.
fn check_out(out: &Path, collection: &str, resume: bool) -> Result<()> {
    let refuse = |reason: String| -> anyhow::Error {
        kindred::Error::from(UserError::InvalidArgument {
            name: if resume { "--resume" } else { "--out" },
            reason,
        })
        .into()
    };
    if out.join(HARVEST_FILE).exists() {
        return Err(refuse(format!(
            "{out} holds a finished adapted model ({HARVEST_FILE}); use it (`kindred --model \
             {out} reindex --collection {collection}`, then `kindred tune --collection \
             {collection}`), or choose another --out to train again",
            out = out.display()
        )));
    }
    let interrupted = interrupted_runs(out);
    if !resume && !interrupted.is_empty() {
        return Err(refuse(format!(
            "{} holds checkpoints of an interrupted run ({}); pass --resume to continue it with \
             the same flags, or choose another --out",
            out.display(),
            interrupted
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    if resume && interrupted.is_empty() {
        return Err(refuse(format!(
            "{} holds no checkpoint of an earlier run to continue; start without --resume",
            out.display()
        )));
    }
    Ok(())
}

/// Where `--grader thread` trains the grader: inside the model it grades the training of (so
/// that the two move together; `tune` looks there when the recorded path is gone).
pub(super) const GRADER_DIR: &str = "grader";

/// The training directories under `out` that hold a checkpoint: the grader's, the runs of a
/// soup and a single run's own.
fn interrupted_runs(out: &Path) -> Vec<PathBuf> {
    let mut dirs = vec![out.to_path_buf(), out.join(GRADER_DIR)];
    if let Ok(entries) = std::fs::read_dir(out.join("runs")) {
        let mut runs: Vec<PathBuf> = entries.filter_map(|e| e.ok()).map(|e| e.path()).collect();
        runs.sort();
        dirs.extend(runs);
    }
    dirs.retain(|d| clrcmd::has_checkpoint(d));
    dirs
}

/// The encoder `--grader` names (None: the base grades) and what to record of it; with
/// `thread`, trains it first into `out/grader`.
fn load_grader(
    g: &Global,
    args: &ContextArgs,
    base: &ModelDir,
    docs: &[ContextDoc],
    general: &[ScoredPair],
    out: &Path,
    device: DeviceKind,
) -> Result<(Option<kindred::Encoder>, GraderRecord)> {
    let plain = |model: GraderKind, dir: &ModelDir| -> Result<GraderRecord> {
        Ok(GraderRecord {
            model,
            dir: kindred::model::resolved(&dir.path),
            identity: dir.identity()?,
            texts_per_question: None,
            selection: None,
        })
    };
    let dir = match args.grader() {
        GraderArg::Base => return Ok((None, plain(GraderKind::Base, base)?)),
        GraderArg::Dir(dir) => open_grader(&dir)?,
        GraderArg::Thread => {
            let dir = out.join(GRADER_DIR);
            eprintln!(
                "training the grader: a contextual model on the collection's own threads \
                 (each question with its first {} context texts) into {}",
                args.thread_texts,
                dir.display()
            );
            let selection = train_thread_grader(args, base, docs, general, &dir, device)?;
            let model = ModelDir::open(&dir)?;
            let encoder = g.load_encoder(&model, Precision::Fp32)?;
            let recorded = GraderRecord {
                texts_per_question: Some(args.thread_texts),
                selection: Some(selection),
                ..plain(GraderKind::Thread, &model)?
            };
            return Ok((Some(encoder), recorded));
        }
    };
    let encoder = g.load_encoder(&dir, Precision::Fp32)?;
    Ok((Some(encoder), plain(GraderKind::Dir, &dir)?))
}

/// The contextual model: CLRCMD on [`context::thread_sets`] (in-batch negatives only), with
/// CoSENT keeping the order of `general` (the runs' `--general` pairs; none without it), selected
/// on the held-out questions' own answers against other threads'; returns the selection
/// summary.
fn train_thread_grader(
    args: &ContextArgs,
    base: &ModelDir,
    docs: &[ContextDoc],
    general: &[ScoredPair],
    out: &Path,
    device: DeviceKind,
) -> Result<ThreadSelection> {
    let sets = context::thread_sets(docs, args.thread_texts, args.held_out_every.max(2));
    if sets.train.len() < 2 {
        anyhow::bail!(
            "--grader thread: the collection's threads gave {} (question, context) pairs \
             outside the held-out slice; training needs at least 2 — add documents with \
             context, or grade with the base (--grader base)",
            sets.train.len()
        );
    }
    let options = ClrcmdOptions {
        batch_size: args.batch.min(sets.train.len()),
        epochs: 1,
        max_steps: Some(args.max_steps),
        eval_every: THREAD_GRADER_EVAL_EVERY.min(args.max_steps.max(1)),
        checkpoint_every: THREAD_GRADER_EVAL_EVERY,
        hard_negatives: false,
        keep_batch: args.general_batch,
        keep_weight: args.general_weight,
        seed: args.seed,
        ..ClrcmdOptions::default()
    };
    Ok(ThreadSelection {
        training: train_on(base, &sets, general, &options, out, args, device)?,
        pairs: sets.train.len(),
        general_pairs: general.len(),
        held_out_pairs: sets.dev.len(),
    })
}

/// How often the `thread` grader's run measures its held-out pairs (the measured setting).
const THREAD_GRADER_EVAL_EVERY: usize = 25;

/// `--runs` encoders trained as [`train_encoder`] with seeds `--seed`, `--seed + 1`, … (each
/// in `out/runs/`, removed once averaged), and the mean of their weights written to `out`;
/// returns each run's selection summary.
fn train_soup(
    args: &ContextArgs,
    base: &ModelDir,
    sets: &context::TrainingSets,
    general: &[ScoredPair],
    out: &Path,
    device: DeviceKind,
) -> Result<SoupSelection> {
    let runs_dir = out.join("runs");
    let runs = args.runs();
    let mut dirs = Vec::with_capacity(runs);
    let mut selections = Vec::with_capacity(runs);
    for k in 0..runs {
        let seed = args.seed.wrapping_add(k as u64);
        let dir = runs_dir.join(format!("seed-{seed}"));
        eprintln!("run {} of {runs} (seed {seed})", k + 1);
        let selection = train_encoder(args, seed, base, sets, general, &dir, device)?;
        selections.push(SoupRun { seed, selection });
        dirs.push(dir);
    }
    let tuned = dirs
        .iter()
        .map(|d| ModelDir::open(d))
        .collect::<kindred::Result<Vec<_>>>()?;
    kindred::train::blend::write_blend(base, &tuned, 1.0, out)
        .with_context(|| format!("writing {}", out.display()))?;
    std::fs::remove_dir_all(&runs_dir)
        .with_context(|| format!("removing {}", runs_dir.display()))?;
    Ok(SoupSelection { runs: selections })
}

/// The encoder, CLRCMD + CoSENT on the harvested sets, batches in the order of `seed`; returns
/// the selection summary.
fn train_encoder(
    args: &ContextArgs,
    seed: u64,
    base: &ModelDir,
    sets: &context::TrainingSets,
    general: &[ScoredPair],
    out: &Path,
    device: DeviceKind,
) -> Result<ClrcmdSelection> {
    let positives = sets.train.iter().filter(|p| p.duplicate).count();
    if positives < 2 {
        anyhow::bail!(
            "the harvest gave {positives} positive pairs outside the held-out slice; \
             training needs at least 2 — add documents with context (a few hundred \
             questions are a useful start)"
        );
    }
    // A small collection has fewer positives than one batch.
    let options = ClrcmdOptions {
        batch_size: args.batch.min(positives),
        learning_rate: args.lr,
        epochs: args.epochs,
        max_steps: Some(args.max_steps),
        eval_every: args.eval_every,
        checkpoint_every: args.eval_every.max(1) * 5,
        hard_negatives: true,
        graded_batch: args.graded_batch,
        graded_weight: args.graded_weight,
        keep_batch: args.general_batch,
        keep_weight: args.general_weight,
        seed,
        ..ClrcmdOptions::default()
    };
    train_on(base, sets, general, &options, out, args, device)
}

/// CLRCMD (+ CoSENT on `sets.graded` and `keep`) from `base` into `out`, selected on
/// `sets.dev`, continuing the checkpoint in `out` when there is one and `--resume` allows it
/// (a finished run's checkpoint continues with no step); returns the selection summary.
fn train_on(
    base: &ModelDir,
    sets: &context::TrainingSets,
    keep: &[ScoredPair],
    options: &ClrcmdOptions,
    out: &Path,
    args: &ContextArgs,
    device: DeviceKind,
) -> Result<ClrcmdSelection> {
    let resume = args.resume && clrcmd::has_checkpoint(out);
    if resume {
        eprintln!("resuming {} from its checkpoint", out.display());
    }
    let run = clrcmd::ClrcmdRun {
        base,
        train: &sets.train,
        dev: &sets.dev,
        graded: &sets.graded,
        keep,
        out,
        options,
        device,
        low_memory: args.low_memory,
        resume,
    };
    let report = super::clrcmd::run_clrcmd(&run)?;
    Ok(ClrcmdSelection {
        held_out_rcmd_auc_before: report.dev_auc_before,
        best: report.best,
        steps: report.steps,
    })
}

/// The transition matrix on the harvested sets (encoder frozen), written with the base's
/// files; returns the selection summary.
fn train_transition_head(
    args: &ContextArgs,
    base: &ModelDir,
    encoder: &kindred::Encoder,
    sets: &context::TrainingSets,
    out: &Path,
) -> Result<TransitionSelection> {
    let positives = sets.train.iter().filter(|p| p.duplicate).count();
    // A small collection has fewer positives than the default batch of 64.
    let options = TransitionOptions {
        epochs: args.epochs.max(10),
        batch_size: positives.clamp(2, TransitionOptions::default().batch_size),
        ..TransitionOptions::default()
    };
    let report = train_transition(encoder, &sets.train, &sets.dev, &options, |_| {})?;
    let mut heads = encoder.heads().clone();
    heads.transition = Some(report.head.clone());
    let by = TrainedBy::Head {
        head: "transition",
        dev: Some(("held_out_cosine_auc".into(), report.dev_auc_after)),
        options: serde_json::to_value(&options)?,
    };
    write_model_dir(base, out, None, Some(&heads), &by)
        .with_context(|| format!("writing {}", out.display()))?;
    Ok(TransitionSelection {
        held_out_cosine_auc_before: report.dev_auc_before,
        held_out_cosine_auc_after: report.dev_auc_after,
        best_epoch: report.best_epoch,
    })
}
