//! What an adaptation reads and where it writes: the collection's documents with their
//! context, the state of OUT (finished, interrupted, empty), the contextual grader's place
//! inside OUT, and the record a soup of adapted runs carries.

use std::path::{Path, PathBuf};

use crate::db::Database;
use crate::error::{Result, UserError};
use crate::model::ModelDir;
use crate::train::clrcmd;
use crate::train::context::ContextDoc;
use crate::train::record::{self, BlendRecord, GraderRecord, RECORD_FILE, RECORD_VERSION};

/// Where a contextual grader is trained: inside the model it grades the training of (so that
/// the two move together; `tune` looks there when the recorded path is gone).
pub const GRADER_DIR: &str = "grader";

/// Every live document of `collection` as a [`ContextDoc`]: its context texts, then
/// "KEY: VALUE" for each of `fields` it has in its metadata (arrays give one text per
/// element).
pub fn read_documents(
    db: &Database,
    collection: &str,
    fields: &[String],
) -> Result<Vec<ContextDoc>> {
    let mut docs = Vec::new();
    for d in db.documents(collection)? {
        let d = d?;
        let mut context = d.context.clone();
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
                        context.push(format!("{key}: {text}"));
                    }
                }
            }
        }
        docs.push(ContextDoc {
            id: d.id,
            text: d.text,
            context,
        });
    }
    Ok(docs)
}

/// Refuses an OUT that would lose work or could not be resumed: one holding a finished
/// adapted model, one holding an interrupted run's checkpoints without `resume`, and `resume`
/// where there is nothing to continue.
pub fn check_out(out: &Path, collection: &str, resume: bool) -> Result<()> {
    let refuse = |reason: String| -> crate::Error {
        UserError::InvalidArgument {
            name: if resume { "--resume" } else { "--out" },
            reason,
        }
        .into()
    };
    if out.join(RECORD_FILE).exists() {
        return Err(refuse(format!(
            "{out} holds a finished adapted model ({RECORD_FILE}); use it (`kindred --model \
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

/// When every model of a soup was trained on grades of one model (the same grader identity in
/// each one's [`record::recorded_grader`]), records that grader in the soup's own
/// [`RECORD_FILE`], so that `tune` grades the soup as it would grade its runs; writes nothing
/// otherwise.
pub fn record_shared_grader(tuned: &[ModelDir], out: &Path) -> Result<()> {
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
            .map(|m| crate::model::resolved(&m.path))
            .collect(),
        grader: first.clone(),
    };
    record::write(out, &blend)
}
