//! Tuning one collection start to finish (what `kindred tune` and the last step of `kindred
//! adapt` run): its documents with their context, a harvest graded by the grader, the context
//! vectors `rerank: context` needs, every candidate configuration searched ([`super::tune`]),
//! and the chosen one stored as the collection's search defaults; and finding the model that
//! graded the training of the collection's model. Progress goes to a callback; nothing here
//! prints.

use std::path::{Path, PathBuf};

use super::{tune, Tuning};
use crate::db::{Capability, Database};
use crate::engine::Engine;
use crate::error::Result;
use crate::model::ModelDir;
use crate::store::{DefaultsSource, SearchDefaults};
use crate::train::adapt::{read_documents, OnProgress, Progress, GRADER_DIR};
use crate::train::context::{self, HarvestOptions, Signal};
use crate::Encoder;

/// One tuning: which collection, how its harvest is graded and by whom, what is tried.
pub struct TuneJob<'a> {
    /// The collection.
    pub collection: &'a str,
    /// Metadata keys read as context beside each document's context texts.
    pub context_fields: &'a [String],
    /// The grade.
    pub signal: Signal,
    /// One question in N (by id hash) is held out and searched.
    pub held_out_every: u64,
    /// Held-out questions searched at most.
    pub max_queries: usize,
    /// The encoder that grades the harvest (None: the collection's own model), and what to
    /// call it in the reason.
    pub grader: Option<(&'a Encoder, String)>,
    /// Make the collection's context vectors so that `rerank: context` is among the
    /// configurations (where the backend keeps them).
    pub context_rerank: bool,
    /// Store the chosen configuration (false: measure only).
    pub store: bool,
}

/// What a tuning found.
#[derive(Debug)]
pub struct Tuned {
    /// Every configuration's agreement, and the chosen one.
    pub tuning: Tuning,
    /// Why the chosen one, and by whose grades.
    pub reason: String,
    /// Who graded: the grader's name, or "the collection's own model".
    pub graded_by: String,
}

/// Runs `job` on `engine`'s collection.
pub fn tune_collection(
    engine: &Engine,
    job: &TuneJob<'_>,
    on: &mut OnProgress<'_>,
) -> Result<Tuned> {
    let docs = read_documents(engine.db(), job.collection, job.context_fields)?;
    let options = HarvestOptions {
        signal: job.signal,
        held_out_every: job.held_out_every.max(2),
        ..HarvestOptions::default()
    };
    let grader = job.grader.as_ref().map(|(encoder, _)| *encoder);
    let graded_by = job.grader.as_ref().map_or_else(
        || "the collection's own model".to_string(),
        |(_, name)| name.clone(),
    );
    let harvest = context::harvest(
        grader.unwrap_or(engine.encoder()),
        &docs,
        &options,
        &mut |what, done, total| on(Progress::Step { what, done, total }),
    );
    let tuned = harvest.and_then(|harvest| {
        let collection = engine.collection(job.collection)?;
        if job.context_rerank && engine.db().supports(Capability::ContextVectors) {
            // The candidates of `rerank: context`: kept (derived data), also when not stored.
            let what = "encoding context for rerank: context";
            crate::engine::make_context_vectors(
                engine.db(),
                job.collection,
                collection.encoder(),
                |done, total| on(Progress::Step { what, done, total }),
            )?;
        }
        let what = "searching held-out questions";
        tune(
            &collection,
            &docs,
            &harvest,
            options.held_out_every,
            job.max_queries,
            &mut |done, total| on(Progress::Step { what, done, total }),
        )
    });
    on(Progress::Done);
    let tuning = tuned?;
    let reason = format!("{} (grades by {graded_by})", tuning.reason());
    if job.store {
        store(engine.db(), job.collection, &tuning, &reason)?;
    }
    Ok(Tuned {
        tuning,
        reason,
        graded_by,
    })
}

/// Stores the chosen configuration as the collection's search defaults (source: learned),
/// with the reason and every configuration's measurement as evidence.
fn store(db: &Database, name: &str, tuning: &Tuning, reason: &str) -> Result<()> {
    let fingerprint = db.settings(name)?.model.fingerprint;
    let defaults = SearchDefaults::from_params(
        &tuning.chosen().params(),
        DefaultsSource::Learned,
        reason,
        fingerprint,
        // Plain rows of names and numbers: serialising cannot fail.
        serde_json::to_value(&tuning.rows).unwrap_or_default(),
    );
    db.set_search_defaults(name, Some(defaults))
}

/// The model that graded the training of `model` ([`recorded_grader`](crate::train::record::recorded_grader)),
/// loaded with `load`, when it is still there with the same weights: where it was recorded,
/// inside `model` (where a contextual grader is trained; a model directory moved or copied
/// keeps its grader but not the recorded path), or `base` (which grades unless told
/// otherwise). The recorded fingerprint decides. None: no grader is recorded, or it is not
/// found (said as a note).
pub fn find_grader(
    model: &ModelDir,
    base: Option<&Path>,
    load: &dyn Fn(&ModelDir) -> Result<Encoder>,
    on: &mut OnProgress<'_>,
) -> Result<Option<(Encoder, PathBuf)>> {
    let Some(record) = crate::train::record::recorded_grader(&model.path) else {
        return Ok(None);
    };
    let dir = record.dir.clone();
    let mut candidates = vec![dir.clone(), model.path.join(GRADER_DIR)];
    candidates.extend(base.map(Path::to_path_buf));
    // Each is loaded (and its weights hashed) at most once.
    let mut seen = Vec::new();
    candidates.retain(|c| {
        let place = crate::model::resolved(c);
        let new = !seen.contains(&place);
        seen.push(place);
        new
    });
    for candidate in candidates {
        let Ok(found) = ModelDir::open(&candidate) else {
            continue;
        };
        // The fp32 encoder's fingerprint is the model directory's (hashed once, by the load).
        let encoder = load(&found)?;
        if encoder.identity().fingerprint != record.identity.fingerprint {
            continue;
        }
        if candidate != dir {
            on(Progress::Note(format!(
                "note: the model that graded {}'s training is no longer at {}; found it at {}",
                model.path.display(),
                dir.display(),
                candidate.display()
            )));
        }
        return Ok(Some((encoder, candidate)));
    }
    on(Progress::Note(format!(
        "note: the model that graded {}'s training ({}) is no longer there with the same \
         weights, nor in {}; the collection's own model grades (--grader DIR names another)",
        model.path.display(),
        dir.display(),
        model.path.join(GRADER_DIR).display()
    )));
    Ok(None)
}
