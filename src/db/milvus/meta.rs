//! The shared metadata collection (`kindred_meta`): collection settings, calibration, search defaults, layouts and review verdicts, cached briefly on each node.

use super::*;
use crate::db::info::CALIBRATION_KEY;
use crate::score::calibration::Calibrator;
use crate::store::{SearchDefaults, SEARCH_DEFAULTS_KEY};

/// How long a node trusts a shared metadata value it read (settings, calibration, search
/// defaults) before reading it again.
pub(super) const META_TTL: Duration = Duration::from_secs(1);

/// The shared metadata collection.
pub(super) const META: &str = "kindred_meta";

pub(super) fn settings_key(name: &str) -> String {
    format!("settings/{name}")
}

/// The key of collection `name`'s metadata value `key`.
pub(crate) fn meta_key(name: &str, key: &str) -> String {
    format!("meta/{name}/{key}")
}

/// The shared-metadata key of labelled pair `key` of collection `name`.
pub(super) fn pair_key(name: &str, key: &str) -> String {
    meta_key(name, &format!("pair/{key}"))
}

/// The characters of a labelled pair's key ...
pub(super) const HEX: &[u8; 16] = b"0123456789abcdef";

/// ... and how many (`review::pair_key`: 128 bits).
pub(super) const PAIR_KEY_DIGITS: usize = 32;

/// Every row under a key prefix followed by [`PAIR_KEY_DIGITS`] hex digits, read with
/// `query(head)` (the rows whose digits start with `head`, at most `page` of them): a full
/// answer is read again as its 16 one-digit-longer heads, so no row is cut off by the page
/// limit (a head of all the digits matches one row).
pub(super) fn by_key_prefix<R>(
    page: usize,
    mut query: impl FnMut(&str) -> Result<Vec<R>>,
) -> Result<Vec<R>> {
    let mut out = Vec::new();
    let mut heads = vec![String::new()];
    while let Some(head) = heads.pop() {
        let rows = query(&head)?;
        if rows.len() >= page && head.len() < PAIR_KEY_DIGITS {
            heads.extend(HEX.iter().map(|&c| format!("{head}{}", c as char)));
        } else {
            out.extend(rows);
        }
    }
    Ok(out)
}

impl Remote {
    /// A value of the shared metadata (None: absent).
    /// Read from Milvus at most once per [`META_TTL`] per key (a search reads three: the
    /// collection's settings, calibration and search defaults); this node's own changes are
    /// seen at once, other nodes' within the TTL.
    pub fn meta(&self, key: &str) -> Result<Option<String>> {
        if let Some((at, value)) = self.meta_cache.locked().get(key) {
            if at.elapsed() < META_TTL {
                return Ok(value.clone());
            }
        }
        let rows = self.query(META, &format!("key == {}", json!(key)), &["value"], Some(1))?;
        let value = rows
            .into_iter()
            .next()
            .and_then(|r| r.get("value").and_then(|v| v.as_str()).map(str::to_string));
        self.cache_meta(key, value.clone());
        Ok(value)
    }

    pub(super) fn cache_meta(&self, key: &str, value: Option<String>) {
        self.meta_cache
            .locked()
            .insert(key.to_string(), (std::time::Instant::now(), value));
    }

    /// Sets a value of the shared metadata.
    pub fn set_meta(&self, key: &str, value: &str) -> Result<()> {
        if value.len() > CHUNK_CHARS {
            return Err(UserError::InvalidArgument {
                name: "metadata value",
                reason: format!(
                    "{} bytes; the Milvus backend keeps at most {CHUNK_CHARS}",
                    value.len()
                ),
            }
            .into());
        }
        self.upsert_rows(
            META,
            vec![json!({"key": key, "value": value, "v": [0.0, 0.0]})],
        )?;
        self.cache_meta(key, Some(value.to_string()));
        Ok(())
    }

    /// Removes a value of the shared metadata; true if it was there.
    pub fn remove_meta(&self, key: &str) -> Result<bool> {
        let had = self.meta(key)?.is_some();
        self.delete_where(META, &format!("key == {}", json!(key)))?;
        self.cache_meta(key, None);
        Ok(had)
    }

    // --- labelled pairs (review verdicts) -------------------------------------------------

    /// Stores labelled pair `key` of collection `name`: shared metadata under
    /// `meta/<name>/pair/<key>` (removed with the collection).
    pub fn put_pair(&self, name: &str, key: &str, value: &[u8]) -> Result<()> {
        // Reading the pairs back walks hex key prefixes (`review::pair_key` makes the keys).
        if key.len() != PAIR_KEY_DIGITS || !key.bytes().all(|b| HEX.contains(&b)) {
            return Err(UserError::InvalidArgument {
                name: "verdict key",
                reason: format!("{key:?} is not {PAIR_KEY_DIGITS} lower-case hex digits"),
            }
            .into());
        }
        let value = std::str::from_utf8(value).map_err(|_| UserError::InvalidArgument {
            name: "verdict",
            reason: "not UTF-8 text".into(),
        })?;
        self.set_meta(&pair_key(name, key), value)
    }

    /// Every labelled pair of collection `name`: (key, value). A query returns at most
    /// [`QUERY_ROWS`] rows, so the pairs are read by key prefix ([`by_key_prefix`]).
    pub fn pairs(&self, name: &str) -> Result<Vec<(String, Vec<u8>)>> {
        let prefix = pair_key(name, "");
        let rows = by_key_prefix(QUERY_ROWS, |head| {
            self.query(
                META,
                &format!("key like {}", json!(format!("{prefix}{head}%"))),
                &["key", "value"],
                Some(QUERY_ROWS),
            )
        })?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                let key = r.get("key")?.as_str()?.strip_prefix(&prefix)?;
                let value = r.get("value")?.as_str()?;
                Some((key.to_string(), value.as_bytes().to_vec()))
            })
            .collect())
    }

    /// Labelled pair `key` of collection `name`.
    pub fn pair(&self, name: &str, key: &str) -> Result<Option<Vec<u8>>> {
        if key.len() != PAIR_KEY_DIGITS || !key.bytes().all(|b| HEX.contains(&b)) {
            return Ok(None);
        }
        Ok(self.meta(&pair_key(name, key))?.map(String::into_bytes))
    }

    /// Removes labelled pair `key` of collection `name`; true if it was there.
    pub fn remove_pair(&self, name: &str, key: &str) -> Result<bool> {
        // Keys are 32 hex digits (`review::pair_key`); anything else was never stored.
        if key.is_empty() || key.len() > 64 || !key.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Ok(false);
        }
        self.remove_meta(&pair_key(name, key))
    }

    // --- collections --------------------------------------------------------------------

    /// Collection `name`'s settings (None: no such collection).
    pub fn settings(&self, name: &str) -> Result<Option<CollectionSettings>> {
        self.meta(&settings_key(name))?
            .map(|s| {
                serde_json::from_str(&s).map_err(|e| {
                    crate::error::InternalError::Corrupt(format!(
                        "the settings of collection {name:?} in Milvus do not decode: {e}"
                    ))
                    .into()
                })
            })
            .transpose()
    }

    /// Collection `name`'s settings, or the error naming it.
    pub fn require(&self, name: &str) -> Result<CollectionSettings> {
        self.settings(name)?
            .ok_or_else(|| UserError::UnknownCollection { name: name.into() }.into())
    }

    /// Every collection's name and settings, by name.
    pub fn collections(&self) -> Result<Vec<(String, CollectionSettings)>> {
        let rows = self.query(
            META,
            "key like \"settings/%\"",
            &["key", "value"],
            Some(QUERY_ROWS),
        )?;
        let mut out: Vec<(String, CollectionSettings)> = rows
            .into_iter()
            .filter_map(|r| {
                let key = r
                    .get("key")?
                    .as_str()?
                    .strip_prefix("settings/")?
                    .to_string();
                let settings = serde_json::from_str(r.get("value")?.as_str()?).ok()?;
                Some((key, settings))
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }
}

/// Collection `name`'s search defaults from the shared metadata (damaged: logged and treated
/// as none).
pub(super) fn search_defaults(r: &Remote, name: &str) -> Result<Option<Arc<SearchDefaults>>> {
    let stored = r.meta(&meta_key(name, SEARCH_DEFAULTS_KEY))?;
    Ok(
        match stored.map(|s| serde_json::from_str::<SearchDefaults>(&s)) {
            Some(Ok(d)) => Some(Arc::new(d)),
            Some(Err(e)) => {
                tracing::warn!(collection = %name, error = %e, "the stored search defaults are damaged; searches use the server's until they are set or cleared again");
                None
            }
            None => None,
        },
    )
}

/// Collection `name`'s calibrator from the shared metadata (absent or damaged: the default).
pub(super) fn calibrator(r: &Remote, name: &str) -> Result<Calibrator> {
    let stored = r.meta(&meta_key(name, CALIBRATION_KEY))?;
    Ok(
        match stored.map(|s| serde_json::from_str::<Calibrator>(&s)) {
            Some(Ok(c)) => c,
            Some(Err(e)) => {
                tracing::warn!(collection = %name, error = %e, "the stored calibration is damaged; using the default until `kindred calibrate` replaces it");
                Calibrator::default_for_minilm()
            }
            None => Calibrator::default_for_minilm(),
        },
    )
}
