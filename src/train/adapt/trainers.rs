//! The trainers an adaptation runs on what it gathered: the contextual model on the
//! collection's threads, the encoder on a harvest (one run, or a soup of several), the
//! transition matrix; each returns its selection summary for the record.

use std::path::Path;

use super::{refused, Job, OnProgress, Progress};
use crate::error::{io_err, Result};
use crate::eval::ScoredPair;
use crate::model::ModelDir;
use crate::train::clrcmd::{self, ClrcmdOptions};
use crate::train::context::{self, TrainingSets};
use crate::train::record::{
    ClrcmdSelection, SoupRun, SoupSelection, ThreadSelection, TransitionSelection,
};
use crate::train::transition::{train_transition, TransitionOptions};
use crate::train::{write_model_dir, TrainedBy};

/// How often the contextual model's run measures its held-out pairs (the measured setting).
const THREAD_EVAL_EVERY: usize = 25;

/// The contextual model: CLRCMD on [`context::thread_sets`] (in-batch negatives only), with
/// CoSENT keeping the order of `general` (none without a general text), selected on the
/// held-out questions' own answers against other threads', written to `out`.
pub(super) fn thread(
    job: &Job<'_>,
    general: &[ScoredPair],
    out: &Path,
    on: &mut OnProgress<'_>,
) -> Result<ThreadSelection> {
    let t = &job.training;
    let sets = context::thread_sets(job.docs, t.thread_texts, job.harvest.held_out_every);
    if sets.train.len() < 2 {
        let or = match job.method {
            super::Method::Thread => "",
            _ => ", or grade with the base (--grader base)",
        };
        return Err(refused(format!(
            "{:?}: its threads gave {} (question, context) pairs outside the held-out slice; \
             training the contextual model needs at least 2 — add documents with context{or}",
            job.collection,
            sets.train.len()
        )));
    }
    let options = ClrcmdOptions {
        batch_size: t.batch.min(sets.train.len()),
        epochs: 1,
        max_steps: Some(t.max_steps),
        eval_every: THREAD_EVAL_EVERY.min(t.max_steps.max(1)),
        checkpoint_every: THREAD_EVAL_EVERY,
        hard_negatives: false,
        keep_batch: t.general_batch,
        keep_weight: t.general_weight,
        seed: t.seed,
        ..ClrcmdOptions::default()
    };
    Ok(ThreadSelection {
        training: clrcmd_on(job, &sets, general, &options, out, on)?,
        pairs: sets.train.len(),
        general_pairs: general.len(),
        held_out_pairs: sets.dev.len(),
    })
}

/// `runs` encoders trained as [`encoder`] with consecutive seeds from the job's (each in
/// `OUT/runs/`, removed once averaged), and the mean of their weights written to OUT.
pub(super) fn soup(
    job: &Job<'_>,
    runs: usize,
    sets: &TrainingSets,
    general: &[ScoredPair],
    on: &mut OnProgress<'_>,
) -> Result<SoupSelection> {
    let runs_dir = job.out.join("runs");
    let mut dirs = Vec::with_capacity(runs);
    let mut selections = Vec::with_capacity(runs);
    for k in 0..runs {
        let seed = job.training.seed.wrapping_add(k as u64);
        let dir = runs_dir.join(format!("seed-{seed}"));
        on(Progress::Note(format!(
            "run {} of {runs} (seed {seed})",
            k + 1
        )));
        let selection = encoder(job, seed, sets, general, &dir, on)?;
        selections.push(SoupRun { seed, selection });
        dirs.push(dir);
    }
    let tuned = dirs
        .iter()
        .map(|d| ModelDir::open(d))
        .collect::<Result<Vec<_>>>()?;
    crate::train::blend::write_blend(job.base, &tuned, 1.0, job.out)?;
    std::fs::remove_dir_all(&runs_dir)
        .map_err(io_err(format!("removing {}", runs_dir.display())))?;
    Ok(SoupSelection { runs: selections })
}

/// The encoder: CLRCMD + CoSENT on the harvested sets, batches in the order of `seed`,
/// written to `out`.
pub(super) fn encoder(
    job: &Job<'_>,
    seed: u64,
    sets: &TrainingSets,
    general: &[ScoredPair],
    out: &Path,
    on: &mut OnProgress<'_>,
) -> Result<ClrcmdSelection> {
    let t = &job.training;
    let positives = sets.train.iter().filter(|p| p.duplicate).count();
    if positives < 2 {
        return Err(refused(format!(
            "{:?}: the harvest gave {positives} positive pairs outside the held-out slice; \
             training needs at least 2 — add documents with context (a few hundred questions \
             are a useful start)",
            job.collection
        )));
    }
    // A small collection has fewer positives than one batch.
    let options = ClrcmdOptions {
        batch_size: t.batch.min(positives),
        learning_rate: t.lr,
        epochs: t.epochs,
        max_steps: Some(t.max_steps),
        eval_every: t.eval_every,
        checkpoint_every: t.eval_every.max(1) * 5,
        hard_negatives: true,
        graded_batch: t.graded_batch,
        graded_weight: t.graded_weight,
        keep_batch: t.general_batch,
        keep_weight: t.general_weight,
        seed,
        ..ClrcmdOptions::default()
    };
    clrcmd_on(job, sets, general, &options, out, on)
}

/// CLRCMD (+ CoSENT on `sets.graded` and `keep`) from the base into `out`, selected on
/// `sets.dev`, continuing the checkpoint in `out` when there is one and the job resumes (a
/// finished run's checkpoint continues with no step).
fn clrcmd_on(
    job: &Job<'_>,
    sets: &TrainingSets,
    keep: &[ScoredPair],
    options: &ClrcmdOptions,
    out: &Path,
    on: &mut OnProgress<'_>,
) -> Result<ClrcmdSelection> {
    let resume = job.training.resume && clrcmd::has_checkpoint(out);
    if resume {
        on(Progress::Note(format!(
            "resuming {} from its checkpoint",
            out.display()
        )));
    }
    let run = clrcmd::ClrcmdRun {
        base: job.base,
        train: &sets.train,
        dev: &sets.dev,
        graded: &sets.graded,
        keep,
        out,
        options,
        device: job.device,
        low_memory: job.training.low_memory,
        resume,
    };
    let report = clrcmd::train_clrcmd(&run, |event| on(Progress::Clrcmd(event)));
    on(Progress::Done);
    let report = report?;
    Ok(ClrcmdSelection {
        held_out_rcmd_auc_before: report.dev_auc_before,
        best: report.best,
        steps: report.steps,
    })
}

/// The transition matrix on the harvested sets (encoder frozen), written with the base's
/// files to OUT.
pub(super) fn transition(job: &Job<'_>, sets: &TrainingSets) -> Result<TransitionSelection> {
    let positives = sets.train.iter().filter(|p| p.duplicate).count();
    // A small collection has fewer positives than the default batch of 64.
    let options = TransitionOptions {
        epochs: job.training.epochs.max(10),
        batch_size: positives.clamp(2, TransitionOptions::default().batch_size),
        ..TransitionOptions::default()
    };
    let report = train_transition(job.encoder, &sets.train, &sets.dev, &options, |_| {})?;
    let mut heads = job.encoder.heads().clone();
    heads.transition = Some(report.head.clone());
    let by = TrainedBy::Head {
        head: "transition",
        dev: Some(("held_out_cosine_auc".into(), report.dev_auc_after)),
        // Plain numbers: serialising cannot fail.
        options: serde_json::to_value(&options).unwrap_or_default(),
    };
    write_model_dir(job.base, job.out, None, Some(&heads), &by)?;
    Ok(TransitionSelection {
        held_out_cosine_auc_before: report.dev_auc_before,
        held_out_cosine_auc_after: report.dev_auc_after,
        best_epoch: report.best_epoch,
    })
}
