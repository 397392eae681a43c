//! `kindred tune`: chooses a collection's search defaults without labels — harvests graded
//! pairs from its documents' context ([`kindred::train::context`]; graded by the model that
//! graded the training of the collection's model, or `--grader`), searches the held-out
//! slice with every candidate configuration ([`kindred::train::tune`]) and stores the one
//! that agrees best with the harvest (with the reason) as the collection's search defaults.

use std::path::PathBuf;

use anyhow::Result;
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
    let docs =
        super::train_context::read_documents(engine.db(), &args.collection, &args.context_fields)?;
    let options = HarvestOptions {
        signal: args.signal,
        held_out_every: args.held_out_every.max(2),
        ..HarvestOptions::default()
    };
    let (grader, graded_by) = match grader(g, engine.db(), args)? {
        Some((encoder, dir)) => (Some(encoder), dir.display().to_string()),
        None => (None, "the collection's own model".to_string()),
    };
    let bar = super::train_context::step_bar()?;
    let harvest = context::harvest(
        grader.as_ref().unwrap_or(engine.encoder()),
        &docs,
        &options,
        &mut super::train_context::on_step(&bar),
    )?;
    let collection = engine.collection(&args.collection)?;
    if !args.no_context_rerank
        && engine
            .db()
            .supports(kindred::db::Capability::ContextVectors)
    {
        // The candidates of `rerank: context`: kept (derived data), also with --dry-run.
        bar.set_message("encoding context for rerank: context");
        kindred::engine::make_context_vectors(
            engine.db(),
            &args.collection,
            collection.encoder(),
            |done, total| {
                bar.set_length(total);
                bar.set_position(done);
            },
        )?;
    }
    bar.set_message("searching held-out questions");
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

/// The encoder that grades the harvest, with its directory: `--grader`, else the model that
/// graded the training of the collection's model ([`recorded_grader`](kindred::train::record::recorded_grader))
/// when it is still there with the same weights; None: the collection's own model grades.
fn grader(
    g: &Global,
    db: &kindred::Database,
    args: &TuneArgs,
) -> Result<Option<(kindred::Encoder, PathBuf)>> {
    if let Some(dir) = &args.grader {
        let model = super::train_context::open_grader(dir)?;
        return Ok(Some((
            g.load_encoder(&model, Precision::Fp32)?,
            dir.clone(),
        )));
    }
    let model = g.collection_model_dir(db, &args.collection)?;
    let Some(record) = kindred::train::record::recorded_grader(&model.path) else {
        return Ok(None);
    };
    let dir = record.dir.clone();
    // Where the grader may be: where it was recorded; inside the model, where `--grader
    // thread` trains it (a model directory moved, or trained elsewhere and copied here, keeps
    // its grader but not the recorded path); the base model, which grades unless told
    // otherwise. The recorded fingerprint decides.
    let mut candidates = vec![
        dir.clone(),
        model.path.join(super::train_context::GRADER_DIR),
    ];
    if let Ok(base) = kindred::model::resolve(g.model.as_deref(), &g.home(), false) {
        candidates.push(base.path);
    }
    // Each is loaded (and its weights hashed) at most once.
    let mut seen = Vec::new();
    candidates.retain(|c| {
        let place = kindred::model::resolved(c);
        let new = !seen.contains(&place);
        seen.push(place);
        new
    });
    for candidate in candidates {
        let Ok(found) = ModelDir::open(&candidate) else {
            continue;
        };
        // The fp32 encoder's fingerprint is the model directory's (hashed once, by the load).
        let encoder = g.load_encoder(&found, Precision::Fp32)?;
        if encoder.identity().fingerprint != record.identity.fingerprint {
            continue;
        }
        if candidate != dir {
            eprintln!(
                "note: the model that graded {}'s training is no longer at {}; found it at {}",
                model.path.display(),
                dir.display(),
                candidate.display()
            );
        }
        return Ok(Some((encoder, candidate)));
    }
    eprintln!(
        "note: the model that graded {}'s training ({}) is no longer there with the same \
         weights, nor in {}; the collection's own model grades (--grader DIR names another)",
        model.path.display(),
        dir.display(),
        model.path.join(super::train_context::GRADER_DIR).display()
    );
    Ok(None)
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
