//! `kindred tune`: chooses a collection's search defaults without labels — harvests graded
//! pairs from its documents' context ([`kindred::train::context`]; graded by the model that
//! graded the training of the collection's model, or `--grader`), searches the held-out
//! slice with every candidate configuration ([`kindred::train::tune`]) and stores the one
//! that agrees best with the harvest (with the reason) as the collection's search defaults.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args as ClapArgs;
use serde_json::json;

use kindred::model::ModelDir;
use kindred::train::context::{self, HarvestOptions, Signal};
use kindred::train::tune;
use kindred::Precision;

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
    /// Measure and print, but leave the collection's settings as they are.
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
}

pub fn run(g: &Global, args: &TuneArgs) -> Result<()> {
    let engine = g.engine_for(&args.collection)?;
    let docs =
        super::train_context::read_documents(engine.db(), &args.collection, &args.context_fields)?;
    let options = HarvestOptions {
        signal: args.signal,
        held_out_every: args.held_out_every.max(2),
        ..HarvestOptions::default()
    };
    let grader = match &args.grader {
        Some(dir) => Some(
            ModelDir::open(dir)
                .with_context(|| format!("--grader {}: not a model directory", dir.display()))?,
        ),
        None => recorded_grader(&g.collection_model_dir(engine.db(), &args.collection)?),
    };
    let graded_by = grader.as_ref().map_or_else(
        || "the collection's own model".to_string(),
        |m| m.path.display().to_string(),
    );
    let grader = match &grader {
        Some(model) => Some(g.load_encoder(model, Precision::Fp32)?),
        None => None,
    };
    let bar = super::train_context::step_bar()?;
    let harvest = context::harvest(
        grader.as_ref().unwrap_or(engine.encoder()),
        &docs,
        &options,
        &mut super::train_context::on_step(&bar),
    )?;
    bar.set_message("searching held-out questions");
    let collection = engine.collection(&args.collection)?;
    let tuning = tune::tune(
        &collection,
        &docs,
        &harvest,
        options.held_out_every,
        args.max_queries,
        &mut |done, total| {
            bar.set_length(total);
            bar.set_position(done);
        },
    )?;
    bar.finish_and_clear();
    let chosen = tuning.chosen();
    let reason = format!("{} (grades by {graded_by})", tuning.reason());
    if !args.dry_run {
        store(engine.db(), &args.collection, &tuning, &reason)?;
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "collection": args.collection,
                "chosen": chosen,
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

/// The model that graded the training of `model` (`grader` in its
/// [`HARVEST_FILE`](super::train_context::HARVEST_FILE)), when one is recorded and still there
/// with the same weights; None otherwise (the collection's own model grades).
fn recorded_grader(model: &ModelDir) -> Option<ModelDir> {
    let path = model.path.join(super::train_context::HARVEST_FILE);
    let recorded: serde_json::Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    let grader = &recorded["grader"];
    // Models adapted before the grader's directory was recorded: their own model grades.
    let dir = grader["dir"].as_str()?;
    let fingerprint = grader["identity"]["fingerprint"].as_str();
    let found = ModelDir::open(Path::new(dir))
        .ok()
        .filter(|m| m.identity().ok().map(|i| i.fingerprint).as_deref() == fingerprint);
    if found.is_none() {
        eprintln!(
            "note: the model that graded {}'s training ({dir}) is no longer there with the same \
             weights; the collection's own model grades (--grader DIR names another)",
            model.path.display()
        );
    }
    found
}

/// Stores the chosen configuration as the collection's search defaults (source: learned),
/// with the reason and every configuration's measurement as evidence.
fn store(db: &kindred::Database, name: &str, tuning: &tune::Tuning, reason: &str) -> Result<()> {
    let fingerprint = db.settings(name)?.model.fingerprint;
    let defaults = kindred::store::SearchDefaults::from_params(
        &tuning.chosen().params(),
        kindred::store::DefaultsSource::Learned,
        reason,
        fingerprint,
        serde_json::to_value(&tuning.rows)?,
    );
    db.set_search_defaults(name, Some(defaults))?;
    Ok(())
}
