//! A collection's search defaults (issue 23): the search settings its searches use where a
//! request does not say — mode, rerank, RCMD weights, fusion weights — with why they were
//! chosen and for which model. Learned (`kindred tune`) or set by an operator
//! (`PUT /v1/collections/{c}/search-defaults`).
//!
//! Kept in the collection's `meta` tree as JSON (key [`SEARCH_DEFAULTS_KEY`]), like its
//! calibration: no format change (older binaries ignore the key), and a reindex, which
//! rewrites the settings and the documents but not `meta`, keeps them. Defaults chosen for
//! another model than the collection's current one are *stale* ([`SearchDefaults::is_stale`]):
//! reported, never applied. Plain data and its checks; the search layer applies them.

use serde::{Deserialize, Serialize};

use crate::error::{Result, UserError};
use crate::types::{FusionWeights, Mode, Rerank, Weighting};

/// The `meta` key a collection's search defaults are stored under.
pub const SEARCH_DEFAULTS_KEY: &str = "search_defaults";

/// Longest accepted reason, in bytes.
pub const MAX_REASON_BYTES: usize = 4096;
/// Largest accepted evidence, in bytes of compact JSON (`kindred tune`'s table of 35
/// configurations is about 10 KiB).
pub const MAX_EVIDENCE_BYTES: usize = 64 << 10;

/// Who chose a collection's search defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DefaultsSource {
    /// Measured on the collection's own data (`kindred tune`).
    Learned,
    /// Set by an operator.
    Set,
}

impl DefaultsSource {
    /// Its name (`learned`, `set`).
    pub fn name(self) -> &'static str {
        match self {
            DefaultsSource::Learned => "learned",
            DefaultsSource::Set => "set",
        }
    }
}

impl std::fmt::Display for DefaultsSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A collection's search defaults and why they were chosen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchDefaults {
    /// Where candidates come from.
    pub mode: Mode,
    /// How candidates are ordered.
    pub rerank: Rerank,
    /// RCMD's token weights.
    pub weights: Weighting,
    /// Reciprocal-rank fusion weights (used by `mode: hybrid`).
    pub fusion: FusionWeights,
    /// Learned or set by hand.
    pub source: DefaultsSource,
    /// Why these: one sentence for people, with the measured numbers when learned.
    pub reason: String,
    /// The fingerprint of the model they were chosen for; under another model they are stale.
    pub model_fingerprint: String,
    /// When they were chosen: RFC 3339, UTC (`2026-11-24T09:30:00Z`).
    pub chosen_at: String,
    /// What was compared (free-form, e.g. a table of configurations and their scores); null
    /// when nothing was.
    #[serde(default)]
    pub evidence: serde_json::Value,
}

impl SearchDefaults {
    /// Refuses defaults no search should run with, naming the field: weights finite and
    /// non-negative, at least one positive stage weight in hybrid mode, k0 finite and above
    /// 0, a reason (at most [`MAX_REASON_BYTES`]), a model fingerprint and a `chosen_at` in
    /// RFC 3339.
    pub fn validate(&self) -> Result<()> {
        let bad = |name: &'static str, reason: String| -> Result<()> {
            Err(UserError::InvalidArgument { name, reason }.into())
        };
        self.fusion.validate(self.mode)?;
        if self.reason.trim().is_empty() {
            return bad("reason", "it is empty; say why these settings".into());
        }
        if self.reason.len() > MAX_REASON_BYTES {
            return bad(
                "reason",
                format!(
                    "it is {} bytes; keep it to one sentence (at most {MAX_REASON_BYTES} bytes) and put tables in evidence",
                    self.reason.len()
                ),
            );
        }
        let evidence = serde_json::to_vec(&self.evidence).map_or(0, |v| v.len());
        if evidence > MAX_EVIDENCE_BYTES {
            return bad(
                "evidence",
                format!(
                    "it is {evidence} bytes of JSON; keep it to at most {MAX_EVIDENCE_BYTES} bytes (a table of the configurations compared, not raw data)"
                ),
            );
        }
        if self.model_fingerprint.trim().is_empty() {
            return bad(
                "model_fingerprint",
                "it is empty; give the fingerprint of the model the defaults were chosen for"
                    .into(),
            );
        }
        if !is_rfc3339_utc(&self.chosen_at) {
            return bad(
                "chosen_at",
                format!(
                    "{:?}; use RFC 3339 in UTC, like 2026-11-24T09:30:00Z",
                    self.chosen_at
                ),
            );
        }
        Ok(())
    }

    /// True when they were chosen for another model than `fingerprint` (the collection's):
    /// stale defaults are reported but never applied.
    pub fn is_stale(&self, fingerprint: &str) -> bool {
        self.model_fingerprint != fingerprint
    }
}

/// Now, as RFC 3339 in UTC to the second (`2026-11-24T09:30:00Z`).
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    rfc3339_utc(secs)
}

/// Seconds since the Unix epoch as RFC 3339 in UTC (`1970-01-01T00:00:00Z`).
pub fn rfc3339_utc(secs: u64) -> String {
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// The proleptic Gregorian (year, month, day) of a day count from 1970-01-01 (Howard
/// Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// True for `YYYY-MM-DDTHH:MM:SS` with an optional fraction and `Z` (UTC): the shape
/// [`now_rfc3339`] writes, with fields in range.
fn is_rfc3339_utc(s: &str) -> bool {
    let Some(body) = s.strip_suffix('Z').or_else(|| s.strip_suffix('z')) else {
        return false;
    };
    let (main, fraction) = match body.split_once('.') {
        Some((m, f)) => (m, Some(f)),
        None => (body, None),
    };
    if fraction.is_some_and(|f| f.is_empty() || !f.bytes().all(|b| b.is_ascii_digit())) {
        return false;
    }
    let b = main.as_bytes();
    if b.len() != 19 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') {
        return false;
    }
    if b[13] != b':' || b[16] != b':' {
        return false;
    }
    let field = |from: usize, to: usize| -> Option<u32> {
        let part = &main[from..to];
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())
            .flatten()
    };
    let parts = (
        field(0, 4),
        field(5, 7),
        field(8, 10),
        field(11, 13),
        field(14, 16),
        field(17, 19),
    );
    matches!(
        parts,
        (
            Some(_),
            Some(1..=12),
            Some(1..=31),
            Some(0..=23),
            Some(0..=59),
            Some(0..=60)
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> SearchDefaults {
        SearchDefaults {
            mode: Mode::Cosine,
            rerank: Rerank::None,
            weights: Weighting::Idf,
            fusion: FusionWeights::default(),
            source: DefaultsSource::Learned,
            reason: "cosine without rerank had nDCG@10 0.712 against 0.694 for the default".into(),
            model_fingerprint: "sha256:abc+int8".into(),
            chosen_at: "2026-11-24T09:30:00Z".into(),
            evidence: serde_json::json!([{ "name": "hybrid", "ndcg_at_10": 0.694 }]),
        }
    }

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339_utc(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339_utc(4_102_444_799), "2099-12-31T23:59:59Z");
        let now = now_rfc3339();
        assert!(is_rfc3339_utc(&now), "{now}");
        for ok in ["2026-11-24T09:30:00Z", "2026-11-24T09:30:00.123Z"] {
            assert!(is_rfc3339_utc(ok), "{ok}");
        }
        for bad in [
            "",
            "2026-11-24",
            "2026-11-24T09:30:00",
            "2026-11-24T09:30:00+01:00",
            "2026-13-24T09:30:00Z",
            "2026-11-24T24:30:00Z",
            "2026-11-24T09:30:00.Z",
            "yesterday at noonZ",
        ] {
            assert!(!is_rfc3339_utc(bad), "{bad}");
        }
    }

    #[test]
    fn defaults_are_checked_by_field() {
        assert!(sample().validate().is_ok());
        let with = |f: fn(&mut SearchDefaults)| {
            let mut d = sample();
            f(&mut d);
            d.validate().unwrap_err().to_string()
        };
        let e = with(|d| d.fusion.w2 = -1.0);
        assert!(e.contains("fusion.w2") && e.contains("0 or more"), "{e}");
        let e = with(|d| d.fusion.lexical = f32::NAN);
        assert!(e.contains("fusion.lexical"), "{e}");
        let e = with(|d| d.fusion.k0 = 0.0);
        assert!(e.contains("fusion.k0") && e.contains("above 0"), "{e}");
        let e = with(|d| {
            d.mode = Mode::Hybrid;
            d.fusion.cosine = 0.0;
            d.fusion.w2 = 0.0;
            d.fusion.lexical = 0.0;
        });
        assert!(e.contains("fusion") && e.contains("positive weight"), "{e}");
        // All-zero weights are harmless outside hybrid mode (a single stage ignores them).
        let mut d = sample();
        (d.fusion.cosine, d.fusion.w2, d.fusion.lexical) = (0.0, 0.0, 0.0);
        assert!(d.validate().is_ok());
        let e = with(|d| d.reason = "  ".into());
        assert!(e.contains("reason"), "{e}");
        let e = with(|d| d.reason = "x".repeat(MAX_REASON_BYTES + 1));
        assert!(e.contains("reason") && e.contains("evidence"), "{e}");
        // Evidence is bounded too (a 15 MB PUT was stored and sent with every GET).
        let e = with(|d| d.evidence = serde_json::json!("x".repeat(MAX_EVIDENCE_BYTES)));
        assert!(e.contains("evidence") && e.contains("65536"), "{e}");
        let e = with(|d| d.model_fingerprint = String::new());
        assert!(e.contains("model_fingerprint"), "{e}");
        let e = with(|d| d.chosen_at = "last tuesday".into());
        assert!(e.contains("chosen_at") && e.contains("RFC 3339"), "{e}");
    }

    /// The JSON kept in the store: the four settings by name, and evidence optional (null).
    #[test]
    fn the_stored_json_names_everything() {
        let d = sample();
        let v = serde_json::to_value(&d).unwrap();
        assert_eq!(v["mode"], "cosine");
        assert_eq!(v["rerank"], "none");
        assert_eq!(v["weights"], "idf");
        assert_eq!(v["fusion"]["k0"], 60.0);
        assert_eq!(v["source"], "learned");
        let back: SearchDefaults = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(back, d);
        let mut v = v;
        v.as_object_mut().unwrap().remove("evidence");
        v["future_field"] = serde_json::json!(1);
        let back: SearchDefaults = serde_json::from_value(v).unwrap();
        assert_eq!(back.evidence, serde_json::Value::Null);
        assert!(!d.is_stale("sha256:abc+int8"));
        assert!(d.is_stale("sha256:other+int8"));
    }
}
