//! `kindred eval pairs | retrieval | sts | alignment`: print a markdown table, write JSON. Also the labelled
//! pair loading and scoring behind a progress bar that `calibrate` shares.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args as ClapArgs, Subcommand};
use serde_json::json;

use kindred::eval::retrieval::{eval_retrieval, RetrievalOptions};
use kindred::eval::scores::{is_jsonl, pair_scores, write_scores};
use kindred::eval::{self, read_pairs, read_scored_pairs, score_pairs_weighted, LabelledPair};
use kindred::index::LexicalIndex;
use kindred::score::calibration::Calibrator;
use kindred::search::{Depths, PairFeatures, Weighting};
use kindred::Encoder;

use super::Global;

/// `kindred eval …`
#[derive(Debug, Subcommand)]
pub enum EvalCommand {
    /// AUC and accuracy (threshold chosen on dev) of cosine, W2, RCMD (both directions and
    /// symmetric), lexical and the calibrated probability (fitted on dev).
    Pairs(PairsArgs),
    /// Recall@1/10, MRR@10, nDCG@10 and latency of each first stage, with and without RCMD
    /// rerank, over a temporary collection of every distinct question in the files.
    Retrieval(RetrievalArgs),
    /// Spearman ×100 of cosine, W2 and RCMD against gold similarity (STS-B or SICK files).
    Sts(StsArgs),
    /// Phrase alignment against SemEval-2016 iSTS gold: official F1 Ali, Type, Score and
    /// Type+Score per genre, with the word-overlap baseline.
    Alignment(super::eval_alignment::AlignmentArgs),
    /// Forum question ranking: SemEval-2016 Task 3 subtask B (Qatar Living), MAP of every
    /// first stage, RCMD rerank and P(duplicate) through the real search pipeline.
    Forum(ForumArgs),
    /// Compositional operations on sentence vectors (fusion, difference, compression): R@1,
    /// R@10 and MRR@10 of each target in a hard pool (every sentence of the files plus real
    /// questions), for the model's learned operators (`kindred`, when it carries them) and
    /// the baselines (identity, arithmetic, concatenation).
    Operators(super::eval_operators::OperatorsArgs),
    /// Compound questions: two unrelated duplicate pairs' first questions joined into one
    /// query should answer `compound` covering both stored questions; single questions should
    /// not. Rates with 95% intervals.
    Compound(super::eval_compound::CompoundArgs),
}

#[derive(Debug, ClapArgs)]
pub struct PairsArgs {
    /// Dev pair files (label<TAB>q1<TAB>q2[<TAB>id]).
    #[arg(long, required = true, num_args = 1..)]
    pub dev: Vec<PathBuf>,
    /// Test pair files.
    #[arg(long, required = true, num_args = 1..)]
    pub test: Vec<PathBuf>,
    /// RCMD's token weights: uniform, or idf (each wordpiece weighs its word's IDF over the
    /// distinct questions of the set it is in).
    #[arg(long, value_name = "uniform|idf", default_value = "uniform", value_parser = super::global::parse_weighting)]
    pub weights: Weighting,
    /// Also write every pair's scores (dev and test: cosine, w2, rcmd both directions and
    /// total, lexical, siamese, P(duplicate), label, texts) to FILE: JSON Lines for a .jsonl
    /// or .ndjson name, else TSV with a header.
    #[arg(long, value_name = "FILE")]
    pub scores: Option<PathBuf>,
    /// Where the JSON report goes.
    #[arg(long, value_name = "FILE", default_value = "kindred-eval-pairs.json")]
    pub out: PathBuf,
}

#[derive(Debug, ClapArgs)]
pub struct RetrievalArgs {
    /// Pair files; duplicate pairs give the queries (first question) and relevant
    /// documents (second).
    #[arg(long, required = true, num_args = 1..)]
    pub pairs: Vec<PathBuf>,
    /// Evaluate only the first N queries.
    #[arg(long)]
    pub max_queries: Option<usize>,
    /// Fused candidates reranked.
    #[arg(long, default_value_t = 100)]
    pub rerank_depth: usize,
    /// Candidates from the cosine HNSW.
    #[arg(long, default_value_t = Depths::default().cosine)]
    pub cosine_depth: usize,
    /// Candidates from the W2 HNSW.
    #[arg(long, default_value_t = Depths::default().w2)]
    pub w2_depth: usize,
    /// Candidates from the lexical index.
    #[arg(long, default_value_t = Depths::default().lexical)]
    pub lexical_depth: usize,
    /// RCMD's token weights in the rerank: uniform, or idf (from the temporary collection).
    #[arg(long, value_name = "uniform|idf", default_value = "uniform", value_parser = super::global::parse_weighting)]
    pub weights: Weighting,
    /// Where the JSON report goes.
    #[arg(
        long,
        value_name = "FILE",
        default_value = "kindred-eval-retrieval.json"
    )]
    pub out: PathBuf,
}

#[derive(Debug, ClapArgs)]
pub struct ForumArgs {
    /// SemEval-2016 Task 3 CQA-QL XML files (e.g.
    /// ../shared/data/semeval2016_task3/SemEval2016-Task3-CQA-QL-dev.xml); their original
    /// questions are ranked together. (Positional: `--data` is the database directory.)
    #[arg(required = true, num_args = 1.., value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Where the JSON report goes.
    #[arg(long, value_name = "FILE", default_value = "kindred-eval-forum.json")]
    pub out: PathBuf,
    /// Also rank with this collection's search defaults (as `kindred tune` stored them; the
    /// collection must be on the model evaluated).
    #[arg(long, value_name = "COLLECTION")]
    pub defaults_from: Option<String>,
    /// Only write the related questions as JSON Lines documents for `kindred ingest` (id,
    /// text, metadata {"orgq": …}, context = the comment thread) to FILE, and stop.
    #[arg(long, value_name = "FILE")]
    pub write_jsonl: Option<PathBuf>,
}

#[derive(Debug, ClapArgs)]
pub struct StsArgs {
    /// STS-B (sts-test.csv) or SICK (SICK_test_annotated.txt) files.
    #[arg(long, required = true, num_args = 1..)]
    pub data: Vec<PathBuf>,
    /// RCMD's token weights: uniform, or idf (over each file's distinct sentences).
    #[arg(long, value_name = "uniform|idf", default_value = "uniform", value_parser = super::global::parse_weighting)]
    pub weights: Weighting,
    /// Where the JSON report goes.
    #[arg(long, value_name = "FILE", default_value = "kindred-eval-sts.json")]
    pub out: PathBuf,
}

pub fn run(g: &Global, command: &EvalCommand) -> Result<()> {
    let encoder = g.encoder()?;
    match command {
        EvalCommand::Pairs(a) => pairs(&encoder, a),
        EvalCommand::Retrieval(a) => retrieval(&encoder, a),
        EvalCommand::Sts(a) => sts(&encoder, a),
        EvalCommand::Alignment(a) => super::eval_alignment::run(&encoder, a),
        EvalCommand::Forum(a) => forum(g, &encoder, a),
        EvalCommand::Operators(a) => super::eval_operators::run(&encoder, a),
        EvalCommand::Compound(a) => super::eval_compound::run(encoder, a),
    }
}

/// Every labelled pair of the files, in order.
pub(super) fn load(paths: &[PathBuf]) -> Result<Vec<LabelledPair>> {
    let mut all = Vec::new();
    for p in paths {
        all.extend(read_pairs(p)?);
    }
    Ok(all)
}

/// Scores labelled pairs (IDF from `lexicon`, else from the pairs' own questions) behind a
/// progress bar.
pub(super) fn scored(
    encoder: &Encoder,
    pairs: &[LabelledPair],
    lexicon: Option<&LexicalIndex>,
    what: &str,
) -> Result<Vec<(PairFeatures, bool)>> {
    scored_weighted(encoder, pairs, lexicon, Weighting::Uniform, what)
}

/// [`scored`] with RCMD's token weights `weights`.
fn scored_weighted(
    encoder: &Encoder,
    pairs: &[LabelledPair],
    lexicon: Option<&LexicalIndex>,
    weights: Weighting,
    what: &str,
) -> Result<Vec<(PairFeatures, bool)>> {
    let distinct: std::collections::HashSet<&str> = pairs
        .iter()
        .flat_map(|p| [p.a.as_str(), p.b.as_str()])
        .collect();
    let b = super::progress::bar(distinct.len() as u64, what);
    let f = score_pairs_weighted(encoder, pairs, lexicon, weights, |n| b.inc(n as u64))?;
    b.finish_and_clear();
    Ok(f.into_iter()
        .zip(pairs.iter().map(|p| p.duplicate))
        .collect())
}

fn write_json(out: &Path, value: &serde_json::Value) -> Result<()> {
    std::fs::write(out, serde_json::to_string_pretty(value)? + "\n")
        .with_context(|| format!("writing {}", out.display()))?;
    eprintln!("wrote {}", out.display());
    Ok(())
}

fn pairs(encoder: &Encoder, args: &PairsArgs) -> Result<()> {
    let (dev, test, out) = (&args.dev, &args.test, &args.out);
    let (dev_pairs, test_pairs) = (load(dev)?, load(test)?);
    let dev_set = scored_weighted(encoder, &dev_pairs, None, args.weights, "encoding dev")?;
    let test_set = scored_weighted(encoder, &test_pairs, None, args.weights, "encoding test")?;
    let cal = Calibrator::fit(&dev_set, &encoder.identity().fingerprint, "dev")?;
    if let Some(path) = &args.scores {
        let features =
            |set: &[(PairFeatures, bool)]| set.iter().map(|(f, _)| *f).collect::<Vec<_>>();
        let mut rows = pair_scores("dev", &dev_pairs, &features(&dev_set), &cal);
        rows.extend(pair_scores("test", &test_pairs, &features(&test_set), &cal));
        let file =
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        write_scores(std::io::BufWriter::new(file), &rows, is_jsonl(path))
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {} ({} pairs)", path.display(), rows.len());
    }
    let rows = eval::eval_pairs_with(&dev_set, &test_set, cal);
    println!("| score | dev AUC | test AUC | threshold (dev) | test accuracy |");
    println!("|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {:.4} | {:.4} | {:.4} | {:.4} |",
            r.score, r.dev_auc, r.test_auc, r.threshold, r.test_accuracy
        );
    }
    let names = |p: &[PathBuf]| {
        p.iter()
            .map(|x| x.display().to_string())
            .collect::<Vec<_>>()
    };
    write_json(
        out,
        &json!({
            "model": encoder.identity(),
            "dev": names(dev), "test": names(test),
            "weights": args.weights.name(),
            "dev_pairs": dev_set.len(), "test_pairs": test_set.len(),
            "rows": rows,
        }),
    )
}

fn forum(g: &Global, encoder: &Encoder, args: &ForumArgs) -> Result<()> {
    let mut questions = Vec::new();
    for path in &args.files {
        questions.extend(eval::forum::read_forum(path)?);
    }
    if let Some(path) = &args.write_jsonl {
        let docs = eval::forum::related_documents(&questions);
        let mut out = String::new();
        for d in &docs {
            out.push_str(&serde_json::to_string(d)?);
            out.push('\n');
        }
        std::fs::write(path, out).with_context(|| format!("writing {}", path.display()))?;
        eprintln!(
            "wrote {} ({} related questions)",
            path.display(),
            docs.len()
        );
        return Ok(());
    }
    let b = super::progress::bar(0, "");
    let progress = |what: &str, done: u64, total: u64| {
        b.set_message(what.to_string());
        b.set_length(total);
        b.set_position(done);
    };
    let mut extra = Vec::new();
    if let Some(c) = &args.defaults_from {
        let db = g.database()?;
        let settings = db.settings(c)?;
        let Some(d) = db.search_defaults(c)? else {
            anyhow::bail!("collection {c:?} has no search defaults; run `kindred tune --collection {c}` first");
        };
        if d.is_stale(&settings.model.fingerprint)
            || settings.model.fingerprint != encoder.identity().fingerprint
        {
            anyhow::bail!(
                "the search defaults of {c:?} were chosen for model {}, not the one evaluated ({}); \
                 pass the collection's model with --model",
                d.model_fingerprint,
                encoder.identity().fingerprint
            );
        }
        let (params, _) = kindred::search::resolve(
            &kindred::search::Overrides::default(),
            Some(&d),
            &settings.model.fingerprint,
            &kindred::search::SearchParams::default(),
        );
        extra.push((format!("{c}'s search defaults"), params));
    }
    let report = eval::forum::eval_forum(encoder, &questions, &extra, &progress)?;
    b.finish_and_clear();
    println!(
        "{} original questions, {} related questions",
        report.questions, report.related
    );
    println!("| ranking | MAP | MRR | incomplete |");
    println!("|---|---|---|---|");
    for r in &report.rows {
        println!(
            "| {} | {:.2} | {:.2} | {} |",
            r.ranking, r.map, r.mrr, r.incomplete
        );
    }
    let names: Vec<String> = args.files.iter().map(|p| p.display().to_string()).collect();
    write_json(
        &args.out,
        &json!({ "model": encoder.identity(), "data": names, "report": report }),
    )
}

fn sts(encoder: &Encoder, args: &StsArgs) -> Result<()> {
    let (data, out) = (&args.data, &args.out);
    let mut report = Vec::new();
    println!("| file | pairs | cosine | W2 | RCMD |");
    println!("|---|---|---|---|---|");
    for path in data {
        let pairs = read_scored_pairs(path)?;
        let b = super::progress::bar(2 * pairs.len() as u64, "encoding");
        let rows = eval::eval_sts_weighted(encoder, &pairs, args.weights, |n| b.inc(n as u64))?;
        b.finish_and_clear();
        println!(
            "| {} | {} | {:.2} | {:.2} | {:.2} |",
            path.display(),
            pairs.len(),
            rows[0].spearman_x100,
            rows[1].spearman_x100,
            rows[2].spearman_x100
        );
        report.push(json!({ "file": path.display().to_string(), "pairs": pairs.len(), "spearman_x100": rows }));
    }
    write_json(
        out,
        &json!({ "model": encoder.identity(), "weights": args.weights.name(), "files": report }),
    )
}

fn retrieval(encoder: &Encoder, args: &RetrievalArgs) -> Result<()> {
    let (files, out) = (&args.pairs, &args.out);
    let depths = Depths {
        cosine: args.cosine_depth,
        w2: args.w2_depth,
        lexical: args.lexical_depth,
    };
    let pairs = load(files)?;
    let b = super::progress::bar(0, "");
    let progress = |what: &str, done: u64, total: u64| {
        b.set_message(what.to_string());
        b.set_length(total);
        b.set_position(done);
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let opts = RetrievalOptions {
        max_queries: args.max_queries,
        rerank_depth: args.rerank_depth,
        depths,
        threads,
        weights: args.weights,
    };
    let report = eval_retrieval(encoder, &pairs, &opts, &progress)?;
    b.finish_and_clear();
    println!(
        "{} documents, {} queries (indexed in {:.0} s; query encoding p50 {:.1} ms)\n",
        report.documents, report.queries, report.index_seconds, report.encode_p50_ms
    );
    println!(
        "| first stage | rerank | Recall@1 | Recall@10 | MRR@10 | nDCG@10 | p50 ms | p99 ms |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for r in &report.rows {
        let q = r.quality;
        println!(
            "| {} | {} | {:.4} | {:.4} | {:.4} | {:.4} | {:.2} | {:.2} |",
            serde_json::to_value(r.mode)?.as_str().unwrap_or(""),
            serde_json::to_value(r.rerank)?.as_str().unwrap_or(""),
            q.recall_at_1,
            q.recall_at_10,
            q.mrr_at_10,
            q.ndcg_at_10,
            r.p50_ms,
            r.p99_ms
        );
    }
    let names: Vec<String> = files.iter().map(|x| x.display().to_string()).collect();
    write_json(
        out,
        &json!({ "model": encoder.identity(), "weights": args.weights.name(), "files": names, "report": report }),
    )
}
