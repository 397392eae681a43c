//! `kindred serve` and `kindred demo`: resolve the layered configuration, load the model and
//! the database, and run the server on a tokio runtime.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args as ClapArgs;

use kindred::db::{Database, NewDocument};
use kindred::engine::Engine;
use kindred::model;
use kindred::search::SearchParams;
use kindred::server::config::{Overrides, ServeConfig};
use kindred::store::CollectionSettings;
use kindred::{Encoder, EncoderOptions};

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

/// The configuration in force: defaults, file, environment, flags.
pub fn config(g: &Global, a: &ServeArgs) -> Result<ServeConfig> {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let overrides = Overrides {
        listen: a.listen,
        data: g.data.clone(),
        model: g.model.clone(),
        home: g.home.clone(),
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
        ..EncoderOptions::default()
    };
    let encoder = Encoder::load(&dir, options)
        .with_context(|| format!("loading model {}", dir.path.display()))?;
    let data = c.data.clone().unwrap_or_else(|| home.join("data"));
    let db = super::db::open(&data, c.relaxed)?;
    Ok((Arc::new(encoder), Arc::new(db)))
}

/// Runs the server until Ctrl-C / SIGTERM.
pub fn serve(c: ServeConfig, engine: Engine) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(kindred::server::serve(c, engine, |r| {
        // Tests and scripts read this line to find the port.
        println!("listening on http://{}", r.addr);
        use std::io::Write;
        let _ = std::io::stdout().flush();
    }))?;
    Ok(())
}

const FAQ: &str = include_str!("../../demo/faq.txt");
const DEMO_COLLECTION: &str = "faq";
const SAMPLES: [&str; 3] = [
    "I can't remember my password",
    "is it possible to get my money back?",
    "the parcel came broken",
];

/// `kindred demo`: makes sure the demo collection holds the bundled FAQ, answers a few
/// questions (yours or samples) with the full pipeline, then serves (unless `no_serve`).
pub fn demo(c: ServeConfig, queries: &[String], k: usize, no_serve: bool) -> Result<()> {
    let (encoder, db) = open(&c)?;
    let have = db.collections()?.iter().any(|(n, _)| n == DEMO_COLLECTION);
    if !have {
        db.create_collection(
            DEMO_COLLECTION,
            &CollectionSettings::for_model(encoder.identity().clone()),
        )?;
    }
    // An existing demo collection keeps its own model and precision (e.g. fp32, from before
    // int8 was the default): answer with its encoder, as the server does.
    let engine = Engine::with_encoder(db.clone(), encoder.clone());
    let collection = engine.collection(DEMO_COLLECTION)?;
    if db.store().count(DEMO_COLLECTION)? == 0 {
        let docs: Vec<NewDocument> = FAQ
            .lines()
            .filter(|l| !l.trim().is_empty())
            .enumerate()
            .map(|(i, text)| NewDocument {
                id: format!("faq-{}", i + 1),
                text: text.into(),
                metadata: serde_json::json!({ "source": "demo" }),
            })
            .collect();
        eprintln!(
            "loading {} demo questions into collection {DEMO_COLLECTION}",
            docs.len()
        );
        collection.upsert(docs)?;
    }
    let queries: Vec<&str> = if queries.is_empty() {
        SAMPLES.to_vec()
    } else {
        queries.iter().map(String::as_str).collect()
    };
    let params = SearchParams {
        k,
        ..SearchParams::default()
    };
    for q in queries {
        let out = collection.search(q, &params)?;
        println!("\n{q}");
        for h in out.hits {
            println!(
                "  rcmd {:.3}  cosine {:.3}  P(dup) {:.2}  {}",
                h.stages.rcmd.score, h.stages.cosine.score, h.probability, h.text
            );
        }
    }
    if no_serve {
        return Ok(());
    }
    println!(
        "\nserving collection {DEMO_COLLECTION}: open the admin UI at http://{0}/ui/ or try\n  curl -s http://{0}/v1/collections/{DEMO_COLLECTION}/search -H 'content-type: application/json' -d '{{\"text\": \"forgot my password\"}}'",
        c.listen
    );
    drop(collection);
    serve(c, engine)
}
