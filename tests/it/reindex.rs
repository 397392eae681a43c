//! Reindexing onto another model (library level, real model, real sled, real HNSW): searches
//! and writes go on during the reindex, writes made meanwhile are caught up, and the switched
//! collection survives a reopen.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use kindred::db::{Database, NewDocument};
use kindred::encoder::Encoders;
use kindred::engine::{Engine, OnReindex};
use kindred::search::SearchParams;
use kindred::store::{CollectionSettings, Durability};
use kindred::{Encoder, EncoderOptions, Error, UserError};

use crate::common::{cosine, encoder, model_dir, other_model, qqp_questions};

fn doc(id: String, text: &str) -> NewDocument {
    NewDocument {
        context: vec![format!("the context of {id}")],
        id,
        text: text.to_string(),
        metadata: serde_json::json!({ "n": 1 }),
    }
}

/// The sled tree names of the database in `dir` (opened directly, so the database is closed).
fn tree_names(dir: &std::path::Path) -> Vec<String> {
    crate::common::open_sled(&dir.join("store"))
        .tree_names()
        .iter()
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect()
}

/// A database in `dir` with an empty collection `c` on the test model.
fn collection_c(dir: &std::path::Path) -> Arc<Database> {
    let db = Arc::new(Database::open(dir, Durability::Flush).expect("opens"));
    db.create_collection(
        "c",
        &CollectionSettings::for_model(encoder().identity().clone()),
    )
    .expect("created");
    db
}

/// An engine over `db` as a server holds it: its own model the test model, others loaded from
/// the directories their collections record.
fn server_engine(db: &Arc<Database>) -> Engine {
    Engine::new(
        db.clone(),
        Encoders::new(
            Arc::new(Encoder::load(model_dir(), EncoderOptions::default()).expect("loads")),
            EncoderOptions::default(),
        ),
    )
}

#[test]
fn reindex_switches_models_while_searches_and_writes_go_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = collection_c(dir.path());
    let questions = qqp_questions("qqp_bimpm/dev.tsv");
    let docs: Vec<NewDocument> = questions[..600]
        .iter()
        .enumerate()
        .map(|(i, q)| doc(format!("q{i}"), q))
        .collect();
    crate::common::upsert(&db, "c", encoder(), docs).expect("stored");
    db.delete("c", "q5").expect("deleted");
    db.checkpoint().expect("saved");

    let other = Arc::new(Encoder::load(other_model(), EncoderOptions::default()).expect("loads"));
    // The engine the server would hold: it retries a request that a switch overtook.
    let engine = Arc::new(server_engine(&db));
    let done = Arc::new(AtomicBool::new(false));
    let searches = Arc::new(AtomicUsize::new(0));
    let searcher = {
        let (engine, done, searches) = (engine.clone(), done.clone(), searches.clone());
        // The writer replaces q100..q199 at most: q550 keeps its text throughout.
        let (text, want) = (questions[550].clone(), "q550");
        std::thread::spawn(move || {
            let params = SearchParams {
                k: 1,
                ..SearchParams::default()
            };
            while !done.load(Ordering::Acquire) {
                let out = engine
                    .with_collection("c", |col| col.search(&text, &params))
                    .expect("every search during the reindex is answered");
                assert_eq!(out.hits[0].id, want);
                searches.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let writer = {
        let (engine, done, questions) = (engine.clone(), done.clone(), questions.clone());
        std::thread::spawn(move || {
            let mut written = Vec::new();
            for (i, q) in questions[600..].iter().take(300).enumerate() {
                let id = if i % 3 == 0 {
                    format!("q{}", 100 + i / 3) // replace an existing document
                } else {
                    format!("new{i}")
                };
                engine
                    .write_with("c", |col| col.upsert(vec![doc(id.clone(), q)]))
                    .expect("every write during the reindex is accepted");
                written.push((id, q.clone()));
                if done.load(Ordering::Acquire) {
                    break;
                }
            }
            written
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(200));
    let report = engine
        .reindex(
            "c",
            other.clone(),
            Some(&other_model().path),
            OnReindex::Remake,
            &|_, _| {},
        )
        .expect("reindexed");
    // Writes keep going a little after the switch too.
    std::thread::sleep(std::time::Duration::from_millis(500));
    done.store(true, Ordering::Release);
    let written = writer.join().expect("writer");
    searcher.join().expect("searcher");
    assert!(
        searches.load(Ordering::Relaxed) >= 3,
        "searches ran during the reindex"
    );
    assert!(written.len() >= 3, "writes ran during the reindex");

    let settings = db.settings("c").expect("settings");
    assert_eq!(settings.model, *other.identity());
    assert_eq!(settings.generation, Some(1));
    assert_eq!(report.generation, 1);
    assert!(report.encoded >= 599, "{report:?}");
    let mut live: std::collections::BTreeMap<String, String> = questions[..600]
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 5)
        .map(|(i, q)| (format!("q{i}"), q.clone()))
        .collect();
    live.extend(written.iter().cloned());
    assert_eq!(db.count("c").expect("count") as usize, live.len());
    // Every document, whenever written, carries the new model's vectors of its latest text,
    // and its context.
    let texts: Vec<&str> = live.values().map(String::as_str).collect();
    let fresh = other.encode(&texts).expect("encodes");
    for ((id, text), e) in live.iter().zip(&fresh) {
        let stored = db.get("c", id).expect("reads").expect("present");
        assert_eq!(&stored.text, text, "{id}");
        assert_eq!(stored.context, [format!("the context of {id}")], "{id}");
        assert!(cosine(&stored.sentence, &e.sentence) > 0.9999, "{id}");
    }
    assert!(
        db.get("c", "q5").expect("reads").is_none(),
        "deletions stay deleted"
    );
    // The old model is refused for writes now, with the way out in the message.
    let err = crate::common::upsert(&db, "c", encoder(), vec![doc("x".into(), "a question")])
        .expect_err("old model refused");
    assert!(err.to_string().contains("kindred reindex"), "{err}");

    // Reopen: the new generation's saved indexes load, the old one is gone.
    drop((db, engine));
    let db = Arc::new(Database::open(dir.path(), Durability::Flush).expect("reopens"));
    let engine = Engine::with_encoder(db.clone(), other.clone());
    let (id, text) = written.last().expect("a write");
    let out =
        crate::common::search(&db, &other, "c", text, &SearchParams::default()).expect("search");
    assert_eq!(&out.hits[0].id, id);
    let info = db.info("c").expect("info");
    assert_eq!(info.stats.documents as usize, live.len());
    assert_eq!(info.index.lexical_documents, live.len());
    assert_eq!(
        info.index.cosine_points - info.index.tombstones,
        live.len(),
        "{:?}",
        info.index
    );
    let err = engine
        .reindex("c", other.clone(), None, OnReindex::Remake, &|_, _| {})
        .expect_err("same model refused");
    assert!(err.to_string().contains("already uses"), "{err}");
    let err = engine
        .reindex("nope", other.clone(), None, OnReindex::Remake, &|_, _| {})
        .expect_err("unknown collection");
    assert!(
        matches!(err, Error::User(UserError::UnknownCollection { .. })),
        "{err}"
    );
    // And back onto the first model: generation 2, old generation trees dropped.
    engine
        .reindex("c", encoder().clone(), None, OnReindex::Remake, &|_, _| {})
        .expect("back");
    assert_eq!(db.settings("c").expect("settings").generation, Some(2));
    let out =
        crate::common::search(&db, encoder(), "c", text, &SearchParams::default()).expect("search");
    assert_eq!(&out.hits[0].id, id);
    drop((db, engine));
    let names: Vec<String> = tree_names(dir.path())
        .into_iter()
        .filter(|n| n.starts_with("docs/"))
        .collect();
    assert_eq!(names, vec!["docs/c@2"]);
}

#[test]
fn reindex_cli_killed_midway_leaves_the_collection_whole_on_its_old_model() {
    let dir = tempfile::tempdir().expect("tempdir");
    let questions = qqp_questions("qqp_bimpm/dev.tsv");
    {
        let db = Database::open(dir.path(), Durability::Flush).expect("opens");
        db.create_collection(
            "c",
            &CollectionSettings::for_model(encoder().identity().clone()),
        )
        .expect("created");
        // Enough that the reindex takes well over the 3 s before the kill (1,500 took
        // under 4 s once the encoder ran int8).
        let docs: Vec<NewDocument> = questions[..6000]
            .iter()
            .enumerate()
            .map(|(i, q)| doc(format!("q{i}"), q))
            .collect();
        crate::common::upsert(&db, "c", encoder(), docs).expect("stored");
    }
    let kindred = |extra: &[&str]| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_kindred"));
        cmd.env_remove("KINDRED_MODEL")
            .env_remove("RUST_LOG")
            .arg("--data")
            .arg(dir.path())
            .args(extra);
        cmd
    };
    let other = other_model().path.to_str().expect("utf-8").to_string();
    let mut child = kindred(&["--model", &other, "reindex", "--collection", "c"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("starts");
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert!(
        child.try_wait().expect("polls").is_none(),
        "the reindex finished within 3 s; give it more documents"
    );
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");

    {
        let db = Arc::new(
            Database::open(dir.path(), Durability::Flush).expect("reopens after the kill"),
        );
        let settings = db.settings("c").expect("settings");
        assert_eq!(
            settings.model,
            *encoder().identity(),
            "still on the old model"
        );
        assert_eq!(settings.generation, None);
        assert_eq!(db.count("c").expect("count"), 6000);
        let out = crate::common::search(
            &db,
            encoder(),
            "c",
            &questions[700],
            &SearchParams::default(),
        )
        .expect("searches");
        assert_eq!(out.hits[0].id, "q700");
    }
    let trees: Vec<String> = tree_names(dir.path())
        .into_iter()
        .filter(|n| n.contains('@'))
        .collect();
    assert!(
        trees.is_empty(),
        "the unfinished generation was dropped: {trees:?}"
    );

    // Run to the end; then `kindred search` without --model uses the collection's model.
    let out = kindred(&["--model", &other, "reindex", "--collection", "c"])
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("reindexed c: 6000 documents"), "{stdout}");
    let out = kindred(&["search", "--collection", "c", "--json", &questions[700]])
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let hits: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(hits["hits"][0]["id"], "q700", "{hits}");
    // The default model is refused for writes, naming the way out.
    let file = dir.path().join("one.jsonl");
    std::fs::write(&file, "{\"id\": \"x\", \"text\": \"a new question\"}\n").expect("written");
    let out = kindred(&["add", "--collection", "c", file.to_str().expect("utf-8")])
        .env("KINDRED_MODEL", &model_dir().path)
        .output()
        .expect("runs");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("kindred reindex"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A file loading while a reindex switches the collection's model (an upload job on the
/// server) goes on with the new model: the batch the store refuses is encoded again with it,
/// and every later one starts with it. Before, the ingest kept the encoder it started with and
/// failed at the first batch after the switch.
#[test]
fn a_file_ingest_goes_on_through_a_reindex_with_the_new_model() {
    use kindred::ingest::{self, Fields, Format, IngestOptions};

    let dir = tempfile::tempdir().expect("tempdir");
    let db = collection_c(dir.path());
    let engine = server_engine(&db);
    let other = Arc::new(Encoder::load(other_model(), EncoderOptions::default()).expect("loads"));
    let questions = qqp_questions("qqp_bimpm/dev.tsv");
    let questions = &questions[..240];
    let file = dir.path().join("questions.jsonl");
    let lines: Vec<String> = questions
        .iter()
        .enumerate()
        .map(|(i, q)| serde_json::json!({ "id": format!("q{i}"), "text": q }).to_string())
        .collect();
    std::fs::write(&file, lines.join("\n")).expect("written");
    let opts = IngestOptions {
        path: file,
        format: Format::Jsonl,
        fields: Fields::default(),
        text_format: Default::default(),
        batch: 8,
        strict: false,
        restart: true,
        threads: None,
        max_text_chars: 2000,
        cancel: None,
    };
    let current = || Ok(engine.collection("c")?.encoder().clone());
    let mut switched_after = None;
    let summary = ingest::ingest(
        &db,
        dir.path(),
        &current,
        "c",
        &opts,
        |r| panic!("no row is rejected: {r:?}"),
        |p| {
            // After the second batch, while the next ones are read and encoded already.
            if switched_after.is_none() && p.written >= 16 {
                engine
                    .reindex(
                        "c",
                        other.clone(),
                        Some(&other_model().path),
                        OnReindex::Remake,
                        &|_, _| {},
                    )
                    .expect("reindexed");
                switched_after = Some(p.written);
            }
        },
    )
    .expect("the ingest goes on through the switch");
    assert_eq!(switched_after, Some(16));
    assert_eq!(summary.ingested, questions.len() as u64);
    assert_eq!(summary.rejected, 0);
    assert_eq!(db.count("c").expect("count") as usize, questions.len());
    // Every document carries the new model's vectors, whether written before the switch
    // (re-encoded by the reindex) or after it.
    let texts: Vec<&str> = questions.iter().map(String::as_str).collect();
    let fresh = other.encode(&texts).expect("encodes");
    for (i, e) in fresh.iter().enumerate() {
        let stored = db
            .get("c", &format!("q{i}"))
            .expect("reads")
            .expect("present");
        assert!(cosine(&stored.sentence, &e.sentence) > 0.9999, "q{i}");
    }
    let info = db.info("c").expect("info");
    assert_eq!(
        info.index.cosine_points - info.index.tombstones,
        questions.len()
    );
}
