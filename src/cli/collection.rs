//! `kindred collection create | list | drop` and `kindred stats`: collections as a whole, with
//! their search defaults (documents are `documents.rs`'s, search `search.rs`'s, reindex
//! `reindex.rs`'s).

use anyhow::Result;
use clap::{Args as ClapArgs, Subcommand};

use kindred::db::{Database, SearchDefaultsInfo};
use kindred::store::CollectionSettings;
use kindred::types::GraphVectors;
use kindred::Encoder;

use super::Global;

/// `kindred collection …`
#[derive(Debug, Subcommand)]
pub enum CollectionCommand {
    /// Create a collection for the current model.
    Create {
        /// Name: 1-64 ASCII letters, digits, '_' or '-'.
        name: String,
        /// How the vector indexes keep vectors in memory: f32, or sq8 (int8 codes, 4x
        /// smaller; candidates are still scored from their exact stored vectors).
        #[arg(long, default_value = "f32", value_name = "f32|sq8")]
        graph_vectors: GraphVectors,
    },
    /// List collections.
    List,
    /// Drop a collection and everything in it.
    Drop {
        /// Name.
        name: String,
    },
}

pub fn run(g: &Global, command: &CollectionCommand) -> Result<()> {
    let db = g.database()?;
    match command {
        CollectionCommand::Create {
            name,
            graph_vectors,
        } => create(&db, &g.encoder()?, name, *graph_vectors),
        CollectionCommand::List => list(&db),
        CollectionCommand::Drop { name } => {
            db.drop_collection(name)?;
            println!("dropped collection {name}");
            Ok(())
        }
    }
}

fn create(db: &Database, encoder: &Encoder, name: &str, vectors: GraphVectors) -> Result<()> {
    let mut settings = CollectionSettings::for_model(encoder.identity().clone());
    settings.hnsw.vectors = vectors;
    db.create_collection(name, &settings)?;
    println!(
        "created collection {name} (model {}, {} graph vectors)",
        encoder.identity().id,
        vectors.name()
    );
    Ok(())
}

fn list(db: &Database) -> Result<()> {
    for (name, settings) in db.collections()? {
        println!(
            "{name}\t{} documents\t{}\t{}",
            db.count(&name)?,
            settings.model.id,
            settings.model.precision
        );
    }
    Ok(())
}

#[derive(Debug, ClapArgs)]
pub struct StatsArgs {
    /// Collection.
    pub collection: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `kindred stats`: a collection's size and index health.
pub fn stats(g: &Global, args: &StatsArgs) -> Result<()> {
    let db = g.database()?;
    let info = db.info(&args.collection)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&info)?);
        return Ok(());
    }
    let s = &info.stats;
    println!("collection      {}", info.name);
    println!(
        "model           {} ({})",
        info.settings.model.id, info.settings.model.fingerprint
    );
    println!("format version  {}", info.format_version);
    println!("documents       {}", s.documents);
    let sampled = match s.sampled {
        Some(n) => format!(" (extrapolated from a sample of {n} documents)"),
        None => String::new(),
    };
    println!("token vectors   {}{sampled}", s.token_vectors);
    println!("bytes/document  {:.0}{sampled}", s.bytes_per_document);
    println!(
        "bytes/token vec {:.1} ({} codec)",
        s.bytes_per_token_vector, info.settings.codec
    );
    println!(
        "indexes         cosine {} points, W2 {} points, {} tombstones, lexical {} documents",
        info.index.cosine_points,
        info.index.w2_points,
        info.index.tombstones,
        info.index.lexical_documents
    );
    if let Some(bytes) = info.index.graph_vector_bytes {
        let size = match bytes {
            b if b < 1 << 20 => format!("{:.1} KiB", b as f64 / 1024.0),
            b => format!("{:.1} MiB", b as f64 / (1 << 20) as f64),
        };
        println!(
            "graph vectors   {} ({size} in memory)",
            info.settings.hnsw.vectors.name()
        );
    }
    match &info.search_defaults {
        None => println!("search defaults none (searches use the built-in or server defaults)"),
        Some(d) => print_search_defaults(d, &info.settings.model.fingerprint),
    }
    match &info.context_vectors {
        None => println!("context vectors none (`kindred tune` makes them for rerank: context)"),
        Some(c) if c.stale => println!(
            "context vectors STALE: made by model {} for {} documents; rerank: context is \
             refused until `kindred tune` makes them again",
            c.stamp.model, c.stamp.documents
        ),
        Some(c) => println!(
            "context vectors {} documents, model {} (rerank: context)",
            c.stamp.documents, c.stamp.model
        ),
    }
    Ok(())
}

/// The collection's search defaults: the settings, who chose them when and for which model,
/// why, and whether a reindex made them stale.
fn print_search_defaults(info: &SearchDefaultsInfo, fingerprint: &str) {
    let d = &info.defaults;
    println!(
        "search defaults mode {}, rerank {}, weights {}, fusion {}",
        d.mode, d.rerank, d.weights, d.fusion
    );
    println!(
        "                {} {} for model {}",
        d.source, d.chosen_at, d.model_fingerprint
    );
    println!("                why: {}", d.reason);
    if info.stale {
        println!(
            "                STALE: chosen for another model than the collection's ({fingerprint}); not applied until tuned or set again"
        );
    }
}
