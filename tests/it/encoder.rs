//! Encoder behaviour: batch independence, invariants of the outputs, bad input.

use kindred::{Encoder, EncoderOptions, UserError};

use crate::common::{cosine, encoder, exact_encoder, model_dir};

const TEXTS: [&str; 7] = [
    "How do I learn Rust?",
    "What is the fastest way to learn a new programming language if I already know Python and C++?",
    "hi",
    "Why is the sky blue during the day but red at sunset?",
    "How can I increase my Quora answer views?",
    "Is it safe to eat raw cookie dough?",
    "What is the meaning of life, the universe and everything according to Douglas Adams?",
];

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn vectors_do_not_depend_on_batch_companions() {
    let enc = encoder();
    let alone: Vec<_> = TEXTS
        .iter()
        .map(|t| enc.encode_one(t).expect("encodes"))
        .collect();
    // All together (one batch of 7 padded to the longest) and in small shuffled batches.
    let together = enc.encode(&TEXTS).expect("encodes");
    let small = Encoder::load(
        model_dir(),
        EncoderOptions {
            batch_size: 3,
            ..EncoderOptions::default()
        },
    )
    .expect("loads");
    let mut shuffled: Vec<&str> = TEXTS.to_vec();
    shuffled.reverse();
    let in_threes = small.encode(&shuffled).expect("encodes");
    for (i, a) in alone.iter().enumerate() {
        let b = &together[i];
        let c = &in_threes[TEXTS.len() - 1 - i];
        for other in [b, c] {
            assert_eq!(a.tokens, other.tokens);
            let ds = max_abs_diff(&a.sentence, &other.sentence);
            let dt = max_abs_diff(&a.token_vectors, &other.token_vectors);
            let dm = max_abs_diff(&a.intent.mu, &other.intent.mu);
            assert!(
                ds < 1e-5 && dt < 1e-5 && dm < 1e-5,
                "{:?}: {ds} {dt} {dm}",
                TEXTS[i]
            );
        }
    }
}

#[test]
fn vectors_are_the_same_bits_on_one_thread_and_in_a_team() {
    // A batch of one, a few and a long text: on a one-thread pool every product runs inline;
    // on a pool of three, forwards up to 1024 wordpieces run as a team (its helpers take
    // products, heads and row blocks), longer ones as rayon jobs.
    let enc = encoder();
    let long = TEXTS.join(" ").repeat(4);
    let mut texts: Vec<&str> = TEXTS.to_vec();
    texts.push(&long);
    let pool = |n| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .expect("pool")
    };
    let run = |n| {
        pool(n).install(|| {
            let mut out = vec![enc.encode(&texts[..1]).expect("encodes")];
            out.push(enc.encode(&texts).expect("encodes"));
            out.push(enc.encode(&[long.as_str()]).expect("encodes"));
            // Five truncated long texts: 1280 wordpieces, past a team's size.
            out.push(enc.encode(&[long.as_str(); 5]).expect("encodes"));
            out
        })
    };
    let (one, team) = (run(1), run(3));
    for (a, b) in one.iter().flatten().zip(team.iter().flatten()) {
        assert_eq!(a.sentence, b.sentence);
        assert_eq!(a.token_vectors, b.token_vectors);
        assert_eq!(a.intent.mu, b.intent.mu);
    }
}

#[test]
fn outputs_are_normalised_and_shaped() {
    let e = encoder()
        .encode_one("How do I learn Rust?")
        .expect("encodes");
    let d = e.dim();
    assert_eq!(d, 384);
    let words: Vec<&str> = e.tokens.iter().map(|t| t.text.as_str()).collect();
    assert_eq!(words, ["how", "do", "i", "learn", "rust", "?"]);
    assert_eq!((e.tokens[4].start, e.tokens[4].end), (15, 19));
    assert_eq!(e.token_vectors.len(), e.tokens.len() * d);
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm(&e.sentence) - 1.0).abs() < 1e-5);
    for i in 0..e.tokens.len() {
        assert!((norm(e.token_vector(i)) - 1.0).abs() < 1e-5);
    }
    // μ is the mean of the content token vectors.
    for (j, &m) in e.intent.mu.iter().enumerate() {
        let mean = (0..e.tokens.len())
            .map(|i| e.token_vector(i)[j])
            .sum::<f32>()
            / e.tokens.len() as f32;
        assert!((m - mean).abs() < 1e-5);
    }
    assert!(e
        .intent
        .sigma
        .iter()
        .all(|&s| s >= kindred::encoder::pooling::SIGMA_FLOOR));
    assert!(!e.truncated);
}

#[test]
fn empty_and_whitespace_text_is_a_user_error_naming_the_text() {
    for (texts, index) in [(vec![""], 0), (vec!["fine", "  \t\n "], 1)] {
        let err = encoder().encode(&texts).expect_err("must fail");
        match &err {
            kindred::Error::User(UserError::EmptyText { index: i }) => assert_eq!(*i, index),
            other => panic!("unexpected error {other:?}"),
        }
        assert!(err.to_string().contains(&format!("text #{index}")));
    }
}

#[test]
fn text_that_normalises_to_nothing_is_a_user_error() {
    // Zero-width and control characters survive `trim()` but the BERT normaliser drops them.
    let err = encoder()
        .encode_one("\u{200b}\u{feff}\u{0}\u{7}")
        .expect_err("must fail");
    assert!(
        matches!(err, kindred::Error::User(UserError::NoContentTokens { .. })),
        "{err:?}"
    );
    assert!(err.to_string().contains("no content tokens"));
}

#[test]
fn literal_special_token_strings_are_content_as_in_sentence_transformers() {
    // Hugging Face's tokenizer maps a typed "[CLS]" to the special id but does not mask it as
    // special; sentence-transformers pools it like any token, and so does kindred.
    let e = encoder().encode_one("[CLS] [SEP]").expect("encodes");
    let words: Vec<&str> = e.tokens.iter().map(|t| t.text.as_str()).collect();
    assert_eq!(words, ["[CLS]", "[SEP]"]);
}

#[test]
fn punctuation_and_emoji_only_texts_encode() {
    for text in ["?!?", "🤷", "…"] {
        let e = encoder().encode_one(text).expect("encodes");
        assert!(!e.tokens.is_empty(), "{text}");
    }
}

#[test]
fn long_text_is_truncated_and_flagged() {
    let text = "how do i learn rust quickly? ".repeat(3500); // ~100 kB
    assert!(text.len() > 100_000);
    let e = encoder().encode_one(&text).expect("encodes");
    assert!(e.truncated);
    let max = encoder().identity().max_len;
    assert_eq!(
        e.tokens.len(),
        max - 2,
        "content tokens = max length minus [CLS]/[SEP]"
    );
    assert!(e.tokens.last().expect("tokens").end < text.chars().count());
}

#[test]
fn encoder_is_shareable_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Encoder>();
    let enc = encoder();
    let a = enc.encode_one("Is it going to rain?").expect("encodes");
    let handles: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(move || enc.encode_one("Is it going to rain?").expect("encodes"))
        })
        .collect();
    for h in handles {
        let b = h.join().expect("thread");
        assert!(max_abs_diff(&a.sentence, &b.sentence) < 1e-6);
    }
}

#[test]
fn the_gpu_paths_padded_batches_give_the_packed_paths_vectors() {
    // The burn forward that runs on a GPU pads a batch to a multiple of 16 wordpieces (fewer
    // shapes for burn-cuda to compile); run here on the CPU, its vectors must be the exact
    // packed path's, for short texts and one at the model's 256-wordpiece limit (which is not
    // padded past it).
    let enc = exact_encoder();
    let texts = [
        "Why is the sky blue?",
        "a",
        "How do I learn machine learning and deep learning from scratch, with which books?",
        &"What is the best way to learn the Rust programming language? ".repeat(30),
    ];
    let packed = enc.encode(&texts).expect("packed");
    let padded = enc.encode_padded(&texts).expect("padded burn forward");
    for (p, b) in packed.iter().zip(&padded) {
        assert_eq!(p.tokens, b.tokens);
        let c = cosine(&p.sentence, &b.sentence);
        assert!(c >= 0.99999, "sentence cosine {c}");
        assert!(max_abs_diff(&p.token_vectors, &b.token_vectors) < 1e-3);
    }
}
