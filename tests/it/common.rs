//! Shared fixtures: one model directory and one encoder per test binary.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use kindred::db::{Database, NewDocument};
use kindred::engine::Engine;
use kindred::model::{self, ModelDir};
use kindred::search::{SearchOutcome, SearchParams};
use kindred::store::{StoredDoc, Upserted};
use kindred::{Encoder, EncoderOptions};

/// The model directory under test (fetched once if needed).
pub fn model_dir() -> &'static ModelDir {
    static DIR: OnceLock<ModelDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let explicit = std::env::var_os("KINDRED_MODEL").map(PathBuf::from);
        let home = std::env::var_os("KINDRED_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(model::default_home);
        model::resolve(explicit.as_deref(), &home, true).expect("the test model resolves")
    })
}

/// A shared encoder with default options (int8, as new collections are).
pub fn encoder() -> &'static Arc<Encoder> {
    static ENC: OnceLock<Arc<Encoder>> = OnceLock::new();
    ENC.get_or_init(|| {
        Arc::new(Encoder::load(model_dir(), EncoderOptions::default()).expect("model loads"))
    })
}

/// A shared fp32 encoder: the model exactly, as the Python references compute it.
pub fn exact_encoder() -> &'static Arc<Encoder> {
    static ENC: OnceLock<Arc<Encoder>> = OnceLock::new();
    ENC.get_or_init(|| {
        let options = EncoderOptions {
            precision: kindred::Precision::Fp32,
            ..EncoderOptions::default()
        };
        Arc::new(Encoder::load(model_dir(), options).expect("model loads"))
    })
}

/// Cosine of two vectors.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (na * nb).max(1e-12)
}

/// A file under ../shared/data (research data is read from there, never copied here).
/// Missing data fails the test loudly, in CI and locally alike.
pub fn shared_data(rel: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/data")
        .join(rel);
    assert!(
        path.is_file(),
        "missing {} (CI={:?}): kindred's data-driven tests read ../shared/data beside the checkout",
        path.display(),
        std::env::var("CI").ok()
    );
    path
}

/// (sentence1, sentence2, score) rows of an STS-B file (tab-separated, fields 5 and 6).
pub fn stsb_pairs(rel: &str) -> Vec<(String, String, f32)> {
    let raw = std::fs::read_to_string(shared_data(rel)).expect("readable STS-B file");
    raw.lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (
                f[5].to_string(),
                f[6].to_string(),
                f[4].parse().expect("score"),
            )
        })
        .collect()
}

/// Distinct questions of a QQP pair file (label, q1, q2, id), first occurrence order.
pub fn qqp_questions(rel: &str) -> Vec<String> {
    let raw = std::fs::read(shared_data(rel)).expect("readable QQP file");
    let raw = String::from_utf8_lossy(&raw);
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for line in raw.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() < 3 {
            continue;
        }
        for q in [f[1].trim(), f[2].trim()] {
            if !q.is_empty() && seen.insert(q.to_string()) {
                out.push(q.to_string());
            }
        }
    }
    out
}

/// The distinct questions of qqp_bimpm dev + test (36,737), in file order.
pub fn qqp_bimpm_dev_test_questions() -> Vec<String> {
    let mut questions = qqp_questions("qqp_bimpm/dev.tsv");
    let mut seen: std::collections::HashSet<String> = questions.iter().cloned().collect();
    questions.extend(
        qqp_questions("qqp_bimpm/test.tsv")
            .into_iter()
            .filter(|q| seen.insert(q.clone())),
    );
    questions
}

/// A second model for reindex tests: the test model plus a transition head that reverses
/// the sentence vector's dimensions (an orthogonal map: cosines between texts are kept, the
/// vectors and the fingerprint are not). Written once per test binary into a kept temp dir.
pub fn other_model() -> &'static ModelDir {
    static DIR: OnceLock<ModelDir> = OnceLock::new();
    DIR.get_or_init(|| {
        use kindred::model::heads::{Dense, Heads, Transition};
        use kindred::train::{write_model_dir, TrainedBy};
        let d = encoder().identity().dim;
        let mut weight = vec![0.0; d * d];
        for i in 0..d {
            weight[i * d + (d - 1 - i)] = 1.0;
        }
        let heads = Heads {
            transition: Some(Transition {
                weight: Dense {
                    inputs: d,
                    outputs: d,
                    weight,
                    bias: vec![0.0; d],
                },
            }),
            ..Heads::default()
        };
        let dir = tempfile::tempdir().expect("tempdir").keep();
        let by = TrainedBy::Head {
            head: "transition",
            dev: None,
            options: serde_json::Value::Null,
        };
        write_model_dir(model_dir(), &dir, None, Some(&heads), &by).expect("model written");
        ModelDir::open(&dir).expect("other model opens")
    })
}

/// Encodes `docs` with `encoder` and upserts them (all or none).
pub fn upsert(
    db: &Database,
    name: &str,
    encoder: &Encoder,
    docs: Vec<NewDocument>,
) -> kindred::Result<Vec<Upserted>> {
    db.check_model(name, encoder.identity())?;
    docs.iter().try_for_each(kindred::db::validate)?;
    let texts: Vec<&str> = docs.iter().map(|d| d.text.as_str()).collect();
    let encoded = encoder.encode(&texts)?;
    db.upsert_encoded(
        name,
        encoder.identity(),
        docs.into_iter().zip(encoded).collect(),
    )
}

/// A search through the engine, with `encoder` as the process's model.
pub fn search(
    db: &Arc<Database>,
    encoder: &Arc<Encoder>,
    name: &str,
    text: &str,
    params: &SearchParams,
) -> kindred::Result<SearchOutcome> {
    Engine::with_encoder(db.clone(), encoder.clone())
        .collection(name)?
        .search(text, params)
}

/// The k nearest documents by cosine: (document, cosine), best first.
pub fn cosine_hits(db: &Database, name: &str, v: &[f32], k: usize) -> Vec<(StoredDoc, f32)> {
    let view = db.view(name).expect("collection");
    let hits = view.cosine(v, k, None).expect("search");
    resolve(&view, hits)
}

/// The k nearest documents by W2 of intents: (document, W2), nearest first.
pub fn w2_hits(
    db: &Database,
    name: &str,
    g: &kindred::Gaussian,
    k: usize,
) -> Vec<(StoredDoc, f32)> {
    let view = db.view(name).expect("collection");
    let hits = view.w2(g, k, None).expect("search");
    resolve(&view, hits)
}

/// The k best documents by BM25: (document, score), best first.
pub fn lexical_hits(db: &Database, name: &str, text: &str, k: usize) -> Vec<(StoredDoc, f32)> {
    let view = db.view(name).expect("collection");
    let hits = view.lexical(text, k, None).expect("search");
    resolve(&view, hits)
}

fn resolve(view: &kindred::db::View<'_>, hits: Vec<(u64, f32)>) -> Vec<(StoredDoc, f32)> {
    hits.into_iter()
        .filter_map(|(i, s)| view.get_internal(i).expect("reads").map(|d| (d, s)))
        .collect()
}

/// Opens the sled database at `path` directly (a test looking under the store). sled's
/// background IO may keep the file lock a moment after the last handle drops (seen under
/// loaded CI runs): retries for 5 s.
pub fn open_sled(path: &std::path::Path) -> sled::Db {
    (0..50)
        .find_map(|_| {
            sled::open(path)
                .inspect_err(|_| std::thread::sleep(std::time::Duration::from_millis(100)))
                .ok()
        })
        .expect("sled opens once the last handle is dropped")
}

/// splitmix64, for the tests' own seeded choices: any seed is fine.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next() % (hi - lo + 1) as u64) as usize
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        self.range(0, n.max(1) - 1)
    }

    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.range(0, i));
        }
    }
}
