//! `kindred ops fuse | diff | compress | decode`: a compositional operation on texts' sentence
//! vectors, read back as a collection's nearest stored questions and, when the model carries a
//! decoder, as words.

use anyhow::Result;
use clap::{Args as ClapArgs, Subcommand};

use kindred::model::operators::Operation;

use super::Global;

/// `kindred ops …`
#[derive(Debug, Subcommand)]
pub enum OpsCommand {
    /// Two texts asked as one (A ⊕ B).
    Fuse(TwoTexts),
    /// What A asks beyond B (A ⊖ B).
    Diff(TwoTexts),
    /// A long text said short.
    Compress(OneText),
    /// A text's own vector, read back.
    Decode(OneText),
}

#[derive(Debug, ClapArgs)]
pub struct Common {
    /// The collection whose stored questions read the result back.
    #[arg(long, short)]
    pub collection: String,
    /// Nearest stored questions to print.
    #[arg(short, default_value_t = 5)]
    pub k: usize,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, ClapArgs)]
pub struct TwoTexts {
    /// First text (A).
    pub a: String,
    /// Second text (B).
    pub b: String,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, ClapArgs)]
pub struct OneText {
    /// The text.
    pub text: String,
    #[command(flatten)]
    pub common: Common,
}

pub fn run(g: &Global, command: &OpsCommand) -> Result<()> {
    let (op, texts, common): (Option<Operation>, Vec<&str>, &Common) = match command {
        OpsCommand::Fuse(t) => (Some(Operation::Fusion), vec![&t.a, &t.b], &t.common),
        OpsCommand::Diff(t) => (Some(Operation::Difference), vec![&t.a, &t.b], &t.common),
        OpsCommand::Compress(t) => (Some(Operation::Compression), vec![&t.text], &t.common),
        OpsCommand::Decode(t) => (None, vec![&t.text], &t.common),
    };
    let engine = g.engine_for(&common.collection)?;
    let out = engine.with_collection(&common.collection, |c| c.operate(op, &texts, common.k))?;
    if common.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    let name = op.map_or("decode", Operation::name);
    println!(
        "{name} ({} operator), nearest stored questions:",
        out.operator
    );
    for n in &out.nearest {
        println!("  {:.3}  {}  [{}]", n.cosine, n.text, n.id);
    }
    match &out.words {
        Some(words) => println!("decoded words: {}", words.join(" ")),
        None => println!(
            "decoded words: none (the model has no decoder; `kindred train decoder` learns one)"
        ),
    }
    Ok(())
}
