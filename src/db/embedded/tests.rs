//! Tests of the embedded backend: opening, catching up and rebuilding indexes, checkpoints.

use std::path::Path;

use super::*;
use crate::db::OpenedFrom;
use crate::score::wasserstein::embed;
use crate::types::{Gaussian, Precision, Token};

/// The backend itself: these tests reach into its store and indexes.
type Database = Embedded;

/// What the facade adds to a write: the record built from each document.
trait Writes {
    fn upsert_encoded(
        &self,
        name: &str,
        model: &ModelIdentity,
        docs: Vec<(NewDocument, Encoded)>,
    ) -> Result<Vec<Upserted>>;
}

impl Writes for Embedded {
    fn upsert_encoded(
        &self,
        name: &str,
        model: &ModelIdentity,
        docs: Vec<(NewDocument, Encoded)>,
    ) -> Result<Vec<Upserted>> {
        let records = docs.iter().map(|(d, e)| d.record(e)).collect();
        self.upsert(name, model, &docs, records)
    }
}

fn model() -> ModelIdentity {
    ModelIdentity {
        id: "test".into(),
        fingerprint: "sha256:test".into(),
        dim: 4,
        max_len: 16,
        intent_dim: None,
        precision: Precision::Fp32,
    }
}

fn doc(i: usize) -> (NewDocument, Encoded) {
    let mut v = [0.1f32; 4];
    v[i % 4] = 1.0;
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    let v: Vec<f32> = v.iter().map(|x| x / n).collect();
    let text = format!("question {i}");
    let e = Encoded {
        tokens: vec![Token {
            text: "question".into(),
            id: 3160,
            start: 0,
            end: 8,
        }],
        truncated: false,
        token_vectors: v.clone(),
        sentence: v.clone(),
        intent: Gaussian {
            mu: v,
            sigma: vec![0.1; 4],
        },
    };
    let d = NewDocument {
        id: format!("d{i}"),
        text,
        metadata: serde_json::Value::Null,
        context: Vec::new(),
    };
    (d, e)
}

/// A panic while a collection's locks are held (a bug) used to poison them: every later
/// write, search and checkpoint of the collection then failed with a PoisonError panic
/// until a restart.
#[test]
fn a_panic_under_a_collections_locks_does_not_take_the_collection_down() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Database::open(dir.path(), Durability::Flush).expect("open");
    db.create_collection("c", &CollectionSettings::for_model(model()))
        .expect("create");
    db.upsert_encoded("c", &model(), (0..3).map(doc).collect())
        .expect("upsert");
    let ix = db.indexes("c").expect("indexes");
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _writer = ix.writer.lock().expect("fresh lock");
        let _cosine = ix.cosine.write().expect("fresh lock");
        let _calibrator = ix.calibrator.lock().expect("fresh lock");
        panic!("a bug while the collection's locks are held");
    }));
    assert!(ix.writer.is_poisoned() && ix.cosine.is_poisoned());

    db.upsert_encoded("c", &model(), vec![doc(3)])
        .expect("writes go on");
    assert!(db.delete("c", "d0").expect("deletes go on"));
    let view = db.view("c").expect("view");
    let hits = view
        .cosine(&doc(3).1.sentence, 2, crate::db::backend::Within::Ids(None))
        .expect("searches go on");
    assert_eq!(hits.len(), 2);
    assert_eq!(
        db.get("c", "d3").expect("get").map(|d| d.text),
        Some("question 3".into())
    );
    assert_eq!(db.checkpoint().expect("checkpoints go on"), 1);
    assert!(crate::sync::recovered() >= 2);
}

fn filled(dir: &Path, n: usize) -> Database {
    let db = Database::open(dir, Durability::Flush).expect("open");
    db.create_collection("c", &CollectionSettings::for_model(model()))
        .expect("create");
    db.upsert_encoded("c", &model(), (0..n).map(doc).collect())
        .expect("upsert");
    db
}

/// A reindex onto the same weights is refused where the collection already finds them,
/// and is how it records their new place when the model directory moved.
#[test]
fn the_same_model_at_another_path_is_a_move_not_a_no_op() {
    let mut settings = CollectionSettings::for_model(model());
    let other = ModelIdentity {
        fingerprint: "sha256:other".into(),
        ..model()
    };
    let here = Path::new("/models/adapted");
    assert!(already_uses(&settings, &model(), Some(here)));
    assert!(already_uses(&settings, &model(), None));
    assert!(!already_uses(&settings, &other, Some(here)));
    settings.model_path = Some(here.display().to_string());
    assert!(already_uses(&settings, &model(), Some(here)));
    assert!(!already_uses(
        &settings,
        &model(),
        Some(Path::new("/srv/models/adapted"))
    ));
    assert!(!already_uses(&settings, &other, Some(here)));
}

fn refusal(r: Result<impl std::fmt::Debug>) -> String {
    match r {
        Err(e @ crate::Error::User(UserError::IncompatibleStore { .. })) => e.to_string(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// A store file emptied under its index files used to open as a new, empty store: every
/// document gone without a word.
#[test]
fn a_store_emptied_under_its_indexes_is_refused_until_they_are_removed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = filled(dir.path(), 3);
    assert_eq!(db.checkpoint().expect("checkpoint"), 1);
    drop(db);
    std::fs::remove_dir_all(dir.path().join("store")).expect("empty the store");
    let e = refusal(Database::open(dir.path(), Durability::Flush));
    assert!(
        e.contains("emptied, replaced or damaged") && e.contains("indexes"),
        "{e}"
    );
    // Still refused at the next try: nothing was changed by the refusal.
    refusal(Database::open(dir.path(), Durability::Flush));
    // The fix the message names.
    std::fs::remove_dir_all(dir.path().join("indexes")).expect("remove the indexes");
    let db = Database::open(dir.path(), Durability::Flush).expect("opens as told");
    assert!(db.collections().expect("collections").is_empty());
}

/// A store rolled back under its indexes (a damaged log, or a store-only backup restored)
/// used to be opened at its old state and its indexes silently rebuilt from it.
#[test]
fn a_store_behind_its_indexes_is_refused_until_they_are_removed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = filled(dir.path(), 1);
    drop(db);
    let old = tempfile::tempdir().expect("tempdir");
    let copy = |from: &Path, to: &Path| {
        for e in std::fs::read_dir(from).expect("read") {
            let e = e.expect("entry");
            if e.path().is_file() {
                std::fs::copy(e.path(), to.join(e.file_name())).expect("copy");
            }
        }
    };
    let store = dir.path().join("store");
    for sub in walk_dirs(&store) {
        let rel = sub.strip_prefix(&store).expect("under");
        std::fs::create_dir_all(old.path().join(rel)).expect("mkdir");
        copy(&sub, &old.path().join(rel));
    }
    let db = Database::open(dir.path(), Durability::Flush).expect("reopen");
    db.upsert_encoded("c", &model(), (1..4).map(doc).collect())
        .expect("upsert");
    assert_eq!(db.checkpoint().expect("checkpoint"), 1);
    drop(db);
    std::fs::remove_dir_all(&store).expect("remove");
    for sub in walk_dirs(old.path()) {
        let rel = sub.strip_prefix(old.path()).expect("under");
        std::fs::create_dir_all(store.join(rel)).expect("mkdir");
        copy(&sub, &store.join(rel));
    }
    let db = Database::open(dir.path(), Durability::Flush).expect("same store: opens");
    let e = refusal(db.view("c").map(|_| ()).and_then(|()| db.warm_up()));
    assert!(
        e.contains("lost acknowledged writes") && e.contains("at write 1"),
        "{e}"
    );
    let e = refusal(db.upsert_encoded("c", &model(), vec![doc(9)]));
    assert!(e.contains("lost acknowledged writes"), "{e}");
    drop(db);
    std::fs::remove_dir_all(dir.path().join("indexes").join("c")).expect("as told");
    let db = Database::open(dir.path(), Durability::Flush).expect("open");
    db.warm_up().expect("rebuilt from the store");
    assert_eq!(db.count("c").expect("count"), 1);
}

/// A collection created under the name of one whose index folder outlived its drop
/// starts with its own indexes, not the old ones (nor a refusal).
#[test]
fn a_new_collection_does_not_inherit_a_dropped_ones_index_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = filled(dir.path(), 3);
    db.checkpoint().expect("checkpoint");
    let saved = dir.path().join("indexes").join("c");
    let keep = tempfile::tempdir().expect("tempdir");
    copy_files(&saved, keep.path());
    db.drop_collection("c").expect("drop");
    // As if the drop had stopped before removing the folder.
    copy_files(keep.path(), &saved);
    db.create_collection("c", &CollectionSettings::for_model(model()))
        .expect("create");
    db.upsert_encoded("c", &model(), vec![doc(7)])
        .expect("upsert");
    db.warm_up().expect("loads");
    assert_eq!(db.count("c").expect("count"), 1);
}

/// A kill between a reindex's switch and the removal of the old generation's index folder
/// left that folder for good when it had the plain collection name (generation 0): only
/// `name@G` folders were swept at open. Found by the fault suite.
#[test]
fn an_old_generations_index_folder_left_by_a_kill_is_removed_at_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = filled(dir.path(), 3);
    db.checkpoint().expect("checkpoint");
    let old = dir.path().join("indexes").join("c");
    let keep = tempfile::tempdir().expect("tempdir");
    copy_files(&old, keep.path());
    let other = ModelIdentity {
        fingerprint: "sha256:other".into(),
        ..model()
    };
    let encode = |texts: &[&str]| Ok((0..texts.len()).map(|i| doc(i).1).collect());
    db.reindex("c", &other, &encode, None, &|_, _| {})
        .expect("reindex");
    assert!(!old.exists());
    // As if the kill had come between the switch and the folder's removal.
    copy_files(keep.path(), &old);
    drop(db);
    let db = Database::open(dir.path(), Durability::Flush).expect("reopen");
    assert!(!old.exists(), "the old generation's folder is removed");
    assert!(dir.path().join("indexes").join("c@1").is_dir());
    db.warm_up().expect("loads");
    assert_eq!(db.count("c").expect("count"), 3);
}

/// Graph files saved before the last writes (a kill after writes the last checkpoint
/// missed) used to be thrown away and both graphs rebuilt from every stored document:
/// minutes at a million documents. They are now read and caught up with the store.
#[test]
fn graphs_saved_before_the_last_writes_are_loaded_and_caught_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = filled(dir.path(), 20);
    assert_eq!(db.checkpoint().expect("checkpoint"), 1);
    let saved_at = db.store.seq("c").expect("seq");
    let saved = dir.path().join("indexes").join("c");
    let keep = tempfile::tempdir().expect("tempdir");
    copy_files(&saved, keep.path());
    // After the save: five new documents, one replaced, one old and one new deleted.
    db.upsert_encoded("c", &model(), (20..25).map(doc).collect())
        .expect("upsert");
    let (mut replaced, vectors) = doc(9);
    replaced.id = "d3".into();
    db.upsert_encoded("c", &model(), vec![(replaced, vectors)])
        .expect("replace");
    assert!(db.delete("c", "d0").expect("delete"));
    assert!(db.delete("c", "d21").expect("delete"));
    drop(db);
    // As if the process had been killed before its last save.
    std::fs::remove_dir_all(&saved).expect("remove");
    copy_files(keep.path(), &saved);

    let db = Database::open(dir.path(), Durability::Flush).expect("reopen");
    let ix = db.indexes("c").expect("indexes");
    // Inserted: d20, d22..d24 and the new d3; removed: d0 and the old d3 (d21 came and
    // went after the save).
    // The text indexes were read from their file too: the records read are the 5 added
    // and the 18 saved ones checked (all of them: fewer than the sample size).
    let caught_up = OpenedFrom {
        saved_seq: Some(saved_at),
        inserted: 5,
        removed: 2,
        text_saved_seq: Some(saved_at),
        records_read: 23,
    };
    assert_eq!(ix.opened, caught_up);
    assert_indexes_hold_the_store(&db, &ix);
    // The next checkpoint saves them; the next open reads them with nothing to catch up.
    assert_eq!(db.checkpoint().expect("checkpoint"), 1);
    let seq = db.store.seq("c").expect("seq");
    drop((ix, db));
    let db = Database::open(dir.path(), Durability::Flush).expect("reopen");
    let ix = db.indexes("c").expect("indexes");
    let current = OpenedFrom {
        saved_seq: Some(seq),
        inserted: 0,
        removed: 0,
        text_saved_seq: Some(seq),
        records_read: 23,
    };
    assert_eq!(ix.opened, current);
    assert_eq!(db.info("c").expect("info").index.opened, Some(current));
}

/// Graph files of another history of the collection (here: its drop and re-creation, with
/// the old files put back) hold other documents under the same internal ids. When their
/// checkpoint matched the store's they used to be served as they were.
#[test]
fn graph_files_holding_other_vectors_than_the_store_are_rebuilt() {
    // Internal ids 0..3 again, now for other vectors, at the same write number.
    another_history(|_| {}, &[&[5, 6, 7]]);
}

/// The same with the saved vectors equal to the store's but one saved point removed while
/// the store has its id: inserting it again would fail, so the collection would not load.
#[test]
fn graph_files_with_a_removed_point_the_store_has_are_rebuilt() {
    let removed = |db: &Database| assert!(db.delete("c", "d1").expect("delete"));
    another_history(removed, &[&[0, 1, 2], &[9]]);
}

/// Saves the graphs of 3 documents (after `prepare`), drops and re-creates the collection
/// with the documents of `again` (one write each), puts the old files back and reopens:
/// the graphs must be rebuilt from the store.
fn another_history(prepare: impl FnOnce(&Database), again: &[&[usize]]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = filled(dir.path(), 3);
    prepare(&db);
    assert_eq!(db.checkpoint().expect("checkpoint"), 1);
    let saved = dir.path().join("indexes").join("c");
    let keep = tempfile::tempdir().expect("tempdir");
    copy_files(&saved, keep.path());
    db.drop_collection("c").expect("drop");
    db.create_collection("c", &CollectionSettings::for_model(model()))
        .expect("create");
    for docs in again {
        db.upsert_encoded("c", &model(), docs.iter().copied().map(doc).collect())
            .expect("upsert");
    }
    drop(db);
    std::fs::remove_dir_all(&saved).expect("remove");
    copy_files(keep.path(), &saved);
    let refused = hnsw::refused_files();
    let db = Database::open(dir.path(), Durability::Flush).expect("reopen");
    let ix = db.indexes("c").expect("indexes load");
    let stored = db.count("c").expect("count");
    let rebuilt = OpenedFrom {
        records_read: stored,
        ..OpenedFrom::default()
    };
    assert_eq!(ix.opened, rebuilt);
    assert!(hnsw::refused_files() > refused);
    assert_indexes_hold_the_store(&db, &ix);
}

/// Opening used to read every stored record to fill the lexical and metadata indexes (85
/// of the 89 s an open took at a million documents). With their file saved beside the
/// graphs, an open reads only the records written since the save and a sample.
#[test]
fn an_open_with_every_index_file_reads_only_new_records_and_a_sample() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = filled(dir.path(), 3000);
    assert_eq!(db.checkpoint().expect("checkpoint"), 1);
    let saved_at = db.store.seq("c").expect("seq");
    db.upsert_encoded("c", &model(), (3000..3010).map(doc).collect())
        .expect("upsert");
    assert!(db.delete("c", "d7").expect("delete"));
    assert_eq!(db.checkpoint().expect("checkpoint"), 0, "under 1%");
    drop(db);
    let db = Database::open(dir.path(), Durability::Flush).expect("reopen");
    let ix = db.indexes("c").expect("indexes");
    // 2,999 saved documents held, every third checked; the 10 new ones read.
    let opened = OpenedFrom {
        saved_seq: Some(saved_at),
        inserted: 10,
        removed: 1,
        text_saved_seq: Some(saved_at),
        records_read: 1000 + 10,
    };
    assert_eq!(ix.opened, opened);
    assert_indexes_hold_the_store(&db, &ix);
    let hits = ix.lexical.search("question 3005", 1);
    let d3005 = db.get("c", "d3005").expect("get").expect("present");
    assert_eq!(hits[0].0, d3005.internal);
}

/// Saves of an older version have no text index file, and a damaged one cannot be read:
/// the text indexes are then filled from every record, and the next checkpoint writes
/// their file even when the graphs' files are current.
#[test]
fn text_index_files_missing_or_damaged_are_filled_from_the_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = filled(dir.path(), 20);
    assert_eq!(db.checkpoint().expect("checkpoint"), 1);
    let seq = db.store.seq("c").expect("seq");
    drop(db);
    let saved = dir.path().join("indexes").join("c");
    let text_files = || {
        std::fs::read_dir(&saved)
            .expect("read")
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("text"))
            })
            .collect::<Vec<_>>()
    };
    for f in text_files() {
        std::fs::remove_file(f).expect("remove");
    }
    let filled_from_store = OpenedFrom {
        saved_seq: Some(seq),
        inserted: 0,
        removed: 0,
        text_saved_seq: None,
        records_read: 20,
    };
    let db = Database::open(dir.path(), Durability::Flush).expect("reopen");
    let ix = db.indexes("c").expect("indexes");
    assert_eq!(ix.opened, filled_from_store);
    assert_indexes_hold_the_store(&db, &ix);
    assert_eq!(
        db.checkpoint().expect("checkpoint"),
        1,
        "the text file is written"
    );
    assert_eq!(db.checkpoint().expect("checkpoint"), 0);
    drop((ix, db));
    let db = Database::open(dir.path(), Durability::Flush).expect("reopen");
    assert_eq!(
        db.indexes("c").expect("indexes").opened.text_saved_seq,
        Some(seq)
    );
    drop(db);
    let file = text_files()
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "index"))
        .expect("a text index file");
    let mut bytes = std::fs::read(&file).expect("read");
    let at = bytes.len() / 2;
    bytes[at] ^= 1;
    std::fs::write(&file, bytes).expect("write");
    let refused = hnsw::refused_files();
    let db = Database::open(dir.path(), Durability::Flush).expect("reopen");
    let ix = db.indexes("c").expect("indexes");
    assert_eq!(ix.opened, filled_from_store);
    assert!(hnsw::refused_files() > refused, "counted as a damaged file");
    assert_indexes_hold_the_store(&db, &ix);
    drop((ix, db));
    // A text save later than the store means the store lost writes, as for the graphs.
    let meta = saved.join("text.meta.json");
    let later = std::fs::read_to_string(&meta)
        .expect("read")
        .replace(&format!("\"seq\":{seq}"), "\"seq\":1000000");
    std::fs::write(&meta, later).expect("write");
    let db = Database::open(dir.path(), Durability::Flush).expect("reopen");
    assert!(refusal(db.indexes("c").map(|_| ())).contains("saved at write 1000000"));
}

/// The same with the saved vectors equal to the store's (the test documents' vectors
/// repeat every 4) but other texts: only the text indexes' check can tell.
#[test]
fn text_index_files_holding_other_terms_than_the_store_are_rebuilt() {
    another_history(|_| {}, &[&[4, 5, 6]]);
}

/// Every index of collection `c` holds exactly its stored documents' ids, each with its
/// record's vectors, terms and metadata values.
fn assert_indexes_hold_the_store(db: &Database, ix: &Indexes) {
    let docs: Vec<StoredDoc> = db
        .store
        .iter("c")
        .expect("iter")
        .collect::<Result<_>>()
        .expect("docs");
    let mut live: Vec<u64> = docs.iter().map(|d| d.internal).collect();
    live.sort_unstable();
    for graph in [&ix.cosine, &ix.w2] {
        let mut ids = graph.reading().ids();
        ids.sort_unstable();
        assert_eq!(ids, live, "the graph holds exactly the stored documents");
    }
    let mut ids = ix.lexical.ids();
    ids.sort_unstable();
    assert_eq!(
        ids, live,
        "the lexical index holds exactly the stored documents"
    );
    for d in &docs {
        let (cosine, w2) = (ix.cosine.reading(), ix.w2.reading());
        assert_eq!(cosine.holds(d.internal, &d.sentence), Some(true));
        assert_eq!(w2.holds(d.internal, &embed(&d.intent())), Some(true));
        assert!(ix.lexical.holds(d.internal, &d.text));
        assert!(ix.metadata.holds(d.internal, &d.metadata()));
    }
}

/// A checkpoint used to rewrite both whole graphs for any change (about 25 s at a million
/// documents, at every `kindred add` of one question): now only once 1% of the points
/// changed since the save; fewer changes are caught up at the next open.
#[test]
fn a_checkpoint_waits_for_one_percent_of_the_points_to_change() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = filled(dir.path(), 300);
    assert_eq!(
        db.checkpoint().expect("checkpoint"),
        1,
        "new graphs are saved"
    );
    let saved_at = db.store.seq("c").expect("seq");
    db.upsert_encoded("c", &model(), (300..302).map(doc).collect())
        .expect("upsert");
    assert_eq!(db.checkpoint().expect("checkpoint"), 0, "2 of 302 changed");
    drop(db);
    let db = Database::open(dir.path(), Durability::Flush).expect("reopen");
    let ix = db.indexes("c").expect("indexes");
    let opened = OpenedFrom {
        saved_seq: Some(saved_at),
        inserted: 2,
        removed: 0,
        text_saved_seq: Some(saved_at),
        records_read: 302,
    };
    assert_eq!(ix.opened, opened);
    let d301 = db.get("c", "d301").expect("get").expect("present");
    let held = ix.cosine.reading().holds(d301.internal, &d301.sentence);
    assert_eq!(held, Some(true), "caught up");
    assert!(db.delete("c", "d5").expect("delete"));
    assert_eq!(db.checkpoint().expect("checkpoint"), 0, "3 of 302");
    db.upsert_encoded("c", &model(), vec![doc(302)])
        .expect("upsert");
    assert_eq!(db.checkpoint().expect("checkpoint"), 1, "4 of 303");
    assert_eq!(db.checkpoint().expect("checkpoint"), 0, "saved");
}

/// Copies the files of folder `from` into folder `to` (made if missing).
fn copy_files(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read").flatten() {
        std::fs::copy(e.path(), to.join(e.file_name())).expect("copy");
    }
}

fn walk_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![dir.to_path_buf()];
    for e in std::fs::read_dir(dir).expect("read").flatten() {
        if e.path().is_dir() {
            out.extend(walk_dirs(&e.path()));
        }
    }
    out
}
