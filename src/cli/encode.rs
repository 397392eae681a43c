//! `kindred encode`: texts (inline or from a file) through the encoder; prints each text's
//! wordpieces, sentence vector and intent, the whole encoding as JSON, or only the throughput.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args as ClapArgs;
use serde_json::json;

use kindred::{Encoded, Encoder};

use super::Global;

#[derive(Debug, ClapArgs)]
pub struct EncodeArgs {
    /// The texts.
    #[arg(required_unless_present = "file")]
    pub texts: Vec<String>,
    /// Read texts from FILE, one per line (blank lines skipped), after any given inline.
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Print only timing as JSON ({"texts", "seconds", "texts_per_sec", "rounds_texts_per_sec"}),
    /// with a progress bar.
    #[arg(long, conflicts_with = "json")]
    pub stats: bool,
    /// Print JSON instead of a summary.
    #[arg(long)]
    pub json: bool,
    /// Include the content token vectors in the JSON.
    #[arg(long)]
    pub token_vectors: bool,
    /// With --stats: encode the texts N times in this one process and report the fastest
    /// round (`texts_per_sec`) beside every round's rate, so one-time costs (a GPU's kernel
    /// compilation, first-touch page faults) show apart from the steady rate.
    #[arg(long, value_name = "N", default_value_t = 1, requires = "stats",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: u32,
}

pub fn run(g: &Global, args: &EncodeArgs) -> Result<()> {
    let mut texts = args.texts.clone();
    if let Some(file) = &args.file {
        let raw = std::fs::read_to_string(file)
            .with_context(|| format!("reading texts from {}", file.display()))?;
        texts.extend(
            raw.lines()
                .filter(|l| !l.trim().is_empty())
                .map(String::from),
        );
        // Without --file, clap requires an inline text; with it, the file may hold none.
        if texts.is_empty() {
            anyhow::bail!(
                "nothing to encode: {} has no non-blank line; give texts inline or a file with \
                 one per line",
                file.display()
            );
        }
    }
    let encoder = g.encoder()?;
    if args.stats {
        return encode_stats(&encoder, &texts, args.repeat);
    }
    let encoded = encoder.encode(&texts)?;
    if args.json {
        let items: Vec<_> = texts
            .iter()
            .zip(&encoded)
            .map(|(t, e)| encoded_json(t, e, args.token_vectors))
            .collect();
        let out = json!({ "model": encoder.identity(), "texts": items });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        for (t, e) in texts.iter().zip(&encoded) {
            print_encoded(t, e);
        }
    }
    Ok(())
}

fn encode_stats(encoder: &Encoder, texts: &[String], repeat: u32) -> Result<()> {
    let mut rounds = Vec::new();
    for _ in 0..repeat {
        let bar = super::progress::bar(texts.len() as u64, "encoding");
        let start = Instant::now();
        // Like sentence-transformers' encode: all texts in, sorted by length, cut into batches.
        encoder.encode_with_progress(texts, |n| bar.inc(n as u64))?;
        rounds.push(start.elapsed().as_secs_f64());
        bar.finish_and_clear();
    }
    let seconds = rounds.iter().copied().fold(f64::INFINITY, f64::min);
    let rate = |s: f64| texts.len() as f64 / s;
    let out = json!({
        "texts": texts.len(),
        "batch_size": encoder.options().batch_size,
        "seconds": seconds,
        "texts_per_sec": rate(seconds),
        "rounds_texts_per_sec": rounds.iter().map(|&s| rate(s)).collect::<Vec<_>>(),
    });
    println!("{out}");
    Ok(())
}

fn encoded_json(text: &str, e: &Encoded, with_token_vectors: bool) -> serde_json::Value {
    let mut v = json!({
        "text": text,
        "tokens": e.tokens,
        "truncated": e.truncated,
        "sentence": e.sentence,
        "intent": e.intent,
    });
    if with_token_vectors {
        let rows: Vec<&[f32]> = (0..e.tokens.len()).map(|i| e.token_vector(i)).collect();
        v["token_vectors"] = json!(rows);
    }
    v
}

fn print_encoded(text: &str, e: &Encoded) {
    println!("{text:?}");
    let pieces: Vec<String> = e
        .tokens
        .iter()
        .map(|t| format!("{}[{}..{}]", t.text, t.start, t.end))
        .collect();
    println!(
        "  tokens ({}{}): {}",
        e.tokens.len(),
        if e.truncated { ", truncated" } else { "" },
        pieces.join(" ")
    );
    let head: Vec<String> = e
        .sentence
        .iter()
        .take(6)
        .map(|x| format!("{x:+.4}"))
        .collect();
    println!("  sentence (d={}): [{} …]", e.dim(), head.join(", "));
    let mean_sigma = e.intent.sigma.iter().sum::<f32>() / e.intent.sigma.len() as f32;
    println!(
        "  intent: ‖μ‖={:.4}, mean σ={mean_sigma:.4}",
        norm(&e.intent.mu)
    );
}

fn norm(v: &[f32]) -> f32 {
    v.iter().map(|x| x * x).sum::<f32>().sqrt()
}
