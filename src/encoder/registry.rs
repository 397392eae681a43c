//! Loaded encoders by model fingerprint: every collection is queried with the model its
//! vectors come from. A process starts with one (its `--model`); a collection reindexed onto
//! another model records that model's directory, which is loaded on first use and kept; a
//! collection of the process's model at another precision loads that variant on first use.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use super::{Encoder, EncoderOptions};
use crate::error::{Result, UserError};
use crate::model::ModelIdentity;
use crate::sync::MutexExt;

/// The encoders a process has loaded.
#[derive(Debug)]
pub struct Encoders {
    default: Arc<Encoder>,
    options: EncoderOptions,
    loaded: Mutex<HashMap<String, Arc<Encoder>>>,
}

impl Encoders {
    /// A set holding `default`; others load with `options`.
    pub fn new(default: Arc<Encoder>, options: EncoderOptions) -> Self {
        Encoders {
            default,
            options,
            loaded: Mutex::new(HashMap::new()),
        }
    }

    /// The process's own model (new collections are created with it).
    pub fn default_encoder(&self) -> &Arc<Encoder> {
        &self.default
    }

    /// The process's model at `precision` (the default encoder, or its variant, loaded now
    /// and kept).
    pub fn at_precision(&self, precision: crate::types::Precision) -> Result<Arc<Encoder>> {
        let model = self.default.identity().clone().with_precision(precision);
        self.get("", &model, None)
    }

    /// Keeps `encoder` (one a reindex just loaded) for later lookups.
    pub fn insert(&self, encoder: Arc<Encoder>) {
        let fingerprint = encoder.identity().fingerprint.clone();
        if fingerprint != self.default.identity().fingerprint {
            self.loaded.locked().insert(fingerprint, encoder);
        }
    }

    /// The encoder of `model`, the model of `collection`: the default one, one loaded before,
    /// or the one in directory `path` (loaded now, and refused if it is no longer that model).
    pub fn get(
        &self,
        collection: &str,
        model: &ModelIdentity,
        path: Option<&str>,
    ) -> Result<Arc<Encoder>> {
        if model.fingerprint == self.default.identity().fingerprint {
            return Ok(self.default.clone());
        }
        if let Some(e) = self.loaded.locked().get(&model.fingerprint) {
            return Ok(e.clone());
        }
        let mismatch = |found: String| UserError::ModelMismatch {
            collection: collection.into(),
            expected: format!("{} ({})", model.id, model.fingerprint),
            found,
        };
        let default = self.default.identity();
        let same_weights = default.clone().with_precision(model.precision) == *model;
        let path = match path {
            Some(path) => Path::new(path),
            None if same_weights => self.default.model_path(),
            None => {
                return Err(mismatch(format!("{} ({})", default.id, default.fingerprint)).into())
            }
        };
        let dir = crate::model::open_recorded(collection, model, path)?;
        let options = EncoderOptions {
            precision: model.precision,
            ..self.options
        };
        let encoder = Arc::new(Encoder::load(&dir, options)?);
        let found = encoder.identity();
        if found.fingerprint != model.fingerprint {
            return Err(mismatch(format!(
                "{} ({}), which is what {} holds now",
                found.id,
                found.fingerprint,
                path.display()
            ))
            .into());
        }
        tracing::info!(collection, model = %model.id, path = %path.display(),
            precision = %model.precision, "loaded the collection's model");
        self.insert(encoder.clone());
        Ok(encoder)
    }
}
