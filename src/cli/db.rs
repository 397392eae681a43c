//! Collection and document commands: `collection …`, `add`, `get`, `delete`, `search`, `stats`.

use std::io::{BufRead, Write};
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use kindred::db::{Database, NewDocument};
use kindred::engine::Engine;
use kindred::model::ModelDir;
use kindred::search::SearchParams;
use kindred::store::{CollectionSettings, Durability};
use kindred::Encoder;

/// Opens the database, drawing index rebuilds as a progress bar.
pub fn open(dir: &Path, relaxed: bool) -> Result<Database> {
    let durability = if relaxed {
        Durability::Relaxed
    } else {
        Durability::Flush
    };
    let bar = ProgressBar::hidden();
    bar.set_style(ProgressStyle::with_template("{msg} {bar:30} {pos}/{len}").expect("template"));
    let progress = Arc::new(move |what: &str, done: u64, total: u64| {
        if bar.is_hidden() && total > 0 {
            bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
        }
        bar.set_message(what.to_string());
        bar.set_length(total);
        bar.set_position(done);
        if done >= total {
            bar.finish_and_clear();
        }
    });
    Database::open(dir, durability)
        .with_context(|| format!("opening the database in {}", dir.display()))
        .map(|db| db.with_progress(progress))
}

pub fn create(db: &Database, encoder: &Encoder, name: &str) -> Result<()> {
    db.create_collection(
        name,
        &CollectionSettings::for_model(encoder.identity().clone()),
    )?;
    println!(
        "created collection {name} (model {})",
        encoder.identity().id
    );
    Ok(())
}

pub fn list(db: &Database) -> Result<()> {
    for (name, settings) in db.collections()? {
        println!(
            "{name}\t{} documents\t{}\t{}",
            db.store().count(&name)?,
            settings.model.id,
            settings.model.precision
        );
    }
    Ok(())
}

pub fn stats(db: &Database, name: &str, as_json: bool) -> Result<()> {
    let info = db.info(name)?;
    if as_json {
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
    println!("token vectors   {}", s.token_vectors);
    println!("bytes/document  {:.0}", s.bytes_per_document);
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
    Ok(())
}

/// Upserts JSONL documents ({"id", "text", "metadata"}) in batches; prints `ack ID` for each
/// document once its batch is acknowledged (durable unless --relaxed).
pub fn add(engine: &Engine, name: &str, file: &Path, batch: usize) -> Result<()> {
    let collection = engine.collection(name)?;
    let reader = std::io::BufReader::new(
        std::fs::File::open(file).with_context(|| format!("opening {}", file.display()))?,
    );
    let mut stdout = std::io::stdout().lock();
    // Upserts a batch, then acknowledges each of its documents on stdout.
    let mut commit = |pending: &mut Vec<NewDocument>| -> Result<usize> {
        let docs = std::mem::take(pending);
        let ids: Vec<String> = docs.iter().map(|d| d.id.clone()).collect();
        if !docs.is_empty() {
            collection.upsert(docs)?;
        }
        for id in &ids {
            writeln!(stdout, "ack {id}")?;
        }
        stdout.flush()?;
        Ok(ids.len())
    };
    let mut pending: Vec<NewDocument> = Vec::with_capacity(batch);
    let mut acked = 0usize;
    for (n, line) in reader.lines().enumerate() {
        let line = line.with_context(|| format!("reading line {}", n + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let doc: NewDocument = serde_json::from_str(&line).with_context(|| {
            format!(
                "line {}: expected {{\"id\", \"text\", \"metadata\"}}",
                n + 1
            )
        })?;
        pending.push(doc);
        if pending.len() >= batch.max(1) {
            acked += commit(&mut pending)?;
        }
    }
    acked += commit(&mut pending)?;
    eprintln!("{acked} documents upserted into {name}");
    Ok(())
}

pub fn get(db: &Database, name: &str, id: &str) -> Result<()> {
    let Some(doc) = db.get(name, id)? else {
        bail!("no document {id:?} in collection {name:?}");
    };
    let out = json!({
        "id": doc.id,
        "text": doc.text,
        "metadata": doc.metadata(),
        "tokens": doc.tokens,
        "truncated": doc.truncated,
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}

pub fn delete(db: &Database, name: &str, id: &str) -> Result<()> {
    if db.delete(name, id)? {
        println!("deleted {id}");
        Ok(())
    } else {
        bail!("no document {id:?} in collection {name:?}")
    }
}

pub fn search(
    engine: &Engine,
    name: &str,
    text: &str,
    params: &SearchParams,
    json: bool,
) -> Result<()> {
    let out = engine.collection(name)?.search(text, params)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!("score\tP(dup)\tcosine\tw2\tlexical\trcmd\tid\ttext");
    for h in &out.hits {
        let s = &h.stages;
        println!(
            "{:.4}\t{:.3}\t{:.4}\t{:.4}\t{:.4}\t{:.4}\t{}\t{}",
            h.score,
            h.probability,
            s.cosine.score,
            s.w2.score,
            s.lexical.score,
            s.rcmd.score,
            h.id,
            h.text
        );
    }
    let t = out.timings;
    eprintln!(
        "{} candidates; encode {:.1} ms, candidates {:.1} ms, rerank {:.1} ms",
        out.candidates, t.encode_ms, t.candidates_ms, t.rerank_ms
    );
    Ok(())
}

/// `kindred reindex`: re-encodes the collection onto `encoder`'s model with a progress bar.
pub fn reindex(
    db: Database,
    encoder: Encoder,
    dir: &ModelDir,
    name: &str,
    json: bool,
) -> Result<()> {
    let bar = ProgressBar::new(db.store().count(name)?).with_style(
        ProgressStyle::with_template(
            "reindexing {bar:30} {pos}/{len} documents {per_sec} eta {eta}",
        )
        .expect("template"),
    );
    let path = dir.path.canonicalize().unwrap_or_else(|_| dir.path.clone());
    let encoder = Arc::new(encoder);
    let engine = Engine::with_encoder(Arc::new(db), encoder.clone());
    let report = engine
        .reindex(name, encoder, Some(&path), &|done, total| {
            bar.set_length(total);
            bar.set_position(done);
        })
        .with_context(|| format!("reindexing {name}"))?;
    bar.finish_and_clear();
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "reindexed {name}: {} documents onto {} ({}) in {:.1} s, generation {}",
            report.documents,
            report.model.id,
            report.model.fingerprint,
            report.seconds,
            report.generation
        );
    }
    Ok(())
}
