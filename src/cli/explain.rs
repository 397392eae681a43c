//! `kindred explain A B`: RCMD of two texts with the word alignments and a terminal heatmap of
//! word-pair contributions (or the whole Explanation as JSON).

use std::fmt::Write as _;
use std::io::IsTerminal;

use anyhow::Result;
use clap::Args as ClapArgs;

use kindred::score::explain::{explain_chunked, Direction, Explanation, Sentence};
use kindred::score::{cosine, w2, Weights};

use super::Global;

/// 256-colour background ramp, light to dark.
const RAMP: [u8; 9] = [255, 195, 159, 123, 87, 45, 33, 27, 19];

#[derive(Debug, ClapArgs)]
pub struct ExplainArgs {
    /// First text (a).
    pub a: String,
    /// Second text (b).
    pub b: String,
    /// Print the whole Explanation as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(g: &Global, args: &ExplainArgs) -> Result<()> {
    let (a, b) = (args.a.as_str(), args.b.as_str());
    let encoder = g.encoder()?;
    let enc = encoder.encode(&[a, b])?;
    let e = explain_chunked(
        Sentence::of(a, &enc[0]),
        Sentence::of(b, &enc[1]),
        Weights::Uniform,
        &encoder,
    );
    if args.json {
        println!("{}", serde_json::to_string_pretty(&e)?);
        return Ok(());
    }
    let color = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    println!("a: {a}\nb: {b}\n");
    println!(
        "s_RCMD   {:.4}   (RCMD a→b {:.4}, b→a {:.4})",
        e.score, e.forward, e.backward
    );
    println!("cosine   {:.4}", cosine(&enc[0].sentence, &enc[1].sentence));
    println!("W2       {:.4}", w2(&enc[0].intent, &enc[1].intent));
    println!("\nphrase alignment:");
    for l in &e.chunk_alignments {
        println!(
            "  [{}] <-> [{}]  {} {:.1}/5  p {:.2}  contribution {:.4}",
            e.a.chunks[l.a].text,
            e.b.chunks[l.b].text,
            l.relation.name(),
            l.score,
            l.probability,
            l.contribution
        );
    }
    for (side, chunks) in [("a", &e.a.chunks), ("b", &e.b.chunks)] {
        for c in chunks.iter().filter(|c| !c.aligned) {
            println!("  unaligned in {side}: [{}]", c.text);
        }
    }
    println!("\nword alignments (by contribution):");
    for l in &e.word_alignments {
        let arrow = match l.direction {
            Direction::Both => "<->",
            Direction::AToB => " ->",
            Direction::BToA => "<- ",
        };
        println!(
            "  {:>16} {arrow} {:<16} cos {:.3}  contribution {:.4}",
            e.a.words[l.a].text, e.b.words[l.b].text, l.cosine, l.contribution
        );
    }
    print!("{}", heatmap(&e, color));
    let total: f32 = e.word_contributions.values.iter().sum();
    println!(
        "\nΣ contributions = {total:.4} = s_RCMD {:.4}  (½·(a→b) + ½·(b→a) = {:.4} + {:.4})",
        e.score,
        0.5 * e.forward,
        0.5 * e.backward
    );
    Ok(())
}

/// Rows: words of a; columns: words of b (numbered, named above); cells: contribution × 100.
fn heatmap(e: &Explanation, color: bool) -> String {
    let m = &e.word_contributions;
    let max = m.values.iter().fold(0f32, |x, &v| x.max(v)).max(1e-9);
    let width =
        e.a.words
            .iter()
            .map(|w| w.text.chars().count())
            .max()
            .unwrap_or(0)
            .min(20);
    let mut out = String::from("\nword-pair contributions × 100 (rows: a, columns: b)\n");
    for (j, w) in e.b.words.iter().enumerate() {
        let _ = writeln!(out, "  {:>w$}  {j:>3}: {}", "", w.text, w = width);
    }
    let _ = write!(out, "  {:>width$} ", "");
    for j in 0..m.cols {
        let _ = write!(out, "{j:>5}");
    }
    out.push('\n');
    for (i, w) in e.a.words.iter().enumerate() {
        let name: String = w.text.chars().take(width).collect();
        let _ = write!(out, "  {name:>width$} ");
        for j in 0..m.cols {
            let v = m.get(i, j);
            let cell = if v > 0.0 {
                format!("{:>5.1}", v * 100.0)
            } else {
                "    .".into()
            };
            if color {
                let level = ((v / max) * (RAMP.len() - 1) as f32).round() as usize;
                let (shade, fg) = (RAMP[level], if level < 5 { 16 } else { 231 });
                let _ = write!(out, "\x1b[48;5;{shade}m\x1b[38;5;{fg}m{cell}\x1b[0m");
            } else {
                out.push_str(&cell);
            }
        }
        out.push('\n');
    }
    if color {
        let _ = write!(out, "  legend: 0 ");
        for shade in RAMP {
            let _ = write!(out, "\x1b[48;5;{shade}m  \x1b[0m");
        }
        let _ = writeln!(out, " {:.1}", max * 100.0);
    }
    out
}
