//! `kindred eval operators`: the compositional operations' table (R@1, R@10, MRR@10 per
//! operation and system) from WikiSplit and compression files, in a pool with real questions.

use std::path::PathBuf;

use anyhow::{bail, Result};
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
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(encoder: &Encoder, args: &OperatorsArgs) -> Result<()> {
    if args.wikisplit.is_none() && args.compression.is_none() {
        bail!("give --wikisplit FILE, --compression FILE or both");
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
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!(
        "{} WikiSplit rows, {} compression pairs, a pool of {} distinct sentences\n",
        report.rows.0, report.rows.1, report.pool
    );
    println!("| operation | system | R@1 | R@10 | MRR@10 |\n|---|---|---:|---:|---:|");
    for (op, systems) in &report.operations {
        for (system, s) in systems {
            println!(
                "| {op} | {system} | {:.3} | {:.3} | {:.3} |",
                s.r1, s.r10, s.mrr10
            );
        }
    }
    Ok(())
}
