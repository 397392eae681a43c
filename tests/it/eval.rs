//! Evaluation against the Python reference measured on ../shared/data with all-MiniLM-L6-v2
//! (issue 6): untrained numbers must agree within ±0.005 AUC and ±0.3 Spearman.

use kindred::eval::retrieval::{eval_retrieval, RetrievalOptions};
use kindred::eval::{eval_pairs, eval_sts, read_pairs, read_scored_pairs, score_pairs};
use kindred::search::{Mode, Rerank};

use crate::common::{exact_encoder as encoder, shared_data};

fn near(name: &str, got: f64, want: f64, tol: f64) {
    assert!(
        (got - want).abs() <= tol,
        "{name}: {got:.4} vs reference {want} (±{tol})"
    );
}

#[test]
fn sts_spearman_matches_the_reference() {
    for (file, want) in [
        (
            "stsb/sts-test.csv",
            [("cosine", 82.03), ("w2 (negated)", 81.42), ("rcmd", 82.27)].as_slice(),
        ),
        (
            "sick/SICK_test_annotated.txt",
            [("cosine", 77.15), ("rcmd", 76.18)].as_slice(),
        ),
    ] {
        let pairs = read_scored_pairs(&shared_data(file)).expect("reads");
        let rows = eval_sts(encoder(), &pairs, |_| {}).expect("evaluates");
        for (score, reference) in want {
            let got = rows
                .iter()
                .find(|r| r.score == *score)
                .expect("row")
                .spearman_x100;
            near(&format!("{file} {score}"), got, *reference, 0.3);
        }
    }
}

#[test]
fn qqp_pair_auc_matches_the_reference() {
    let test = read_pairs(&shared_data("qqp_bimpm/test.tsv")).expect("reads");
    let features = score_pairs(encoder(), &test, None, |_| {}).expect("scores");
    let set: Vec<_> = features
        .into_iter()
        .zip(test.iter().map(|p| p.duplicate))
        .collect();
    // eval_pairs fits the probability on its first argument; here only the AUCs of single
    // scores on test matter, so test doubles as dev.
    let rows = eval_pairs(&set, &set, "m").expect("evaluates");
    let auc = |name: &str| rows.iter().find(|r| r.score == name).expect("row").test_auc;
    near("cosine AUC", auc("cosine"), 0.863, 0.005);
    near("RCMD AUC", auc("rcmd"), 0.837, 0.005);
    near("W2 AUC", auc("w2 (negated)"), 0.858, 0.005);
    assert!(
        auc("P(duplicate)") > auc("cosine"),
        "the fitted probability beats cosine"
    );
}

#[test]
fn retrieval_eval_reports_every_stage_with_and_without_rerank() {
    let mut pairs = read_pairs(&shared_data("qqp_bimpm/dev.tsv")).expect("reads");
    pairs.truncate(400);
    let opts = RetrievalOptions {
        max_queries: Some(40),
        rerank_depth: 50,
        depths: Default::default(),
        threads: 2,
        weights: Default::default(),
    };
    let report = eval_retrieval(encoder(), &pairs, &opts, &|_, _, _| {}).expect("evaluates");
    assert_eq!(report.queries, 40);
    assert_eq!(report.rows.len(), 8);
    for r in &report.rows {
        let q = r.quality;
        for v in [q.recall_at_1, q.recall_at_10, q.mrr_at_10, q.ndcg_at_10] {
            assert!((0.0..=1.0).contains(&v), "{r:?}");
        }
        assert!(q.recall_at_1 <= q.recall_at_10 && q.mrr_at_10 >= q.recall_at_1 - 1e-12);
    }
    let hybrid = report
        .rows
        .iter()
        .find(|r| r.mode == Mode::Hybrid && r.rerank == Rerank::Rcmd)
        .expect("row");
    assert!(hybrid.quality.recall_at_10 > 0.6, "{hybrid:?}");
}

/// Runs `python3 scripts/NAME ARGS…`, returning (success, stdout + stderr).
fn script(name: &str, args: &[&std::path::Path]) -> (bool, String) {
    let out = std::process::Command::new("python3")
        .arg(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("scripts")
                .join(name),
        )
        .args(args)
        .output()
        .expect("python3 runs (scripts/test.sh checks it is installed)");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// Per-pair scores in `kindred eval pairs --scores` TSV form: (label, cosine) per test pair.
fn scores_tsv(path: &std::path::Path, rows: &[(u8, f32)]) {
    let mut s = kindred::eval::scores::TSV_HEADER.to_string() + "\n";
    for (i, (label, cosine)) in rows.iter().enumerate() {
        s += &format!("test\t{i}\t{label}\t{cosine}\t1\t0.5\t0.5\t0.5\t0.1\t\t0.5\tq{i}a\tq{i}b\n");
    }
    std::fs::write(path, s).expect("writes");
}

#[test]
fn paired_scripts_give_the_hand_computed_difference_and_its_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Two duplicates and two others. Before: 0.9 and 0.4 against 0.5 and 0.1, AUC 3/4; after:
    // 0.6 replaces 0.4, AUC 1. DeLong's placements before: positives [1, ½], negatives [½, 1]
    // (each variance ⅛), after: all 1 (variance 0); Var(Δ) = ⅛/2 + ⅛/2 = ¼·½, SE 0.3536,
    // z = 0.25 / 0.3536, two-sided p = erfc(½) = 0.480.
    let (before, after) = (dir.path().join("before.tsv"), dir.path().join("after.tsv"));
    scores_tsv(&before, &[(1, 0.9), (1, 0.4), (0, 0.5), (0, 0.1)]);
    scores_tsv(&after, &[(1, 0.9), (1, 0.6), (0, 0.5), (0, 0.1)]);
    let (ok, out) = script("pairs-paired.py", &[&before, &after]);
    assert!(ok, "{out}");
    assert!(
        out.contains(
            "| cosine | 0.7500 | 1.0000 | +0.2500 | 0.3536 | [-0.4430, +0.9430] | 0.480 |"
        ),
        "{out}"
    );
    // Files of different pairs are refused by name, not compared.
    let other = dir.path().join("other.tsv");
    scores_tsv(&other, &[(1, 0.9), (0, 0.4), (0, 0.5), (1, 0.1)]);
    let (ok, out) = script("pairs-paired.py", &[&before, &other]);
    assert!(
        !ok && out.contains("pair 1 differs between the files"),
        "{out}"
    );

    // forum-paired.py: per-question APs 50/50/50 → 60/45/70: mean difference 8.33, SE
    // sqrt(((5/3)² + (40/3)² + (35/3)²) / 2 / 3) = 7.26; 2 better, 1 worse.
    let report = |path: &std::path::Path, ap: [f64; 3]| {
        let map = ap.iter().sum::<f64>() / 3.0;
        let v =
            serde_json::json!({"report": {"rows": [{"ranking": "cosine", "map": map, "ap": ap}]}});
        std::fs::write(path, v.to_string()).expect("writes");
    };
    let (fa, fb) = (dir.path().join("a.json"), dir.path().join("b.json"));
    report(&fa, [50.0, 50.0, 50.0]);
    report(&fb, [60.0, 45.0, 70.0]);
    let (ok, out) = script("forum-paired.py", &[&fa, &fb]);
    assert!(ok, "{out}");
    assert!(
        out.contains("| cosine | 50.00 | 58.33 | +8.33 | 7.26 |"),
        "{out}"
    );
    assert!(out.contains("| 2 / 1 |"), "{out}");
}

/// `kindred eval operators` through the binary on a slice of the held-out files (WikiSplit
/// validation, the compression pairs): the JSON shape, and the baselines behave as a
/// hard pool makes them: an input's own vector finds the input (identity near 0), the
/// normalised sum finds most complex sentences.
#[test]
fn eval_operators_reports_every_baseline_in_a_hard_pool() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kindred"))
        .env("KINDRED_MODEL", &crate::common::model_dir().path)
        .env_remove("RUST_LOG")
        .args([
            "eval",
            "operators",
            "--json",
            "--limit",
            "80",
            "--wikisplit",
        ])
        .arg(shared_data("wikisplit/validation.tsv"))
        .arg("--compression")
        .arg(shared_data("google_compression/pairs.csv"))
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let r1 = |op: &str, system: &str| {
        v[op][system]["r1"]
            .as_f64()
            .unwrap_or_else(|| panic!("no {op} {system} in {v}"))
    };
    for op in ["fusion", "difference"] {
        assert!(r1(op, "arithmetic") > 0.6, "{v}");
        assert!(r1(op, "identity") < 0.2, "{v}");
    }
    assert!(r1("fusion", "concatenation") > 0.5, "{v}");
    assert!(r1("compression", "identity") < 0.1, "{v}");
    assert!(v["compression"].get("arithmetic").is_none(), "{v}");
    for op in ["fusion", "difference", "compression"] {
        for (_, s) in v[op].as_object().expect("systems") {
            let (a, b, m) = (
                s["r1"].as_f64().unwrap(),
                s["r10"].as_f64().unwrap(),
                s["mrr10"].as_f64().unwrap(),
            );
            assert!(a <= m + 1e-9 && m <= b + 1e-9 && b <= 1.0, "{s}");
        }
    }
    assert_eq!(v["rows"], serde_json::json!([80, 80]));
}
