//! Adapting to a site without labels (issue 23): harvesting graded pairs from context on a
//! small synthetic forum whose right pairs are known (four topics; questions of one topic are
//! worded apart, and two topics share their words — "renew", "permit" — but not their
//! answers); and `kindred train context` end to end on a real store: the adapted model has
//! a new fingerprint, the collection refuses it until it is reindexed onto it.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kindred::train::context::{
    general_training_pairs, harvest, held_out, precheck, thread_sets, training_sets, ContextDoc,
    GeneralOptions, HarvestOptions, Signal,
};

use crate::common::{encoder, model_dir};

/// (topic, question) and each topic's answers.
const QUESTIONS: [(usize, &str); 16] = [
    (0, "How can I renew my driving licence?"),
    (0, "My car license expires next week, what do I do?"),
    (0, "Where do I go to extend a driver's permit?"),
    (
        0,
        "Process for getting a new driving license after it expired",
    ),
    (1, "How do I renew my residence permit?"),
    (1, "My RP is expiring, how to extend it?"),
    (1, "What documents does immigration need to extend an RP?"),
    (1, "Can my sponsor renew my residency card?"),
    (2, "Which bank is the best for expats?"),
    (2, "Where should I open a savings account?"),
    (2, "Recommend a bank with low transfer fees"),
    (2, "Is QNB better than Commercial Bank?"),
    (3, "Where can I go swimming at the weekend?"),
    (3, "Any nice beaches near Doha?"),
    (3, "Family friendly places by the sea?"),
    (3, "Best spot for a picnic on the coast?"),
];

const ANSWERS: [[&str; 3]; 4] = [
    [
        "Go to the traffic department in Madinat Khalifa with your old licence and an eye test.",
        "The traffic police office renews it in ten minutes; bring the eye test certificate.",
        "Renewal at the traffic department costs 250 riyals and takes a few minutes.",
    ],
    [
        "Your sponsor's PRO handles it at the immigration department with your passport.",
        "Immigration needs your passport, the medical and fingerprints; the company does it.",
        "Ask the HR of your company, they submit the papers to immigration for you.",
    ],
    [
        "QNB has the most ATMs and a decent mobile app.",
        "Commercial Bank has good online banking and low fees for salary accounts.",
        "HSBC is fine for international money transfers.",
    ],
    [
        "Sealine beach is nice, about an hour south, bring a tent.",
        "Try Fuwairit beach in the north, turtles nest there in spring.",
        "Katara beach is close to the city and has showers and a cafe.",
    ],
];

/// Each question gets two of its topic's three answers (a different pair per question) and a
/// thank-you every thread has.
fn forum() -> Vec<ContextDoc> {
    QUESTIONS
        .iter()
        .enumerate()
        .map(|(i, &(topic, q))| ContextDoc {
            id: format!("q{i}"),
            text: q.to_string(),
            context: vec![
                ANSWERS[topic][i % 3].to_string(),
                ANSWERS[topic][(i + 1) % 3].to_string(),
                "Thanks, that helps!".to_string(),
            ],
        })
        .collect()
}

/// AUC of `score` separating same-topic pairs from the rest.
fn auc(pairs: &[(bool, f64)]) -> f64 {
    let pos: Vec<f64> = pairs.iter().filter(|p| p.0).map(|p| p.1).collect();
    let neg: Vec<f64> = pairs.iter().filter(|p| !p.0).map(|p| p.1).collect();
    let mut wins = 0.0;
    for p in &pos {
        for n in &neg {
            wins += if p > n {
                1.0
            } else if p == n {
                0.5
            } else {
                0.0
            };
        }
    }
    wins / (pos.len() * neg.len()) as f64
}

#[test]
fn harvested_grades_find_the_known_pairs_better_than_the_models_own_cosine() {
    let docs = forum();
    let options = HarvestOptions {
        neighbours: 5,
        signal: Signal::Both,
        ..HarvestOptions::default()
    };
    let h = harvest(encoder(), &docs, &options, &mut |_, _, _| {}).expect("harvests");
    assert_eq!((h.documents, h.with_context, h.context_texts), (16, 16, 48));
    let same = |a: usize, b: usize| QUESTIONS[a].0 == QUESTIONS[b].0;
    let graded: Vec<(bool, f64)> = h.pairs.iter().map(|p| (same(p.a, p.b), p.grade)).collect();
    let cosine: Vec<(bool, f64)> = h
        .pairs
        .iter()
        .map(|p| (same(p.a, p.b), f64::from(p.question)))
        .collect();
    assert!(graded.iter().any(|p| p.0) && graded.iter().any(|p| !p.0));
    let (by_grade, by_cosine) = (auc(&graded), auc(&cosine));
    assert!(
        by_grade >= 0.95 && by_grade > by_cosine,
        "same-topic AUC: harvested grade {by_grade:.3}, question cosine {by_cosine:.3}"
    );
    // Each question's best-graded partner is one of its topic.
    for (i, question) in QUESTIONS.iter().enumerate() {
        let best = h
            .pairs
            .iter()
            .filter(|p| p.a == i || p.b == i)
            .max_by(|x, y| x.grade.total_cmp(&y.grade))
            .expect("every question is in a pair");
        let other = if best.a == i { best.b } else { best.a };
        assert!(same(i, other), "{question:?} → {:?}", QUESTIONS[other]);
    }
    // Every signal grades 0–5.
    for signal in [Signal::Context, Signal::Retrieval] {
        let h = harvest(
            encoder(),
            &docs,
            &HarvestOptions {
                signal,
                ..options.clone()
            },
            &mut |_, _, _| {},
        )
        .expect("harvests");
        assert!(h.pairs.iter().all(|p| (0.0..=5.0).contains(&p.grade)));
        let graded: Vec<(bool, f64)> = h.pairs.iter().map(|p| (same(p.a, p.b), p.grade)).collect();
        assert!(auc(&graded) > 0.8, "{signal:?}: {:.3}", auc(&graded));
    }
}

/// What lets `kindred tune` judge every hit of every configuration, not only the pairs the
/// harvest mined by cosine (the pool bias that held lexical hits at gain 0).
#[test]
fn pairs_the_harvest_did_not_mine_are_graded_on_its_scale() {
    let mut docs = forum();
    docs.push(ContextDoc {
        id: "no context".into(),
        text: "How can I renew my driving licence online?".into(),
        context: vec![],
    });
    let options = HarvestOptions {
        neighbours: 2,
        ..HarvestOptions::default()
    };
    let h = harvest(encoder(), &docs, &options, &mut |_, _, _| {}).expect("harvests");
    for p in &h.pairs {
        let g = h.grader.grade(p.a, p.b).expect("both were harvested");
        assert!(
            (g - p.grade).abs() < 1e-9,
            "{g} against the mined {}",
            p.grade
        );
        assert_eq!(h.grader.grade(p.b, p.a), Some(g), "symmetric");
    }
    let mined: std::collections::HashSet<(usize, usize)> = h
        .pairs
        .iter()
        .map(|p| (p.a.min(p.b), p.a.max(p.b)))
        .collect();
    let same = |a: usize, b: usize| QUESTIONS[a].0 == QUESTIONS[b].0;
    let unmined: Vec<(bool, f64)> = (0..QUESTIONS.len())
        .flat_map(|a| (a + 1..QUESTIONS.len()).map(move |b| (a, b)))
        .filter(|pair| !mined.contains(pair))
        .map(|(a, b)| (same(a, b), h.grader.grade(a, b).expect("harvested")))
        .collect();
    assert!(unmined.len() > 40, "2 neighbours leave most pairs unmined");
    assert!(unmined.iter().all(|p| (0.0..=5.0).contains(&p.1)));
    assert!(
        auc(&unmined) > 0.9,
        "same-topic AUC over unmined pairs {:.3}",
        auc(&unmined)
    );
    // A document without context, or past the end, has no grade.
    assert_eq!(h.grader.grade(0, 16), None);
    assert_eq!(h.grader.grade(0, 99), None);
}

/// `--thread-positives N`: each harvested question outside the held-out slice gets its first
/// N non-empty context texts as InfoNCE positives of its own; held-out questions and questions
/// without context get none, and N = 0 adds nothing.
#[test]
fn thread_positives_pair_each_question_with_its_own_first_answers() {
    let mut docs = forum();
    docs[0].context.insert(0, "  ".into());
    docs.push(ContextDoc {
        id: "no context".into(),
        text: "How can I renew my driving licence online?".into(),
        context: vec![],
    });
    let options = HarvestOptions {
        neighbours: 3,
        held_out_every: 4,
        ..HarvestOptions::default()
    };
    let h = harvest(encoder(), &docs, &options, &mut |_, _, _| {}).expect("harvests");
    let without = training_sets(&docs, &h, &options);
    let with = training_sets(
        &docs,
        &h,
        &HarvestOptions {
            thread_positives: 2,
            ..options.clone()
        },
    );
    assert_eq!(
        (with.graded.len(), with.dev.len()),
        (without.graded.len(), without.dev.len())
    );
    let added: Vec<_> = with.train[without.train.len()..].to_vec();
    assert_eq!(without.train, with.train[..without.train.len()]);
    let kept: Vec<&ContextDoc> = docs
        .iter()
        .filter(|d| d.has_context() && !held_out(&d.id, 4))
        .collect();
    assert!(
        kept.len() >= 8 && kept.len() < 16,
        "some questions are held out"
    );
    let expected: Vec<(String, String)> = kept
        .iter()
        .flat_map(|d| {
            d.context
                .iter()
                .filter(|c| !c.trim().is_empty())
                .take(2)
                .map(|c| (d.text.clone(), c.clone()))
        })
        .collect();
    let got: Vec<(String, String)> = added
        .iter()
        .inspect(|p| assert!(p.duplicate))
        .map(|p| (p.a.clone(), p.b.clone()))
        .collect();
    assert_eq!(got, expected);
    if !held_out("q0", 4) {
        assert_eq!(
            got[0],
            (docs[0].text.clone(), docs[0].context[1].clone()),
            "blank skipped"
        );
    }
}

#[test]
fn a_collection_without_context_is_refused_with_the_fix() {
    let docs: Vec<ContextDoc> = QUESTIONS
        .iter()
        .map(|(_, q)| ContextDoc {
            id: q.to_string(),
            text: q.to_string(),
            context: vec![" ".into()],
        })
        .collect();
    let e = harvest(
        encoder(),
        &docs,
        &HarvestOptions::default(),
        &mut |_, _, _| {},
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("0 of its 16 documents carry context") && e.contains("--context-field"),
        "{e}"
    );
}

#[test]
fn general_texts_are_paired_with_their_nearest_and_graded_by_the_base_cosine() {
    let lines = "How do I learn French quickly?\n\nWhat is the fastest way to learn French?\n\
                 How do I learn French quickly?\nWhy is the sky blue?\nBest laptop for gaming?\n\
                 Which gaming laptop should I buy?\n";
    let pairs = general_training_pairs(
        encoder(),
        lines,
        &GeneralOptions {
            neighbours: 1,
            ..GeneralOptions::default()
        },
        &mut |_, _, _| {},
    )
    .expect("pairs");
    // Five distinct texts (the blank line and the repeat are skipped).
    let texts: std::collections::HashSet<&str> = pairs
        .iter()
        .flat_map(|p| [p.a.as_str(), p.b.as_str()])
        .collect();
    assert_eq!(texts.len(), 5, "{pairs:?}");
    assert!(pairs.iter().all(|p| p.a != p.b));
    let gold = |a: &str, b: &str| {
        pairs
            .iter()
            .find(|p| (p.a == a && p.b == b) || (p.a == b && p.b == a))
            .map(|p| p.gold)
    };
    let french = gold(
        "How do I learn French quickly?",
        "What is the fastest way to learn French?",
    )
    .expect("the paraphrases are nearest neighbours");
    let laptops = gold(
        "Best laptop for gaming?",
        "Which gaming laptop should I buy?",
    )
    .expect("the paraphrases are nearest neighbours");
    let e = encoder()
        .encode(&[
            "How do I learn French quickly?",
            "What is the fastest way to learn French?",
        ])
        .unwrap();
    let cosine = f64::from(kindred::score::dot(&e[0].sentence, &e[1].sentence));
    assert!((french - cosine).abs() < 1e-4, "{french} vs {cosine}");
    // The paraphrases outrank every pair with the stranger.
    for p in pairs
        .iter()
        .filter(|p| p.a.contains("sky") || p.b.contains("sky"))
    {
        assert!(p.gold < french.min(laptops), "{p:?}");
    }
    let e = general_training_pairs(
        encoder(),
        "only one line\n\n",
        &GeneralOptions::default(),
        &mut |_, _, _| {},
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("1 distinct non-blank lines") && e.contains("one per"),
        "{e}"
    );
}

fn kindred(data: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kindred"));
    cmd.env("KINDRED_MODEL", &model_dir().path)
        .env("KINDRED_DATA", data)
        .env_remove("RUST_LOG");
    cmd
}

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().expect("runs");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `cmd`, which must fail as bad input does (exit 2); its stderr.
fn run_refused(cmd: &mut Command) -> String {
    let out = cmd.output().expect("runs");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{cmd:?}: {err}");
    err
}

/// Asserts that collection `forum` of `data` is on the model directory `model` (its
/// fingerprint), as `kindred stats` reports it without --model.
fn assert_on_model(data: &Path, model: &Path) {
    let fingerprint = kindred::model::ModelDir::open(model)
        .unwrap()
        .identity()
        .unwrap()
        .fingerprint;
    let stats = run_ok(
        kindred(data)
            .env_remove("KINDRED_MODEL")
            .args(["stats", "forum", "--json"]),
    );
    assert!(
        stats.contains(&fingerprint),
        "the collection is on {}: {stats}",
        model.display()
    );
}

/// Training flags that keep an encoder run on the synthetic forum to one small step.
const QUICK_TRAINING: [&str; 8] = [
    "--neighbours",
    "5",
    "--batch",
    "4",
    "--graded-batch",
    "4",
    "--max-steps",
    "1",
];

/// A new database (in the returned directory, at the returned path) whose collection `forum`
/// is the synthetic forum, each thread's answers as its `context`.
fn forum_with_context() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    ingest_forum(
        dir.path(),
        &data,
        |_, d| serde_json::json!({ "id": d.id, "text": d.text, "context": d.context }),
    );
    (dir, data)
}

/// Ingests the synthetic forum into collection `forum` of the database `data`, one JSONL line
/// per thread as `line(index, thread)` writes it.
fn ingest_forum(dir: &Path, data: &Path, line: impl Fn(usize, &ContextDoc) -> serde_json::Value) {
    let jsonl = dir.join("forum.jsonl");
    let lines: Vec<String> = forum()
        .iter()
        .enumerate()
        .map(|(i, d)| line(i, d).to_string())
        .collect();
    std::fs::write(&jsonl, lines.join("\n") + "\n").unwrap();
    run_ok(
        kindred(data)
            .args(["ingest", "--create", "-c", "forum"])
            .arg(&jsonl),
    );
}

/// A few general questions (`--general`) in `dir`, whose order an adapted encoder keeps.
fn general_file(dir: &Path) -> std::path::PathBuf {
    let general = dir.join("general.txt");
    std::fs::write(
        &general,
        "How do I learn French quickly?\nWhat is the fastest way to learn French?\n\
         Why is the sky blue?\nBest laptop for gaming?\nWhich gaming laptop should I buy?\n",
    )
    .unwrap();
    general
}

#[test]
fn train_context_adapts_a_collection_which_then_needs_a_reindex_onto_the_new_model() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // Half the threads carry their answers as `context`, half as a metadata key.
    ingest_forum(dir.path(), &data, |i, d| {
        if i % 2 == 0 {
            serde_json::json!({ "id": d.id, "text": d.text, "context": d.context })
        } else {
            serde_json::json!({ "id": d.id, "text": d.text, "metadata": { "answers": d.context } })
        }
    });

    // General questions whose order the adapted encoder keeps; refused without an encoder to
    // keep it in, and when there is too little of it.
    let general = general_file(dir.path());
    for (flags, says) in [
        (["--method", "transition"], ["--general", "frozen"]),
        (
            ["--general-batch", "1"],
            ["--general-batch 1", "at least 2"],
        ),
    ] {
        let refused = kindred(&data)
            .args(["train", "context", "-c", "forum"])
            .args(flags)
            .arg("--general")
            .arg(&general)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&refused.stderr);
        assert!(
            !refused.status.success() && says.iter().all(|s| err.contains(s)),
            "{err}"
        );
    }
    for (runs, method, says) in [
        ("0", "encoder", "1 or more"),
        ("2", "transition", "--method encoder"),
        ("2", "thread", "--method encoder"),
    ] {
        let refused = kindred(&data)
            .args([
                "train", "context", "-c", "forum", "--runs", runs, "--method", method,
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&refused.stderr);
        assert!(
            !refused.status.success() && err.contains("--runs") && err.contains(says),
            "{err}"
        );
    }
    // --method thread trains the grader itself: there is no harvest for --grader to grade.
    let err = run_refused(kindred(&data).args([
        "train", "context", "-c", "forum", "--method", "thread", "--grader", "base",
    ]));
    assert!(err.contains("drop --grader"), "{err}");
    let one_line = dir.path().join("one.txt");
    std::fs::write(&one_line, "just one question?\n").unwrap();
    // Too little general text, and a grader that is not a model, are refused before anything
    // is trained.
    let no_model = dir.path().join("no-such-model");
    for (flag, value, says) in [
        ("--general", &one_line, ["general texts", "general texts"]),
        ("--grader", &no_model, ["--grader", "no-such-model"]),
    ] {
        let err = run_refused(
            kindred(&data)
                .args(["train", "context", "-c", "forum", flag])
                .arg(value)
                .args(["--out"])
                .arg(dir.path().join("never")),
        );
        assert!(says.iter().all(|s| err.contains(s)), "{err}");
        assert!(!dir.path().join("never").exists(), "nothing written");
    }

    let out = dir.path().join("adapted");
    let summary = run_ok(
        kindred(&data)
            .args([
                "train",
                "context",
                "-c",
                "forum",
                "--context-field",
                "answers",
                "--json",
            ])
            .args([
                "--neighbours",
                "5",
                "--batch",
                "4",
                "--graded-batch",
                "4",
                "--max-steps",
                "2",
            ])
            .args([
                "--eval-every",
                "1",
                "--general-weight",
                "2",
                "--general-batch",
                "3",
            ])
            .args(["--runs", "2"])
            .arg("--general")
            .arg(&general)
            .arg("--out")
            .arg(&out),
    );
    let v: serde_json::Value = serde_json::from_str(&summary).expect("JSON summary");
    // Two runs (seeds 42 and 43), averaged into the model written; the runs are removed.
    assert_eq!(v["method"], "encoder soup", "{v}");
    let runs = v["selection"]["runs"].as_array().expect("runs");
    assert_eq!(
        runs.iter().map(|r| r["seed"].as_u64()).collect::<Vec<_>>(),
        vec![Some(42), Some(43)],
        "{v}"
    );
    assert!(
        !out.join("runs").exists(),
        "the runs are removed once averaged"
    );
    let identity: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("kindred-model.json")).unwrap()).unwrap();
    assert_eq!(
        identity["trained_by"]["tuned"].as_array().map(Vec::len),
        Some(2)
    );
    assert_eq!(v["harvest"]["with_context"], 16, "{v}");
    assert_eq!(
        v["harvest"]["context_texts"], 48,
        "context and the metadata key are read: {v}"
    );
    assert!(v["general"]["pairs"].as_u64().unwrap() >= 4, "{v}");
    assert_eq!(v["general"]["weight"], 2.0, "{v}");
    assert_eq!(v["general"]["batch"], 3, "{v}");
    let recorded: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("kindred-context.json")).unwrap()).unwrap();
    assert_eq!(recorded["collection"], "forum");
    assert_eq!(
        recorded["grader"]["model"], "base",
        "train context grades with the base"
    );

    let adapted = kindred::model::ModelDir::open(&out)
        .unwrap()
        .identity()
        .unwrap();
    let base = model_dir().identity().unwrap();
    assert_ne!(
        adapted.fingerprint, base.fingerprint,
        "training changed the weights"
    );

    // The collection's vectors are the base model's: the adapted model is refused, naming
    // the fix, until the collection is reindexed onto it.
    let refused = kindred(&data)
        .arg("--model")
        .arg(&out)
        .args(["search", "-c", "forum", "Where is the traffic department?"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && err.contains("reindex"),
        "{err}"
    );
    run_ok(
        kindred(&data)
            .arg("--model")
            .arg(&out)
            .args(["reindex", "-c", "forum"]),
    );
    let hits = run_ok(kindred(&data).arg("--model").arg(&out).args([
        "search",
        "-c",
        "forum",
        "--json",
        "How do I renew my driving licence?",
    ]));
    let v: serde_json::Value = serde_json::from_str(&hits).expect("JSON hits");
    assert_eq!(v["hits"][0]["id"], "q0", "{v}");

    // tune on the adapted collection grades with the base its training was graded by (recorded
    // in kindred-context.json), not with the adapted model's own grades; --grader names another.
    let tune = |extra: &[&str]| -> serde_json::Value {
        let report = run_ok(
            kindred(&data)
                .arg("--model")
                .arg(&out)
                .args(["tune", "-c", "forum", "--dry-run", "--json"])
                .args(["--held-out-every", "3", "--context-field", "answers"])
                .args(extra),
        );
        serde_json::from_str(&report).expect("tune's JSON report")
    };
    let base_path = std::fs::canonicalize(&model_dir().path).unwrap();
    assert_eq!(recorded["grader"]["dir"], base_path.display().to_string());
    assert_eq!(tune(&[])["graded_by"], base_path.display().to_string());
    let own = out.display().to_string();
    assert_eq!(tune(&["--grader", &own])["graded_by"], own);
    // A recorded grader that is gone: the collection's own model grades, and tune says so.
    let mut moved = recorded.clone();
    moved["grader"]["dir"] = serde_json::json!(dir.path().join("gone").display().to_string());
    std::fs::write(out.join("kindred-context.json"), moved.to_string()).unwrap();
    let report = kindred(&data)
        .arg("--model")
        .arg(&out)
        .args(["tune", "-c", "forum", "--dry-run", "--json"])
        .args(["--held-out-every", "3", "--context-field", "answers"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&report.stderr);
    assert!(report.status.success(), "{err}");
    assert!(err.contains("is no longer there"), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&report.stdout).expect("tune's JSON");
    assert_eq!(v["graded_by"], "the collection's own model", "{v}");
}

/// `--method thread`: the contextual model `--grader thread` trains first (each question with
/// its first answers, rehearsing --general) is written as the model itself, with no harvest;
/// the collection moves onto it like onto any adapted model.
#[test]
fn train_context_method_thread_writes_the_contextual_model_as_the_model() {
    let (dir, data) = forum_with_context();
    let out = dir.path().join("thread");
    let general = general_file(dir.path());
    let report = run_ok(
        kindred(&data)
            .args([
                "train", "context", "-c", "forum", "--method", "thread", "--json",
            ])
            .args(["--held-out-every", "3", "--general-batch", "3"])
            .args(["--thread-texts", "2"])
            .args(QUICK_TRAINING)
            .arg("--general")
            .arg(&general)
            .arg("--out")
            .arg(&out),
    );
    let v: serde_json::Value = serde_json::from_str(&report).expect("JSON report");
    assert_eq!(v["method"], "thread", "{v}");
    // Each question with its first two context texts (`--thread-texts`; three by default).
    let pairs = |texts| thread_sets(&forum(), texts, 3).train.len() as u64;
    assert_eq!(v["texts_per_question"], 2, "{v}");
    assert_eq!(v["selection"]["pairs"], pairs(2), "{v}");
    assert!(pairs(2) >= 20 && pairs(2) < pairs(3), "{v}");
    assert!(v["selection"]["general_pairs"].as_u64().unwrap() > 0, "{v}");
    assert!(v.get("harvest").is_none(), "nothing was harvested: {v}");
    assert!(!out.join("grader").exists(), "the model is OUT itself");
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("kindred-context.json")).unwrap())
            .unwrap();
    assert_eq!(written["method"], "thread");
    let model = kindred::model::ModelDir::open(&out).expect("a model directory");
    assert_ne!(
        model.identity().unwrap().fingerprint,
        model_dir().identity().unwrap().fingerprint,
        "the model was trained"
    );
    run_ok(
        kindred(&data)
            .arg("--model")
            .arg(&out)
            .args(["reindex", "-c", "forum"]),
    );
    assert_on_model(&data, &out);
    // No text per question is no training data: refused before anything is read.
    let err = run_refused(kindred(&data).args([
        "train",
        "context",
        "-c",
        "forum",
        "--method",
        "thread",
        "--thread-texts",
        "0",
    ]));
    assert!(err.contains("at least 1 context text"), "{err}");
}

/// Runs `adapt --json` on the synthetic forum of `data` into `out`, with training flags that
/// keep it short, `general` as --general and `extra` flags; returns train context's JSON
/// report (the first printed) and tune's (the last).
fn adapt_quickly(
    data: &Path,
    general: &Path,
    out: &Path,
    extra: &[&str],
) -> (serde_json::Value, serde_json::Value) {
    let report = run_ok(
        kindred(data)
            .args(["adapt", "-c", "forum", "--json", "--held-out-every", "3"])
            .args(extra)
            .args(QUICK_TRAINING)
            .args(["--general-batch", "3"])
            .arg("--general")
            .arg(general)
            .arg("--out")
            .arg(out),
    );
    let trained = serde_json::Deserializer::from_str(&report)
        .into_iter::<serde_json::Value>()
        .next()
        .expect("train context's JSON report")
        .expect("JSON");
    let tune_json = &report[report.rfind("\n{").map_or(0, |i| i + 1)..];
    let tuned = serde_json::from_str(tune_json).expect("tune's JSON report");
    (trained, tuned)
}

/// `adapt` without `--method` trains the contextual model alone (the measured best with the
/// context channel, EVALUATION.md "Adapting without labels"), then reindexes and tunes with the channel among
/// the configurations, so that `rerank: context` works on the adapted collection at once
/// (before: the grader and a three-run soup, not measured with the channel).
#[test]
fn adapt_trains_the_contextual_model_by_default_and_tunes_with_the_context_channel() {
    let (dir, data) = forum_with_context();
    let out = dir.path().join("adapted");
    let general = general_file(dir.path());
    // Flags that only the encoder method reads are refused without it, naming it.
    let err = run_refused(kindred(&data).args(["adapt", "-c", "forum", "--runs", "3"]));
    assert!(err.contains("--method encoder"), "{err}");
    let err = run_refused(kindred(&data).args(["adapt", "-c", "forum", "--grader", "thread"]));
    assert!(err.contains("--method encoder"), "{err}");
    // An --out holding an interrupted encoder run (how adapt trained by default before) is
    // not silently started over by the new default.
    let earlier = dir.path().join("earlier");
    std::fs::create_dir_all(earlier.join("grader/checkpoint")).unwrap();
    std::fs::write(earlier.join("grader/checkpoint/state.json"), "{}").unwrap();
    let err = run_refused(
        kindred(&data)
            .args(["adapt", "-c", "forum", "--resume", "--out"])
            .arg(&earlier),
    );
    assert!(
        err.contains("--method encoder") && err.contains(&*earlier.to_string_lossy()),
        "{err}"
    );
    // Without --general, adapt says what that costs and how to keep it.
    assert!(err.contains("--general FILE"), "{err}");
    // A set of context vectors made with the base model before adapting: adapt's reindex
    // leaves it stale (not made twice) and its tune makes it with the adapted model.
    run_ok(kindred(&data).args(["tune", "-c", "forum"]));

    let (trained, v) = adapt_quickly(&data, &general, &out, &[]);
    assert_eq!(trained["method"], "thread", "{trained}");
    assert!(trained.get("harvest").is_none(), "{trained}");
    assert!(
        !out.join("grader").exists(),
        "no grader: the model is OUT itself"
    );
    assert_on_model(&data, &out);
    assert_eq!(v["stored"], true, "{v}");
    assert_eq!(v["graded_by"], "the collection's own model", "{v}");
    let rows = v["tuning"]["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 35, "{v}");
    // tune made the context vectors with the adapted model: stats reports them, and a
    // search with the channel runs on the collection as adapt left it.
    let stats: serde_json::Value = serde_json::from_str(&run_ok(
        kindred(&data)
            .env_remove("KINDRED_MODEL")
            .args(["stats", "forum", "--json"]),
    ))
    .unwrap();
    assert_eq!(
        stats["context_vectors"]["model"], stats["settings"]["model"]["fingerprint"],
        "{stats}"
    );
    assert_eq!(stats["context_vectors"]["stale"], false, "{stats}");
    assert_eq!(
        stats["context_vectors"]["documents"],
        forum().iter().filter(|d| !d.context.is_empty()).count() as u64,
        "{stats}"
    );
    let hits: serde_json::Value =
        serde_json::from_str(&run_ok(kindred(&data).env_remove("KINDRED_MODEL").args([
            "search",
            "-c",
            "forum",
            "--rerank",
            "context",
            "--json",
            "How do I renew my driving licence?",
        ])))
        .unwrap();
    assert_eq!(hits["hits"][0]["id"], "q0", "{hits}");
    assert!(hits["hits"][0]["stages"]["context"].is_number(), "{hits}");
}

#[test]
fn adapt_trains_reindexes_and_tunes_the_collection_in_one_command() {
    let (dir, data) = forum_with_context();
    let out = dir.path().join("adapted");
    let general = general_file(dir.path());
    // With --method encoder (adapt's default is thread, the test above): three runs,
    // averaged, unless --runs says otherwise.
    let (trained, v) = adapt_quickly(&data, &general, &out, &["--method", "encoder"]);
    assert_eq!(trained["method"], "encoder soup", "{trained}");
    let seeds: Vec<_> = trained["selection"]["runs"]
        .as_array()
        .expect("the runs")
        .iter()
        .map(|r| r["seed"].as_u64().unwrap())
        .collect();
    assert_eq!(seeds, [42, 43, 44], "{trained}");
    // With --general and no --grader, adapt grades with a `thread` grader: a contextual
    // model trained first on the forum's own threads (each question with its first answers),
    // kept beside the adapted model.
    assert_eq!(trained["grader"]["model"], "thread", "{trained}");
    assert!(
        trained["grader"]["selection"]["pairs"].as_u64().unwrap() >= 20,
        "{trained}"
    );
    assert!(
        trained["grader"]["selection"]["held_out_pairs"]
            .as_u64()
            .unwrap()
            >= 2,
        "{trained}"
    );
    // The grader rehearses the --general pairs the runs keep in order, so that it keeps
    // general similarity as they do.
    assert!(
        trained["grader"]["selection"]["general_pairs"]
            .as_u64()
            .is_some_and(|n| n > 0),
        "{trained}"
    );
    let grader = kindred::model::ModelDir::open(&out.join("grader")).expect("the grader");
    assert_ne!(
        grader.identity().unwrap().fingerprint,
        model_dir().identity().unwrap().fingerprint,
        "the grader was trained"
    );
    assert_eq!(
        trained["grader"]["identity"]["fingerprint"],
        serde_json::to_value(grader.identity().unwrap().fingerprint).unwrap()
    );
    assert_eq!(v["stored"], true, "{v}");
    assert!(v["tuning"]["queries"].as_u64().unwrap() >= 1, "{v}");
    assert!(
        v["reason"].as_str().unwrap().contains("held-out questions"),
        "{v}"
    );
    // tune grades with the model that graded the training (the thread grader), not with the
    // adapted model's own grades.
    let grader_path = std::fs::canonicalize(out.join("grader")).unwrap();
    assert_eq!(v["graded_by"], grader_path.display().to_string(), "{v}");
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .ends_with(&format!("(grades by {})", grader_path.display())),
        "{v}"
    );

    // Searches now run on the adapted model (no --model needed) with the learned defaults.
    let hits = run_ok(kindred(&data).env_remove("KINDRED_MODEL").args([
        "search",
        "-c",
        "forum",
        "--json",
        "How do I renew my driving licence?",
    ]));
    let h: serde_json::Value = serde_json::from_str(&hits).expect("JSON hits");
    assert_eq!(h["hits"][0]["id"], "q0", "{h}");
    assert_eq!(h["settings"]["source"]["mode"], "collection", "{h}");
    assert_eq!(h["settings"]["mode"], v["chosen"]["mode"], "{h} {v}");
    assert_on_model(&data, &out);

    // A soup made by hand (`train blend`) of models graded by one grader records that grader,
    // so that tune grades it as it grades its runs; a soup with a model graded otherwise (here
    // the grader itself, which records none) records nothing.
    let copy = dir.path().join("adapted-copy");
    std::fs::create_dir(&copy).unwrap();
    for entry in std::fs::read_dir(&out).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, copy.join(path.file_name().unwrap())).unwrap();
        }
    }
    let blend = |second: &Path, soup: &Path| {
        run_ok(
            kindred(&data)
                .args(["train", "blend", "--alpha", "1", "--tuned"])
                .arg(&out)
                .arg("--tuned")
                .arg(second)
                .arg("--out")
                .arg(soup),
        );
        std::fs::read(soup.join("kindred-context.json"))
            .ok()
            .map(|raw| serde_json::from_slice::<serde_json::Value>(&raw).unwrap())
    };
    let soup = blend(&copy, &dir.path().join("soup")).expect("the shared grader recorded");
    assert_eq!(
        soup["grader"]["identity"], trained["grader"]["identity"],
        "{soup}"
    );
    assert_eq!(soup["blend_of"].as_array().map(Vec::len), Some(2), "{soup}");
    assert!(
        blend(&out.join("grader"), &dir.path().join("mixed")).is_none(),
        "a soup of models graded differently records no grader"
    );

    // The adapted model moved (renamed, or trained elsewhere and copied here). The
    // collection's commands name the reindex that records its new place (before: "not
    // usable … drop the option"); and the model's record still names its grader's old
    // directory, so `tune` finds the grader where `adapt` keeps it, inside the model
    // (before: the collection's own model graded, which picks worse settings).
    let moved = dir.path().join("moved");
    std::fs::rename(&out, &moved).unwrap();
    let search = || {
        kindred(&data)
            .env_remove("KINDRED_MODEL")
            .args([
                "search",
                "-c",
                "forum",
                "--json",
                "How do I renew my driving licence?",
            ])
            .output()
            .expect("runs")
    };
    let lost = search();
    let err = String::from_utf8_lossy(&lost.stderr);
    assert!(
        !lost.status.success() && err.contains("reindex") && err.contains("--model"),
        "{err}"
    );
    // Reindexing onto the same weights at their new place records it (before: refused as
    // "already uses"), and the collection finds its model again.
    run_ok(
        kindred(&data)
            .args(["reindex", "-c", "forum", "--model"])
            .arg(&moved),
    );
    let found = search();
    assert!(
        found.status.success(),
        "{}",
        String::from_utf8_lossy(&found.stderr)
    );
    run_refused(
        kindred(&data)
            .args(["reindex", "-c", "forum", "--model"])
            .arg(&moved),
    );
    let tuned = run_ok(kindred(&data).env_remove("KINDRED_MODEL").args([
        "tune",
        "-c",
        "forum",
        "--json",
        "--dry-run",
    ]));
    let t: serde_json::Value = serde_json::from_str(&tuned).expect("tune's JSON report");
    let moved_grader = std::fs::canonicalize(moved.join("grader")).unwrap();
    assert_eq!(t["graded_by"], moved_grader.display().to_string(), "{t}");
}

/// `adapt` reindexes in its second step, which the Milvus backend does not offer: it says so
/// before it trains (before, it trained for minutes and then failed at the reindex).
#[test]
fn adapt_on_the_milvus_backend_is_refused_before_it_trains_naming_the_steps_to_take() {
    let data = tempfile::tempdir().expect("tempdir");
    let started = std::time::Instant::now();
    let err = run_refused(kindred(data.path()).args([
        "--backend",
        "milvus://127.0.0.1:1",
        "adapt",
        "--collection",
        "faq",
    ]));
    assert!(
        err.contains("not available on the milvus backend")
            && err.contains("train context --collection faq")
            && err.contains("ingest"),
        "{err}"
    );
    assert!(started.elapsed().as_secs() < 30, "{:?}", started.elapsed());
}

/// A collection that does not exist fails `adapt` and `train context` with that error alone:
/// no step or output directory announced first (before: "1/3 train context: harvesting
/// pairs…" and "training into OUT (… --resume continues it)" preceded it), and nothing written.
#[test]
fn adapt_and_train_context_on_a_missing_collection_fail_before_announcing_a_step() {
    let data = tempfile::tempdir().expect("tempdir");
    let out = data.path().join("adapted");
    let out_arg = out.to_str().expect("utf-8 path");
    for args in [
        vec!["adapt", "-c", "nope", "--out", out_arg],
        vec![
            "adapt", "-c", "nope", "--method", "thread", "--out", out_arg,
        ],
        vec!["train", "context", "-c", "nope", "--out", out_arg],
    ] {
        let err = run_refused(kindred(data.path()).args(&args));
        assert!(
            err.contains("collection \"nope\" does not exist")
                && !err.contains("1/3")
                && !err.contains("training into"),
            "{args:?}: {err}"
        );
        assert!(!out.exists(), "{args:?} wrote {}", out.display());
    }
}

#[test]
fn eval_forum_reproduces_the_tasks_baseline_and_ranks_above_it_on_semeval_dev() {
    let dev = crate::common::shared_data("semeval2016_task3/SemEval2016-Task3-CQA-QL-dev.xml");
    let questions = kindred::eval::forum::read_forum(&dev).expect("reads the dev file");
    assert_eq!(questions.len(), 50);
    assert_eq!(
        questions.iter().map(|q| q.related.len()).sum::<usize>(),
        500
    );
    assert!(questions
        .iter()
        .all(|q| q.related.iter().all(|r| r.comments.len() == 10)));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("forum.json");
    run_ok(
        kindred(&dir.path().join("data"))
            .args(["eval", "forum"])
            .arg(&dev)
            .arg("--out")
            .arg(&out),
    );
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let map = |name: &str| -> f64 {
        v["report"]["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["ranking"].as_str().unwrap().starts_with(name))
            .unwrap_or_else(|| panic!("no row {name}: {v}"))["map"]
            .as_f64()
            .unwrap()
    };
    // The official scorer's MAP of the search engine's order on dev is 71.35.
    assert!((map("search engine") - 71.35).abs() < 0.005, "{v}");
    assert!(map("cosine") > 75.0, "{v}");
    // The context channel (each thread's comments) ranks above the question cosine alone
    // (77.09 against 76.57 measured).
    assert!(map("cosine → context") > map("cosine") + 0.3, "{v}");
    // Every vector stage sees all ten related questions through the filter.
    for r in v["report"]["rows"].as_array().unwrap() {
        if !r["ranking"].as_str().unwrap().starts_with("lexical") {
            assert_eq!(r["incomplete"], 0, "{r}");
        }
    }
}

/// An adaptation is one library job ([`kindred::train::adapt::run`]): it reports through its
/// callback (each harvest step's progress, ended by `Done` before the note of what was
/// harvested) and prints nothing; the record it returns is the one written into OUT, which is
/// then refused as the OUT of another run. The transition method trains in seconds.
#[test]
fn an_adaptation_is_one_library_job_that_reports_through_its_callback() {
    use kindred::train::adapt::{self, GradeWith, Job, Method, Progress, Training};
    use kindred::train::record::{ContextRecord, RECORD_FILE};
    let docs = forum();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("adapted");
    let load =
        |d: &kindred::ModelDir| kindred::Encoder::load(d, kindred::EncoderOptions::default());
    let job = Job {
        collection: "forum",
        context_fields: &[],
        docs: &docs,
        base: model_dir(),
        encoder: crate::common::exact_encoder(),
        out: &out,
        method: Method::Transition,
        grader: GradeWith::Base,
        harvest: HarvestOptions {
            neighbours: 5,
            held_out_every: 4,
            ..HarvestOptions::default()
        },
        general: None,
        training: Training {
            epochs: 1,
            max_steps: 4,
            lr: 1e-4,
            batch: 8,
            graded_batch: 8,
            graded_weight: 1.0,
            general_batch: 8,
            general_weight: 3.0,
            seed: 7,
            eval_every: 2,
            thread_texts: 3,
            low_memory: false,
            resume: false,
        },
        allow_unrelated_context: false,
        device: kindred::DeviceKind::Cpu,
        load_encoder: &load,
    };
    let mut seen: Vec<String> = Vec::new();
    let record = adapt::run(&job, &mut |p| {
        seen.push(match p {
            Progress::Note(line) => format!("note {line}"),
            Progress::Step { what, .. } => format!("step {what}"),
            Progress::Clrcmd(_) => "clrcmd".into(),
            Progress::Done => "done".into(),
        })
    })
    .expect("adapts");
    assert_eq!(record.trained.method(), "transition");
    assert_eq!(record.collection, "forum");
    let written: ContextRecord =
        serde_json::from_str(&std::fs::read_to_string(out.join(RECORD_FILE)).unwrap()).unwrap();
    assert_eq!(written, record);
    assert!(
        kindred::ModelDir::open(&out).is_ok(),
        "OUT is a model directory"
    );
    let harvested = seen
        .iter()
        .position(|s| s.starts_with("note harvested"))
        .unwrap_or_else(|| panic!("no harvest note in {seen:?}"));
    assert!(
        seen[..harvested].iter().any(|s| s.starts_with("step ")) && seen[harvested - 1] == "done",
        "{seen:?}"
    );
    let refused = adapt::check_out(&out, "forum", false)
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("holds a finished adapted model"),
        "{refused}"
    );
}

/// `train context` first judges the context on a sample of the collection's questions, so that
/// a large collection whose context is not about its questions is refused in a minute, not
/// after its whole harvest; a collection of at most twice the sample is not sampled.
#[test]
fn the_precheck_judges_a_sample_and_skips_small_collections() {
    // The context grade: a context every question shares grades every pair alike (the
    // retrieval grade's order on so few pairs is chance).
    let options = HarvestOptions {
        neighbours: 5,
        signal: Signal::Context,
        ..HarvestOptions::default()
    };
    let mut shared = forum();
    for d in &mut shared {
        d.context = vec!["category: Qatar Living".into()];
    }
    let why = precheck(encoder(), &shared, &options, 7, &mut |_, _, _| {})
        .expect("harvests")
        .expect("a context every question shares is not about them");
    assert!(why.contains("on a sample of 7 questions"), "{why}");
    assert_eq!(
        precheck(encoder(), &forum(), &options, 7, &mut |_, _, _| {}).expect("harvests"),
        None,
        "each question's own answers are about it"
    );
    assert_eq!(
        precheck(encoder(), &shared, &options, 8, &mut |_, _, _| {}).expect("nothing to do"),
        None,
        "16 questions are at most twice a sample of 8: not sampled"
    );
}

/// A context every document shares (a `category` that is the same for all) grades pairs by
/// nothing about the questions: `train context` refuses before it trains, naming the
/// agreement and the way out, and writes nothing; `tune` keeps the built-in default and says
/// why. (Before, both went ahead: on 10,000 questions given other threads' comments, tune
/// stored "hybrid → P(duplicate)" from noise.)
#[test]
fn context_that_does_not_belong_to_its_questions_is_not_learned_or_tuned_from() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    ingest_forum(
        dir.path(),
        &data,
        |_, d| serde_json::json!({ "id": d.id, "text": d.text, "metadata": { "category": "Qatar Living" } }),
    );
    let out = dir.path().join("adapted");
    let err = run_refused(
        kindred(&data)
            .args([
                "train",
                "context",
                "-c",
                "forum",
                "--context-field",
                "category",
            ])
            .args(["--held-out-every", "3", "--max-steps", "1", "--out"])
            .arg(&out),
    );
    assert!(
        err.contains("hardly agree with the questions' own similarity")
            && err.contains("Spearman")
            && err.contains("--allow-unrelated-context")
            && err.contains("nothing was trained"),
        "{err}"
    );
    assert!(!out.exists(), "nothing is written");

    // With the flag it trains (the transition matrix: seconds), and warns.
    let forced = kindred(&data)
        .args([
            "train",
            "context",
            "-c",
            "forum",
            "--context-field",
            "category",
        ])
        .args(["--held-out-every", "3", "--method", "transition"])
        .args(["--allow-unrelated-context", "--out"])
        .arg(&out)
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&forced.stderr);
    assert!(forced.status.success(), "{err}");
    assert!(
        err.contains("warning") && err.contains("training anyway"),
        "{err}"
    );

    let tuned = run_ok(kindred(&data).args([
        "tune",
        "-c",
        "forum",
        "--context-field",
        "category",
        "--held-out-every",
        "3",
        "--json",
    ]));
    let v: serde_json::Value = serde_json::from_str(&tuned).expect("tune's JSON report");
    assert_eq!(v["chosen"]["name"], "hybrid 1/1/1 → RCMD", "{v}");
    assert_eq!(v["stored"], true, "{v}");
    let reason = v["reason"].as_str().unwrap();
    assert!(
        reason.contains("stays") && reason.contains("hardly agree"),
        "{reason}"
    );
    assert!(v["tuning"]["unrelated"].is_string(), "{v}");
}

/// A step of `adapt` after the training that fails says what state it left and the commands
/// that finish the job: here `tune` finds no held-out question (one in 1,000 of 16), after the
/// collection moved onto the adapted model (before: only tune's own error, with nothing on
/// what the first two steps had done).
#[test]
fn adapt_that_fails_after_training_names_what_is_done_and_what_is_left() {
    let (dir, data) = forum_with_context();
    let out = dir.path().join("adapted");
    let err = run_refused(
        kindred(&data)
            .args([
                "adapt",
                "-c",
                "forum",
                "--held-out-every",
                "1000",
                "--runs",
                "1",
            ])
            .args(QUICK_TRAINING)
            .arg("--out")
            .arg(&out),
    );
    // Without --general, the collection's own model graded the harvest: no grader was trained.
    assert!(!out.join("grader").exists());
    assert!(
        err.contains("step 3/3, tune")
            && err.contains("is on the adapted model")
            && err.contains("`kindred tune --collection forum`")
            && err.contains("one in 1000, --held-out-every"),
        "{err}"
    );
    assert_on_model(&data, &out);
}

/// `train context` killed (SIGKILL) between the runs of a soup is refused when run again into
/// the same --out (before it harvests, naming --resume, the checkpoint kept), and continued
/// with --resume: the finished run resumes at its end, the other trains, the soup is written.
/// A finished --out is not overwritten, and --resume with nothing to continue is refused.
/// (Before: the rerun harvested, then failed with CLRCMD's "pass --resume", a flag train
/// context did not have.)
#[test]
fn an_interrupted_train_context_is_refused_without_resume_and_continued_with_it() {
    let (dir, data) = forum_with_context();
    let out = dir.path().join("adapted");
    let train = |out: &Path| {
        let mut cmd = kindred(&data);
        cmd.args([
            "train",
            "context",
            "-c",
            "forum",
            "--runs",
            "2",
            "--eval-every",
            "1",
        ])
        .args(QUICK_TRAINING)
        .arg("--out")
        .arg(out);
        cmd
    };
    let mut child = train(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let first = out.join("runs/seed-42/checkpoint/state.json");
    let deadline = Instant::now() + Duration::from_secs(900);
    while !first.exists() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "train context ended before its first run's checkpoint"
        );
        assert!(Instant::now() < deadline, "no checkpoint after 15 minutes");
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success(), "killed before the second run ended");
    assert!(!out.join("kindred-context.json").exists());

    let err = run_refused(&mut train(&out));
    assert!(
        err.contains("interrupted run") && err.contains("seed-42") && err.contains("--resume"),
        "{err}"
    );
    assert!(first.exists(), "the refusal kept the checkpoint");

    let resumed = train(&out).args(["--resume", "--json"]).output().unwrap();
    let err = String::from_utf8_lossy(&resumed.stderr);
    assert!(resumed.status.success(), "{err}");
    assert!(err.contains("resuming") && err.contains("seed-42"), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&resumed.stdout).expect("JSON summary");
    assert_eq!(v["method"], "encoder soup", "{v}");
    let runs = v["selection"]["runs"].as_array().expect("runs");
    assert_eq!(
        runs.iter()
            .map(|r| (r["seed"].as_u64(), r["selection"]["steps"].as_u64()))
            .collect::<Vec<_>>(),
        vec![(Some(42), Some(1)), (Some(43), Some(1))],
        "{v}"
    );
    assert!(out.join("kindred-context.json").exists());
    assert!(
        !out.join("runs").exists(),
        "the runs are removed once averaged"
    );

    let err = run_refused(train(&out).arg("--resume"));
    assert!(
        err.contains("finished adapted model") && err.contains("reindex --collection forum"),
        "{err}"
    );
    let err = run_refused(train(&dir.path().join("new")).arg("--resume"));
    assert!(err.contains("no checkpoint"), "{err}");
}

/// The context channel (`rerank: context`): refused with the fix until `kindred tune` makes the
/// collection's context vectors; then each hit's `stages.context` is the query's cosine to the
/// normalised mean of its answers' sentence vectors, and its score the question cosine and
/// that, each standardised over the hits, summed. Documents written afterwards with context
/// (`kindred add`, `kindred ingest`) get their vectors as they are written; one without
/// context is ranked by its question alone. A reindex makes the set again with the new model.
#[test]
fn rerank_context_reads_the_vectors_tune_makes_and_new_documents_get_theirs() {
    use kindred::score::context::{fused, mean_direction};
    let (dir, data) = forum_with_context();
    let query = "Where do I renew my driving licence?";
    // After the reindex below, searches name the collection's new model (as a user's would).
    let model = std::cell::RefCell::new(model_dir().path.clone());
    let search = |k: usize| -> serde_json::Value {
        let k = k.to_string();
        let out = run_ok(kindred(&data).arg("--model").arg(&*model.borrow()).args([
            "search", "-c", "forum", "--rerank", "context", "-k", &k, "--json", query,
        ]));
        serde_json::from_str(&out).expect("search JSON")
    };
    let refused =
        run_refused(kindred(&data).args(["search", "-c", "forum", "--rerank", "context", query]));
    assert!(
        refused.contains("no context vectors")
            && refused.contains("kindred tune --collection forum"),
        "{refused}"
    );

    let report = run_ok(kindred(&data).args(["tune", "-c", "forum", "--dry-run", "--json"]));
    let v: serde_json::Value = serde_json::from_str(&report).expect("tune's JSON report");
    let names: Vec<&str> = v["tuning"]["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| r["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names.len(), 35, "{names:?}");
    assert!(
        names[28..].iter().all(|n| n.ends_with("→ context")),
        "{names:?}"
    );

    // Every document: the channel over all 16, checked against the encoder directly.
    let encoder = crate::common::encoder();
    let q = encoder.encode_one(query).unwrap().sentence;
    let expected_context = |context: &[String]| -> f32 {
        let rows: Vec<Vec<f32>> = encoder
            .encode(context)
            .unwrap()
            .into_iter()
            .map(|e| e.sentence)
            .collect();
        let rows: Vec<&[f32]> = rows.iter().map(Vec::as_slice).collect();
        kindred::score::dot(&q, &mean_direction(&rows).unwrap())
    };
    let check = |out: &serde_json::Value,
                 contexts: &std::collections::HashMap<String, Vec<String>>| {
        let hits = out["hits"].as_array().expect("hits");
        assert_eq!(out["settings"]["rerank"], "context", "{out}");
        let f =
            |h: &serde_json::Value, key: &str| h["stages"][key]["score"].as_f64().unwrap() as f32;
        let question: Vec<f32> = hits.iter().map(|h| f(h, "cosine")).collect();
        let context: Vec<Option<f32>> = hits
            .iter()
            .map(|h| h["stages"]["context"].as_f64().map(|c| c as f32))
            .collect();
        for (h, (c, score)) in hits
            .iter()
            .zip(context.iter().zip(fused(&question, &context)))
        {
            let id = h["id"].as_str().unwrap();
            let got = h["score"].as_f64().unwrap() as f32;
            assert!(
                (got - score).abs() < 1e-4,
                "{id}: score {got} against {score}"
            );
            match contexts.get(id).filter(|c| !c.is_empty()) {
                Some(ctx) => {
                    let want = expected_context(ctx);
                    let c = c.unwrap_or_else(|| panic!("{id} has no context score: {h}"));
                    assert!((c - want).abs() < 0.01, "{id}: context {c} against {want}");
                }
                None => assert_eq!(*c, None, "{id} has no context: {h}"),
            }
        }
        let scores: Vec<f64> = hits.iter().map(|h| h["score"].as_f64().unwrap()).collect();
        assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
    };
    let mut contexts: std::collections::HashMap<String, Vec<String>> =
        forum().into_iter().map(|d| (d.id, d.context)).collect();
    let out = search(16);
    assert_eq!(out["hits"].as_array().unwrap().len(), 16);
    check(&out, &contexts);

    // Written afterwards: through `add` (the engine) and `ingest` (its pipeline).
    let new = (
        "new",
        "Is there a cheap place to renew a licence?",
        vec!["The traffic department in Al Rayyan, bring your eye test.".to_string()],
    );
    let ingested = (
        "ingested",
        "Who renews licences fastest?",
        vec![
            "Madinat Khalifa traffic office, ten minutes.".to_string(),
            "Yes".to_string(),
        ],
    );
    let line = |(id, text, context): &(&str, &str, Vec<String>)| {
        serde_json::json!({"id": id, "text": text, "context": context}).to_string()
    };
    let file = dir.path().join("more.jsonl");
    std::fs::write(
        &file,
        format!(
            "{}\n{}\n",
            line(&new),
            serde_json::json!({"id": "bare", "text": "Renewing a licence: how?"})
        ),
    )
    .unwrap();
    run_ok(kindred(&data).args(["add", "-c", "forum"]).arg(&file));
    std::fs::write(&file, line(&ingested) + "\n").unwrap();
    run_ok(kindred(&data).args(["ingest", "-c", "forum"]).arg(&file));
    for (id, _, context) in [new, ingested] {
        contexts.insert(id.to_string(), context);
    }
    let out = search(19);
    let ids: Vec<&str> = out["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["id"].as_str().unwrap())
        .collect();
    assert!(
        ["new", "ingested", "bare"]
            .iter()
            .all(|id| ids.contains(id)),
        "{ids:?}"
    );
    check(&out, &contexts);

    // A reindex onto another model makes the set again with it (the test's second model keeps
    // every cosine, not the vectors or the fingerprint): the same channel after it.
    run_ok(
        kindred(&data)
            .arg("--model")
            .arg(&crate::common::other_model().path)
            .args(["reindex", "-c", "forum"]),
    );
    assert_on_model(&data, &crate::common::other_model().path);
    *model.borrow_mut() = crate::common::other_model().path.clone();
    check(&search(19), &contexts);

    // A collection that never had a set gets one from a reindex asked for it
    // (`--context-vectors`; over HTTP `"context_vectors": true`), as a served collection moved
    // onto a model adapted on a copy needs.
    let (_other_dir, other) = forum_with_context();
    run_ok(
        kindred(&other)
            .arg("--model")
            .arg(&crate::common::other_model().path)
            .args(["reindex", "-c", "forum", "--context-vectors"]),
    );
    let out = run_ok(kindred(&other).arg("--model").arg(&*model.borrow()).args([
        "search", "-c", "forum", "--rerank", "context", "-k", "16", "--json", query,
    ]));
    let out: serde_json::Value = serde_json::from_str(&out).expect("search JSON");
    check(
        &out,
        &forum().into_iter().map(|d| (d.id, d.context)).collect(),
    );
}
