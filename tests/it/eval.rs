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
