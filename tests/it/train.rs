//! Training: the RCMD and CoSENT losses' gradients against finite differences through a tiny
//! burn model; CLRCMD on real QQP pairs lowering the loss and raising dev AUC; `low_memory`
//! training the same model; a saved model reloading to identical vectors; a killed run
//! resuming from its checkpoint; the heads trainers writing model directories whose heads
//! change what the encoder returns.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use burn::module::Param;
use burn::nn::{Embedding, EmbeddingConfig, Linear, LinearConfig};
use burn::tensor::{Device, Int, Tensor, TensorData};

use kindred::eval::{read_pairs, LabelledPair};
use kindred::model::heads::{Heads, HEADS_FILE};
use kindred::model::ModelDir;
use kindred::train::clrcmd::{
    cosent_surrogate, rcmd_surrogate, train_clrcmd, ClrcmdOptions, ClrcmdRun, Event,
};
use kindred::train::loss::InfoNce;
use kindred::train::{pair_auc, write_model_dir, TrainedBy};
use kindred::{DeviceKind, Encoder, EncoderOptions};

use crate::common::{encoder, model_dir, shared_data};

struct Tiny {
    emb: Embedding,
    lin: Linear,
}

const LENS: [usize; 6] = [3, 4, 2, 4, 3, 1];

/// Hidden states `[6, 4, d]` of the tiny model over fixed token ids.
fn tiny_hidden(m: &Tiny, device: &Device) -> Tensor<3> {
    let (n, len) = (LENS.len(), 4);
    let ids: Vec<i64> = (0..n * len).map(|i| ((i * 7 + 3) % 11) as i64).collect();
    let ids = Tensor::<2, Int>::from_data(TensorData::new(ids, [n, len]), device);
    m.lin.forward(m.emb.forward(ids))
}

/// The loss, and (with `backward`) the gradient of its surrogate for the linear layer's weight.
type TinyLoss = fn(&Tiny, &Device, bool) -> (f64, Option<Tensor<2>>);

fn weight_grad(m: &Tiny, surrogate: Tensor<1>, backward: bool) -> Option<Tensor<2>> {
    backward.then(|| {
        let grads = surrogate.backward();
        m.lin.weight.val().grad(&grads).expect("weight gradient")
    })
}

fn tiny_rcmd_loss(m: &Tiny, device: &Device, backward: bool) -> (f64, Option<Tensor<2>>) {
    let positions: Vec<Vec<usize>> = LENS.iter().map(|&l| (0..l).collect()).collect();
    let batch = InfoNce {
        anchors: vec![0, 1],
        candidates: vec![2, 3, 4],
        positives: vec![0, 1],
        excluded: Vec::new(),
    };
    let (loss, surrogate) =
        rcmd_surrogate(tiny_hidden(m, device), &positions, &batch, 0.05).expect("loss");
    (loss, weight_grad(m, surrogate, backward))
}

fn tiny_cosent_loss(m: &Tiny, device: &Device, backward: bool) -> (f64, Option<Tensor<2>>) {
    // Three graded pairs: texts 0-2 are the first sentences, 3-5 the second ones.
    let (loss, surrogate) =
        cosent_surrogate(tiny_hidden(m, device), &LENS, &[4.5, 1.0, 2.5]).expect("loss");
    (loss, weight_grad(m, surrogate, backward))
}

/// Autodiff through `loss`'s host-computed surrogate against central differences, weight by
/// weight of the tiny model's linear layer.
fn assert_gradients_match_finite_differences(loss: TinyLoss) {
    let device = Device::flex().autodiff();
    let d = 6;
    // Fixed weights, not a random init: RCMD's argmax partners are piecewise constant, and a
    // random draw now and then puts a tie within the finite-difference step.
    let mut emb = EmbeddingConfig::new(11, d).init(&device);
    let table: Vec<f32> = (0..11 * d)
        .map(|i| ((i * 37 % 31) as f32 - 15.0) / 16.0)
        .collect();
    emb.weight = Param::from_tensor(Tensor::<2>::from_data(
        TensorData::new(table, [11, d]),
        &device,
    ));
    let weights: Vec<f32> = (0..d * d)
        .map(|i| ((i * 13 % 17) as f32 - 8.0) / 9.0)
        .collect();
    let with = |w: Vec<f32>| Tiny {
        emb: emb.clone(),
        lin: {
            let mut l = LinearConfig::new(d, d).with_bias(false).init(&device);
            l.weight =
                Param::from_tensor(Tensor::<2>::from_data(TensorData::new(w, [d, d]), &device));
            l
        },
    };
    let (value, grad) = loss(&with(weights.clone()), &device, true);
    assert!(value.is_finite() && value > 0.0, "{value}");
    let grad: Vec<f32> = grad
        .expect("gradient")
        .into_data()
        .try_into_vec::<f32>()
        .expect("f32");
    let eps = 1e-3f32;
    let mut nonzero = 0;
    for i in 0..d * d {
        let mut plus = weights.clone();
        plus[i] += eps;
        let mut minus = weights.clone();
        minus[i] -= eps;
        let numeric = (loss(&with(plus), &device, false).0 - loss(&with(minus), &device, false).0)
            / (2.0 * f64::from(eps));
        let analytic = f64::from(grad[i]);
        assert!(
            (numeric - analytic).abs() <= 0.05 * analytic.abs() + 2e-3,
            "weight {i}: finite differences {numeric}, autodiff through the surrogate {analytic}"
        );
        nonzero += usize::from(analytic.abs() > 1e-4);
    }
    assert!(
        nonzero > d * d / 2,
        "the gradient reaches most weights ({nonzero})"
    );
}

#[test]
fn rcmd_loss_gradients_match_finite_differences_on_a_tiny_model() {
    assert_gradients_match_finite_differences(tiny_rcmd_loss);
}

#[test]
fn cosent_loss_gradients_match_finite_differences_on_a_tiny_model() {
    assert_gradients_match_finite_differences(tiny_cosent_loss);
}

fn pairs(rel: &str, skip: usize, take: usize) -> Vec<LabelledPair> {
    read_pairs(&shared_data(rel))
        .expect("pairs")
        .into_iter()
        .skip(skip)
        .take(take)
        .collect()
}

#[test]
fn a_few_hundred_cpu_steps_lower_the_loss_raise_dev_auc_and_reload_identically() {
    let train = pairs("qqp_deep1994_split/dev.tsv", 0, 3000);
    let dev = pairs("qqp_bimpm/dev.tsv", 0, 300);
    let out = tempfile::tempdir().expect("tempdir");
    let options = ClrcmdOptions {
        batch_size: 8,
        learning_rate: 1e-4,
        epochs: 2,
        max_steps: Some(200),
        eval_every: 100,
        checkpoint_every: 100,
        ..ClrcmdOptions::default()
    };
    let mut evals = Vec::new();
    let report = train_clrcmd(
        &ClrcmdRun {
            base: model_dir(),
            train: &train,
            dev: &dev,
            graded: &[],
            keep: &[],
            out: out.path(),
            options: &options,
            device: DeviceKind::Cpu,
            low_memory: false,
            resume: false,
        },
        |e| {
            if let Event::Eval { step, auc, .. } = e {
                evals.push((step, auc));
            }
        },
    )
    .expect("training runs");
    assert_eq!(report.steps, 200);
    eprintln!("report {report:?}, evals {evals:?}");
    assert!(
        report.last_loss < report.first_loss,
        "the loss falls: first 20 steps {}, last 20 {}",
        report.first_loss,
        report.last_loss
    );
    let before = report.dev_auc_before.expect("dev AUC before");
    let (best_step, best) = report.best.expect("a best step");
    assert!(best > before, "dev AUC rises: {before} → {best}");
    assert_eq!(evals[0], (0, before));

    // The saved best model is a model directory like any other, and scores the dev pairs
    // exactly as the in-memory weights did at the best step.
    let saved = ModelDir::open(out.path()).expect("a model directory");
    // Training evaluates in fp32; reloaded in fp32 it scores identically.
    let fp32 = EncoderOptions {
        precision: kindred::Precision::Fp32,
        ..EncoderOptions::default()
    };
    let reloaded = Encoder::load(&saved, fp32).expect("loads");
    let again = pair_auc(&reloaded, &dev).expect("auc");
    assert!(
        (again - best).abs() < 1e-9,
        "best at step {best_step}: {best}, reloaded {again}"
    );
    assert_ne!(
        saved.identity().expect("id").fingerprint,
        model_dir().identity().expect("id").fingerprint
    );
    let meta: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.path().join("kindred-model.json")).expect("identity file"),
    )
    .expect("json");
    assert_eq!(meta["trained_by"]["objective"], "clrcmd");
    assert_eq!(meta["trained_by"]["steps"], best_step);
    assert!(out.path().join("checkpoint/state.json").is_file());

    // Starting again over a checkpoint without --resume is refused, not overwritten.
    let err = train_clrcmd(
        &ClrcmdRun {
            base: model_dir(),
            train: &train,
            dev: &dev,
            graded: &[],
            keep: &[],
            out: out.path(),
            options: &options,
            device: DeviceKind::Cpu,
            low_memory: false,
            resume: false,
        },
        |_| {},
    )
    .expect_err("refused");
    assert!(err.to_string().contains("--resume"), "{err}");
}

/// `low_memory` recomputes activations in the backward pass instead of keeping them: the
/// trained model must be the one the plain run trains (to float rounding), with graded and
/// kept pairs beside the InfoNCE batch (each set's gradients are summed into the step's).
#[test]
fn low_memory_training_trains_the_same_model() {
    let train = pairs("qqp_deep1994_split/dev.tsv", 0, 400);
    let graded: Vec<kindred::eval::ScoredPair> = pairs("qqp_bimpm/dev.tsv", 0, 40)
        .into_iter()
        .map(|p| kindred::eval::ScoredPair {
            a: p.a,
            b: p.b,
            gold: if p.duplicate { 1.0 } else { 0.0 },
        })
        .collect();
    let options = ClrcmdOptions {
        batch_size: 4,
        learning_rate: 1e-4,
        max_steps: Some(3),
        graded_batch: 4,
        keep_batch: 4,
        ..ClrcmdOptions::default()
    };
    let texts = [
        "How do I learn Rust quickly?",
        "What is the capital of France?",
    ];
    let trained = |low_memory| {
        let out = tempfile::tempdir().expect("tempdir");
        train_clrcmd(
            &ClrcmdRun {
                base: model_dir(),
                train: &train,
                dev: &[],
                graded: &graded[..20],
                keep: &graded[20..],
                out: out.path(),
                options: &options,
                device: DeviceKind::Cpu,
                low_memory,
                resume: false,
            },
            |_| {},
        )
        .expect("training runs");
        let fp32 = EncoderOptions {
            precision: kindred::Precision::Fp32,
            ..EncoderOptions::default()
        };
        let model = Encoder::load(&ModelDir::open(out.path()).expect("dir"), fp32).expect("loads");
        model.encode(&texts).expect("encodes")
    };
    let (plain, low) = (trained(false), trained(true));
    let untrained = encoder().encode(&texts).expect("encodes");
    for ((p, l), u) in plain.iter().zip(&low).zip(&untrained) {
        let gap = |x: &[f32], y: &[f32]| {
            x.iter()
                .zip(y)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max)
        };
        assert!(
            gap(&p.sentence, &u.sentence) > 1e-4,
            "three steps moved the model"
        );
        assert!(
            gap(&p.sentence, &l.sentence) < 1e-5,
            "low_memory trained another model: {}",
            gap(&p.sentence, &l.sentence)
        );
    }
}

#[test]
fn saved_weights_reload_to_identical_vectors() {
    let out = tempfile::tempdir().expect("tempdir");
    let by = TrainedBy::Head {
        head: "none",
        dev: None,
        options: serde_json::Value::Null,
    };
    write_model_dir(model_dir(), out.path(), Some(encoder().bert()), None, &by).expect("saved");
    let reloaded = Encoder::load(
        &ModelDir::open(out.path()).expect("dir"),
        EncoderOptions::default(),
    )
    .expect("loads");
    let texts = [
        "How do I learn Rust quickly?",
        "What is the capital of France?",
    ];
    let (a, b) = (
        encoder().encode(&texts).expect("a"),
        reloaded.encode(&texts).expect("b"),
    );
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.sentence, y.sentence, "sentence vectors identical");
        assert_eq!(x.token_vectors, y.token_vectors, "token vectors identical");
        assert_eq!(x.intent, y.intent, "intents identical");
    }
    // The re-serialised file differs in bytes (tensor order, no unused tensors), so it is a
    // different file to a store; what matters is that it encodes identically, checked above.
}

fn kindred(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kindred"));
    cmd.args(args).env("NO_COLOR", "1");
    cmd
}

#[test]
fn a_killed_clrcmd_run_resumes_from_its_checkpoint() {
    let work = tempfile::tempdir().expect("tempdir");
    let train = shared_data("qqp_deep1994_split/dev.tsv");
    let out = work.path().join("model");
    let (train_s, out_s) = (train.to_str().expect("utf8"), out.to_str().expect("utf8"));
    let model = model_dir().path.to_str().expect("utf8").to_string();
    let args = [
        "train",
        "clrcmd",
        "--model",
        &model,
        "--pairs",
        train_s,
        "--out",
        out_s,
        "--batch",
        "4",
        "--max-steps",
        "12",
        "--checkpoint-every",
        "2",
        "--eval-every",
        "100",
        // No dev pairs: checkpoints carry the latest weights into --out (with dev pairs, 12
        // steps seldom beat the base model, and then --out rightly keeps the base weights).
        "--dev-split",
        "0",
    ];
    let mut child = kindred(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starts");
    let state = out.join("checkpoint/state.json");
    let deadline = Instant::now() + Duration::from_secs(300);
    while !state.exists() {
        assert!(Instant::now() < deadline, "no checkpoint within 5 minutes");
        assert!(
            child.try_wait().expect("wait").is_none(),
            "exited before its first checkpoint"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    child.kill().expect("kill -9");
    child.wait().expect("reaped");
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&state).expect("state")).expect("json");
    let at = saved["step"].as_u64().expect("step");
    assert!((2..12).contains(&at), "killed mid-run, at step {at}");

    let again = kindred(&args).output().expect("runs");
    assert!(
        !again.status.success(),
        "a second start without --resume is refused"
    );
    assert!(String::from_utf8_lossy(&again.stderr).contains("--resume"));

    let mut resumed_args = args.to_vec();
    resumed_args.extend(["--resume", "--json"]);
    let resumed = kindred(&resumed_args).output().expect("runs");
    let stdout = String::from_utf8_lossy(&resumed.stdout);
    assert!(
        resumed.status.success(),
        "resume failed: {}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("json report");
    assert_eq!(report["report"]["steps"], 12, "{stdout}");
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&state).expect("state")).expect("json");
    assert_eq!(state["step"], 12);

    // A resume with other flags is refused.
    let mut other = args.to_vec();
    other[9] = "8";
    other.push("--resume");
    let refused = kindred(&other).output().expect("runs");
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("other options"));

    blends_of_the_trained_model_lie_between_it_and_its_base(&out, work.path());
}

/// `kindred train blend` at α = 0 gives the base's vectors, at α = 1 the tuned model's, and at
/// α = 0.5 vectors of neither; α outside [0, 1] is refused.
fn blends_of_the_trained_model_lie_between_it_and_its_base(tuned: &Path, work: &Path) {
    let model = model_dir().path.to_str().expect("utf8").to_string();
    let text = ["How can I improve my English speaking skills?"];
    let sentence_of = |dir: &Path| {
        let encoder = Encoder::load(
            &ModelDir::open(dir).expect("dir"),
            EncoderOptions::default(),
        )
        .expect("loads");
        encoder.encode(&text).expect("encodes")[0].sentence.clone()
    };
    let close = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-5);
    let (base, trained) = (sentence_of(&model_dir().path), sentence_of(tuned));
    assert!(!close(&base, &trained), "training moved the vectors");
    let mut blended = Vec::new();
    for alpha in ["0", "1", "0.5", "1.5"] {
        let out = work.join(format!("blend-{alpha}"));
        let run = kindred(&[
            "train",
            "blend",
            "--model",
            &model,
            "--tuned",
            tuned.to_str().expect("utf8"),
            "--alpha",
            alpha,
            "--out",
            out.to_str().expect("utf8"),
        ])
        .output()
        .expect("runs");
        if alpha == "1.5" {
            assert!(!run.status.success());
            let stderr = String::from_utf8_lossy(&run.stderr);
            assert!(
                stderr.contains("--alpha") && stderr.contains("between 0"),
                "{stderr}"
            );
            continue;
        }
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        blended.push(sentence_of(&out));
    }
    assert!(close(&blended[0], &base), "α = 0 is the base");
    assert!(close(&blended[1], &trained), "α = 1 is the tuned model");
    assert!(!close(&blended[2], &base) && !close(&blended[2], &trained));

    // A soup: the mean of the tuned model and the α = 0 blend (the base's weights) is the
    // α = 0.5 blend. The same directory twice is refused.
    let soup = work.join("soup");
    let (tuned_s, base_copy) = (
        tuned.to_str().expect("utf8"),
        work.join("blend-0").to_str().expect("utf8").to_string(),
    );
    let soup_args = |second: &str| {
        vec![
            "train".to_string(),
            "blend".into(),
            "--model".into(),
            model.clone(),
            "--tuned".into(),
            tuned_s.into(),
            "--tuned".into(),
            second.into(),
            "--alpha".into(),
            "1".into(),
            "--out".into(),
            soup.to_str().expect("utf8").into(),
        ]
    };
    let run = kindred(&as_strs(&soup_args(&base_copy)))
        .output()
        .expect("runs");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(String::from_utf8_lossy(&run.stdout).contains("the mean of"));
    assert!(
        close(&sentence_of(&soup), &blended[2]),
        "soup = half-way blend"
    );
    let identity: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(soup.join("kindred-model.json")).expect("identity"),
    )
    .expect("json");
    assert_eq!(
        identity["trained_by"]["tuned"].as_array().map(Vec::len),
        Some(2),
        "{identity}"
    );
    let spelled_otherwise = format!("{}/.", tuned_s);
    let twice = kindred(&as_strs(&soup_args(&spelled_otherwise)))
        .output()
        .expect("runs");
    assert!(!twice.status.success());
    assert!(String::from_utf8_lossy(&twice.stderr).contains("given twice"));
}

#[test]
fn head_trainers_write_models_whose_heads_change_the_vectors() {
    let work = tempfile::tempdir().expect("tempdir");
    let train = shared_data("qqp_deep1994_split/dev.tsv");
    // A small slice keeps this quick; the full runs are in EVALUATION.md.
    let slice = work.path().join("pairs.tsv");
    let raw = String::from_utf8_lossy(&std::fs::read(&train).expect("read")).into_owned();
    std::fs::write(&slice, raw.lines().take(600).collect::<Vec<_>>().join("\n")).expect("write");
    let model = model_dir().path.to_str().expect("utf8").to_string();
    let slice_s = slice.to_str().expect("utf8");
    let t_out = work.path().join("with-transition");
    let i_out = work.path().join("with-intent");
    let k_out = work.path().join("with-intent-32");
    for (kind, out, dim) in [
        ("transition", &t_out, None),
        ("intent", &i_out, None),
        ("intent", &k_out, Some("32")),
    ] {
        let mut args = vec![
            "train",
            kind,
            "--model",
            &model,
            "--pairs",
            slice_s,
            "--out",
            out.to_str().expect("utf8"),
            "--dev-split",
            "100",
            "--epochs",
            "3",
            "--json",
        ];
        args.extend(dim.map(|k| ["--dim", k]).into_iter().flatten());
        let run = kindred(&args).output().expect("runs");
        assert!(
            run.status.success(),
            "{kind}: {}",
            String::from_utf8_lossy(&run.stderr)
        );
        let report: serde_json::Value = serde_json::from_slice(&run.stdout).expect("json report");
        assert_eq!(report["dev_pairs"], 100, "{report}");
        assert!(out.join(HEADS_FILE).is_file());
        if kind == "intent" {
            // A broken start (non-finite weights) leaves the classifier at chance.
            let auc = report["dev_classifier_auc"].as_f64().expect("auc");
            assert!(auc > 0.6, "dim {dim:?}: dev classifier AUC {auc}");
            let heads = Heads::load(out, 384).expect("heads");
            let intent = heads.intent.expect("intent head");
            let classifier = heads.classifier.expect("classifier");
            let finite = [
                &intent.mu,
                &intent.logvar,
                &classifier.hidden,
                &classifier.out,
            ]
            .iter()
            .all(|d| d.weight.iter().chain(&d.bias).all(|x| x.is_finite()));
            assert!(finite, "dim {dim:?}: non-finite head weights");
        }
    }
    let test_file = shared_data("qqp_bimpm/test.tsv");
    let refused = kindred(&[
        "train",
        "intent",
        "--model",
        &model,
        "--pairs",
        test_file.to_str().expect("utf8"),
        "--out",
        work.path().join("x").to_str().expect("utf8"),
    ])
    .output()
    .expect("runs");
    assert!(
        !refused.status.success(),
        "training on a test file is refused"
    );
    assert!(String::from_utf8_lossy(&refused.stderr).contains("test split"));

    let text = ["How can I improve my English speaking skills?"];
    let base = &encoder().encode(&text).expect("base")[0];
    let t_dir = ModelDir::open(&t_out).expect("dir");
    let with_t = Encoder::load(&t_dir, EncoderOptions::default()).expect("loads");
    assert_eq!(with_t.heads().names(), vec!["transition"]);
    let t = &with_t.encode(&text).expect("t")[0];
    assert_eq!(
        t.token_vectors, base.token_vectors,
        "token vectors are the encoder's"
    );
    assert_ne!(
        t.sentence, base.sentence,
        "the matrix moves the sentence vector"
    );
    let norm: f32 = t.sentence.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-5);

    let i_dir = ModelDir::open(&i_out).expect("dir");
    let with_i = Encoder::load(&i_dir, EncoderOptions::default()).expect("loads");
    assert_eq!(with_i.heads().names(), vec!["intent", "classifier"]);
    let i = &with_i.encode(&text).expect("i")[0];
    assert_eq!(i.sentence, base.sentence);
    assert_ne!(i.intent, base.intent, "the learned head moves the intent");
    let heads = Heads::load(&i_out, 384).expect("heads");
    let p = heads
        .classifier
        .as_ref()
        .expect("classifier")
        .probability(&i.intent, &i.intent);
    assert!((0.0..=1.0).contains(&p));
    assert_ne!(
        i_dir.identity().expect("id").fingerprint,
        model_dir().identity().expect("id").fingerprint,
        "heads are part of the fingerprint"
    );
    assert_eq!(i_dir.identity().expect("id").intent_dim, None);

    // An intent head of a chosen dimension: 32-dimensional intents, a 64-wide W2 index.
    let k_dir = ModelDir::open(&k_out).expect("dir");
    let identity = k_dir.identity().expect("id");
    assert_eq!((identity.dim, identity.intent_dim()), (384, 32));
    let with_k = Arc::new(Encoder::load(&k_dir, EncoderOptions::default()).expect("loads"));
    let k = &with_k.encode(&text).expect("k")[0];
    assert_eq!((k.intent.mu.len(), k.intent.sigma.len()), (32, 32));
    assert!(k.intent.sigma.iter().all(|s| s.is_finite() && *s > 0.0));
    w2_search_finds_its_own_documents(&with_k);

    let too_wide = kindred(&[
        "train",
        "intent",
        "--model",
        &model,
        "--pairs",
        slice_s,
        "--out",
        work.path().join("y").to_str().expect("utf8"),
        "--dim",
        "385",
    ])
    .output()
    .expect("runs");
    assert!(!too_wide.status.success());
    let stderr = String::from_utf8_lossy(&too_wide.stderr);
    assert!(
        stderr.contains("--dim") && stderr.contains("384"),
        "{stderr}"
    );
}

/// A collection on `encoder`'s model answers W2 searches with each document's own text first,
/// before and after a reopen (the W2 graph saved and loaded at the model's intent width).
fn w2_search_finds_its_own_documents(encoder: &Arc<Encoder>) {
    use kindred::db::Database;
    use kindred::search::{Mode, Rerank, SearchParams};
    use kindred::store::{CollectionSettings, Durability};

    let texts = [
        "How do I reset my password?",
        "What is the best way to learn French quickly?",
        "Why is the sky blue?",
        "Which laptop should I buy for programming?",
    ];
    let data = tempfile::tempdir().expect("tempdir");
    let params = SearchParams {
        k: 2,
        mode: Mode::W2,
        rerank: Rerank::None,
        ..SearchParams::default()
    };
    for reopen in [false, true] {
        let db = Arc::new(Database::open(data.path(), Durability::Flush).expect("opens"));
        if !reopen {
            db.create_collection(
                "c",
                &CollectionSettings::for_model(encoder.identity().clone()),
            )
            .expect("created");
            crate::common::upsert(&db, "c", encoder, numbered_docs(&texts)).expect("stored");
        }
        for (i, t) in texts.iter().enumerate() {
            let found = crate::common::search(&db, encoder, "c", t, &params).expect("searched");
            assert_eq!(found.hits[0].id, format!("d{i}"), "reopen {reopen}: {t}");
        }
    }
}

#[test]
fn a_model_with_a_classifier_judges_duplicates_with_it() {
    use kindred::db::Database;
    use kindred::engine::Engine;
    use kindred::model::heads::{Classifier, Dense, IntentHead};
    use kindred::review::{queue, ReviewQuery};
    use kindred::search::{SearchParams, SIAMESE_THRESHOLD};
    use kindred::store::{CollectionSettings, Durability};

    // A hand-set classifier: one hidden unit 1 − 5·ΣW2² (ReLU), logit 10·h − 5: near 1 for
    // intents that coincide, sigmoid(−5) ≈ 0.007 once ΣW2² ≥ 0.2.
    let d = encoder().identity().dim;
    let mut hidden = vec![0.0; 2 * d];
    hidden[..d].iter_mut().for_each(|w| *w = -5.0);
    let heads = Heads {
        intent: Some(IntentHead {
            mu: Dense::identity(d),
            logvar: Dense::identity(d),
        }),
        classifier: Some(Classifier {
            hidden: Dense {
                inputs: 2 * d,
                outputs: 1,
                weight: hidden,
                bias: vec![1.0],
            },
            out: Dense {
                inputs: 1,
                outputs: 1,
                weight: vec![10.0],
                bias: vec![-5.0],
            },
        }),
        ..Heads::default()
    };
    let out = tempfile::tempdir().expect("tempdir");
    let by = TrainedBy::Head {
        head: "intent",
        dev: None,
        options: serde_json::Value::Null,
    };
    write_model_dir(model_dir(), out.path(), None, Some(&heads), &by).expect("written");
    let judged = Arc::new(
        Encoder::load(
            &ModelDir::open(out.path()).expect("dir"),
            EncoderOptions::default(),
        )
        .expect("loads"),
    );

    let data = tempfile::tempdir().expect("tempdir");
    let db = Arc::new(Database::open(data.path(), Durability::Flush).expect("opens"));
    db.create_collection(
        "c",
        &CollectionSettings::for_model(judged.identity().clone()),
    )
    .expect("created");
    let texts = [
        "How do I reset my password?",
        "What is the best way to learn French quickly?",
        "Why is the sky blue?",
    ];
    crate::common::upsert(&db, "c", &judged, numbered_docs(&texts)).expect("stored");
    let params = SearchParams {
        k: 3,
        ..SearchParams::default()
    };
    let engine = Engine::with_encoder(db.clone(), judged.clone());
    let col = engine.collection("c").expect("collection");
    let verdict = col.duplicates(texts[1], None, &params).expect("judged");
    assert!(
        verdict.calibration.contains("variational-siamese"),
        "{}",
        verdict.calibration
    );
    assert_eq!(verdict.threshold, SIAMESE_THRESHOLD);
    assert!(
        verdict.is_duplicate && verdict.probability > 0.99,
        "{verdict:?}"
    );
    assert_eq!(verdict.matches[0].hit.id, "d1");
    let others: Vec<f32> = verdict.matches[1..]
        .iter()
        .map(|m| m.hit.probability)
        .collect();
    assert!(others.iter().all(|p| *p < 0.5), "{others:?}");
    let verdict = col
        .duplicates("Who won the 1998 World Cup?", None, &params)
        .expect("judged");
    assert!(!verdict.is_duplicate, "{verdict:?}");
    // Search hits carry the same probability.
    let out = col.search(texts[0], &params).expect("searched");
    assert_eq!(out.hits[0].id, "d0");
    assert!(out.calibration.contains("variational-siamese"));
    // And so does the review queue: its default threshold is the classifier's, and each
    // queued pair's probability is the classifier's on the two stored intents.
    let review = |threshold| ReviewQuery {
        threshold,
        before: None,
        scan: 10,
        explain: false,
        explain_cells: kindred::search::DEFAULT_EXPLAIN_CELLS,
    };
    let page = queue(&col, &review(None)).expect("queue");
    assert_eq!(page.threshold, SIAMESE_THRESHOLD);
    let page = queue(&col, &review(Some(0.0))).expect("queue");
    assert!(!page.items.is_empty());
    let classifier = judged.heads().classifier.as_ref().expect("classifier");
    for item in &page.items {
        let a = db
            .get("c", item.document.id.as_deref().unwrap())
            .unwrap()
            .unwrap();
        let b = db.get("c", &item.matched.id).unwrap().unwrap();
        let want = classifier.probability(&a.intent(), &b.intent());
        assert!((item.matched.probability - want).abs() < 1e-6, "{item:?}");
    }
}

/// Documents `d0`, `d1`, … with `texts` and no metadata.
fn numbered_docs(texts: &[&str]) -> Vec<kindred::db::NewDocument> {
    texts
        .iter()
        .enumerate()
        .map(|(i, t)| kindred::db::NewDocument {
            id: format!("d{i}"),
            text: t.to_string(),
            metadata: serde_json::Value::Null,
            context: Vec::new(),
        })
        .collect()
}

fn as_strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}
