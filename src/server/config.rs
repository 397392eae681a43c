//! `kindred serve` configuration, layered: built-in defaults, then a TOML file
//! (`--config FILE` / `KINDRED_CONFIG`), then environment variables, then command-line flags
//! (the last two are resolved by the CLI into a [`ServeConfig`] patch and applied here).
//! Every field has a default, so an empty file (or none) is a valid configuration.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{io_err, Result, UserError};
use crate::search::{Depths, FusionWeights};
use crate::types::Precision;

/// Limits on what one request may ask for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Largest request body, in bytes (413 beyond). NDJSON streams are not bounded by it.
    pub max_body_bytes: usize,
    /// Most documents in one JSON batch or NDJSON chunk (413 beyond).
    pub max_batch: usize,
    /// Largest k (422 beyond).
    pub max_k: usize,
    /// Longest text of a query or document, in characters (422 beyond).
    pub max_text_chars: usize,
    /// Milliseconds before a request (other than an NDJSON stream or a file upload) is
    /// answered 503 `timeout` (0: never).
    pub request_timeout_ms: u64,
    /// Largest file uploaded to `POST /v1/collections/{c}/ingest`, in bytes (413 beyond).
    pub max_upload_bytes: u64,
    /// Most matrix cells the explanations of one answer (search, duplicates, review page) may
    /// hold, about 10 bytes of JSON each: hits are explained best first until the next would
    /// pass it, the rest are counted in the answer's `unexplained`.
    pub max_explain_cells: usize,
    /// Most open connections; more wait in the listen backlog until one closes.
    pub max_connections: usize,
    /// Milliseconds a client has to send a request's headers (and an idle keep-alive
    /// connection to start its next request) before the connection is closed.
    pub header_timeout_ms: u64,
    /// Most upload jobs loading at once (429 beyond).
    pub max_jobs: usize,
    /// Writes are refused (507 `insufficient_storage`) while the data disk has fewer bytes
    /// free, so the store never meets a full disk: reads go on, writes resume once space is
    /// freed.
    pub min_free_disk_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 16 << 20,
            max_batch: 1000,
            max_k: 100,
            max_text_chars: 2000,
            request_timeout_ms: 30_000,
            max_upload_bytes: 1 << 30,
            max_explain_cells: crate::search::DEFAULT_EXPLAIN_CELLS,
            max_connections: 1024,
            header_timeout_ms: 30_000,
            max_jobs: 4,
            min_free_disk_bytes: crate::store::DEFAULT_MIN_FREE_BYTES,
        }
    }
}

/// Server-wide search defaults (a request may override each; a collection's own search
/// defaults, `store::SearchDefaults`, take precedence over `fusion`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SearchDefaults {
    /// Per-stage candidate depths.
    pub depths: Depths,
    /// Fusion weights.
    pub fusion: FusionWeights,
    /// Fused candidates scored and reranked.
    pub rerank_depth: usize,
}

impl Default for SearchDefaults {
    fn default() -> Self {
        SearchDefaults {
            depths: Depths::default(),
            fusion: FusionWeights::default(),
            rerank_depth: 100,
        }
    }
}

/// Everything `kindred serve` reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServeConfig {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Database directory (default: `$KINDRED_HOME/data`).
    pub data: Option<PathBuf>,
    /// Where collections live: `embedded` (in `data`) or `milvus://HOST:PORT`.
    pub backend: String,
    /// Model directory (default: the cached all-MiniLM-L6-v2, fetched on first use).
    pub model: Option<PathBuf>,
    /// kindred's home (model cache).
    pub home: Option<PathBuf>,
    /// Encoder device: cpu, cuda, cuda:N.
    pub device: String,
    /// Texts per encoder forward pass.
    pub batch_size: usize,
    /// Encoder arithmetic of new collections (`int8` or `fp32`; unset: int8 on the CPU, fp32
    /// on a GPU); an existing collection keeps the precision it was created with.
    pub precision: Option<Precision>,
    /// Acknowledge writes before they reach the disk.
    pub relaxed: bool,
    /// Key for writes, collection management and the UI. Unset: writes need no key (only
    /// allowed on a loopback address).
    pub admin_key: Option<String>,
    /// Key for reads (search, get, explain). Unset: reads need no key.
    pub read_key: Option<String>,
    /// Seconds between index checkpoints (0: only at shutdown).
    pub checkpoint_interval_secs: u64,
    /// CPU threads that API writes (encoding, index inserts) may use; the rest stay free for
    /// searches. 0: all but one (at least one).
    pub ingest_threads: usize,
    /// Niceness (0-19) of the write threads, so the scheduler runs searches first when both
    /// want a core (Linux; 0 leaves the priority alone).
    pub ingest_nice: i32,
    /// Host names, besides the loopback ones, that a server listening on loopback answers
    /// (a reverse proxy that keeps the client's Host header); every other Host is refused as
    /// a DNS-rebinding guard.
    pub allowed_hosts: Vec<String>,
    /// Request limits.
    pub limits: Limits,
    /// Search defaults.
    pub search: SearchDefaults,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            listen: ([127, 0, 0, 1], 7700).into(),
            data: None,
            backend: "embedded".into(),
            model: None,
            home: None,
            device: "cpu".into(),
            batch_size: 32,
            precision: None,
            relaxed: false,
            admin_key: None,
            read_key: None,
            checkpoint_interval_secs: 60,
            ingest_threads: 0,
            ingest_nice: 10,
            allowed_hosts: Vec::new(),
            limits: Limits::default(),
            search: SearchDefaults::default(),
        }
    }
}

/// Values given by environment variables or flags; each set one replaces the file's.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--listen` / `KINDRED_LISTEN`.
    pub listen: Option<SocketAddr>,
    /// `--data` / `KINDRED_DATA`.
    pub data: Option<PathBuf>,
    /// `--backend` / `KINDRED_BACKEND`.
    pub backend: Option<String>,
    /// `--model` / `KINDRED_MODEL`.
    pub model: Option<PathBuf>,
    /// `--home` / `KINDRED_HOME`.
    pub home: Option<PathBuf>,
    /// `--device` / `KINDRED_DEVICE`.
    pub device: Option<String>,
    /// `--batch-size` / `KINDRED_BATCH_SIZE`.
    pub batch_size: Option<usize>,
    /// `--precision` / `KINDRED_PRECISION`.
    pub precision: Option<Precision>,
    /// `--relaxed` / `KINDRED_RELAXED_DURABILITY` (only `true` overrides).
    pub relaxed: bool,
    /// `KINDRED_ADMIN_KEY`.
    pub admin_key: Option<String>,
    /// `KINDRED_READ_KEY`.
    pub read_key: Option<String>,
    /// `--checkpoint-interval` / `KINDRED_CHECKPOINT_INTERVAL`.
    pub checkpoint_interval_secs: Option<u64>,
    /// `--ingest-threads` / `KINDRED_INGEST_THREADS`.
    pub ingest_threads: Option<usize>,
    /// `--ingest-nice` / `KINDRED_INGEST_NICE`.
    pub ingest_nice: Option<i32>,
    /// `--request-timeout-ms` / `KINDRED_REQUEST_TIMEOUT_MS`.
    pub request_timeout_ms: Option<u64>,
}

impl ServeConfig {
    /// The precision of new collections: as set, else int8 on the CPU and fp32 on a GPU
    /// (where only fp32 runs).
    pub fn precision(&self) -> Precision {
        self.precision
            .unwrap_or(if self.device.starts_with("cuda") {
                Precision::Fp32
            } else {
                Precision::Int8
            })
    }

    /// Threads for API writes: `ingest_threads`, or all cores but one.
    pub fn writer_threads(&self) -> usize {
        match self.ingest_threads {
            0 => {
                std::thread::available_parallelism().map_or(1, |n| n.get().saturating_sub(1).max(1))
            }
            n => n,
        }
    }

    /// Defaults, then `file` (if any), then `overrides`.
    pub fn load(file: Option<&Path>, overrides: Overrides) -> Result<Self> {
        let mut c = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(io_err(format!("reading config file {}", path.display())))?;
                Self::from_toml(&text).map_err(|reason| UserError::InvalidArgument {
                    name: "config file",
                    reason: format!("{}: {reason}", path.display()),
                })?
            }
            None => ServeConfig::default(),
        };
        let o = overrides;
        macro_rules! take {
            ($field:ident) => {
                if let Some(v) = o.$field {
                    c.$field = v;
                }
            };
            (opt $field:ident) => {
                if o.$field.is_some() {
                    c.$field = o.$field;
                }
            };
        }
        take!(listen);
        take!(opt data);
        take!(backend);
        take!(opt model);
        take!(opt home);
        take!(device);
        take!(batch_size);
        take!(opt precision);
        take!(opt admin_key);
        take!(opt read_key);
        take!(checkpoint_interval_secs);
        take!(ingest_threads);
        take!(ingest_nice);
        c.relaxed |= o.relaxed;
        if let Some(t) = o.request_timeout_ms {
            c.limits.request_timeout_ms = t;
        }
        c.validate()?;
        Ok(c)
    }

    /// Parses a TOML configuration (unknown keys are errors, so typos surface).
    pub fn from_toml(text: &str) -> std::result::Result<Self, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    fn validate(&self) -> Result<()> {
        let bad = |name: &'static str, reason: &str| -> Result<()> {
            Err(UserError::InvalidArgument {
                name,
                reason: reason.into(),
            }
            .into())
        };
        for (name, key) in [("admin_key", &self.admin_key), ("read_key", &self.read_key)] {
            let Some(key) = key.as_deref() else { continue };
            if key.len() < 16 {
                return bad(name, "shorter than 16 characters; use a long random key (e.g. `openssl rand -hex 24`)");
            }
            if key.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return bad(
                    name,
                    "holds whitespace or control characters; a key is compared byte for byte and HTTP drops the whitespace around a header's value, so use a key without them (e.g. `openssl rand -hex 24`)",
                );
            }
        }
        if self.read_key.is_some() && self.admin_key.is_none() {
            return bad(
                "read_key",
                "set without admin_key: reads would need a key while writes stayed open to anyone; set KINDRED_ADMIN_KEY too",
            );
        }
        if self.read_key.is_some() && self.read_key == self.admin_key {
            return bad(
                "read_key",
                "the same as admin_key, so every reader could write; use two different keys",
            );
        }
        if self.admin_key.is_none() && !self.listen.ip().is_loopback() {
            return bad(
                "listen",
                "a non-loopback address without an admin key would let anyone on the network write; set KINDRED_ADMIN_KEY (or admin_key in the config file)",
            );
        }
        if self.batch_size == 0 {
            return bad("batch_size", "0; use at least 1");
        }
        if !(0..=19).contains(&self.ingest_nice) {
            return bad(
                "ingest_nice",
                "outside 0-19; higher runs writes at lower priority than searches, 0 leaves them alone",
            );
        }
        let l = &self.limits;
        if l.max_body_bytes == 0
            || l.max_batch == 0
            || l.max_k == 0
            || l.max_text_chars == 0
            || l.max_upload_bytes == 0
            || l.max_explain_cells == 0
            || l.max_connections == 0
            || l.header_timeout_ms == 0
            || l.max_jobs == 0
        {
            return bad("limits", "every limit must be at least 1");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_apply_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("k.toml");
        std::fs::write(
            &file,
            "listen = \"127.0.0.1:9000\"\nbatch_size = 8\n[limits]\nmax_k = 50\n[search]\nrerank_depth = 40\n",
        )
        .unwrap();
        let c = ServeConfig::load(Some(&file), Overrides::default()).unwrap();
        assert_eq!(c.listen.port(), 9000);
        assert_eq!(c.batch_size, 8);
        assert_eq!(c.limits.max_k, 50);
        assert_eq!(c.limits.max_batch, Limits::default().max_batch);
        assert_eq!(c.search.rerank_depth, 40);
        let o = Overrides {
            listen: Some("127.0.0.1:9001".parse().unwrap()),
            request_timeout_ms: Some(5),
            ..Default::default()
        };
        let c = ServeConfig::load(Some(&file), o).unwrap();
        assert_eq!(c.listen.port(), 9001);
        assert_eq!(c.batch_size, 8);
        assert_eq!(c.limits.request_timeout_ms, 5);
    }

    #[test]
    fn bad_configs_say_what_is_wrong() {
        let e = ServeConfig::from_toml("lisen = \"x\"").unwrap_err();
        assert!(e.contains("lisen"), "{e}");
        let o = Overrides {
            listen: Some("0.0.0.0:7700".parse().unwrap()),
            ..Default::default()
        };
        let e = ServeConfig::load(None, o).unwrap_err().to_string();
        assert!(e.contains("KINDRED_ADMIN_KEY"), "{e}");
        let o = Overrides {
            admin_key: Some("short".into()),
            ..Default::default()
        };
        let e = ServeConfig::load(None, o).unwrap_err().to_string();
        assert!(e.contains("16 characters"), "{e}");
        let long = "k".repeat(20);
        for (admin, read, want) in [
            (None, Some(long.clone()), "KINDRED_ADMIN_KEY too"),
            (Some(long.clone()), Some(long.clone()), "two different keys"),
            (Some(format!(" {long} ")), None, "whitespace"),
        ] {
            let o = Overrides {
                admin_key: admin,
                read_key: read,
                ..Default::default()
            };
            let e = ServeConfig::load(None, o).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
        let o = Overrides {
            ingest_nice: Some(20),
            ..Default::default()
        };
        let e = ServeConfig::load(None, o).unwrap_err().to_string();
        assert!(e.contains("ingest_nice") && e.contains("0-19"), "{e}");
    }

    /// The configuration guide's first block lists every key with its default value.
    #[test]
    fn documented_configuration_block_is_the_defaults() {
        let section = include_str!("../../docs/configuration.md");
        let start = section.find("```toml\n").expect("toml block") + "```toml\n".len();
        let block = &section[start..start + section[start..].find("```").expect("block end")];
        let parsed = ServeConfig::from_toml(block).expect("the documented block parses");
        assert_eq!(parsed, ServeConfig::default());
    }
}
