//! The scoring core on real sentences: the golden comparison with the Python reference
//! (tests/golden/scores.json, made by tests/golden/make_score_fixture.py) and the error of
//! the int8 token codec.

use serde::Deserialize;
use sha2::{Digest, Sha256};

use kindred::encoder::pooling::SIGMA_FLOOR;
use kindred::score::quant::I8Tokens;
use kindred::score::rerank::Reranker;
use kindred::score::{cosine, rcmd, w2, Tokens, Weights};

use crate::common::{exact_encoder as encoder, stsb_pairs};

#[derive(Deserialize)]
struct Fixture {
    data: String,
    sigma_floor: f32,
    pairs: Vec<Pair>,
}

#[derive(Deserialize)]
struct Pair {
    line: usize,
    sha256: String,
    cosine: f64,
    rcmd_forward: f64,
    rcmd_backward: f64,
    rcmd: f64,
    idf_weights_a: Vec<f32>,
    idf_weights_b: Vec<f32>,
    idf_rcmd_forward: f64,
    idf_rcmd_backward: f64,
    idf_rcmd: f64,
    w2: f64,
}

fn close(name: &str, got: f32, want: f64, line: usize) {
    let err = (f64::from(got) - want).abs();
    assert!(
        err < 1e-4,
        "{name} of pair at line {line}: kindred {got}, reference {want}"
    );
}

#[test]
fn scores_match_the_python_reference() {
    let fx: Fixture =
        serde_json::from_str(include_str!("../golden/scores.json")).expect("fixture parses");
    assert_eq!(
        fx.sigma_floor, SIGMA_FLOOR,
        "fixture made with kindred's σ floor"
    );
    let rows = stsb_pairs(&fx.data);
    let enc = encoder();
    for p in &fx.pairs {
        let (a, b, _) = &rows[p.line];
        let digest = Sha256::digest(format!("{a}\t{b}").as_bytes());
        let hex: String = digest.iter().map(|x| format!("{x:02x}")).collect();
        assert_eq!(hex, p.sha256, "line {} of {} changed", p.line, fx.data);
        let (ea, eb) = (
            enc.encode_one(a).expect("encodes"),
            enc.encode_one(b).expect("encodes"),
        );
        let (ta, tb) = (
            Tokens::new(&ea.token_vectors, ea.dim()),
            Tokens::new(&eb.token_vectors, eb.dim()),
        );

        close(
            "cosine",
            cosine(&ea.sentence, &eb.sentence),
            p.cosine,
            p.line,
        );
        let r = rcmd(ta, tb, Weights::Uniform);
        close("RCMD_1", r.forward, p.rcmd_forward, p.line);
        close("RCMD_2", r.backward, p.rcmd_backward, p.line);
        close("s_RCMD", r.score, p.rcmd, p.line);
        let idf = rcmd(ta, tb, Weights::Given(&p.idf_weights_a, &p.idf_weights_b));
        close("IDF RCMD_1", idf.forward, p.idf_rcmd_forward, p.line);
        close("IDF RCMD_2", idf.backward, p.idf_rcmd_backward, p.line);
        close("IDF s_RCMD", idf.score, p.idf_rcmd, p.line);
        close("W2", w2(&ea.intent, &eb.intent), p.w2, p.line);
    }
}

/// The error the store's int8 token codec costs on s_RCMD, over 300 real STS-B pairs.
/// `cargo test --release --test it int8 -- --nocapture` prints the figures in BENCHMARKS.md.
#[test]
fn int8_codec_error_on_real_pairs() {
    let rows = stsb_pairs("stsb/sts-test.csv");
    let texts: Vec<&str> = rows
        .iter()
        .step_by(4)
        .take(300)
        .flat_map(|(a, b, _)| [a.as_str(), b.as_str()])
        .collect();
    let encoded = encoder().encode(&texts).expect("encodes");
    let mut reranker = Reranker::new();
    let (mut max_err, mut sum_err, mut n) = (0f32, 0f64, 0usize);
    let (mut f32_bytes, mut i8_bytes) = (0usize, 0usize);
    for pair in encoded.chunks_exact(2) {
        let d = pair[0].dim();
        let (qa, cb) = (
            Tokens::new(&pair[0].token_vectors, d),
            Tokens::new(&pair[1].token_vectors, d),
        );
        let compressed = I8Tokens::encode(cb);
        f32_bytes += 4 * pair[1].token_vectors.len();
        i8_bytes += compressed.byte_len();
        let exact = reranker.score(qa, cb);
        let approx = reranker.score_i8(qa, &compressed);
        let err = (exact - approx).abs();
        max_err = max_err.max(err);
        sum_err += f64::from(err);
        n += 1;
    }
    let mean = sum_err / n as f64;
    eprintln!(
        "int8 codec over {n} STS-B pairs: s_RCMD abs error mean {mean:.2e}, max {max_err:.2e}; \
         {:.2}x smaller ({f32_bytes} -> {i8_bytes} bytes)",
        f32_bytes as f64 / i8_bytes as f64
    );
    assert!(max_err < 2e-3, "max error {max_err}");
    assert!(mean < 5e-4, "mean error {mean}");
}

/// How far the scores and explanations of search hits (query fresh, document from the store's
/// int8 token vectors) sit from `POST /v1/explain`'s (both fresh f32), on 1,000 real QQP pairs
/// with the default model: |Δ s_RCMD| on every (query, candidate), and how often two hits of
/// one query swap places. Each first question is a query; its candidates are the 10 second
/// questions of the set nearest by cosine. Prints the table in docs/api.md ("Which vectors"):
/// `cargo test --release --test it stored_int8_against_fresh_f32 -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement (seconds): prints the figures docs/api.md quotes"]
fn stored_int8_against_fresh_f32_on_qqp() {
    use kindred::index::LexicalIndex;
    use kindred::score::weights::token_weights;

    let mut pairs =
        kindred::eval::read_pairs(&crate::common::shared_data("qqp_deep1994_split/test.tsv"))
            .expect("reads QQP");
    pairs.truncate(1000);
    let texts: Vec<&str> = pairs
        .iter()
        .flat_map(|p| [p.a.as_str(), p.b.as_str()])
        .collect();
    let encoded = crate::common::encoder().encode(&texts).expect("encodes");
    let (queries, docs): (Vec<_>, Vec<_>) = encoded.chunks_exact(2).map(|p| (&p[0], &p[1])).unzip();
    let lexicon = LexicalIndex::new();
    for (i, t) in texts.iter().enumerate() {
        lexicon.upsert(i as u64, t);
    }
    let idf_weights: Vec<Vec<f32>> = lexicon.with_idf(|idf| {
        texts
            .iter()
            .zip(&encoded)
            .map(|(t, e)| token_weights(t, &e.tokens, idf))
            .collect()
    });
    let stored: Vec<I8Tokens> = docs
        .iter()
        .map(|d| I8Tokens::encode(Tokens::new(&d.token_vectors, d.dim())))
        .collect();
    let mut reranker = Reranker::new();
    println!("| weights | (query, candidate) scores | mean abs Δ s_RCMD | max abs Δ | hit pairs swapped | widest swapped gap (f32) | top hit changed |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for idf in [false, true] {
        let (mut sum, mut max, mut n) = (0f64, 0f32, 0usize);
        let (mut swapped, mut hit_pairs, mut top_changed) = (0usize, 0usize, 0usize);
        let mut widest_swap = 0f32;
        for (qi, q) in queries.iter().enumerate() {
            let mut nearest: Vec<(f32, usize)> = docs
                .iter()
                .enumerate()
                .map(|(j, d)| (cosine(&q.sentence, &d.sentence), j))
                .collect();
            nearest.sort_by(|a, b| b.0.total_cmp(&a.0));
            let tq = Tokens::new(&q.token_vectors, q.dim());
            let scores: Vec<(f32, f32)> = nearest[..10]
                .iter()
                .map(|&(_, j)| {
                    let d = docs[j];
                    let weights = if idf {
                        Weights::Given(&idf_weights[2 * qi], &idf_weights[2 * j + 1])
                    } else {
                        Weights::Uniform
                    };
                    let fresh = rcmd(tq, Tokens::new(&d.token_vectors, d.dim()), weights).score;
                    let (f, b) = reranker
                        .directions_i8_weighted(tq, &stored[j], weights)
                        .weighted;
                    (fresh, 0.5 * (f + b))
                })
                .collect();
            for &(fresh, int8) in &scores {
                let d = (fresh - int8).abs();
                sum += f64::from(d);
                max = max.max(d);
                n += 1;
            }
            for a in 0..scores.len() {
                for b in a + 1..scores.len() {
                    let (fa, ia) = scores[a];
                    let (fb, ib) = scores[b];
                    if fa != fb {
                        hit_pairs += 1;
                        if (fa > fb) != (ia > ib) {
                            swapped += 1;
                            widest_swap = widest_swap.max((fa - fb).abs());
                        }
                    }
                }
            }
            let top = |k: fn(&(f32, f32)) -> f32| {
                (0..scores.len())
                    .max_by(|&a, &b| k(&scores[a]).total_cmp(&k(&scores[b])))
                    .expect("ten candidates")
            };
            if top(|s| s.0) != top(|s| s.1) {
                top_changed += 1;
            }
        }
        println!(
            "| {} | {n} | {:.1e} | {max:.1e} | {swapped} of {hit_pairs} ({:.3}%) | {widest_swap:.1e} | {top_changed} of {} queries |",
            if idf { "idf" } else { "uniform" },
            sum / n as f64,
            100.0 * swapped as f64 / hit_pairs as f64,
            queries.len(),
        );
        assert!(max < 5e-3, "stored int8 stays close to fresh f32: {max}");
    }
}
