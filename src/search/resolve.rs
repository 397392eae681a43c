//! Which settings a search runs with, decided in one place. For each of the four settings a
//! collection may default — mode, rerank, RCMD weights, fusion weights — the request's value
//! wins; else the collection's search defaults, unless stale (chosen for another model than
//! the collection's); else the caller's fallback (the server's `[search]` config or the
//! built-in defaults). The answer says which were in force and where each came from.

use serde::{Deserialize, Serialize};

use super::params::{FusionWeights, Mode, Rerank, SearchParams, Weighting};
use crate::store::{now_rfc3339, DefaultsSource, SearchDefaults};

/// The settings a request chose itself (None: it did not say).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Overrides {
    /// Where candidates come from.
    pub mode: Option<Mode>,
    /// How candidates are ordered.
    pub rerank: Option<Rerank>,
    /// RCMD's token weights.
    pub weights: Option<Weighting>,
    /// Fusion weights (as a whole: a request's `fusion` object replaces the defaults' one).
    pub fusion: Option<FusionWeights>,
}

/// Where a setting in force came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The request said it.
    Request,
    /// The collection's search defaults.
    Collection,
    /// The server's configuration or the built-in default.
    Default,
}

/// Where each setting in force came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sources {
    /// Of `mode`.
    pub mode: Source,
    /// Of `rerank`.
    pub rerank: Source,
    /// Of `weights`.
    pub weights: Source,
    /// Of `fusion`.
    pub fusion: Source,
}

/// The settings a search ran with and where each came from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// Where candidates came from.
    pub mode: Mode,
    /// How candidates were ordered.
    pub rerank: Rerank,
    /// RCMD's token weights.
    pub weights: Weighting,
    /// Fusion weights (they act in hybrid mode only).
    pub fusion: FusionWeights,
    /// Where each came from.
    pub source: Sources,
    /// True when the collection has search defaults that were not applied because they were
    /// chosen for another model than its vectors now come from (absent when false).
    #[serde(default, skip_serializing_if = "is_false")]
    pub stale_defaults: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// The parameters a search runs with: `fallback` with its mode, rerank, weights and fusion
/// decided per setting — `asked`'s value, else `collection`'s (unless stale: chosen for
/// another model than `model_fingerprint`, the collection's), else `fallback`'s own — and
/// the settings in force with where each came from. Pure.
pub fn resolve(
    asked: &Overrides,
    collection: Option<&SearchDefaults>,
    model_fingerprint: &str,
    fallback: &SearchParams,
) -> (SearchParams, Settings) {
    let stale = collection.is_some_and(|d| d.is_stale(model_fingerprint));
    let defaults = collection.filter(|_| !stale);
    fn pick<T: Copy>(asked: Option<T>, collection: Option<T>, fallback: T) -> (T, Source) {
        match (asked, collection) {
            (Some(v), _) => (v, Source::Request),
            (None, Some(v)) => (v, Source::Collection),
            (None, None) => (fallback, Source::Default),
        }
    }
    let (mode, mode_from) = pick(asked.mode, defaults.map(|d| d.mode), fallback.mode);
    let (rerank, rerank_from) = pick(asked.rerank, defaults.map(|d| d.rerank), fallback.rerank);
    let (weights, weights_from) =
        pick(asked.weights, defaults.map(|d| d.weights), fallback.weights);
    let (fusion, fusion_from) = pick(asked.fusion, defaults.map(|d| d.fusion), fallback.fusion);
    let params = SearchParams {
        mode,
        rerank,
        weights,
        fusion,
        ..fallback.clone()
    };
    let settings = Settings {
        mode,
        rerank,
        weights,
        fusion,
        source: Sources {
            mode: mode_from,
            rerank: rerank_from,
            weights: weights_from,
            fusion: fusion_from,
        },
        stale_defaults: stale,
    };
    (params, settings)
}

impl SearchDefaults {
    /// Search defaults holding `params`' mode, rerank, RCMD weights and fusion weights,
    /// chosen now by `source` for the model `model_fingerprint` (the collection's), with the
    /// `reason` people read and the `evidence` behind it (null: none). Store them with
    /// `Database::set_search_defaults`, which validates them.
    pub fn from_params(
        params: &SearchParams,
        source: DefaultsSource,
        reason: impl Into<String>,
        model_fingerprint: impl Into<String>,
        evidence: serde_json::Value,
    ) -> SearchDefaults {
        SearchDefaults {
            mode: params.mode,
            rerank: params.rerank,
            weights: params.weights,
            fusion: params.fusion,
            source,
            reason: reason.into(),
            model_fingerprint: model_fingerprint.into(),
            chosen_at: now_rfc3339(),
            evidence,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults(fingerprint: &str) -> SearchDefaults {
        let params = SearchParams {
            mode: Mode::Cosine,
            rerank: Rerank::None,
            weights: Weighting::Idf,
            fusion: FusionWeights {
                lexical: 0.5,
                ..Default::default()
            },
            ..SearchParams::default()
        };
        SearchDefaults::from_params(
            &params,
            DefaultsSource::Learned,
            "cosine alone agreed best",
            fingerprint,
            serde_json::Value::Null,
        )
    }

    #[test]
    fn the_request_wins_then_the_collection_then_the_fallback() {
        let fallback = SearchParams {
            k: 7,
            rerank_depth: 40,
            fusion: FusionWeights {
                w2: 2.0,
                ..Default::default()
            },
            ..SearchParams::default()
        };
        let d = defaults("sha256:m");
        assert!(d.validate().is_ok(), "{:?}", d.validate());

        // Nothing asked, no defaults: the fallback, every source "default".
        let (p, s) = resolve(&Overrides::default(), None, "sha256:m", &fallback);
        assert_eq!(p, fallback);
        assert_eq!(s.source.mode, Source::Default);
        assert_eq!(s.source.fusion, Source::Default);
        assert!(!s.stale_defaults);

        // Nothing asked: the collection's four, the fallback's other fields.
        let (p, s) = resolve(&Overrides::default(), Some(&d), "sha256:m", &fallback);
        assert_eq!(
            (p.mode, p.rerank, p.weights, p.fusion),
            (d.mode, d.rerank, d.weights, d.fusion)
        );
        assert_eq!((p.k, p.rerank_depth), (7, 40));
        assert_eq!(
            s.source,
            Sources {
                mode: Source::Collection,
                rerank: Source::Collection,
                weights: Source::Collection,
                fusion: Source::Collection,
            }
        );

        // Asked fields win, one by one.
        let asked = Overrides {
            mode: Some(Mode::Hybrid),
            fusion: Some(FusionWeights::default()),
            ..Overrides::default()
        };
        let (p, s) = resolve(&asked, Some(&d), "sha256:m", &fallback);
        assert_eq!((p.mode, p.rerank), (Mode::Hybrid, Rerank::None));
        assert_eq!(p.fusion, FusionWeights::default());
        assert_eq!(
            (s.source.mode, s.source.rerank, s.source.fusion),
            (Source::Request, Source::Collection, Source::Request)
        );
        assert_eq!((s.mode, s.rerank, s.weights), (p.mode, p.rerank, p.weights));

        // Stale defaults (another model): not applied, and said so.
        let (p, s) = resolve(&Overrides::default(), Some(&d), "sha256:other", &fallback);
        assert_eq!(p, fallback);
        assert_eq!(s.source.mode, Source::Default);
        assert!(s.stale_defaults);
    }

    #[test]
    fn settings_serialise_small() {
        let (_, s) = resolve(
            &Overrides {
                rerank: Some(Rerank::None),
                ..Overrides::default()
            },
            Some(&defaults("sha256:m")),
            "sha256:m",
            &SearchParams::default(),
        );
        let v = serde_json::to_value(s).unwrap();
        assert_eq!(v["mode"], "cosine");
        assert_eq!(v["rerank"], "none");
        assert_eq!(v["source"]["mode"], "collection");
        assert_eq!(v["source"]["rerank"], "request");
        assert!(v.get("stale_defaults").is_none(), "{v}");
    }
}
