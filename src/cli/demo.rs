//! `kindred demo`: the main job until the server lands. Encodes the bundled demo FAQ
//! (demo/faq.txt, compiled in) and answers questions by brute-force cosine over sentence vectors.

use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};

use kindred::Encoder;

const FAQ: &str = include_str!("../../demo/faq.txt");
const SAMPLES: [&str; 4] = [
    "I can't remember my password",
    "what cards can I pay with?",
    "is it possible to get my money back?",
    "the parcel came broken",
];

pub fn run(encoder: &Encoder, queries: &[String], k: usize) -> Result<()> {
    let faq: Vec<&str> = FAQ.lines().filter(|l| !l.trim().is_empty()).collect();
    let bar = ProgressBar::new(faq.len() as u64).with_style(ProgressStyle::with_template(
        "encoding demo FAQ {bar:30} {pos}/{len} {per_sec} eta {eta}",
    )?);
    let stored = encoder.encode_with_progress(&faq, |n| bar.inc(n as u64))?;
    bar.finish_and_clear();
    println!(
        "{} demo questions encoded with {}",
        faq.len(),
        encoder.identity().id
    );

    let queries: Vec<&str> = if queries.is_empty() {
        SAMPLES.to_vec()
    } else {
        queries.iter().map(String::as_str).collect()
    };
    for (q, e) in queries.iter().zip(encoder.encode(&queries)?) {
        let mut scored: Vec<(f32, &str)> = stored
            .iter()
            .zip(&faq)
            .map(|(s, text)| (dot(&e.sentence, &s.sentence), *text))
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        println!("\n{q}");
        for (score, text) in scored.iter().take(k) {
            println!("  {score:.3}  {text}");
        }
    }
    Ok(())
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}
