//! `kindred demo`: the bundled FAQ loaded into collection `faq`, a few questions answered
//! with the full pipeline, then the server on it (through `serve.rs`).

use anyhow::Result;
use clap::Args as ClapArgs;

use kindred::db::NewDocument;
use kindred::engine::Engine;
use kindred::search::SearchParams;
use kindred::server::config::ServeConfig;
use kindred::store::CollectionSettings;

use super::serve::{self, ServeArgs};
use super::Global;

#[derive(Debug, ClapArgs)]
pub struct DemoArgs {
    /// Questions to look up (default: a few samples).
    pub queries: Vec<String>,
    /// How many matches to show per question.
    #[arg(short, default_value_t = 3)]
    pub k: usize,
    /// Answer the questions and exit instead of serving.
    #[arg(long)]
    pub no_serve: bool,
    #[command(flatten)]
    pub serve: ServeArgs,
}

pub fn run(g: &Global, args: &DemoArgs) -> Result<()> {
    demo(
        serve::config(g, &args.serve)?,
        &args.queries,
        args.k,
        args.no_serve,
    )
}

const FAQ: &str = include_str!("../../demo/faq.txt");
const DEMO_COLLECTION: &str = "faq";
const SAMPLES: [&str; 3] = [
    "I can't remember my password",
    "is it possible to get my money back?",
    "the parcel came broken",
];

/// `kindred demo`: makes sure the demo collection holds the bundled FAQ, answers a few
/// questions (yours or samples) with the full pipeline, then serves (unless `no_serve`).
fn demo(c: ServeConfig, queries: &[String], k: usize, no_serve: bool) -> Result<()> {
    let (encoder, db) = serve::open(&c)?;
    let have = db.collections()?.iter().any(|(n, _)| n == DEMO_COLLECTION);
    if !have {
        db.create_collection(
            DEMO_COLLECTION,
            &CollectionSettings::for_model(encoder.identity().clone()),
        )?;
    }
    // An existing demo collection keeps its own model and precision (e.g. fp32, from before
    // int8 was the default): answer with its encoder, as the server does.
    let engine = Engine::with_encoder(db.clone(), encoder.clone());
    let collection = engine.collection(DEMO_COLLECTION)?;
    if db.count(DEMO_COLLECTION)? == 0 {
        let docs: Vec<NewDocument> = FAQ
            .lines()
            .filter(|l| !l.trim().is_empty())
            .enumerate()
            .map(|(i, text)| NewDocument {
                id: format!("faq-{}", i + 1),
                text: text.into(),
                metadata: serde_json::json!({ "source": "demo" }),
                context: Vec::new(),
            })
            .collect();
        eprintln!(
            "loading {} demo questions into collection {DEMO_COLLECTION}",
            docs.len()
        );
        collection.upsert(docs)?;
    }
    let queries: Vec<&str> = if queries.is_empty() {
        SAMPLES.to_vec()
    } else {
        queries.iter().map(String::as_str).collect()
    };
    let params = SearchParams {
        k,
        ..SearchParams::default()
    };
    for q in queries {
        let out = collection.search(q, &params)?;
        println!("\n{q}");
        for h in out.hits {
            println!(
                "  rcmd {:.3}  cosine {:.3}  P(dup) {:.2}  {}",
                h.stages.rcmd.score, h.stages.cosine.score, h.probability, h.text
            );
        }
    }
    if no_serve {
        return Ok(());
    }
    println!(
        "\nserving collection {DEMO_COLLECTION}: open the admin UI at http://{0}/ui/ or try\n  curl -s http://{0}/v1/collections/{DEMO_COLLECTION}/search -H 'content-type: application/json' -d '{{\"text\": \"forgot my password\"}}'",
        c.listen
    );
    drop(collection);
    serve::serve(c, engine)
}
