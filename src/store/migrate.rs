//! On-disk format versions and the ordered migration steps between them (one file per format
//! change in `migrations/`). A store records its version in the `format_version` key of sled's
//! default tree; opening applies every step from its version up to [`FORMAT_VERSION`], then
//! stamps the new version last, and refuses a store that is newer than this build or older than
//! [`OLDEST_SUPPORTED`].

use super::compat::{upgrade_record, Upgrade};
use crate::error::{Result, UserError};

/// The format this build writes.
pub const FORMAT_VERSION: u32 = 4;
/// The oldest format this build can migrate from.
pub const OLDEST_SUPPORTED: u32 = 1;

/// One migration step: from `from` to `from + 1`.
pub struct Step {
    /// The version the step starts from.
    pub from: u32,
    /// What it changes, for logs.
    pub what: &'static str,
    /// The change itself.
    pub run: fn(&sled::Db) -> Result<()>,
}

/// The steps, in order.
pub const STEPS: &[Step] = &[
    Step {
        from: 1,
        what: "generations (migrations/0002_generations.md): nothing to rewrite",
        // A format-1 collection has no `generation`, which format 2 reads as "the plain name".
        run: |_| Ok(()),
    },
    Step {
        from: 2,
        what: "intent dimension (migrations/0003_intent_dim.md): nothing to rewrite",
        // A format-2 model identity has no `intent_dim`: its intents have the model dimension.
        run: |_| Ok(()),
    },
    Step {
        from: 3,
        what: "document context (migrations/0004_context.md): every document record rewritten with an empty context",
        run: |db| add_context(db).map(drop),
    },
];

/// Records rewritten per atomic sled batch by [`add_context`].
const REWRITE_BATCH: usize = 1024;

/// Step 3 → 4: rewrites every document record of every `docs/*` tree (every collection and
/// generation, unfinished ones included) in format 4, with an empty context, in atomic batches
/// of [`REWRITE_BATCH`], then flushes. Safe to stop anywhere and run again: a record already in
/// format 4 is left alone ([`upgrade_record`]), and the version is stamped only after this
/// returns. A damaged record is left as it is (reading it reports the damage, as before) and
/// logged. Returns (records rewritten, damaged records left).
pub(crate) fn add_context(db: &sled::Db) -> Result<(u64, u64)> {
    let (mut rewritten, mut damaged) = (0u64, 0u64);
    for name in db.tree_names() {
        if !name.starts_with(b"docs/") {
            continue;
        }
        let tree = db.open_tree(&name)?;
        let mut batch = sled::Batch::default();
        let mut pending = 0;
        for kv in tree.iter() {
            let (key, value) = kv?;
            match upgrade_record(&value) {
                Upgrade::Current => continue,
                Upgrade::Rewritten(bytes) => {
                    batch.insert(key, bytes);
                    pending += 1;
                }
                Upgrade::Undecodable(why) => {
                    damaged += 1;
                    tracing::warn!(
                        tree = %String::from_utf8_lossy(&name),
                        id = %String::from_utf8_lossy(&key),
                        why,
                        "a damaged document record is left as it is"
                    );
                    continue;
                }
            }
            if pending == REWRITE_BATCH {
                tree.apply_batch(std::mem::take(&mut batch))?;
                rewritten += pending as u64;
                pending = 0;
            }
        }
        if pending > 0 {
            tree.apply_batch(batch)?;
            rewritten += pending as u64;
        }
    }
    db.flush()?;
    tracing::info!(rewritten, damaged, "document records now carry a context");
    Ok((rewritten, damaged))
}

/// Checks `found` against this build and runs the steps it needs; returns the steps run.
pub fn check_and_migrate(db: &sled::Db, found: u32, path: &std::path::Path) -> Result<usize> {
    if found > FORMAT_VERSION {
        return Err(UserError::IncompatibleStore {
            path: path.to_path_buf(),
            reason: format!(
                "it has format version {found}, newer than this kindred's {FORMAT_VERSION}; \
                 upgrade kindred to open it"
            ),
        }
        .into());
    }
    if found < OLDEST_SUPPORTED {
        return Err(UserError::IncompatibleStore {
            path: path.to_path_buf(),
            reason: format!(
                "it has format version {found}, older than the oldest this kindred migrates \
                 ({OLDEST_SUPPORTED}); open it with an older kindred first or re-ingest"
            ),
        }
        .into());
    }
    let mut ran = 0;
    for step in STEPS
        .iter()
        .filter(|s| s.from >= found && s.from < FORMAT_VERSION)
    {
        tracing::info!(from = step.from, what = step.what, "migrating store");
        (step.run)(db)?;
        ran += 1;
    }
    Ok(ran)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::compat::{encode_record, StoredDocV1};
    use crate::store::StoredDoc;

    fn v1(id: &str) -> StoredDocV1 {
        StoredDocV1 {
            id: id.into(),
            internal: 3,
            text: "How do I reset my password?".into(),
            metadata_json: "{}".into(),
            tokens: Vec::new(),
            truncated: false,
            token_codes: Vec::new(),
            token_scales: Vec::new(),
            sentence: vec![0.6, 0.8],
            mu: vec![0.1],
            sigma: vec![1.0],
        }
    }

    /// Every collection's and generation's records are rewritten (more than one batch's
    /// worth); a record already in format 4 keeps its context; a damaged one is left; a second
    /// run (a migration stopped part-way and started again) changes nothing.
    #[test]
    fn context_is_added_to_every_record_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = sled::open(dir.path()).expect("sled");
        let (faq, next) = (
            db.open_tree("docs/faq").unwrap(),
            db.open_tree("docs/faq@2").unwrap(),
        );
        let n = REWRITE_BATCH + 5;
        for i in 0..n {
            faq.insert(format!("q{i:05}"), encode_record(&v1(&format!("q{i:05}"))))
                .unwrap();
        }
        next.insert("a", encode_record(&v1("a"))).unwrap();
        let done = StoredDoc::from(v1("b")).with_context(vec!["kept".into()]);
        next.insert("b", done.to_bytes()).unwrap();
        next.insert("c", &[0xff, 0x01][..]).unwrap();
        db.open_tree("ids/faq")
            .unwrap()
            .insert(1u64.to_be_bytes(), "q00000")
            .unwrap();
        assert_eq!(add_context(&db).expect("migrates"), (n as u64 + 1, 1));
        for (tree, id) in [
            (&faq, "q00000"),
            (&faq, &format!("q{:05}", n - 1)),
            (&next, "a"),
        ] {
            let doc = StoredDoc::from_bytes(&tree.get(id).unwrap().unwrap()).expect("format 4");
            assert_eq!((doc.id.as_str(), doc.context.len()), (id, 0));
        }
        let b = StoredDoc::from_bytes(&next.get("b").unwrap().unwrap()).unwrap();
        assert_eq!(b, done);
        assert_eq!(next.get("c").unwrap().unwrap().as_ref(), &[0xff, 0x01]);
        assert_eq!(
            db.open_tree("ids/faq")
                .unwrap()
                .get(1u64.to_be_bytes())
                .unwrap()
                .unwrap()
                .as_ref(),
            b"q00000"
        );
        assert_eq!(add_context(&db).expect("runs again"), (0, 1));
    }
}
