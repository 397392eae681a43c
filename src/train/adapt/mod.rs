//! Adapting a model to one collection without labels, start to finish (what `kindred train
//! context` and the first step of `kindred adapt` run): the precheck that the context is about
//! its questions, the general pairs to keep in order, the grader, the harvest of graded pairs
//! ([`super::context`]), the training of the chosen [`Method`] ([`trainers`]) and the
//! record that makes OUT a finished adapted model ([`super::record`]). Progress and what is
//! worth telling go to a callback ([`Progress`]); nothing here prints or draws.

mod files;
mod trainers;

use std::path::Path;
use std::time::Instant;

pub use files::{check_out, read_documents, record_shared_grader, GRADER_DIR};

use super::clrcmd::Event;
use super::context::{self, ContextDoc, GeneralOptions, HarvestOptions};
use super::record::{
    self, ContextRecord, GeneralRecord, GraderKind, GraderRecord, HarvestRecord, Trained,
    RECORD_VERSION,
};
use crate::error::{Result, UserError};
use crate::eval::ScoredPair;
use crate::model::ModelDir;
use crate::{DeviceKind, Encoder};

/// What is trained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// The encoder (CLRCMD on the best harvested pairs + CoSENT on every grade); with `runs`
    /// above 1, that many runs with consecutive seeds averaged (a model soup).
    Encoder {
        /// Runs averaged (1: no soup).
        runs: usize,
    },
    /// The sentence transition matrix only (encoder frozen).
    Transition,
    /// Only the contextual model (each question matched to its first context texts), written
    /// as the model: no harvest.
    Thread,
}

/// The model that grades the harvest (the base is what is trained either way).
#[derive(Debug, Clone)]
pub enum GradeWith {
    /// The base model.
    Base,
    /// A contextual model trained first on the collection's own threads, into
    /// `OUT/`[`GRADER_DIR`].
    Thread,
    /// Another model directory.
    Model(ModelDir),
}

/// The training settings the methods share.
#[derive(Debug, Clone)]
pub struct Training {
    /// Passes over the positive pairs (encoder) or over all pairs (transition).
    pub epochs: usize,
    /// Steps at most (encoder, contextual model).
    pub max_steps: usize,
    /// Peak learning rate (encoder).
    pub lr: f64,
    /// Positive pairs per step.
    pub batch: usize,
    /// Graded pairs per step (encoder).
    pub graded_batch: usize,
    /// Weight of CoSENT on the grades (encoder).
    pub graded_weight: f32,
    /// General pairs per step.
    pub general_batch: usize,
    /// Weight of CoSENT on the general pairs.
    pub general_weight: f32,
    /// Seed of the batch order (the first run's, in a soup).
    pub seed: u64,
    /// Measure the held-out agreement every N steps (encoder).
    pub eval_every: usize,
    /// Context texts per question the contextual model learns to match.
    pub thread_texts: usize,
    /// Recompute cheap activations in the backward pass instead of keeping them.
    pub low_memory: bool,
    /// Continue the checkpoints an interrupted run left in OUT.
    pub resume: bool,
}

/// The general text whose order the adapted encoder keeps.
#[derive(Debug, Clone, Copy)]
pub struct General<'a> {
    /// The file it was read from (recorded).
    pub file: &'a Path,
    /// Its text, one question per line.
    pub text: &'a str,
}

/// One adaptation: what it reads, what it trains and where it writes.
pub struct Job<'a> {
    /// The collection adapted to (recorded).
    pub collection: &'a str,
    /// Metadata keys read as context (recorded; `docs` already holds their texts).
    pub context_fields: &'a [String],
    /// The collection's documents with their context ([`read_documents`]).
    pub docs: &'a [ContextDoc],
    /// The collection's model directory: what is trained.
    pub base: &'a ModelDir,
    /// Its fp32 encoder.
    pub encoder: &'a Encoder,
    /// The model directory written, checked with [`check_out`].
    pub out: &'a Path,
    /// What is trained.
    pub method: Method,
    /// Which model grades the harvest.
    pub grader: GradeWith,
    /// How pairs are harvested and graded.
    pub harvest: HarvestOptions,
    /// The general text kept in order (encoder and contextual model), if any.
    pub general: Option<General<'a>>,
    /// The training settings.
    pub training: Training,
    /// Train even on grades that hardly agree with the questions' own similarity.
    pub allow_unrelated_context: bool,
    /// Where training runs.
    pub device: DeviceKind,
    /// Loads a model directory's fp32 encoder as the caller configures encoders (device,
    /// batch size, kernels): the grader, and a contextual grader once trained.
    pub load_encoder: &'a dyn Fn(&ModelDir) -> Result<Encoder>,
}

/// What an adaptation reports while it runs.
#[derive(Debug)]
pub enum Progress<'a> {
    /// Something worth a line: what starts, what was found, a warning.
    Note(String),
    /// `done` of `total` units of the step `what` (precheck, general pairs, harvest).
    Step {
        /// The step.
        what: &'a str,
        /// Units done.
        done: u64,
        /// Units in the step.
        total: u64,
    },
    /// An event of a CLRCMD run (the contextual model's or an encoder run's).
    Clrcmd(Event),
    /// The step or run reported so far is over.
    Done,
}

/// The callback a [`Job`] reports to.
pub type OnProgress<'p> = dyn FnMut(Progress<'_>) + 'p;

/// Runs `job`: refuses unrelated context (unless allowed) before anything is trained, trains
/// as its method says, writes the record into OUT and returns it.
pub fn run(job: &Job<'_>, on: &mut OnProgress<'_>) -> Result<ContextRecord> {
    // The precheck grades with the base: a grader trained on unrelated context would agree
    // with itself.
    if !job.allow_unrelated_context {
        let sample = context::PRECHECK_DOCUMENTS;
        let why = context::precheck(job.encoder, job.docs, &job.harvest, sample, &mut steps(on));
        on(Progress::Done);
        if let Some(why) = why? {
            return Err(unrelated(job.collection, why));
        }
    }
    // Before the grader: a contextual grader rehearses the same general pairs as the runs.
    let general_options = GeneralOptions::default();
    let general = match job.general {
        Some(g) => general_pairs(job, g.text, &general_options, on)?,
        None => Vec::new(),
    };
    let started = Instant::now();
    let trained = match job.method {
        Method::Thread => {
            on(Progress::Note(format!(
                "training the contextual model on the collection's own threads (each question \
                 with its first {} context texts) as the model",
                job.training.thread_texts
            )));
            let selection = trainers::thread(job, &general, job.out, on)?;
            Trained::Thread {
                texts_per_question: job.training.thread_texts,
                selection,
                train_seconds: started.elapsed().as_secs_f64(),
            }
        }
        _ => on_harvest(job, &general, on)?,
    };
    let record = ContextRecord {
        version: RECORD_VERSION,
        collection: job.collection.to_string(),
        context_fields: job.context_fields.to_vec(),
        base: job.base.identity()?,
        general: job.general.map(|g| GeneralRecord {
            file: g.file.to_path_buf(),
            options: general_options,
            pairs: general.len(),
            weight: job.training.general_weight,
            batch: job.training.general_batch,
        }),
        out: job.out.to_path_buf(),
        trained,
    };
    record::write(job.out, &record)?;
    Ok(record)
}

/// A harvest step callback reporting to `on`.
fn steps<'a>(on: &'a mut (dyn FnMut(Progress<'_>) + 'a)) -> impl FnMut(&str, u64, u64) + 'a {
    move |what, done, total| on(Progress::Step { what, done, total })
}

/// The refusal of a collection whose context does not relate to its questions.
fn unrelated(collection: &str, why: String) -> crate::Error {
    refused(format!(
        "{collection:?}: {why}; nothing was trained (pass --allow-unrelated-context to train on \
         these grades anyway)"
    ))
}

/// The refusal of the collection an adaptation reads, for `reason` (which names it).
fn refused(reason: String) -> crate::Error {
    UserError::InvalidArgument {
        name: "collection",
        reason,
    }
    .into()
}

/// The general text's pairs to keep in order, graded by the base model.
fn general_pairs(
    job: &Job<'_>,
    text: &str,
    options: &GeneralOptions,
    on: &mut OnProgress<'_>,
) -> Result<Vec<ScoredPair>> {
    let pairs = context::general_training_pairs(job.encoder, text, options, &mut steps(on));
    on(Progress::Done);
    let pairs = pairs?;
    on(Progress::Note(format!(
        "general text: {} pairs to keep in order, {} per step, weight {}",
        pairs.len(),
        job.training.general_batch,
        job.training.general_weight
    )));
    Ok(pairs)
}

/// The encoder `job.grader` names (None: the base grades) and what to record of it; a
/// contextual grader is trained first, into `OUT/`[`GRADER_DIR`].
fn grader(
    job: &Job<'_>,
    general: &[ScoredPair],
    on: &mut OnProgress<'_>,
) -> Result<(Option<Encoder>, GraderRecord)> {
    let plain = |model: GraderKind, dir: &ModelDir| -> Result<GraderRecord> {
        Ok(GraderRecord {
            model,
            dir: crate::model::resolved(&dir.path),
            identity: dir.identity()?,
            texts_per_question: None,
            selection: None,
        })
    };
    match &job.grader {
        GradeWith::Base => Ok((None, plain(GraderKind::Base, job.base)?)),
        GradeWith::Model(dir) => Ok((Some((job.load_encoder)(dir)?), plain(GraderKind::Dir, dir)?)),
        GradeWith::Thread => {
            let dir = job.out.join(GRADER_DIR);
            on(Progress::Note(format!(
                "training the grader: a contextual model on the collection's own threads (each \
                 question with its first {} context texts) into {}",
                job.training.thread_texts,
                dir.display()
            )));
            let selection = trainers::thread(job, general, &dir, on)?;
            let model = ModelDir::open(&dir)?;
            let encoder = (job.load_encoder)(&model)?;
            let recorded = GraderRecord {
                texts_per_question: Some(job.training.thread_texts),
                selection: Some(selection),
                ..plain(GraderKind::Thread, &model)?
            };
            Ok((Some(encoder), recorded))
        }
    }
}

/// The encoder and transition methods: grades a harvest of the collection's pairs (with the
/// base or the grader), refuses unrelated context unless allowed, trains on it, and returns
/// what the record adds (method, grader, harvest, selection, time).
fn on_harvest(job: &Job<'_>, general: &[ScoredPair], on: &mut OnProgress<'_>) -> Result<Trained> {
    let (grader, grader_record) = grader(job, general, on)?;
    let started = Instant::now();
    let harvest = context::harvest(
        grader.as_ref().unwrap_or(job.encoder),
        job.docs,
        &job.harvest,
        &mut steps(on),
    );
    drop(grader);
    on(Progress::Done);
    let harvest = harvest?;
    let harvest_seconds = started.elapsed().as_secs_f64();
    if let Some(why) = harvest.unrelated() {
        if !job.allow_unrelated_context {
            return Err(unrelated(job.collection, why));
        }
        on(Progress::Note(format!(
            "warning: {why}; training anyway (--allow-unrelated-context)"
        )));
    }
    let sets = context::training_sets(job.docs, &harvest, &job.harvest);
    let positives = sets.train.iter().filter(|p| p.duplicate).count();
    on(Progress::Note(format!(
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
    )));
    let harvest_record = HarvestRecord {
        options: job.harvest.clone(),
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
    let started = Instant::now();
    let seconds = || started.elapsed().as_secs_f64();
    let (grader, harvest) = (grader_record, harvest_record);
    Ok(match job.method {
        Method::Encoder { runs } if runs <= 1 => {
            let seed = job.training.seed;
            let selection = trainers::encoder(job, seed, &sets, general, job.out, on)?;
            Trained::Encoder {
                grader,
                harvest,
                selection,
                train_seconds: seconds(),
            }
        }
        Method::Encoder { runs } => {
            let selection = trainers::soup(job, runs, &sets, general, on)?;
            Trained::Soup {
                grader,
                harvest,
                selection,
                train_seconds: seconds(),
            }
        }
        Method::Transition => {
            let selection = trainers::transition(job, &sets)?;
            Trained::Transition {
                grader,
                harvest,
                selection,
                train_seconds: seconds(),
            }
        }
        Method::Thread => unreachable!("the thread method harvests nothing (run)"),
    })
}
