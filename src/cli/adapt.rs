//! `kindred adapt`: a site without labels adapts kindred to its data in one command —
//! `train context` (the encoder learns from the collection's context), `reindex` (the
//! collection moves onto the adapted model) and `tune` (its search defaults are chosen on the
//! adapted vectors, the context channel among them), in that order; each step's own command
//! does the same by hand. What it trains by default differs from `train context`'s: the
//! contextual model alone ([`ADAPT_METHOD`]), the measured best with the channel.

use anyhow::{Context, Result};
use clap::Args as ClapArgs;

use kindred::db::Capability;
use kindred::UserError;

use super::train_context::{ContextArgs, GraderArg, MethodArg};
use super::Global;

/// What `adapt` trains when `--method` is not given: the contextual model alone (each
/// question matched to its own thread). With the context channel that `tune` then chooses it
/// is the best adaptation measured on Qatar Living, in under half the encoder method's time
/// (EVALUATION.md, "Adapting without labels").
pub const ADAPT_METHOD: MethodArg = MethodArg::Thread;

/// Runs `adapt` averages with `--method encoder` when `--runs` is not given: one run's gain
/// depends on its batch order, a soup of three is steadier (EVALUATION.md), and a site adapts
/// once.
pub const ADAPT_RUNS: usize = 3;

#[derive(Debug, ClapArgs)]
pub struct AdaptArgs {
    #[command(flatten)]
    pub train: ContextArgs,
}

pub fn run(g: &Global, args: &AdaptArgs) -> Result<()> {
    let device = g.device.as_deref().unwrap_or("cpu").parse()?;
    refuse_without_reindex(g, &args.train.collection)?;
    // Named before the first step announces anything: a wrong name fails alone, in a second.
    g.database()?.settings(&args.train.collection)?;
    let t = &with_adapt_defaults(&args.train);
    if t.method() == MethodArg::Thread {
        eprintln!(
            "1/3 train context: training the contextual model on the threads of {:?}",
            t.collection
        );
    } else {
        eprintln!(
            "1/3 train context: harvesting pairs from {:?} and training",
            t.collection
        );
    }
    let out = super::train_context::run(g, t, device)?;
    eprintln!(
        "2/3 reindex: moving {:?} onto {}",
        t.collection,
        out.display()
    );
    let adapted = Global {
        model: Some(out.clone()),
        home: g.home.clone(),
        device: g.device.clone(),
        data: g.data.clone(),
        relaxed: g.relaxed,
        batch_size: g.batch_size,
        precision: g.precision,
        backend: g.backend.clone(),
    };
    // The tune step below makes the context vectors: a set the collection had is left stale
    // rather than made twice.
    super::reindex::reindex(
        &adapted,
        &t.collection,
        kindred::engine::OnReindex::Leave,
        false,
    )
    .with_context(|| {
        format!(
            "step 2/3, reindex: the adapted model is kept at {out}; finish with `kindred --model \
             {out} reindex --collection {c}`, then `kindred tune --collection {c}`",
            out = out.display(),
            c = t.collection
        )
    })?;
    eprintln!(
        "3/3 tune: choosing the search defaults of {:?}",
        t.collection
    );
    super::tune::run(
        &adapted,
        &super::tune::TuneArgs {
            collection: t.collection.clone(),
            context_fields: t.context_fields.clone(),
            signal: t.signal,
            held_out_every: t.held_out_every,
            max_queries: super::tune::DEFAULT_MAX_QUERIES,
            dry_run: false,
            json: t.json,
            grader: None,
            no_context_rerank: false,
        },
    )
    .with_context(|| {
        format!(
            "step 3/3, tune: {c:?} is on the adapted model ({out}) and keeps the search defaults \
             it had until `kindred tune --collection {c}` succeeds",
            out = out.display(),
            c = t.collection
        )
    })
}

/// Refuses before any training where the backend cannot reindex (adapt's second step).
fn refuse_without_reindex(g: &Global, collection: &str) -> Result<()> {
    let location = g.backend.clone().unwrap_or_default();
    if !location.supports(Capability::Reindex) {
        return Err(kindred::Error::from(UserError::NotSupported {
            what: "adapt (its second step is a reindex)".into(),
            backend: location.name(),
            fix: format!(
                "run `kindred --backend {location} train context --collection {} --out DIR`, \
                 then {} (--model DIR)",
                collection,
                Capability::Reindex.instead()
            ),
        })
        .into());
    }
    Ok(())
}

/// `train context`'s arguments with what adapt chooses where they do not say: the method
/// ([`ADAPT_METHOD`]), the soup size ([`ADAPT_RUNS`]) and, with --general, a thread grader.
fn with_adapt_defaults(train: &ContextArgs) -> ContextArgs {
    let mut t = train.clone();
    t.method = Some(t.method.unwrap_or(ADAPT_METHOD));
    if t.general.is_none() && t.method() != MethodArg::Transition {
        eprintln!(
            "note: without --general the adapted model learns this site's notion of \"same\" at \
             the cost of some general similarity (EVALUATION.md, \"Adapting without labels\"); give a file of \
             general questions, one per line, with --general FILE to keep it"
        );
    }
    if t.method() == MethodArg::Encoder {
        if t.runs.is_none() {
            t.runs = Some(ADAPT_RUNS);
        }
        // With --general, a `thread` grader (trained first on the collection's own threads,
        // rehearsing the general pairs too) grades: on Qatar Living its soups gained more over
        // the untrained cosine than the base-graded ones and kept QQP's AUC (EVALUATION.md).
        // Without --general the base grades, as in `train context`.
        if t.grader.is_none() && t.general.is_some() {
            eprintln!(
                "with --general, adapt first trains a grader on the collection's own threads \
                 (--grader thread; at most --max-steps steps, about 40 minutes for a forum of \
                 1,000 questions on 2 cores); --grader base skips it"
            );
            t.grader = Some(GraderArg::Thread);
        }
    }
    t
}
