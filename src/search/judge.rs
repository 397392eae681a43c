//! Where P(duplicate) comes from, chosen once per collection: the model's variational-siamese
//! classifier when it carries one, else the collection's calibrated logistic model. Search,
//! duplicates and the review queue all ask the same judge, so a pair gets one probability.

use std::sync::Arc;

use crate::model::heads::Classifier;
use crate::score::calibration::Calibrator;
use crate::score::features::PairFeatures;
use crate::types::Gaussian;

/// Where P(duplicate) comes from when the collection's model carries a variational-siamese
/// classifier: its probability, judged at 0.5 (it is trained with cross-entropy, so 0.5 is the
/// accuracy-optimal threshold for calibrated outputs).
pub const SIAMESE_THRESHOLD: f32 = 0.5;

/// The source of a collection's P(duplicate).
#[derive(Debug, Clone)]
pub enum Judge<'a> {
    /// The model's variational-siamese classifier, on the two intents.
    Siamese {
        /// The classifier.
        classifier: &'a Classifier,
        /// The model's id (for the `calibration` field of answers).
        model: &'a str,
    },
    /// The logistic model over a pair's scores.
    Calibrated(Arc<Calibrator>),
}

impl Judge<'_> {
    /// The classifier's probability on the intents, if this judge is a classifier.
    pub fn siamese(&self, a: &Gaussian, b: &Gaussian) -> Option<f32> {
        match self {
            Judge::Siamese { classifier, .. } => Some(classifier.probability(a, b)),
            Judge::Calibrated(_) => None,
        }
    }

    /// P(duplicate) of a pair with `features` (whose `siamese` field [`Judge::siamese`] filled).
    pub fn probability(&self, features: &PairFeatures) -> f32 {
        match self {
            Judge::Siamese { .. } => features.siamese.unwrap_or(0.0),
            Judge::Calibrated(c) => c.probability(features),
        }
    }

    /// The threshold at or above which a pair is a duplicate.
    pub fn threshold(&self) -> f32 {
        match self {
            Judge::Siamese { .. } => SIAMESE_THRESHOLD,
            Judge::Calibrated(c) => c.threshold as f32,
        }
    }

    /// Where the probabilities come from, as answers report it.
    pub fn name(&self) -> String {
        match self {
            Judge::Siamese { model, .. } => format!("variational-siamese classifier of {model}"),
            Judge::Calibrated(c) => c.fitted_on.clone(),
        }
    }
}
