//! `kindred add | get | delete | export`: documents one by one — upserts from a JSONL file
//! (each acknowledged on stdout once durable), a stored document as JSON, a deletion — and
//! all of a collection's documents as JSONL, the format `add` and `ingest` read.

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

/// `kindred export`.
#[derive(Debug, ClapArgs)]
pub struct ExportArgs {
    /// Collection.
    #[arg(long, short)]
    pub collection: String,
    /// Write to this file (built as FILE.partial beside it and renamed once complete, so a
    /// stopped export leaves no truncated FILE); default: standard output.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Writes every document of the collection as JSONL ({"id", "text", "metadata", "context"}
/// per line; in id order on the embedded store), with a progress bar on standard error when
/// writing to a file.
pub fn export(g: &Global, args: &ExportArgs) -> Result<()> {
    let name = &args.collection;
    let db = g.database()?;
    let total = db.count(name)?;
    let docs = db.documents(name)?;
    let written = match &args.out {
        None => kindred::db::write_export(docs, &mut std::io::stdout().lock(), |_| {})?,
        Some(path) => {
            let mut partial = path.clone().into_os_string();
            partial.push(".partial");
            let partial = PathBuf::from(partial);
            let file = std::fs::File::create(&partial)
                .with_context(|| format!("creating {}", partial.display()))?;
            let bar = super::progress::bar(total, "exporting");
            let mut out = std::io::BufWriter::new(file);
            let n = kindred::db::write_export(docs, &mut out, |n| bar.set_position(n))
                .with_context(|| format!("writing {}", partial.display()))?;
            (out.into_inner().map_err(|e| e.into_error()))
                .and_then(|f| f.sync_all())
                .with_context(|| format!("writing {}", partial.display()))?;
            bar.finish_and_clear();
            std::fs::rename(&partial, path)
                .with_context(|| format!("renaming {} to {}", partial.display(), path.display()))?;
            n
        }
    };
    eprintln!("{written} documents exported from {name}");
    Ok(())
}
