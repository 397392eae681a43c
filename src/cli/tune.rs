//! `kindred tune`: chooses a collection's search defaults without labels
//! ([`kindred::train::tune::tune_collection`]: a harvest of graded pairs from its documents'
//! context, graded by the model that graded the training of the collection's model or
//! `--grader`; the held-out slice searched with every candidate configuration; the one that
//! agrees best stored with the reason). This file: the arguments, the grader, the report.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args as ClapArgs;
use serde_json::json;

use kindred::model::ModelDir;
use kindred::train::context::{HarvestOptions, Signal};
use kindred::train::tune::{self, TuneJob, Tuned};
use kindred::Precision;

use super::shown::Shown;
use super::Global;

/// `--max-queries`.
pub const DEFAULT_MAX_QUERIES: usize = 300;

#[derive(Debug, ClapArgs)]
pub struct TuneArgs {
    /// The collection.
    #[arg(long, short)]
    pub collection: String,
    /// Metadata keys read as context too (as for `kindred train context`).
    #[arg(long = "context-field", value_name = "KEY")]
    pub context_fields: Vec<String>,
    /// The grade: context, retrieval or both.
    #[arg(long, default_value = "retrieval", value_parser = super::train_context::parse_signal)]
    pub signal: Signal,
    /// One question in N (by id hash) is held out and searched.
    #[arg(long, default_value_t = HarvestOptions::default().held_out_every, value_name = "N")]
    pub held_out_every: u64,
    /// Held-out questions searched at most.
    #[arg(long, default_value_t = DEFAULT_MAX_QUERIES)]
    pub max_queries: usize,
    /// Measure and print, but leave the collection's search defaults as they are (the context
    /// vectors made to measure `rerank: context` are kept).
    #[arg(long)]
    pub dry_run: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// The model whose encoder grades the harvest (a model directory). Default: the model
    /// that graded the training of the collection's model (recorded in its
    /// kindred-context.json: the base it was adapted from, or its --grader), so that a model
    /// is not judged by its own grades; the collection's own model when none is recorded.
    #[arg(long, value_name = "DIR")]
    pub grader: Option<PathBuf>,
    /// Do not make the collection's context vectors, so `rerank: context` is not among the
    /// configurations tried (unless it has a set already). Making them encodes the first 10
    /// context texts of every document with context, once per tune: about as long as
    /// ingesting that many texts.
    #[arg(long)]
    pub no_context_rerank: bool,
}

pub fn run(g: &Global, args: &TuneArgs) -> Result<()> {
    let engine = g.engine_for(&args.collection)?;
    let mut shown = Shown::default();
    let grader = grader(g, engine.db(), args, &mut shown)?;
    let job = TuneJob {
        collection: &args.collection,
        context_fields: &args.context_fields,
        signal: args.signal,
        held_out_every: args.held_out_every,
        max_queries: args.max_queries,
        grader: grader
            .as_ref()
            .map(|(encoder, dir)| (encoder, dir.display().to_string())),
        context_rerank: !args.no_context_rerank,
        store: !args.dry_run,
    };
    let tuned = tune::tune_collection(&engine, &job, &mut |p| shown.on(p));
    shown.finish();
    let Tuned {
        tuning,
        reason,
        graded_by,
    } = tuned?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "collection": args.collection,
                "chosen": tuning.chosen(),
                "reason": reason,
                "stored": !args.dry_run,
                "graded_by": graded_by,
                "tuning": tuning,
            }))?
        );
    } else {
        println!("| configuration | nDCG@10 vs harvested grades |");
        println!("|---|---|");
        for (i, r) in tuning.rows.iter().enumerate() {
            let mark = if i == tuning.chosen { " (chosen)" } else { "" };
            println!("| {}{mark} | {:.4} |", r.name, r.ndcg_at_10);
        }
        println!(
            "grades vs the questions' cosine: Spearman {:.3}",
            tuning.grade_vs_question_spearman
        );
        println!("{reason}");
        if args.dry_run {
            println!("--dry-run: collection {:?} left as it was", args.collection);
        } else {
            println!(
                "stored as the search defaults of collection {:?}",
                args.collection
            );
        }
    }
    Ok(())
}

/// The encoder that grades the harvest, with its directory: `--grader`, else the model that
/// graded the training of the collection's model ([`tune::find_grader`]; the base model
/// among the places looked in); None: the collection's own model grades.
fn grader(
    g: &Global,
    db: &kindred::Database,
    args: &TuneArgs,
    shown: &mut Shown,
) -> Result<Option<(kindred::Encoder, PathBuf)>> {
    if let Some(dir) = &args.grader {
        let model = super::train_context::open_grader(dir)?;
        return Ok(Some((
            g.load_encoder(&model, Precision::Fp32)?,
            dir.clone(),
        )));
    }
    let model = g.collection_model_dir(db, &args.collection)?;
    let base = kindred::model::resolve(g.model.as_deref(), &g.home(), false).ok();
    let options = g.encoder_options(Precision::Fp32)?;
    let load = |dir: &ModelDir| kindred::Encoder::load(dir, options);
    Ok(tune::find_grader(
        &model,
        base.as_ref().map(|b| b.path.as_path()),
        &load,
        &mut |p| shown.on(p),
    )?)
}
