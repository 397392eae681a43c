//! `kindred search`: one query against a collection through the whole pipeline, printed as a
//! table of every stage's score and P(duplicate) per hit, or as JSON with timings. `--mode`,
//! `--rerank` and `--weights` left out take the collection's search defaults (unless stale),
//! else the built-in ones; the settings in force and where each came from are printed too.
//! `--compound` also prints the two stored questions a compound question asks at once.

use anyhow::Result;
use clap::Args as ClapArgs;

use kindred::search::{Overrides, SearchParams, Settings};

use super::Global;

#[derive(Debug, ClapArgs)]
pub struct SearchArgs {
    /// Collection.
    #[arg(long, short)]
    pub collection: String,
    /// The question.
    pub text: String,
    /// cosine | w2 | lexical | hybrid [default: the collection's search defaults, else hybrid].
    #[arg(long)]
    pub mode: Option<String>,
    /// rcmd | probability (by P(duplicate)) | context (the question's cosine and the query's
    /// cosine to its answers or comments, standardised and summed; needs the context vectors
    /// `kindred tune` makes) | none [default: the collection's search defaults, else rcmd].
    #[arg(long)]
    pub rerank: Option<String>,
    /// uniform | idf: RCMD's token weights (idf: each wordpiece weighs its word's IDF in the
    /// collection) [default: the collection's search defaults, else uniform].
    #[arg(long)]
    pub weights: Option<String>,
    /// How many hits.
    #[arg(short, default_value_t = 10)]
    pub k: usize,
    /// Also check whether the question asks two stored questions at once (only a text with a
    /// join, such as " and " or "? ", is checked), and print the two it covers.
    #[arg(long)]
    pub compound: bool,
    /// Print the whole result (with timings) as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(g: &Global, args: &SearchArgs) -> Result<()> {
    let asked = Overrides {
        mode: args.mode.as_deref().map(str::parse).transpose()?,
        rerank: args.rerank.as_deref().map(str::parse).transpose()?,
        weights: args.weights.as_deref().map(str::parse).transpose()?,
        fusion: None,
    };
    let fallback = SearchParams {
        k: args.k,
        compound: args.compound,
        ..Default::default()
    };
    let name = &args.collection;
    let engine = g.engine_for(name)?;
    let out = engine
        .collection(name)?
        .search_with_defaults(&args.text, &asked, &fallback)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    let context = out.hits.iter().any(|h| h.stages.context.is_some());
    let column = if context { "\tcontext" } else { "" };
    println!("score\tP(dup)\tcosine\tw2\tlexical\trcmd{column}\tid\ttext");
    for h in &out.hits {
        let s = &h.stages;
        let context = match (context, s.context) {
            (false, _) => String::new(),
            (true, Some(c)) => format!("\t{c:.4}"),
            (true, None) => "\t–".into(),
        };
        println!(
            "{:.4}\t{:.3}\t{:.4}\t{:.4}\t{:.4}\t{:.4}{context}\t{}\t{}",
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
    if let Some(c) = &out.compound {
        println!(
            "compound, P(duplicate) {:.3} as one question: it asks both of these",
            c.probability
        );
        for part in &c.covers {
            println!(
                "  {}\t{}\t(P {:.3}; its phrases: {})",
                part.id,
                part.text,
                part.probability,
                part.phrases.join(", ")
            );
        }
    }
    let t = out.timings;
    eprintln!(
        "{} candidates; encode {:.1} ms, candidates {:.1} ms, rerank {:.1} ms",
        out.candidates, t.encode_ms, t.candidates_ms, t.rerank_ms
    );
    if let Some(s) = &out.settings {
        eprintln!("{}", settings_line(s));
    }
    Ok(())
}

/// `settings: mode cosine (collection), rerank none (collection), weights uniform (option),
/// fusion cosine 1 · w2 1 · lexical 1 · k0 60 (default)`, and a note on stale defaults.
fn settings_line(s: &Settings) -> String {
    let from = |source: kindred::search::Source| match source {
        kindred::search::Source::Request => "option",
        kindred::search::Source::Collection => "collection",
        kindred::search::Source::Default => "default",
    };
    let mut line = format!(
        "settings: mode {} ({}), rerank {} ({}), weights {} ({}), fusion {} ({})",
        s.mode,
        from(s.source.mode),
        s.rerank,
        from(s.source.rerank),
        s.weights,
        from(s.source.weights),
        s.fusion,
        from(s.source.fusion)
    );
    if s.stale_defaults {
        line.push_str("; the collection's search defaults were chosen for another model and are not applied (see `kindred stats`)");
    }
    line
}
