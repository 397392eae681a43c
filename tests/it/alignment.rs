//! Phrase alignment against people: `kindred eval alignment` on the held-out part of the
//! SemEval-2016 iSTS training data beats the word-overlap baseline in every genre and both
//! chunkings, reaches the bar with gold chunks, and writes `.wa` files that read back
//! to the same official scores.

use std::process::Command;

use kindred::eval::ists;
use serde_json::Value;

use crate::common::shared_data;

/// `kindred eval alignment --json …` on the iSTS training folder.
fn eval_alignment(extra: &[&str]) -> Value {
    let data = shared_data("ists2016_train/STSint.input.headlines.wa");
    let dir = data.parent().expect("folder");
    let out = Command::new(env!("CARGO_BIN_EXE_kindred"))
        .args(["eval", "alignment", "--json", "--data"])
        .arg(dir)
        .args(extra)
        .env_remove("RUST_LOG")
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

fn f1(v: &Value, genre: &str, system: &str, which: &str) -> f64 {
    v["genres"]
        .as_array()
        .expect("genres")
        .iter()
        .find(|g| g["genre"] == genre)
        .and_then(|g| g[system][which].as_f64())
        .unwrap_or_else(|| panic!("no {system} {which} for {genre} in {v}"))
}

const GENRES: [&str; 3] = ["answers-students", "headlines", "images"];

#[test]
fn gold_chunk_alignment_agrees_with_people() {
    let v = eval_alignment(&["--gold-chunks"]);
    for genre in GENRES {
        let (ours, overlap) = (
            f1(&v, genre, "kindred", "ali"),
            f1(&v, genre, "word_overlap", "ali"),
        );
        // Measured 0.930-0.935 (EVALUATION.md); the bar is 0.92.
        assert!(ours >= 0.92, "{genre}: F1 Ali {ours}");
        assert!(
            ours > overlap + 0.03,
            "{genre}: {ours} vs word overlap {overlap}"
        );
        assert!(
            f1(&v, genre, "kindred", "type_score") > f1(&v, genre, "word_overlap", "type_score"),
            "{genre}"
        );
    }
}

#[test]
fn own_chunk_alignment_beats_word_overlap_and_writes_task_files() {
    let out = tempfile::tempdir().expect("tempdir");
    let dir = out.path().to_str().expect("utf-8 path");
    let v = eval_alignment(&["--out-wa", dir]);
    for genre in GENRES {
        let (ours, overlap) = (
            f1(&v, genre, "kindred", "ali"),
            f1(&v, genre, "word_overlap", "ali"),
        );
        // Measured 0.904-0.922 with the neural contextual chunker (EVALUATION.md; the issue's
        // bar is 0.90 on headlines and images): a little slack for other CPUs' states.
        assert!(ours >= 0.895, "{genre}: F1 Ali {ours}");
        assert!(
            ours > overlap + 0.05,
            "{genre}: {ours} vs word overlap {overlap}"
        );
        // The written file is the task's format and scores the same when read back.
        let written = std::fs::read_to_string(out.path().join(format!("{genre}.wa"))).expect("wa");
        let system = ists::parse_wa(&written).expect("parses");
        let data = shared_data("ists2016_train/STSint.input.headlines.wa");
        let gold: Vec<ists::WaPair> = ists::read_genre(data.parent().expect("folder"), genre)
            .expect("reads")
            .into_iter()
            .filter(|p| ists::held_out(p.id))
            .map(|p| ists::WaPair {
                id: p.id,
                tokens1: p.tokens1,
                tokens2: p.tokens2,
                alignments: p.gold.expect("gold"),
            })
            .collect();
        assert_eq!(system.len(), gold.len(), "{genre}");
        let again = ists::evaluate(&gold, &system);
        assert!(
            (again.ali - ours).abs() < 1e-9,
            "{genre}: {} vs {ours}",
            again.ali
        );
    }
}
