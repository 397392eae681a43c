//! CLRCMD fine-tuning (design.md §3; papers/clrcmd-rcmd-optimal-transport-sts.txt §3.3, §4.1):
//! the encoder learns so that s_RCMD ranks each anchor's duplicate above in-batch and hard
//! negatives — InfoNCE with τ = 0.05, Adam with linear decay.
//!
//! One step: tokenize the batch's distinct texts, run BERT on burn's autodiff device, L2-normalise
//! the hidden states, copy the content token vectors to the host, compute the loss and its
//! gradient there with the sparse [`super::loss::rcmd_infonce`], and push the
//! gradient back through BERT as the surrogate Σ x ⊙ ∂L/∂x. Checkpoints (weights with their
//! parameter ids + optimizer state + step) make runs resumable; dev AUC of s_RCMD is measured
//! every `eval_every` steps and the best weights are what `out` holds.
//!
//! With graded pairs (STS-B/SICK train), each step also runs a batch of them and adds
//! `graded_weight` × the CoSENT loss over their sentence-vector cosines
//! ([`super::loss::cosent`]) and/or their s_RCMD ([`rcmd_cosent`]), pushed back through
//! BERT the same way (Σ cos ⊙ ∂L/∂cos, Σ x ⊙ ∂L/∂x). *Kept* pairs (general text graded by
//! the base model's own cosine, [`ClrcmdRun::keep`]) add one more CoSENT term of the same
//! form, which holds the base model's order there while the rest of the loss moves it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::module::Module;
use burn::optim::{AdamConfig, GradientsAccumulator, GradientsParams, ModuleOptimizer};
use burn::store::{BurnpackStore, ModuleSnapshot};
use burn::tensor::{Bool, Device, Int, Tensor, TensorData};
use serde::{Deserialize, Serialize};

use super::data::{graded_batch, Dataset};
use super::loss::{cosent, rcmd_cosent, rcmd_infonce, InfoNce, LossGrads};
use super::{pair_auc, write_model_dir, TrainedBy};
use crate::encoder::{host_f32, weights, Bert, DeviceKind};
use crate::error::{io_err, InternalError, Result, UserError};
use crate::eval::{LabelledPair, ScoredPair};
use crate::model::heads::Heads;
use crate::model::ModelDir;
use crate::score::Tokens;
use crate::text::Tokenized;
use crate::{Encoder, EncoderOptions, Precision};

/// CLRCMD settings (defaults: the paper's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClrcmdOptions {
    /// Duplicate pairs per step.
    pub batch_size: usize,
    /// Peak Adam learning rate, decayed linearly to 0 over the run.
    pub learning_rate: f64,
    /// InfoNCE temperature.
    pub tau: f32,
    /// Passes over the duplicate pairs.
    pub epochs: usize,
    /// Stop after this many steps (before the epochs are done).
    pub max_steps: Option<usize>,
    /// Measure dev AUC every this many steps (and at the end).
    pub eval_every: usize,
    /// Write a resumable checkpoint every this many steps (and at the end).
    pub checkpoint_every: usize,
    /// Add one hard negative per anchor.
    pub hard_negatives: bool,
    /// Mine the hard negative of items without a labelled one: the base model's nearest
    /// non-duplicate question (instead of a random question from a non-duplicate pair).
    #[serde(default)]
    pub mine_negatives: bool,
    /// Seed of the batch order.
    pub seed: u64,
    /// Graded pairs per step (when graded pairs are given).
    #[serde(default = "default_graded_batch")]
    pub graded_batch: usize,
    /// Weight of the CoSENT loss on graded pairs beside the InfoNCE loss.
    #[serde(default = "default_graded_weight")]
    pub graded_weight: f32,
    /// Which similarity CoSENT ranks on graded pairs.
    #[serde(default)]
    pub graded_score: GradedScore,
    /// Kept pairs per step (when the run has kept pairs: [`ClrcmdRun::keep`]).
    #[serde(default = "default_graded_batch")]
    pub keep_batch: usize,
    /// Weight of the CoSENT loss that keeps the kept pairs' order.
    #[serde(default = "default_keep_weight")]
    pub keep_weight: f32,
}

/// The similarity whose order CoSENT teaches on graded pairs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GradedScore {
    /// The sentence vectors' cosine (the measured setting: EVALUATION.md).
    #[default]
    Cosine,
    /// s_RCMD over the token vectors.
    Rcmd,
    /// Both: the two CoSENT losses added.
    Both,
}

fn default_graded_batch() -> usize {
    16
}

fn default_graded_weight() -> f32 {
    // 1.0 let the CoSENT term dominate the InfoNCE one (EVALUATION.md, weight 1.0 vs 0.2).
    0.2
}

fn default_keep_weight() -> f32 {
    // The measured setting (EVALUATION.md, adapting without labels).
    3.0
}

/// CoSENT's scale λ (the paper's).
const COSENT_SCALE: f32 = 20.0;

impl Default for ClrcmdOptions {
    fn default() -> Self {
        ClrcmdOptions {
            batch_size: 32,
            learning_rate: 5e-5,
            tau: 0.05,
            epochs: 1,
            max_steps: None,
            eval_every: 100,
            checkpoint_every: 100,
            hard_negatives: true,
            mine_negatives: false,
            seed: 42,
            graded_batch: default_graded_batch(),
            graded_weight: default_graded_weight(),
            graded_score: GradedScore::default(),
            keep_batch: default_graded_batch(),
            keep_weight: default_keep_weight(),
        }
    }
}

/// What happens during a run, for progress reporting.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The run starts at `step` of `total`.
    Started {
        /// First step to run (non-zero when resumed).
        step: usize,
        /// Steps in the whole run.
        total: usize,
        /// Duplicate pairs (items).
        items: usize,
        /// Items with a labelled hard negative.
        linked_negatives: usize,
        /// Items with a mined hard negative.
        mined_negatives: usize,
        /// Duplicate pairs per step.
        batch_size: usize,
        /// Graded pairs (CoSENT beside InfoNCE; 0: none).
        graded: usize,
        /// Graded pairs per step.
        graded_batch: usize,
        /// Weight of CoSENT on the graded pairs.
        graded_weight: f32,
        /// Pairs the dev AUC is measured on.
        dev: usize,
    },
    /// A step finished.
    Step {
        /// Steps done.
        step: usize,
        /// This step's loss.
        loss: f64,
        /// Pairs per second over the run so far.
        pairs_per_sec: f64,
    },
    /// Dev AUC of s_RCMD after `step` steps.
    Eval {
        /// Steps done.
        step: usize,
        /// AUC on the dev pairs.
        auc: f64,
        /// It is the best so far (and was saved to `out`).
        best: bool,
    },
    /// Mining hard negatives: `done` of `total` questions encoded with the base model.
    Mining {
        /// Questions encoded.
        done: usize,
        /// Questions to encode.
        total: usize,
    },
    /// A checkpoint was written after `step` steps.
    Checkpoint {
        /// Steps done.
        step: usize,
    },
}

/// The outcome of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClrcmdReport {
    /// Steps done in total (including before a resume).
    pub steps: usize,
    /// Mean loss over the first `min(20, steps run)` steps of this invocation.
    pub first_loss: f64,
    /// Mean loss over the last `min(20, steps run)` steps of this invocation.
    pub last_loss: f64,
    /// Dev AUC of s_RCMD before any training step (None without dev pairs or when resumed).
    pub dev_auc_before: Option<f64>,
    /// Best dev AUC and its step (None without dev pairs).
    pub best: Option<(usize, f64)>,
    /// Duplicate pairs trained on per second (this invocation).
    pub pairs_per_sec: f64,
}

/// What a checkpoint records besides the tensors.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct CheckpointState {
    step: usize,
    total: usize,
    best: Option<(usize, f64)>,
    dev_auc_before: Option<f64>,
    options: ClrcmdOptions,
    base_fingerprint: String,
}

const CHECKPOINT_DIR: &str = "checkpoint";

/// Mined negatives closer than this to the anchor are likely unlabelled duplicates: skipped.
const MINED_MAX_COSINE: f32 = 0.95;

/// What a CLRCMD run trains on and where it writes (see [`train_clrcmd`]).
#[derive(Debug, Clone, Copy)]
pub struct ClrcmdRun<'a> {
    /// The model to start from.
    pub base: &'a ModelDir,
    /// Labelled pairs: duplicates are the items, non-duplicates the hard negatives.
    pub train: &'a [LabelledPair],
    /// Pairs s_RCMD AUC is measured on (may be empty).
    pub dev: &'a [LabelledPair],
    /// Graded pairs for CoSENT beside InfoNCE (may be empty).
    pub graded: &'a [ScoredPair],
    /// Pairs whose order the run keeps (may be empty): graded by the base model's own cosine,
    /// CoSENT on their sentence cosines holds that order while the rest of the loss moves the
    /// model (rehearsal on general text, so that adapting to one site does not undo what the
    /// base model knows elsewhere).
    pub keep: &'a [ScoredPair],
    /// The model directory written (with `checkpoint/` inside).
    pub out: &'a Path,
    /// The settings.
    pub options: &'a ClrcmdOptions,
    /// Where the forward and backward passes run.
    pub device: DeviceKind,
    /// Recompute memory-bound activations (softmax, GELU, normalisation) in the backward pass
    /// instead of keeping them (burn's gradient checkpointing): the same gradients for about a
    /// third less memory and a tenth more time (EVALUATION.md). Not an option of
    /// the training (a run resumes with either).
    pub low_memory: bool,
    /// Continue from `out/checkpoint` (same options and data).
    pub resume: bool,
}

fn bad(name: &'static str, reason: String) -> UserError {
    UserError::InvalidArgument { name, reason }
}

/// Refuses settings no run can use, before any model is loaded.
fn check_options(
    options: &ClrcmdOptions,
    graded: &[ScoredPair],
    keep: &[ScoredPair],
) -> Result<()> {
    if options.batch_size < 2 {
        return Err(bad(
            "batch size",
            format!(
                "{}; use at least 2 (in-batch negatives)",
                options.batch_size
            ),
        )
        .into());
    }
    if options.tau.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater)
        || options.learning_rate.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater)
    {
        return Err(bad("tau / learning rate", "must be positive".into()).into());
    }
    let cosent_set = |name: &'static str,
                      pairs: &[ScoredPair],
                      batch: usize,
                      weight: f32,
                      flags: &str| {
        if pairs.is_empty()
            || (batch >= 2 && weight.partial_cmp(&0.0) == Some(std::cmp::Ordering::Greater))
        {
            return Ok(());
        }
        Err(bad(
            name,
            format!(
                "{flags} {batch} / {weight}: CoSENT compares pairs within a batch, so give at least 2 per step and a positive weight"
            ),
        ))
    };
    cosent_set(
        "graded pairs",
        graded,
        options.graded_batch,
        options.graded_weight,
        "--graded-batch / --graded-weight",
    )?;
    cosent_set(
        "kept pairs",
        keep,
        options.keep_batch,
        options.keep_weight,
        "--general-batch / --general-weight",
    )?;
    Ok(())
}

/// Gives items without a linked negative one mined among the texts' neighbours by the base
/// model (deterministic given the base model, so a resumed run mines the same negatives).
/// Returns how many were mined.
fn mine_negatives(
    base: &ModelDir,
    device: DeviceKind,
    data: &mut Dataset,
    on: &mut impl FnMut(Event),
) -> Result<usize> {
    let encoder = Encoder::load(
        base,
        EncoderOptions {
            device,
            // Training runs the burn forward in f32: validate and mine in f32 too.
            precision: Precision::Fp32,
            ..EncoderOptions::default()
        },
    )?;
    let texts: Vec<String> = data.texts().into_iter().map(str::to_string).collect();
    let total = texts.len();
    let mut done = 0;
    let vectors: Vec<Vec<f32>> = encoder
        .encode_without_heads(&texts, |n| {
            done += n;
            on(Event::Mining { done, total });
        })?
        .into_iter()
        .map(|e| e.sentence)
        .collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    Ok(data.mine_negatives(&refs, &vectors, MINED_MAX_COSINE))
}

/// The run's items and its number of steps (epochs × batches per epoch, capped by max_steps).
fn plan(train: &[LabelledPair], options: &ClrcmdOptions) -> Result<(Dataset, usize)> {
    let data = Dataset::new(train);
    let per_epoch = data.batches_per_epoch(options.batch_size);
    if per_epoch == 0 {
        return Err(bad(
            "pairs",
            format!(
                "{} duplicate pairs, fewer than one batch of {}; give more labelled duplicates or a smaller --batch-size",
                data.items.len(),
                options.batch_size
            ),
        )
        .into());
    }
    let total = options
        .max_steps
        .unwrap_or(usize::MAX)
        .min(per_epoch * options.epochs.max(1));
    Ok((data, total))
}

/// Whether `out` holds a resumable checkpoint of a run (what `resume` continues).
pub fn has_checkpoint(out: &Path) -> bool {
    out.join(CHECKPOINT_DIR).join("state.json").exists()
}

/// `out/checkpoint`, created; refused when it holds an earlier run's checkpoint and this run
/// does not resume it.
fn checkpoint_dir(out: &Path, resume: bool) -> Result<PathBuf> {
    let ckpt = out.join(CHECKPOINT_DIR);
    if !resume && has_checkpoint(out) {
        return Err(bad(
            "--out",
            format!(
                "{} holds a checkpoint of an earlier run; pass --resume to continue it, or choose another --out",
                out.display()
            ),
        )
        .into());
    }
    std::fs::create_dir_all(&ckpt).map_err(io_err(format!("creating {}", ckpt.display())))?;
    Ok(ckpt)
}

/// Loads the checkpoint in `ckpt` into `bert` and `optim`, refusing one made from another base
/// model or with other options; returns the optimizer and the run's state.
fn restore(
    ckpt: &Path,
    base_fingerprint: &str,
    options: &ClrcmdOptions,
    bert: &mut Bert,
    optim: ModuleOptimizer,
) -> Result<(ModuleOptimizer, CheckpointState)> {
    let state_path = ckpt.join("state.json");
    let raw = std::fs::read_to_string(&state_path).map_err(|_| {
        bad(
            "--resume",
            format!(
                "no checkpoint in {}; start without --resume",
                ckpt.display()
            ),
        )
    })?;
    let saved: CheckpointState = serde_json::from_str(&raw)
        .map_err(|e| InternalError::Corrupt(format!("{}: {e}", state_path.display())))?;
    if saved.base_fingerprint != base_fingerprint || saved.options != *options {
        return Err(bad(
            "--resume",
            "the checkpoint was made from another base model or with other options; resume with the same --model and training flags".into(),
        )
        .into());
    }
    let mut store = BurnpackStore::from_file(ckpt.join("model.bpk"));
    bert.load_from(&mut store)
        .map_err(|e| InternalError::Corrupt(format!("checkpoint weights: {e}")))?;
    let optim = optim
        .load(ckpt.join("optimizer.bpk"))
        .map_err(|e| InternalError::Corrupt(format!("checkpoint optimizer: {e}")))?;
    Ok((optim, saved))
}

/// Fine-tunes `base` with CLRCMD on `train` (labelled pairs: duplicates are the items,
/// non-duplicates the hard negatives), plus CoSENT on `graded` pairs when there are any,
/// measuring s_RCMD AUC on `dev` (may be empty), writing the best model directory to `out` and
/// a checkpoint to `out/checkpoint`. With `resume`, the run continues from that checkpoint with
/// the same options and data (on any device).
pub fn train_clrcmd(run: &ClrcmdRun<'_>, mut on: impl FnMut(Event)) -> Result<ClrcmdReport> {
    let ClrcmdRun {
        base,
        train,
        dev,
        graded,
        keep,
        out,
        options,
        device,
        low_memory,
        resume,
    } = *run;
    check_options(options, graded, keep)?;
    let (mut data, total) = plan(train, options)?;
    let base_identity = base.identity()?;
    let ckpt = checkpoint_dir(out, resume)?;

    let device_kind = device;
    let mined = if options.hard_negatives && options.mine_negatives {
        mine_negatives(base, device_kind, &mut data, &mut on)?
    } else {
        0
    };
    let device = match device_kind.device()?.autodiff() {
        device if low_memory => device.gradient_checkpointing(),
        device => device,
    };
    let (mut bert, mut optim, mut state) = start(run, &device, total, &base_identity, &ckpt)?;
    let tokenizer = crate::text::TextTokenizer::from_file(&base.tokenizer_path(), base.max_len)?;
    let evaluate = |bert: &Bert| dev_auc(bert, base, &base_identity, device_kind, dev);
    let save_best = |bert: &Bert, state: &CheckpointState| save_model(bert, base, out, state);
    if !resume && !dev.is_empty() {
        // The base model is the first candidate: a run in which no step beats it leaves the
        // base weights in `out` (trained_by.steps = 0), never a worse model.
        let auc = evaluate(&bert)?;
        state.dev_auc_before = Some(auc);
        state.best = Some((0, auc));
        save_best(&bert, &state)?;
        on(Event::Eval {
            step: 0,
            auc,
            best: true,
        });
    }

    on(Event::Started {
        step: state.step,
        total,
        items: data.items.len(),
        linked_negatives: data.linked_negatives() - mined,
        mined_negatives: mined,
        batch_size: options.batch_size,
        graded: graded.len(),
        graded_batch: options.graded_batch,
        graded_weight: options.graded_weight,
        dev: dev.len(),
    });
    let started = Instant::now();
    let first_step = state.step;
    let mut losses = Vec::new();
    while state.step < total {
        let lr = options.learning_rate * (1.0 - state.step as f64 / total as f64);
        let (loss, grads) = step_loss(&bert, &tokenizer, &data, run, state.step, &device)?;
        bert = optim.step(lr, bert, grads);
        state.step += 1;
        losses.push(loss);
        let secs = started.elapsed().as_secs_f64().max(1e-9);
        on(Event::Step {
            step: state.step,
            loss,
            pairs_per_sec: ((state.step - first_step) * options.batch_size) as f64 / secs,
        });
        let last = state.step == total;
        if !dev.is_empty() && (state.step.is_multiple_of(options.eval_every.max(1)) || last) {
            let auc = evaluate(&bert)?;
            let best = state.best.is_none_or(|(_, b)| auc > b);
            if best {
                state.best = Some((state.step, auc));
                save_best(&bert, &state)?;
            }
            on(Event::Eval {
                step: state.step,
                auc,
                best,
            });
        }
        if state.step.is_multiple_of(options.checkpoint_every.max(1)) || last {
            // Without dev pairs there is no best: the latest model is the model.
            if dev.is_empty() {
                save_best(&bert, &state)?;
            }
            save_checkpoint(&bert, &optim, &state, &ckpt)?;
            on(Event::Checkpoint { step: state.step });
        }
    }
    Ok(report(&state, &losses, options.batch_size, started))
}

/// The model, optimiser and state a run starts from: the base's weights and a fresh optimiser,
/// or with `resume` the checkpoint's.
fn start(
    run: &ClrcmdRun<'_>,
    device: &Device,
    total: usize,
    base_identity: &crate::model::ModelIdentity,
    ckpt: &Path,
) -> Result<(Bert, ModuleOptimizer, CheckpointState)> {
    let mut bert = Bert::new(&run.base.config, device);
    let optim = AdamConfig::new().init();
    if run.resume {
        let (optim, state) = restore(
            ckpt,
            &base_identity.fingerprint,
            run.options,
            &mut bert,
            optim,
        )?;
        return Ok((bert, optim, state));
    }
    weights::load(&mut bert, &run.base.weights_path())?;
    let state = CheckpointState {
        step: 0,
        total,
        best: None,
        dev_auc_before: None,
        options: run.options.clone(),
        base_fingerprint: base_identity.fingerprint.clone(),
    };
    Ok((bert, optim, state))
}

/// Step `step`'s loss and gradients: its contrastive batch, and its share of the graded and
/// kept pairs.
fn step_loss(
    bert: &Bert,
    tokenizer: &crate::text::TextTokenizer,
    data: &Dataset,
    run: &ClrcmdRun<'_>,
    step: usize,
    device: &Device,
) -> Result<(f64, GradientsParams)> {
    let options = run.options;
    let batch = data.batch(
        step,
        options.batch_size,
        options.seed,
        options.hard_negatives,
    );
    let graded = sampled(run.graded, step, options.graded_batch, options.seed);
    let keep = sampled(run.keep, step, options.keep_batch, options.seed ^ KEEP_SEED);
    step_grads(
        bert,
        tokenizer,
        (data, &batch, options.tau),
        &[
            (&graded, options.graded_weight, options.graded_score),
            (&keep, options.keep_weight, GradedScore::Cosine),
        ],
        device,
    )
}

/// The pairs of `pairs` that step `step` trains on (`per_step` of them, by `seed`).
fn sampled(pairs: &[ScoredPair], step: usize, per_step: usize, seed: u64) -> Vec<&ScoredPair> {
    graded_batch(pairs.len(), step, per_step, seed)
        .into_iter()
        .map(|i| &pairs[i])
        .collect()
}

/// s_RCMD AUC of `bert` (in f32, without heads) on the dev pairs.
fn dev_auc(
    bert: &Bert,
    base: &ModelDir,
    identity: &crate::model::ModelIdentity,
    device: DeviceKind,
    dev: &[LabelledPair],
) -> Result<f64> {
    let options = EncoderOptions {
        device,
        precision: Precision::Fp32,
        ..EncoderOptions::default()
    };
    let encoder = Encoder::from_parts(
        bert.valid(),
        Heads::default(),
        base,
        identity.clone(),
        options,
    )?;
    pair_auc(&encoder, dev)
}

/// Writes `bert` as the run's model directory `out`, recording the step and dev AUC.
fn save_model(bert: &Bert, base: &ModelDir, out: &Path, state: &CheckpointState) -> Result<()> {
    let by = TrainedBy::Clrcmd {
        steps: state.step,
        dev_auc: state.best.map(|b| b.1),
        options: state.options.clone(),
    };
    // Heads learned on the old encoder do not fit the new one: the model carries none.
    write_model_dir(base, out, Some(&bert.valid()), Some(&Heads::default()), &by)
}

/// The run's summary: mean loss over its first and last 20 steps, the dev AUCs, throughput.
fn report(
    state: &CheckpointState,
    losses: &[f64],
    batch_size: usize,
    started: Instant,
) -> ClrcmdReport {
    let secs = started.elapsed().as_secs_f64().max(1e-9);
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let window = losses.len().min(20);
    ClrcmdReport {
        steps: state.step,
        first_loss: mean(&losses[..window]),
        last_loss: mean(&losses[losses.len() - window..]),
        dev_auc_before: state.dev_auc_before,
        best: state.best,
        pairs_per_sec: (losses.len() * batch_size) as f64 / secs,
    }
}

/// Writes weights (burnpack keeps parameter ids, which the optimizer state is keyed by), the
/// optimizer state and the step — each to a temporary name, then renamed, state last, so a
/// crash mid-write leaves the previous checkpoint whole.
fn save_checkpoint(
    bert: &Bert,
    optim: &ModuleOptimizer,
    state: &CheckpointState,
    dir: &Path,
) -> Result<()> {
    let tmp = |name: &str| dir.join(format!("{name}.tmp"));
    let mut store = BurnpackStore::from_file(tmp("model.bpk"))
        .auto_extension(false)
        .overwrite(true);
    bert.valid()
        .save_into(&mut store)
        .map_err(|e| InternalError::Backend(format!("saving checkpoint weights: {e}")))?;
    optim
        .save(tmp("optimizer.bpk"))
        .map_err(|e| InternalError::Backend(format!("saving optimizer state: {e}")))?;
    let json = serde_json::to_vec_pretty(state).expect("state serialises");
    std::fs::write(tmp("state.json"), json).map_err(io_err("writing checkpoint state"))?;
    for name in ["model.bpk", "optimizer.bpk", "state.json"] {
        let to: PathBuf = dir.join(name);
        std::fs::rename(tmp(name), &to).map_err(io_err(format!("renaming {}", to.display())))?;
    }
    Ok(())
}

/// Seeds the kept pairs' batch order apart from the graded pairs'.
const KEEP_SEED: u64 = 0x6b65_6570;

/// One step's loss (InfoNCE, plus a weighted CoSENT loss for each non-empty set of graded
/// pairs: the harvested or labelled grades, the kept pairs) and parameter gradients.
///
/// Each set's forward graph is taken back through the model (and freed) before the next
/// set's forward, and the gradients are summed: the step's memory peaks with its biggest set,
/// not with all of them at once.
fn step_grads(
    bert: &Bert,
    tokenizer: &crate::text::TextTokenizer,
    (data, batch, tau): (&Dataset, &[(&super::data::Item, Option<&str>)], f32),
    graded_sets: &[(&[&ScoredPair], f32, GradedScore)],
    device: &Device,
) -> Result<(f64, GradientsParams)> {
    // Distinct texts; anchors, then candidates = positives, then hard negatives.
    let mut texts: Vec<&str> = Vec::new();
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut id_of = |t| intern(&mut texts, &mut index, t);
    let anchors: Vec<usize> = batch
        .iter()
        .map(|(i, _)| id_of(i.anchor.as_str()))
        .collect();
    let mut candidates: Vec<usize> = batch
        .iter()
        .map(|(i, _)| id_of(i.positive.as_str()))
        .collect();
    candidates.extend(batch.iter().filter_map(|(_, n)| n.map(&mut id_of)));
    let positives: Vec<usize> = (0..batch.len()).collect();
    let mut excluded = Vec::new();
    for (k, &a) in anchors.iter().enumerate() {
        for (j, &c) in candidates.iter().enumerate() {
            if j != k && data.is_duplicate(texts[a], texts[c]) {
                excluded.push((k, j));
            }
        }
    }
    let infonce = InfoNce {
        anchors,
        candidates,
        positives,
        excluded,
    };

    let mut grads = GradientsAccumulator::new();
    let (tokenized, hidden) = forward(bert, tokenizer, &texts, device)?;
    let (mut loss, surrogate) =
        rcmd_surrogate(hidden, &content_positions(&tokenized), &infonce, tau)?;
    grads.accumulate(
        bert,
        GradientsParams::from_grads(surrogate.backward(), bert),
    );
    for &(graded, graded_weight, graded_score) in graded_sets {
        if graded.is_empty() {
            continue;
        }
        let texts: Vec<&str> = graded
            .iter()
            .map(|p| p.a.as_str())
            .chain(graded.iter().map(|p| p.b.as_str()))
            .collect();
        let (tokenized, hidden) = forward(bert, tokenizer, &texts, device)?;
        let gold: Vec<f64> = graded.iter().map(|p| p.gold).collect();
        let mut terms = Vec::new();
        if graded_score != GradedScore::Rcmd {
            let lens: Vec<usize> = tokenized.iter().map(|t| t.ids.len()).collect();
            terms.push(cosent_surrogate(hidden.clone(), &lens, &gold)?);
        }
        if graded_score != GradedScore::Cosine {
            let m = graded.len();
            let pairs: Vec<(usize, usize)> = (0..m).map(|k| (k, m + k)).collect();
            terms.push(token_surrogate(
                hidden,
                &content_positions(&tokenized),
                |tokens| rcmd_cosent(tokens, &pairs, &gold, COSENT_SCALE),
            )?);
        }
        let set_surrogate = terms
            .into_iter()
            .map(|(graded_loss, graded_surrogate)| {
                loss += f64::from(graded_weight) * graded_loss;
                graded_surrogate * graded_weight
            })
            .reduce(|sum, term| sum + term);
        if let Some(set_surrogate) = set_surrogate {
            grads.accumulate(
                bert,
                GradientsParams::from_grads(set_surrogate.backward(), bert),
            );
        }
    }
    Ok((loss, grads.grads()))
}

/// Each text's content (non-special) token positions: the rows RCMD works on.
fn content_positions(tokenized: &[Tokenized]) -> Vec<Vec<usize>> {
    tokenized
        .iter()
        .map(|t| (0..t.ids.len()).filter(|&p| !t.special[p]).collect())
        .collect()
}

/// Tokenizes `texts` and runs BERT on them as one padded batch: the tokenized texts and the
/// last hidden states `[n, len, d]`.
fn forward(
    bert: &Bert,
    tokenizer: &crate::text::TextTokenizer,
    texts: &[&str],
    device: &Device,
) -> Result<(Vec<Tokenized>, Tensor<3>)> {
    let tokenized = texts
        .iter()
        .enumerate()
        .map(|(i, t)| tokenizer.tokenize(t, i))
        .collect::<Result<Vec<Tokenized>>>()?;
    let (n, len) = (
        tokenized.len(),
        tokenized.iter().map(|t| t.ids.len()).max().unwrap_or(0),
    );
    let pad_id = i64::from(tokenizer.pad_id());
    let mut ids = Vec::with_capacity(n * len);
    let mut pad = Vec::with_capacity(n * len);
    for t in &tokenized {
        ids.extend(t.ids.iter().map(|&id| i64::from(id)));
        ids.extend(std::iter::repeat_n(pad_id, len - t.ids.len()));
        pad.extend((0..len).map(|p| p >= t.ids.len()));
    }
    let ids = Tensor::<2, Int>::from_data(TensorData::new(ids, [n, len]), device);
    let pad = pad
        .contains(&true)
        .then(|| Tensor::<2, Bool>::from_data(TensorData::new(pad, [n, len]), device));
    Ok((tokenized, bert.forward(ids, pad)))
}

/// The CoSENT loss of graded pairs whose texts are the rows of `hidden` `[2m, len, d]` (the m
/// first sentences, then the m second ones; text i has `lens[i]` non-pad positions), over the
/// cosines of their sentence vectors (masked mean, L2-normalised: what the encoder returns),
/// and a surrogate scalar Σ cos ⊙ ∂L/∂cos whose gradient upstream is the loss's.
pub fn cosent_surrogate(
    hidden: Tensor<3>,
    lens: &[usize],
    gold: &[f64],
) -> Result<(f64, Tensor<1>)> {
    let [n, len, d] = hidden.dims();
    let m = gold.len();
    if n != 2 * m || lens.len() != n {
        return Err(InternalError::Backend(format!(
            "CoSENT batch: {n} texts and {} lengths for {m} pairs",
            lens.len()
        ))
        .into());
    }
    let device = hidden.device();
    let mask: Vec<f32> = lens
        .iter()
        .flat_map(|&l| (0..len).map(move |p| if p < l { 1.0 } else { 0.0 }))
        .collect();
    let mask = Tensor::<3>::from_data(TensorData::new(mask, [n, len, 1]), &device);
    let counts: Vec<f32> = lens.iter().map(|&l| l.max(1) as f32).collect();
    let counts = Tensor::<2>::from_data(TensorData::new(counts, [n, 1]), &device);
    let mean = (hidden * mask).sum_dim(1).reshape([n, d]) / counts;
    let norm = mean.clone().square().sum_dim(1).sqrt().clamp_min(1e-12);
    let unit = mean / norm;
    let cos = (unit.clone().narrow(0, 0, m) * unit.narrow(0, m, m))
        .sum_dim(1)
        .reshape([m]);
    let host = host_f32(cos.clone().detach(), "cosines")?;
    let (loss, grad) = cosent(&host, gold, COSENT_SCALE);
    let grad = Tensor::<1>::from_data(TensorData::new(grad, [m]), &device);
    Ok((loss, (cos * grad).sum()))
}

/// The RCMD InfoNCE loss of hidden states `[n, len, d]` (text i's token vectors are the rows
/// at `positions[i]`, L2-normalised here), and a surrogate scalar whose gradient with respect
/// to everything upstream of `hidden` is the loss's gradient: Σ x ⊙ ∂L/∂x over the normalised
/// rows, with ∂L/∂x computed sparse on the host.
pub fn rcmd_surrogate(
    hidden: Tensor<3>,
    positions: &[Vec<usize>],
    batch: &InfoNce,
    tau: f32,
) -> Result<(f64, Tensor<1>)> {
    token_surrogate(hidden, positions, |tokens| rcmd_infonce(tokens, batch, tau))
}

/// A loss over texts' token vectors, computed with its gradient on the host by `loss` from the
/// L2-normalised rows of `hidden` `[n, len, d]` at `positions[i]` for text i, and the surrogate
/// scalar Σ x ⊙ ∂L/∂x that carries that gradient upstream.
fn token_surrogate(
    hidden: Tensor<3>,
    positions: &[Vec<usize>],
    loss: impl FnOnce(&[Tokens<'_>]) -> LossGrads,
) -> Result<(f64, Tensor<1>)> {
    let [n, len, d] = hidden.dims();
    let device = hidden.device();
    let norm = hidden.clone().square().sum_dim(2).sqrt().clamp_min(1e-12);
    let unit = hidden / norm;
    let host = host_f32(unit.clone().detach(), "token vectors")?;
    let rows: Vec<Vec<f32>> = positions
        .iter()
        .enumerate()
        .map(|(i, ps)| {
            ps.iter()
                .flat_map(|&p| &host[(i * len + p) * d..(i * len + p + 1) * d])
                .copied()
                .collect()
        })
        .collect();
    let tokens: Vec<Tokens<'_>> = rows.iter().map(|r| Tokens::new(r, d)).collect();
    let out = loss(&tokens);
    let mut g = vec![0f32; n * len * d];
    for (i, ps) in positions.iter().enumerate() {
        for (r, &p) in ps.iter().enumerate() {
            g[(i * len + p) * d..(i * len + p + 1) * d]
                .copy_from_slice(&out.grads[i][r * d..(r + 1) * d]);
        }
    }
    let g = Tensor::<3>::from_data(TensorData::new(g, [n, len, d]), &device);
    Ok((out.loss, (unit * g).sum()))
}

fn intern<'a>(texts: &mut Vec<&'a str>, index: &mut HashMap<&'a str, usize>, t: &'a str) -> usize {
    *index.entry(t).or_insert_with(|| {
        texts.push(t);
        texts.len() - 1
    })
}
