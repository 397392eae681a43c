//! `kindred eval compound`: compound-question detection (both parts found, single questions
//! not flagged) on duplicate pairs, through the real duplicate check.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use clap::Args as ClapArgs;

use kindred::eval::compound::{eval_compound, CompoundOptions, Share};
use kindred::eval::read_pairs;
use kindred::Encoder;

#[derive(Debug, ClapArgs)]
pub struct CompoundArgs {
    /// Labelled pair files (label<TAB>q1<TAB>q2), e.g. ../shared/data/qqp_bimpm/test.tsv: the
    /// duplicate pairs' second questions are stored, their first questions asked.
    #[arg(long, required = true, num_args = 1.., value_name = "FILE")]
    pub pairs: Vec<PathBuf>,
    /// Duplicate pairs used (the first ones).
    #[arg(long, default_value_t = 1500)]
    pub limit: usize,
    /// Compound queries made (two unrelated pairs' first questions joined).
    #[arg(long, default_value_t = 300)]
    pub compounds: usize,
    /// Single questions asked.
    #[arg(long, default_value_t = 1000)]
    pub singles: usize,
    /// Seed of which pairs join.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(encoder: Encoder, args: &CompoundArgs) -> Result<()> {
    let mut pairs = Vec::new();
    for p in &args.pairs {
        pairs.extend(read_pairs(p)?);
    }
    let opts = CompoundOptions {
        pairs: args.limit,
        compounds: args.compounds,
        singles: args.singles,
        seed: args.seed,
    };
    let bar = super::progress::bar(0, "");
    let report = eval_compound(Arc::new(encoder), &pairs, &opts, &|what, done, total| {
        bar.set_prefix(what.to_string());
        bar.set_length(total);
        bar.set_position(done);
    })?;
    bar.finish_and_clear();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    let row = |name: &str, s: &Share| {
        println!("| {name} | {:.3} | {:.3}–{:.3} |", s.rate, s.low, s.high);
    };
    println!(
        "{} stored questions; {} compounds, {} single questions\n",
        report.documents, report.compounds, report.singles
    );
    println!("| measure | rate | 95% interval |\n|---|---:|---|");
    row("compound covers both parts", &report.covered);
    row("compound flagged", &report.flagged);
    row("both parts are the top 2 matches", &report.top2);
    row("both parts are among the top 10 matches", &report.top10);
    row(
        "single question flagged compound (false)",
        &report.false_flags,
    );
    row(
        "single question's duplicate ranked first",
        &report.singles_top1,
    );
    Ok(())
}
