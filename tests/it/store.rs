//! The storage engine on a real sled directory with the real model: collections, documents,
//! bad input, model and format refusal, persistence.

use kindred::db::{Database, NewDocument};
use kindred::store::{CollectionSettings, Durability, Store};
use kindred::UserError;
use serde_json::json;

use crate::common::{encoder, open_sled, qqp_questions};

fn doc(id: &str, text: &str, metadata: serde_json::Value) -> NewDocument {
    NewDocument {
        id: id.into(),
        text: text.into(),
        metadata,
        context: Vec::new(),
    }
}

fn new_db(dir: &std::path::Path) -> Database {
    let db = Database::open(dir, Durability::Flush).expect("opens");
    db.create_collection(
        "faq",
        &CollectionSettings::for_model(encoder().identity().clone()),
    )
    .expect("creates");
    db
}

fn user_err(e: kindred::Error) -> UserError {
    match e {
        kindred::Error::User(u) => u,
        other => panic!("expected a user error, got {other:?}"),
    }
}

#[test]
fn collections_documents_and_bad_input() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = new_db(dir.path());
    let enc = encoder();
    let settings = CollectionSettings::for_model(enc.identity().clone());
    assert!(matches!(
        user_err(
            db.create_collection("faq", &settings)
                .expect_err("duplicate")
        ),
        UserError::CollectionExists { .. }
    ));
    assert!(db.create_collection("no spaces!", &settings).is_err());
    assert!(matches!(
        user_err(
            crate::common::upsert(&db, "nope", enc, vec![doc("a", "hi", json!({}))])
                .expect_err("unknown")
        ),
        UserError::UnknownCollection { .. }
    ));

    // One bad document fails the whole batch; nothing is stored.
    let good = doc("q1", "How do I reset my password?", json!({"lang": "en"}));
    for (bad, needle) in [
        (
            doc("q2", "Fine text", json!(["not", "an", "object"])),
            "metadata must be a JSON object",
        ),
        (doc("q2", "   ", json!({})), "text is empty"),
        (
            doc(&"x".repeat(513), "Fine text", json!({})),
            "ids must be 1-512 bytes",
        ),
        (doc("", "Fine text", json!({})), "ids must be 1-512 bytes"),
    ] {
        let err =
            crate::common::upsert(&db, "faq", enc, vec![good.clone(), bad]).expect_err("rejected");
        assert!(err.to_string().contains(needle), "{err}");
        assert_eq!(db.count("faq").expect("count"), 0);
    }

    crate::common::upsert(
        &db,
        "faq",
        enc,
        vec![
            good.clone(),
            doc("q2", "Which payment methods do you accept?", json!(null)),
        ],
    )
    .expect("upserts");
    assert_eq!(db.count("faq").expect("count"), 2);
    let stored = db.get("faq", "q1").expect("get").expect("present");
    assert_eq!(stored.text, good.text);
    assert_eq!(stored.metadata()["lang"], "en");
    assert_eq!(
        db.get("faq", "q2")
            .expect("get")
            .expect("present")
            .metadata_json,
        "{}"
    );

    // Replace q1 everywhere: store and every index.
    let replaced = crate::common::upsert(
        &db,
        "faq",
        enc,
        vec![doc("q1", "Can I pay with PayPal?", json!({"v": 2}))],
    )
    .expect("upserts");
    assert!(replaced[0].replaced.is_some());
    assert_eq!(db.count("faq").expect("count"), 2);
    let q = enc
        .encode_one("How do I reset my password?")
        .expect("encodes");
    let hits = crate::common::cosine_hits(&db, "faq", &q.sentence, 10);
    assert_eq!(hits.len(), 2, "the old version of q1 is not returned");
    assert!(hits
        .iter()
        .all(|(d, _)| d.text != "How do I reset my password?"));
    let lexical = crate::common::lexical_hits(&db, "faq", "reset password", 10);
    assert!(
        lexical.is_empty(),
        "lexical index forgot the old text: {lexical:?}"
    );
    let paypal = crate::common::lexical_hits(&db, "faq", "paypal", 10);
    assert_eq!(paypal[0].0.id, "q1");

    assert!(db.delete("faq", "q2").expect("delete"));
    assert!(!db.delete("faq", "q2").expect("delete twice"));
    let ids: Vec<String> = db
        .documents("faq")
        .expect("iter")
        .map(|d| d.expect("doc").id)
        .collect();
    assert_eq!(ids, ["q1"]);
    let info = db.info("faq").expect("info");
    assert_eq!(info.stats.documents, 1);
    assert!((info.stats.bytes_per_token_vector - 388.0).abs() < 1e-9);

    db.drop_collection("faq").expect("drops");
    assert!(db.collections().expect("list").is_empty());
    assert!(!dir.path().join("indexes/faq").exists());
}

#[test]
fn vectors_of_another_model_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Database::open(dir.path(), Durability::Flush).expect("opens");
    let mut other = encoder().identity().clone();
    other.fingerprint = "sha256:0000".into();
    other.id = "acme/other-model".into();
    db.create_collection("c", &CollectionSettings::for_model(other))
        .expect("creates");
    let err = crate::common::upsert(
        &db,
        "c",
        encoder(),
        vec![doc("a", "hello there", json!({}))],
    )
    .expect_err("model mismatch");
    let msg = err.to_string();
    assert!(matches!(user_err(err), UserError::ModelMismatch { .. }));
    assert!(
        msg.contains("acme/other-model") && msg.contains("--model"),
        "{msg}"
    );
}

#[test]
fn store_of_a_newer_format_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    drop(new_db(dir.path()));
    Store::stamp_format_version_for_tests(&dir.path().join("store"), 5).expect("stamps");
    let err = Database::open(dir.path(), Durability::Flush).expect_err("refused");
    assert_eq!(
        err.to_string(),
        format!(
            "cannot open the store at {}: it has format version 5, newer than this kindred's 4; \
             upgrade kindred to open it",
            dir.path().join("store").display()
        )
    );
}

#[test]
fn reopened_store_gives_identical_results() {
    let dir = tempfile::tempdir().expect("tempdir");
    let questions: Vec<String> = qqp_questions("qqp_bimpm/dev.tsv")
        .into_iter()
        .take(400)
        .collect();
    let enc = encoder();
    let queries = enc.encode(&questions[..20]).expect("encodes");
    let run = |db: &Database| -> Vec<Vec<(String, f32)>> {
        queries
            .iter()
            .flat_map(|q| {
                [
                    crate::common::cosine_hits(db, "faq", &q.sentence, 10),
                    crate::common::w2_hits(db, "faq", &q.intent, 10),
                ]
            })
            .map(|hits| hits.into_iter().map(|(d, s)| (d.id, s)).collect())
            .collect()
    };
    let before = {
        let db = new_db(dir.path());
        let docs = questions
            .iter()
            .enumerate()
            .map(|(i, q)| doc(&format!("q{i}"), q, json!({ "n": i })))
            .collect();
        crate::common::upsert(&db, "faq", enc, docs).expect("upserts");
        db.delete("faq", "q399").expect("deletes");
        run(&db)
    };
    assert_eq!(before[0][0].0, "q0", "a stored question finds itself first");
    // Reopen: indexes load from their saved files.
    let db = Database::open(dir.path(), Durability::Flush).expect("reopens");
    assert_eq!(run(&db), before);
    let index = db.info("faq").expect("info").index;
    assert_eq!(
        (index.tombstones, index.w2_tombstones),
        (1, 1),
        "one per graph"
    );
    drop(db);
    // Without index files they are rebuilt from the store: same documents found first.
    std::fs::remove_dir_all(dir.path().join("indexes")).expect("rm");
    let db = Database::open(dir.path(), Durability::Flush).expect("reopens");
    let rebuilt = run(&db);
    for (a, b) in rebuilt.iter().zip(&before) {
        assert_eq!(a[0].0, b[0].0);
    }
    assert_eq!(db.info("faq").expect("info").index.cosine_points, 399);
}

#[test]
fn readers_keep_reading_while_a_writer_writes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = std::sync::Arc::new(new_db(dir.path()));
    let questions: Vec<String> = qqp_questions("qqp_bimpm/test.tsv")
        .into_iter()
        .take(240)
        .collect();
    let encoded = encoder().encode(&questions).expect("encodes");
    let queries: Vec<Vec<f32>> = encoded
        .iter()
        .step_by(24)
        .map(|e| e.sentence.clone())
        .collect();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (db, done, queries) = (db.clone(), done.clone(), queries.clone());
            std::thread::spawn(move || {
                let (mut reads, mut last_count) = (0usize, 0u64);
                while !done.load(std::sync::atomic::Ordering::Acquire) || reads < 10 {
                    let q = &queries[(reads + r) % queries.len()];
                    crate::common::cosine_hits(&db, "faq", q, 5);
                    crate::common::lexical_hits(&db, "faq", "how do i", 5);
                    let count = db.count("faq").expect("count");
                    assert!(count >= last_count, "document count went backwards");
                    last_count = count;
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    let docs: Vec<(NewDocument, kindred::Encoded)> = questions
        .iter()
        .zip(encoded)
        .enumerate()
        .map(|(i, (q, e))| (doc(&format!("q{i}"), q, json!({})), e))
        .collect();
    for chunk in docs.chunks(12) {
        db.upsert_encoded("faq", encoder().identity(), chunk.to_vec())
            .expect("upserts");
    }
    done.store(true, std::sync::atomic::Ordering::Release);
    for r in readers {
        assert!(r.join().expect("reader thread") >= 10);
    }
    assert_eq!(db.count("faq").expect("count"), 240);
}

#[test]
fn store_of_format_1_is_migrated_to_the_current_format() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = new_db(dir.path());
    crate::common::upsert(
        &db,
        "faq",
        encoder(),
        vec![doc("a", "how do I reset my password?", json!({}))],
    )
    .expect("stored");
    drop(db);
    let store = dir.path().join("store");
    Store::stamp_format_version_for_tests(&store, 1).expect("stamps");
    let db = Database::open(dir.path(), Durability::Flush).expect("a format-1 store opens");
    let doc = db.get("faq", "a").expect("reads").expect("kept");
    assert_eq!(doc.text, "how do I reset my password?");
    assert_eq!(db.settings("faq").expect("settings").generation, None);
    drop(db);
    let version = open_sled(&store)
        .get("format_version")
        .expect("reads")
        .expect("present");
    assert_eq!(
        version.as_ref(),
        4u32.to_be_bytes(),
        "stamped with the new version"
    );
}

/// The committed format-1 store: written by [`regenerate_format_1_fixture`] through the
/// frozen format-1 types (kindred::store::compat), never by the current writer.
const FORMAT_1_FIXTURE: &str = "tests/fixtures/format1";

/// The questions the format-1 fixture holds, by id.
const FORMAT_1_DOCS: [(&str, &str); 3] = [
    ("a", "How do I reset my password?"),
    ("b", "Can I get a refund for my order?"),
    ("c", "My parcel arrived damaged, what now?"),
];

/// Writes tests/fixtures/format1/store as kindred's format 1 laid it out (migrations/0001):
/// `format_version` 1, settings JSON without the later fields, bincode records, the ids and
/// state trees. Run with `cargo test --release --test it regenerate_format_1 -- --ignored`.
#[test]
#[ignore = "writes the committed fixture"]
fn regenerate_format_1_fixture() {
    use kindred::store::compat::*;
    let exact = crate::common::exact_encoder();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(FORMAT_1_FIXTURE);
    let _ = std::fs::remove_dir_all(&root);
    let db = sled::open(root.join("store")).expect("sled");
    db.insert("format_version", &1u32.to_be_bytes()).unwrap();
    let id = exact.identity();
    let settings = CollectionSettingsV1 {
        model: ModelIdentityV1 {
            id: id.id.clone(),
            fingerprint: id.fingerprint.clone(),
            dim: id.dim,
            max_len: id.max_len,
        },
        codec: "int8".into(),
        hnsw: HnswParamsV1 {
            m: 16,
            ef_construction: 200,
            ef_search: 64,
        },
    };
    db.open_tree("collections")
        .unwrap()
        .insert("faq", serde_json::to_vec(&settings).unwrap())
        .unwrap();
    let (docs, ids, state) = (
        db.open_tree("docs/faq").unwrap(),
        db.open_tree("ids/faq").unwrap(),
        db.open_tree("state/faq").unwrap(),
    );
    let texts: Vec<&str> = FORMAT_1_DOCS.iter().map(|(_, t)| *t).collect();
    for (internal, ((ext, text), e)) in FORMAT_1_DOCS
        .iter()
        .zip(exact.encode(&texts).unwrap())
        .enumerate()
    {
        let current = kindred::store::StoredDoc::new(
            ext.to_string(),
            internal as u64,
            text.to_string(),
            r#"{"source":"format-1"}"#.into(),
            &e,
        );
        let record = StoredDocV1 {
            id: current.id,
            internal: current.internal,
            text: current.text,
            metadata_json: current.metadata_json,
            tokens: current.tokens.iter().map(TokenV1::from).collect(),
            truncated: current.truncated,
            token_codes: current.token_codes,
            token_scales: current.token_scales,
            sentence: current.sentence,
            mu: current.mu,
            sigma: current.sigma,
        };
        docs.insert(ext.as_bytes(), encode_record(&record)).unwrap();
        ids.insert((internal as u64).to_be_bytes(), ext.as_bytes())
            .unwrap();
    }
    state
        .insert("next", &(FORMAT_1_DOCS.len() as u64).to_be_bytes())
        .unwrap();
    state.insert("seq", &1u64.to_be_bytes()).unwrap();
    db.flush().unwrap();
}

/// A store a format-1 kindred wrote (committed, tests/fixtures/format1) opens, migrates to
/// the current format, and answers searches; the committed files are never touched.
#[test]
fn committed_format_1_store_opens_migrates_and_answers() {
    use std::sync::Arc;
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(FORMAT_1_FIXTURE);
    assert!(
        fixture.join("store").is_dir(),
        "missing {}; regenerate it (see regenerate_format_1_fixture)",
        fixture.display()
    );
    let dir = tempfile::tempdir().expect("tempdir");
    copy_dir(&fixture, dir.path());
    let db =
        Arc::new(Database::open(dir.path(), Durability::Flush).expect("a format-1 store opens"));
    let settings = db.settings("faq").expect("settings");
    assert_eq!(settings.generation, None);
    assert_eq!(settings.model.precision, kindred::Precision::Fp32);
    for (id, text) in FORMAT_1_DOCS {
        let doc = db.get("faq", id).expect("reads").expect("kept");
        assert_eq!(doc.text, text);
        assert_eq!(doc.metadata()["source"], "format-1");
        assert!(doc.context.is_empty(), "{:?}", doc.context);
    }
    let exact = crate::common::exact_encoder();
    let out = crate::common::search(
        &db,
        exact,
        "faq",
        "I forgot my password",
        &kindred::search::SearchParams::default(),
    )
    .expect("searches");
    assert_eq!(out.hits[0].id, "a");
    drop(db);
    let store = open_sled(&dir.path().join("store"));
    let version = store
        .get("format_version")
        .expect("reads")
        .expect("present");
    assert_eq!(version.as_ref(), 4u32.to_be_bytes(), "migrated");
}

/// A format-3 store (document records without context: the committed fixture's records,
/// stamped 3) opens, migrates to format 4 and reads back every document with an empty
/// context; one record already rewritten by a migration that stopped part-way (here carrying
/// a context, to tell) is left as it is; documents written afterwards keep their context.
#[test]
fn a_format_3_store_migrates_to_empty_contexts_and_resumes_a_stopped_migration() {
    use kindred::store::compat::{upgrade_record, Upgrade};
    use std::sync::Arc;
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(FORMAT_1_FIXTURE);
    let dir = tempfile::tempdir().expect("tempdir");
    copy_dir(&fixture, dir.path());
    let store = dir.path().join("store");
    Store::stamp_format_version_for_tests(&store, 3).expect("stamps");
    {
        let sled = open_sled(&store);
        let docs = sled.open_tree("docs/faq").expect("tree");
        let old = docs.get("b").expect("reads").expect("b");
        let Upgrade::Rewritten(new) = upgrade_record(&old) else {
            panic!("the fixture's records are format 3");
        };
        let done = kindred::store::StoredDoc::from_bytes(&new)
            .expect("format 4")
            .with_context(vec!["written by the interrupted run".into()]);
        docs.insert("b", done.to_bytes()).expect("writes");
        sled.flush().expect("flush");
    }
    let db = Arc::new(Database::open(dir.path(), Durability::Flush).expect("format 3 opens"));
    let read: Vec<(String, Vec<String>)> = db
        .documents("faq")
        .expect("collection")
        .map(|d| d.map(|d| (d.id, d.context)).expect("record"))
        .collect();
    assert_eq!(
        read,
        [
            ("a".to_string(), vec![]),
            (
                "b".into(),
                vec!["written by the interrupted run".to_string()]
            ),
            ("c".into(), vec![]),
        ]
    );
    let exact = crate::common::exact_encoder();
    let mut with_context = doc("d", "Where is my refund?", json!({}));
    with_context.context = vec!["Refunds take 5 days.".into()];
    crate::common::upsert(&db, "faq", exact, vec![with_context]).expect("stored");
    let out = crate::common::search(
        &db,
        exact,
        "faq",
        "I forgot my password",
        &kindred::search::SearchParams::default(),
    )
    .expect("searches");
    assert_eq!(out.hits[0].id, "a");
    drop(db);
    let db = Database::open(dir.path(), Durability::Flush).expect("reopens");
    let d = db.get("faq", "d").expect("reads").expect("kept");
    assert_eq!(d.context, ["Refunds take 5 days."]);
    assert_eq!(
        db.embedded_store()
            .expect("embedded store")
            .format_version(),
        4
    );
}

/// Context is stored verbatim (blank texts dropped) and read back, never encoded: the same
/// text with and without context has the same vectors and the same search scores; over the
/// limits, a batch is refused whole with a message naming the limit and the fix.
#[test]
fn context_is_stored_with_the_document_and_never_encoded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = new_db(dir.path());
    let enc = encoder();
    let text = "How do I reset my password?";
    let mut with = doc("with", text, json!({}));
    with.context = vec![
        "  Use the link on the sign-in page.  ".into(),
        "   ".into(),
        String::new(),
        "Ask support.".into(),
    ];
    let without = doc("without", text, json!({}));
    crate::common::upsert(&db, "faq", enc, vec![with, without]).expect("stored");
    let (a, b) = (
        db.get("faq", "with").expect("reads").expect("kept"),
        db.get("faq", "without").expect("reads").expect("kept"),
    );
    assert_eq!(
        a.context,
        ["  Use the link on the sign-in page.  ", "Ask support."]
    );
    assert!(b.context.is_empty());
    assert_eq!(
        (&a.sentence, &a.mu, &a.sigma, &a.token_codes),
        (&b.sentence, &b.mu, &b.sigma, &b.token_codes)
    );
    let hits = crate::common::cosine_hits(&db, "faq", &a.sentence, 2);
    assert_eq!(hits[0].1, hits[1].1);
    let hits = crate::common::lexical_hits(&db, "faq", "sign-in link support", 2);
    assert!(hits.is_empty(), "context was indexed: {hits:?}");

    let limits = [
        (
            vec!["an answer".to_string(); kindred::db::MAX_CONTEXT_TEXTS + 1],
            "document \"over\" rejected: its context has 65 texts; the limit is 64: keep the most useful ones or join short ones",
        ),
        (
            vec!["x".repeat(40_000), "y".repeat(30_000)],
            "document \"over\" rejected: its context is 70000 bytes; the limit is 65536 (64 KiB) in all: shorten or drop some of its texts",
        ),
    ];
    for (context, message) in limits {
        let mut over = doc("over", "Can I pay later?", json!({}));
        over.context = context;
        let fine = doc("fine", "Can I pay by card?", json!({}));
        let encoded = enc
            .encode(&[fine.text.as_str(), over.text.as_str()])
            .expect("encodes");
        let err = db
            .upsert_encoded(
                "faq",
                enc.identity(),
                vec![fine, over].into_iter().zip(encoded).collect(),
            )
            .expect_err("over the limit");
        assert_eq!(err.to_string(), message);
        assert!(matches!(user_err(err), UserError::InvalidDocument { .. }));
        assert_eq!(db.count("faq").expect("count"), 2, "nothing stored");
    }
    // At the limits exactly: stored.
    let mut full = doc("full", "Can I pay later?", json!({}));
    full.context = vec!["z".repeat(1024); kindred::db::MAX_CONTEXT_TEXTS];
    crate::common::upsert(&db, "faq", enc, vec![full]).expect("at the limits");
    assert_eq!(
        db.get("faq", "full")
            .expect("reads")
            .expect("kept")
            .context
            .len(),
        64
    );
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("reads") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copies");
        }
    }
}

/// A store dropped a moment before it is opened again is waited for, not refused: sled's
/// last background writes can hold its lock briefly after the last handle is gone (a
/// reopen in the next statement failed under load, "another kindred process has it open").
#[test]
fn a_store_let_go_a_moment_later_opens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = Database::open(dir.path(), Durability::Flush).expect("opens");
    let holder = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(300));
        drop(first);
    });
    let second = Database::open(dir.path(), Durability::Flush);
    holder.join().expect("joins");
    second.expect("opens once the first lets go");
}

/// A second open of a database directory (another process, or this one) is refused with a
/// message naming the way out, not sled's raw lock error.
#[test]
fn a_store_open_elsewhere_is_refused_clearly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _first = Database::open(dir.path(), Durability::Flush).expect("opens");
    let err = Database::open(dir.path(), Durability::Flush).expect_err("refused");
    assert!(
        err.to_string()
            .contains("another kindred process has it open"),
        "{err}"
    );
}
