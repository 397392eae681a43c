//! The packed CPU path against the burn forward, layer by layer, on the real model; int8
//! against fp32 on real questions; kernel paths against each other; collections keeping
//! their precision.

use kindred::db::{Database, NewDocument};
use kindred::encoder::KernelPath;
use kindred::store::{CollectionSettings, Durability};
use kindred::{Encoder, Precision};

use crate::common::{cosine, exact_encoder as encoder, qqp_questions};

/// The shared int8 encoder (the default).
fn int8() -> &'static Encoder {
    let enc = crate::common::encoder();
    assert_eq!(
        enc.identity().precision,
        Precision::Int8,
        "int8 is the default"
    );
    enc
}

const TEXTS: [&str; 4] = [
    "How do I reset my password?",
    "What is the best way to learn Rust if I already know C++ and a little Haskell?",
    "café naïve résumé — 東京 🙂",
    // 40 wordpieces: attention's three blocks of 16 keys go as a pair and one left over.
    "I moved to a new city last month and my bank account still lists the old address; \
     the app refuses the change without a utility bill in my name. How can I update my address?",
];

fn paths() -> Vec<KernelPath> {
    KernelPath::available_paths()
}

/// Per token row: the smallest cosine and the largest absolute difference, over all rows.
fn row_agreement(a: &[f32], b: &[f32], d: usize) -> (f32, f32) {
    assert_eq!(a.len(), b.len(), "same shape");
    let mut min_cos = 1f32;
    let mut max_diff = 0f32;
    for (x, y) in a.chunks_exact(d).zip(b.chunks_exact(d)) {
        min_cos = min_cos.min(cosine(x, y));
        for (p, q) in x.iter().zip(y) {
            max_diff = max_diff.max((p - q).abs());
        }
    }
    (min_cos, max_diff)
}

#[test]
fn fp32_packed_path_matches_the_burn_forward_at_every_layer_on_every_kernel_path() {
    let enc = encoder();
    let d = enc.identity().dim;
    for text in TEXTS {
        let burn = enc.layer_outputs(text, true, None).expect("burn layers");
        assert_eq!(burn.len(), 7, "embeddings + 6 layers");
        for path in paths() {
            let packed = enc
                .layer_outputs(text, false, Some(path))
                .expect("packed layers");
            assert_eq!(packed.len(), burn.len());
            for (i, (b, p)) in burn.iter().zip(&packed).enumerate() {
                let (min_cos, max_diff) = row_agreement(b, p, d);
                assert!(
                    min_cos > 0.99999 && max_diff < 2e-3,
                    "{path:?} layer {i} of {text:?}: min cosine {min_cos}, max |diff| {max_diff}"
                );
            }
        }
    }
}

#[test]
fn int8_packed_path_tracks_the_burn_forward_at_every_layer_and_paths_agree() {
    let enc = int8();
    let d = enc.identity().dim;
    for text in TEXTS {
        let burn = enc.layer_outputs(text, true, None).expect("burn layers");
        let per_path: Vec<Vec<Vec<f32>>> = paths()
            .into_iter()
            .map(|p| {
                enc.layer_outputs(text, false, Some(p))
                    .expect("packed layers")
            })
            .collect();
        for (i, (b, p)) in burn.iter().zip(&per_path[0]).enumerate() {
            let (min_cos, _) = row_agreement(b, p, d);
            assert!(
                min_cos > 0.97,
                "layer {i} of {text:?}: min token cosine {min_cos}"
            );
        }
        // Integer accumulation: the kernel paths differ only in the float epilogues.
        for other in &per_path[1..] {
            for (i, (a, b)) in per_path[0].iter().zip(other).enumerate() {
                let (min_cos, _) = row_agreement(a, b, d);
                assert!(
                    min_cos > 0.9999,
                    "layer {i} of {text:?}: paths disagree ({min_cos})"
                );
            }
        }
    }
}

#[test]
fn int8_sentence_vectors_stay_within_the_quality_bar_on_2000_qqp_questions() {
    let questions: Vec<String> = qqp_questions("qqp_bimpm/test.tsv")
        .into_iter()
        .take(2000)
        .collect();
    assert_eq!(questions.len(), 2000);
    let exact = encoder().encode(&questions).expect("fp32");
    let quant = int8().encode(&questions).expect("int8");
    let cosines: Vec<f32> = exact
        .iter()
        .zip(&quant)
        .map(|(a, b)| cosine(&a.sentence, &b.sentence))
        .collect();
    let mean = cosines.iter().sum::<f32>() / cosines.len() as f32;
    let min = cosines.iter().cloned().fold(1f32, f32::min);
    eprintln!("int8 vs fp32 sentence cosine over 2000 QQP questions: mean {mean:.5}, min {min:.5}");
    assert!(mean >= 0.995, "mean cosine {mean} < 0.995");
    assert!(min >= 0.98, "min cosine {min} < 0.98");
    // Token vectors (what RCMD aligns) too.
    let mut tok_min = 1f32;
    for (a, b) in exact.iter().zip(&quant).take(200) {
        assert_eq!(a.tokens, b.tokens);
        for i in 0..a.tokens.len() {
            tok_min = tok_min.min(cosine(a.token_vector(i), b.token_vector(i)));
        }
    }
    assert!(tok_min >= 0.95, "min token-vector cosine {tok_min}");
}

#[test]
fn int8_identity_differs_and_a_collection_refuses_the_other_precision() {
    let (exact, quant) = (encoder(), int8());
    assert_eq!(quant.identity().precision, Precision::Int8);
    assert_ne!(exact.identity().fingerprint, quant.identity().fingerprint);
    assert!(quant.identity().fingerprint.ends_with("+int8"));
    assert_eq!(
        quant.identity().clone().with_precision(Precision::Fp32),
        *exact.identity()
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let db = Database::open(dir.path(), Durability::Flush).expect("db");
    db.create_collection(
        "q",
        &CollectionSettings::for_model(quant.identity().clone()),
    )
    .expect("create");
    let doc = NewDocument {
        id: "a".into(),
        text: "How do I reset my password?".into(),
        metadata: serde_json::Value::Null,
        context: Vec::new(),
    };
    crate::common::upsert(&db, "q", quant, vec![doc.clone()]).expect("int8 vectors go in");
    let err = crate::common::upsert(&db, "q", exact, vec![doc])
        .expect_err("fp32 vectors must be refused")
        .to_string();
    assert!(err.contains("+int8"), "{err}");
    assert!(err.contains("reindex"), "{err}");
    // Reopened, the collection still says int8.
    drop(db);
    let db = Database::open(dir.path(), Durability::Flush).expect("reopen");
    assert_eq!(
        db.settings("q").expect("settings").model.precision,
        Precision::Int8
    );
}
