//! `kindred reindex`: re-encodes a collection onto another model (and/or precision) in a new
//! generation, with a progress bar, then reports the switch.

use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args as ClapArgs;

use kindred::engine::{Engine, OnReindex};

use super::Global;

#[derive(Debug, ClapArgs)]
pub struct ReindexArgs {
    /// The collection.
    #[arg(long, short)]
    pub collection: String,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also make the collection's context vectors with the new model (`rerank: context`)
    /// when it has none; one that has them gets them made again either way.
    #[arg(long)]
    pub context_vectors: bool,
}

pub fn run(g: &Global, args: &ReindexArgs) -> Result<()> {
    reindex(
        g,
        &args.collection,
        OnReindex::from_flag(args.context_vectors),
        args.json,
    )
}

/// Reindexes collection `name` onto the global model (and precision), doing `context_vectors`
/// with its context vectors; prints the report (as JSON with `json`).
pub fn reindex(g: &Global, name: &str, context_vectors: OnReindex, json: bool) -> Result<()> {
    let db = g.database()?;
    let dir = g.model_dir()?;
    // The collection keeps its precision unless --precision moves it.
    let precision = match g.precision {
        Some(p) => p,
        None => db.settings(name)?.model.precision,
    };
    let encoder = g.load_encoder(&dir, precision)?;
    let bar = super::progress::bar(db.count(name)?, "reindexing (documents)");
    let path = kindred::model::resolved(&dir.path);
    let encoder = Arc::new(encoder);
    let engine = Engine::with_encoder(Arc::new(db), encoder.clone());
    let report = engine
        .reindex(
            name,
            encoder,
            Some(&path),
            context_vectors,
            &|done, total| {
                bar.set_length(total);
                bar.set_position(done);
            },
        )
        .with_context(|| format!("reindexing {name}"))?;
    bar.finish_and_clear();
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "reindexed {name}: {} documents onto {} ({}) in {:.1} s, generation {}",
            report.documents,
            report.model.id,
            report.model.fingerprint,
            report.seconds,
            report.generation
        );
    }
    Ok(())
}
