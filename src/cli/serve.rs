//! `kindred serve`: the server's options, the layered configuration they resolve to, loading
//! the model and the database it names, and running the server on a tokio runtime (`demo.rs`
//! serves through the same pieces).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args as ClapArgs;

use kindred::db::Database;
use kindred::engine::Engine;
use kindred::model;
use kindred::server::config::{Overrides, ServeConfig};
use kindred::{Encoder, EncoderOptions};

use super::global::open_database;
use super::Global;

/// Server options. Each can also come from the config file (same name, snake_case) and from
/// an environment variable; flags beat environment beats file beats defaults.
#[derive(Debug, ClapArgs)]
pub struct ServeArgs {
    /// TOML configuration file (see docs/configuration.md for every key).
    #[arg(long, env = "KINDRED_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1:7700; port 0 picks a free one].
    #[arg(long, env = "KINDRED_LISTEN", value_name = "ADDR:PORT")]
    pub listen: Option<std::net::SocketAddr>,
    /// Seconds between index checkpoints; 0: only at shutdown [default: 60].
    #[arg(long, env = "KINDRED_CHECKPOINT_INTERVAL", value_name = "SECS")]
    pub checkpoint_interval: Option<u64>,
    /// CPU threads API writes may use (encoding, index inserts); 0: all cores but one
    /// [default: 0].
    #[arg(long, env = "KINDRED_INGEST_THREADS", value_name = "N")]
    pub ingest_threads: Option<usize>,
    /// Niceness of the write threads (0-19; Linux): higher lets searches take a core first
    /// while a large ingest runs; 0 leaves their priority alone [default: 10].
    #[arg(long, env = "KINDRED_INGEST_NICE", value_name = "NICE")]
    pub ingest_nice: Option<i32>,
    /// Milliseconds before a request is answered 503 timeout; 0: never [default: 30000].
    #[arg(long, env = "KINDRED_REQUEST_TIMEOUT_MS", value_name = "MS")]
    pub request_timeout_ms: Option<u64>,
}

pub fn run(g: &Global, args: &ServeArgs) -> Result<()> {
    let config = config(g, args)?;
    let (encoder, db) = open(&config)?;
    serve(config, Engine::with_encoder(db, encoder))
}

/// The configuration in force: defaults, file, environment, flags.
pub fn config(g: &Global, a: &ServeArgs) -> Result<ServeConfig> {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let overrides = Overrides {
        listen: a.listen,
        data: g.data.clone(),
        model: g.model.clone(),
        home: g.home.clone(),
        backend: g.backend.as_ref().map(|b| b.to_string()),
        device: g.device.clone(),
        batch_size: g.batch_size,
        precision: g.precision,
        relaxed: g.relaxed,
        admin_key: env("KINDRED_ADMIN_KEY"),
        read_key: env("KINDRED_READ_KEY"),
        checkpoint_interval_secs: a.checkpoint_interval,
        request_timeout_ms: a.request_timeout_ms,
        ingest_threads: a.ingest_threads,
        ingest_nice: a.ingest_nice,
    };
    Ok(ServeConfig::load(a.config.as_deref(), overrides)?)
}

/// Loads the encoder and database a configuration names.
pub fn open(c: &ServeConfig) -> Result<(Arc<Encoder>, Arc<Database>)> {
    let home = c.home.clone().unwrap_or_else(model::default_home);
    let dir = model::resolve(c.model.as_deref(), &home, true)?;
    let options = EncoderOptions {
        device: c.device.parse()?,
        batch_size: c.batch_size,
        precision: c.precision(),
        // KINDRED_KERNELS and KINDRED_PAD_MULTIPLE: the library reads no environment itself.
        ..EncoderOptions::default().with_vars(|k| std::env::var(k).ok())
    };
    let encoder = Encoder::load(&dir, options)
        .with_context(|| format!("loading model {}", dir.path.display()))?;
    let data = c.data.clone().unwrap_or_else(|| home.join("data"));
    let backend: kindred::db::Location = c
        .backend
        .parse()
        .map_err(|reason| anyhow::anyhow!("invalid backend in the configuration: {reason}"))?;
    let db = open_database(&data, c.relaxed, &backend)?;
    Ok((Arc::new(encoder), Arc::new(db)))
}

/// Runs the server until Ctrl-C / SIGTERM.
pub fn serve(c: ServeConfig, engine: Engine) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let served = runtime.block_on(kindred::server::serve(c, engine, |r| {
        // Tests and scripts read this line to find the port.
        println!("listening on http://{}", r.addr);
        use std::io::Write;
        let _ = std::io::stdout().flush();
    }));
    // The indexes are saved (or their save failed, logged): background work still running
    // (a store reopen waiting on a failed disk) must not keep the process from exiting.
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    served?;
    Ok(())
}
