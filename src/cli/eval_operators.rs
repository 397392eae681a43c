//! `kindred eval operators`: the compositional operations' table (R@1, R@10, MRR@10 per
//! operation and system, and ROUGE of the answers read back when the model carries a decoder)
//! from WikiSplit and compression files, in a pool with real questions.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args as ClapArgs;

use kindred::eval::operators::{eval_operators, read_compression, read_wikisplit};
use kindred::eval::read_pairs;
use kindred::Encoder;

#[derive(Debug, ClapArgs)]
pub struct OperatorsArgs {
    /// WikiSplit TSV (`complex<TAB>part1 <::::> part2`): fusion and difference.
    #[arg(long, value_name = "FILE")]
    pub wikisplit: Option<PathBuf>,
    /// Compression CSV (`original,compressed`): compression.
    #[arg(long, value_name = "FILE")]
    pub compression: Option<PathBuf>,
    /// Rows of each file to measure (the first N).
    #[arg(long, value_name = "N", default_value_t = 2000)]
    pub limit: usize,
    /// Pair files (label<TAB>q1<TAB>q2) whose distinct questions join the pool, e.g. the
    /// qqp_bimpm dev and test files.
    #[arg(long = "pool", value_name = "FILE", num_args = 1..)]
    pub pool: Vec<PathBuf>,
    /// Write the `decode` row's read-backs (`{"said", "target"}` per line) to FILE, e.g. to
    /// check their ROUGE with scripts/rouge-crosscheck.py.
    #[arg(long, value_name = "FILE")]
    pub read_backs: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(encoder: &Encoder, args: &OperatorsArgs) -> Result<()> {
    if args.wikisplit.is_none() && args.compression.is_none() {
        bail!("give --wikisplit FILE, --compression FILE or both");
    }
    if args.read_backs.is_some() && encoder.decoder().is_none() {
        bail!(
            "--read-backs needs a model with a decoder (this one has none; `kindred train \
             decoder` learns one)"
        );
    }
    let splits = match &args.wikisplit {
        Some(p) => read_wikisplit(p, Some(args.limit))?,
        None => Vec::new(),
    };
    let compressions = match &args.compression {
        Some(p) => read_compression(p, Some(args.limit))?,
        None => Vec::new(),
    };
    let mut extra = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for p in &args.pool {
        for pair in read_pairs(p)? {
            for q in [pair.a, pair.b] {
                if seen.insert(q.clone()) {
                    extra.push(q);
                }
            }
        }
    }
    let bar = super::progress::bar(0, "encoding the pool (texts)");
    let report = eval_operators(encoder, &splits, &compressions, &extra, &|done, total| {
        bar.set_length(total);
        bar.set_position(done);
    })?;
    bar.finish_and_clear();
    if let Some(path) = &args.read_backs {
        let mut lines = String::new();
        for r in &report.read_backs {
            lines.push_str(&serde_json::to_string(r)?);
            lines.push('\n');
        }
        std::fs::write(path, lines).with_context(|| format!("writing {}", path.display()))?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!(
        "{} WikiSplit rows, {} compression pairs, a pool of {} distinct sentences\n",
        report.rows.0, report.rows.1, report.pool
    );
    let decoded = report
        .operations
        .values()
        .flat_map(|systems| systems.values())
        .any(|s| s.rouge.is_some());
    let mut header = "| operation | system | R@1 | R@10 | MRR@10 |".to_string();
    let mut rule = "|---|---|---:|---:|---:|".to_string();
    if decoded {
        header.push_str(" ROUGE-1 | ROUGE-2 | ROUGE-L |");
        rule.push_str("---:|---:|---:|");
    }
    println!("{header}\n{rule}");
    for (op, systems) in &report.operations {
        for (system, s) in systems {
            let mut row = match s.ranks {
                Some(r) => format!(
                    "| {op} | {system} | {:.3} | {:.3} | {:.3} |",
                    r.r1, r.r10, r.mrr10
                ),
                None => format!("| {op} | {system} | – | – | – |"),
            };
            if decoded {
                row.push_str(&match s.rouge {
                    Some(r) => format!(" {:.3} | {:.3} | {:.3} |", r.rouge1, r.rouge2, r.rouge_l),
                    None => " – | – | – |".to_string(),
                });
            }
            println!("{row}");
        }
    }
    Ok(())
}
