//! `kindred search`: one query against a collection through the whole pipeline, printed as a
//! table of every stage's score and P(duplicate) per hit, or as JSON with timings.

use anyhow::Result;
use clap::Args as ClapArgs;

use kindred::search::SearchParams;

use super::Global;

#[derive(Debug, ClapArgs)]
pub struct SearchArgs {
    /// Collection.
    #[arg(long, short)]
    pub collection: String,
    /// The question.
    pub text: String,
    /// cosine | w2 | lexical | hybrid.
    #[arg(long, default_value = "hybrid")]
    pub mode: String,
    /// rcmd | none.
    #[arg(long, default_value = "rcmd")]
    pub rerank: String,
    /// uniform | idf: RCMD's token weights (idf: each wordpiece weighs its word's IDF in the
    /// collection).
    #[arg(long, default_value = "uniform")]
    pub weights: String,
    /// How many hits.
    #[arg(short, default_value_t = 10)]
    pub k: usize,
    /// Print the whole result (with timings) as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(g: &Global, args: &SearchArgs) -> Result<()> {
    let params = SearchParams {
        k: args.k,
        mode: args.mode.parse()?,
        rerank: args.rerank.parse()?,
        weights: args.weights.parse()?,
        ..Default::default()
    };
    let name = &args.collection;
    let engine = g.engine_for(name)?;
    let out = engine.collection(name)?.search(&args.text, &params)?;
    if args.json {
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
