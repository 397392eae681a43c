//! Golden test: kindred's encoder against sentence-transformers (tests/golden/encoder.json,
//! written by tests/golden/make_encoder_fixture.py from the same model directory).

use base64::Engine as _;
use serde::Deserialize;

use crate::common::{cosine, exact_encoder as encoder};

#[derive(Deserialize)]
struct Fixture {
    dim: usize,
    max_seq_length: usize,
    texts: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    text: String,
    truncated: bool,
    tokens: Vec<kindred::Token>,
    sentence: Vec<f32>,
    token_vectors_f16: String,
}

fn fixture() -> Fixture {
    let raw = include_str!("../golden/encoder.json");
    serde_json::from_str(raw).expect("fixture parses")
}

fn decode_f16(b64: &str) -> Vec<f32> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .expect("base64");
    bytes
        .chunks_exact(2)
        .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
        .collect()
}

#[test]
fn encoder_matches_sentence_transformers() {
    let fx = fixture();
    let enc = encoder();
    assert_eq!(enc.identity().dim, fx.dim);
    assert_eq!(enc.identity().max_len, fx.max_seq_length);
    let texts: Vec<&str> = fx.texts.iter().map(|t| t.text.as_str()).collect();
    let got = enc.encode(&texts).expect("fixture texts encode");

    let mut worst_sentence = 1.0f32;
    let mut worst_token = 1.0f32;
    for (item, e) in fx.texts.iter().zip(&got) {
        assert_eq!(
            e.tokens, item.tokens,
            "wordpieces/offsets of {:?}",
            item.text
        );
        assert_eq!(
            e.truncated, item.truncated,
            "truncated flag of {:?}",
            item.text
        );
        let s = cosine(&e.sentence, &item.sentence);
        assert!(s >= 0.9999, "sentence cosine {s} for {:?}", item.text);
        worst_sentence = worst_sentence.min(s);

        let reference = decode_f16(&item.token_vectors_f16);
        assert_eq!(
            reference.len(),
            e.token_vectors.len(),
            "token count of {:?}",
            item.text
        );
        for (i, (a, b)) in e
            .token_vectors
            .chunks_exact(fx.dim)
            .zip(reference.chunks_exact(fx.dim))
            .enumerate()
        {
            let c = cosine(a, b);
            assert!(c >= 0.999, "token {i} cosine {c} for {:?}", item.text);
            worst_token = worst_token.min(c);
        }
    }
    eprintln!("golden: worst sentence cosine {worst_sentence}, worst token cosine {worst_token}");
}
