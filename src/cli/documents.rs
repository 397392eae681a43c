//! `kindred add | get | delete`: documents one by one — upserts from a JSONL file (each
//! acknowledged on stdout once durable), a stored document as JSON, a deletion.

use std::io::{BufRead, Write};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args as ClapArgs;
use serde_json::json;

use kindred::db::NewDocument;

use super::Global;

#[derive(Debug, ClapArgs)]
pub struct AddArgs {
    /// Target collection.
    #[arg(long, short)]
    pub collection: String,
    /// The JSONL file.
    pub file: PathBuf,
}

/// Upserts JSONL documents ({"id", "text", "metadata", "context"}) in batches of --batch-size; prints
/// `ack ID` for each document once its batch is acknowledged (durable unless --relaxed).
pub fn add(g: &Global, args: &AddArgs) -> Result<()> {
    let (name, file) = (&args.collection, &args.file);
    let engine = g.engine_for(name)?;
    let batch = g.batch_size();
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
                "line {}: expected {{\"id\", \"text\", \"metadata\", \"context\"}}",
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

/// `kindred get` and `kindred delete`: one document by its external id.
#[derive(Debug, ClapArgs)]
pub struct DocumentArgs {
    /// Collection.
    #[arg(long, short)]
    pub collection: String,
    /// External id.
    pub id: String,
}

pub fn get(g: &Global, args: &DocumentArgs) -> Result<()> {
    let (name, id) = (&args.collection, &args.id);
    let Some(doc) = g.database()?.get(name, id)? else {
        bail!("no document {id:?} in collection {name:?}");
    };
    let out = json!({
        "id": doc.id,
        "text": doc.text,
        "metadata": doc.metadata(),
        "tokens": doc.tokens,
        "truncated": doc.truncated,
        "context": doc.context,
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}

pub fn delete(g: &Global, args: &DocumentArgs) -> Result<()> {
    let (name, id) = (&args.collection, &args.id);
    if g.database()?.delete(name, id)? {
        println!("deleted {id}");
        Ok(())
    } else {
        bail!("no document {id:?} in collection {name:?}")
    }
}
