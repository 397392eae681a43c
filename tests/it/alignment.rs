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
    eval_alignment_in(data.parent().expect("folder"), extra)
}

/// `kindred eval alignment --json --data DIR …`.
fn eval_alignment_in(dir: &std::path::Path, extra: &[&str]) -> Value {
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

/// The first `n` pairs of the headlines genre of the training folder, written under `prefix`
/// (`STSint.input` for the training layout, `STSint.testinput` for the test layout).
fn headlines_head(dir: &std::path::Path, prefix: &str, n: usize) {
    let from = shared_data("ists2016_train/STSint.input.headlines.wa");
    let from = from.parent().expect("folder");
    for side in ["sent1", "sent2"] {
        let text = std::fs::read_to_string(from.join(format!("STSint.input.headlines.{side}.txt")))
            .expect("sentences");
        let head: Vec<&str> = text.lines().take(n).collect();
        std::fs::write(
            dir.join(format!("{prefix}.headlines.{side}.txt")),
            head.join("\n") + "\n",
        )
        .expect("write");
    }
    let wa = std::fs::read_to_string(from.join("STSint.input.headlines.wa")).expect("gold");
    let blocks: Vec<&str> = wa.split_inclusive("</sentence>").take(n).collect();
    std::fs::write(
        dir.join(format!("{prefix}.headlines.wa")),
        blocks.concat() + "\n",
    )
    .expect("write");
}

/// `kindred eval alignment` scores every pair of the task's test files by default (before: only
/// the ids divisible by 5 unless `--part all` was given, so a user of the test files silently
/// got a fifth of them); on the training files the default stays the held-out fifth.
#[test]
fn eval_alignment_scores_every_pair_of_test_files_by_default() {
    let pairs_scored = |prefix: &str, extra: &[&str]| -> u64 {
        let dir = tempfile::tempdir().expect("tempdir");
        headlines_head(dir.path(), prefix, 40);
        let v = eval_alignment_in(dir.path(), extra);
        v["genres"][0]["pairs"].as_u64().expect("pairs")
    };
    assert_eq!(pairs_scored("STSint.testinput", &[]), 40);
    assert_eq!(pairs_scored("STSint.input", &[]), 8);
    assert_eq!(pairs_scored("STSint.input", &["--part", "all"]), 40);
    assert_eq!(pairs_scored("STSint.testinput", &["--part", "held-out"]), 8);
}
