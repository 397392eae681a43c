//! Where a database keeps its collections ([`Location`]) and the settings a Milvus node runs
//! with ([`MilvusSettings`]), typed: the binary reads them from its flags, config file and
//! environment and passes them down; the library reads no environment itself.

use std::time::Duration;

use super::backend::{self, Capability};
use crate::error::{Result, UserError};

/// Where a database keeps its collections.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Location {
    /// In the data directory: sled store, HNSW graphs, BM25 (the default).
    #[default]
    Embedded,
    /// In the Milvus server or cluster at this URL (`milvus://HOST:PORT`).
    Milvus(String),
}

impl std::str::FromStr for Location {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.trim() {
            "" | "embedded" => Ok(Location::Embedded),
            url if url.starts_with("milvus://") && url.len() > "milvus://".len() => {
                Ok(Location::Milvus(url.to_string()))
            }
            other => Err(format!(
                "unknown backend {other:?}: use `embedded` (the default) or `milvus://HOST:PORT`"
            )),
        }
    }
}

impl Location {
    /// The backend's name ("embedded", "milvus"), as refusals name it.
    pub fn name(&self) -> &'static str {
        match self {
            Location::Embedded => backend::EMBEDDED,
            Location::Milvus(_) => backend::MILVUS,
        }
    }

    /// Whether the backend at this location offers `capability` (known before connecting,
    /// so a command can refuse before it starts work that would need it).
    pub fn supports(&self, capability: Capability) -> bool {
        match self {
            Location::Embedded => backend::embedded_offers(capability),
            Location::Milvus(_) => backend::milvus_offers(capability),
        }
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Embedded => f.write_str(backend::EMBEDDED),
            Location::Milvus(url) => f.write_str(url),
        }
    }
}

/// How a node runs against Milvus.
#[derive(Debug, Clone, PartialEq)]
pub struct MilvusSettings {
    /// How old a node's BM25 index may get before a search starts rebuilding it in the
    /// background (what brings other nodes' writes and deletes into this node's lexical
    /// stage). 60 s by default; `KINDRED_MILVUS_LEXICAL_REFRESH_SECS` in the binary.
    pub lexical_refresh: Duration,
    /// On the full-text layout, about how many documents a node's BM25 index holds (a uniform
    /// sample: it then only gives IDF weights and the lexical feature of P(duplicate), for
    /// which a sample's document frequencies do). 100,000 by default;
    /// `KINDRED_MILVUS_IDF_SAMPLE` in the binary.
    pub idf_sample: usize,
    /// The layout new collections get (`split`, `one`, `full-text`), when not the best the
    /// server offers (checked against the server when it connects); `KINDRED_MILVUS_LAYOUT`
    /// in the binary.
    pub layout: Option<String>,
}

impl Default for MilvusSettings {
    fn default() -> Self {
        MilvusSettings {
            lexical_refresh: Duration::from_secs(60),
            idf_sample: 100_000,
            layout: None,
        }
    }
}

impl MilvusSettings {
    /// The defaults, with what the variables `var` answers for override them
    /// (`KINDRED_MILVUS_LEXICAL_REFRESH_SECS`, `KINDRED_MILVUS_IDF_SAMPLE`,
    /// `KINDRED_MILVUS_LAYOUT`); a value that does not parse is refused, naming the variable.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let d = MilvusSettings::default();
        Ok(MilvusSettings {
            lexical_refresh: override_with(
                "KINDRED_MILVUS_LEXICAL_REFRESH_SECS",
                var("KINDRED_MILVUS_LEXICAL_REFRESH_SECS"),
                d.lexical_refresh,
                |v| {
                    v.parse::<f64>()
                        .ok()
                        .filter(|s| s.is_finite() && *s >= 0.0)
                        .map(Duration::from_secs_f64)
                },
                "seconds, 0 or more (60 by default)",
            )?,
            idf_sample: override_with(
                "KINDRED_MILVUS_IDF_SAMPLE",
                var("KINDRED_MILVUS_IDF_SAMPLE"),
                d.idf_sample,
                |v| v.parse::<usize>().ok().filter(|&n| n > 0),
                "a whole number of documents, 1 or more (100000 by default)",
            )?,
            layout: var("KINDRED_MILVUS_LAYOUT").filter(|l| !l.trim().is_empty()),
        })
    }
}

/// An override (pure): `default` when `raw` is unset or blank, its value when `parse` accepts
/// it, else an error naming the variable, the value and what it takes — the value would
/// otherwise be ignored without a word (or, for a negative number of seconds, panic).
fn override_with<T>(
    name: &'static str,
    raw: Option<String>,
    default: T,
    parse: impl Fn(&str) -> Option<T>,
    takes: &str,
) -> Result<T> {
    match raw.as_deref().map(str::trim) {
        None | Some("") => Ok(default),
        Some(v) => parse(v).ok_or_else(|| {
            UserError::InvalidArgument {
                name,
                reason: format!("{v:?}: give {takes}, or unset it"),
            }
            .into()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milvus_overrides_are_used_when_valid_and_refused_by_name_otherwise() {
        let with = |name: &'static str, raw: &'static str| {
            MilvusSettings::from_vars(move |k| (k == name).then(|| raw.to_string()))
        };
        let refresh = |raw| with("KINDRED_MILVUS_LEXICAL_REFRESH_SECS", raw);
        let d = MilvusSettings::default();
        assert_eq!(MilvusSettings::from_vars(|_| None).unwrap(), d);
        assert_eq!(refresh(" ").unwrap(), d);
        assert_eq!(
            refresh("2.5").unwrap().lexical_refresh,
            Duration::from_millis(2500)
        );
        assert_eq!(refresh("0").unwrap().lexical_refresh, Duration::ZERO);
        assert_eq!(
            with("KINDRED_MILVUS_IDF_SAMPLE", "400").unwrap().idf_sample,
            400
        );
        // A negative number of seconds panicked in Duration::from_secs_f64; the other values
        // were ignored without a word.
        for (name, raw) in [
            ("KINDRED_MILVUS_LEXICAL_REFRESH_SECS", "-1"),
            ("KINDRED_MILVUS_LEXICAL_REFRESH_SECS", "NaN"),
            ("KINDRED_MILVUS_LEXICAL_REFRESH_SECS", "sixty"),
            ("KINDRED_MILVUS_IDF_SAMPLE", "0"),
            ("KINDRED_MILVUS_IDF_SAMPLE", "1e5"),
        ] {
            let e = with(name, raw).unwrap_err().to_string();
            assert!(e.contains(name) && e.contains("give"), "{e}");
        }
    }
}
