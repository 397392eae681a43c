//! The lexical and metadata indexes saved together at a store checkpoint, so that opening a
//! large collection reads them back instead of every stored record (at a million documents
//! that pass was about 85 s of an 89 s open: BENCHMARKS.md, "Opening after a crash").
//!
//! Saved as `dir/text-SEQ.index` plus `dir/text.meta.json` ([`super::files`]). The file is
//! `KNDTEXT\0`, a format version (u32 LE), the bincode 2 (standard configuration) encoding of
//! both snapshots, and the CRC-32 of all preceding bytes (as a u64 LE). A missing, damaged or inconsistent
//! file is reported (damaged ones are counted with the graphs': [`super::files::refused_files`])
//! and the caller fills the indexes from the store instead.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::files::{self, Checksum};
use super::lexical::LexicalSnapshot;
use super::metadata::MetadataSnapshot;
use super::{LexicalIndex, MetadataIndex};
use crate::error::Result;

const MAGIC: &[u8; 8] = b"KNDTEXT\0";
const VERSION: u32 = 1;
const BASENAME: &str = "text";

#[derive(Serialize, Deserialize)]
struct Meta {
    seq: u64,
    /// Documents in the saved indexes.
    documents: usize,
    /// The index file, under the index directory.
    file: String,
}

#[derive(Serialize, Deserialize)]
struct Snapshots {
    lexical: LexicalSnapshot,
    metadata: MetadataSnapshot,
}

/// Saves both indexes, recording the store checkpoint `seq` they reflect. The caller keeps
/// them from changing meanwhile (the collection's writer lock).
pub fn save(dir: &Path, seq: u64, lexical: &LexicalIndex, metadata: &MetadataIndex) -> Result<()> {
    let snapshots = Snapshots {
        lexical: lexical.snapshot(),
        metadata: metadata.snapshot(),
    };
    let mut bytes = MAGIC.to_vec();
    bytes.extend_from_slice(&VERSION.to_le_bytes());
    bincode::serde::encode_into_std_write(&snapshots, &mut bytes, bincode::config::standard())
        .expect("in-memory encode");
    let sum = Checksum::crc32().of(&bytes);
    bytes.extend_from_slice(&sum);
    let meta = |file| Meta {
        seq,
        documents: lexical.len(),
        file,
    };
    files::save(dir, (BASENAME, "index"), seq, |w| w.write_all(&bytes), meta)
}

/// The indexes saved in `dir` at a store checkpoint no later than `upto`, with that
/// checkpoint; None when there is no such save or it cannot be used (logged).
pub fn load(dir: &Path, upto: u64) -> Option<(LexicalIndex, MetadataIndex, u64)> {
    let meta: Meta = files::read_meta(dir, BASENAME)?;
    if meta.seq > upto {
        return None;
    }
    let path = files::saved_file(dir, BASENAME, &meta.file)?;
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e,
                "text index file unreadable; filling the text indexes from the store");
            super::files::note_refused_file();
            return None;
        }
    };
    match decode(&bytes) {
        Ok((lexical, metadata)) if lexical.len() == meta.documents => {
            Some((lexical, metadata, meta.seq))
        }
        Ok(_) => refuse(&path, "it disagrees with its meta"),
        Err(why) => refuse(&path, why),
    }
}

fn refuse<T>(path: &Path, why: &str) -> Option<T> {
    tracing::warn!(file = %path.display(), why,
        "text index file damaged; filling the text indexes from the store");
    super::files::note_refused_file();
    None
}

/// Both indexes from a file's bytes; never panics on bad input.
fn decode(bytes: &[u8]) -> std::result::Result<(LexicalIndex, MetadataIndex), &'static str> {
    if bytes.len() < MAGIC.len() + 4 + 8 {
        return Err("truncated");
    }
    let (body, sum) = bytes.split_at(bytes.len() - 8);
    if Checksum::crc32().of(body) != sum {
        return Err("checksum mismatch");
    }
    let (magic, rest) = body.split_at(MAGIC.len());
    let (version, payload) = rest.split_at(4);
    if magic != MAGIC {
        return Err("bad magic");
    }
    if version != VERSION.to_le_bytes() {
        return Err("unsupported version");
    }
    let (snapshots, used): (Snapshots, usize) =
        bincode::serde::decode_from_slice(payload, bincode::config::standard())
            .map_err(|_| "undecodable")?;
    if used != payload.len() {
        return Err("trailing bytes");
    }
    let lexical = LexicalIndex::from_snapshot(snapshots.lexical).ok_or("inconsistent lexical")?;
    let metadata =
        MetadataIndex::from_snapshot(snapshots.metadata).ok_or("inconsistent metadata")?;
    Ok((lexical, metadata))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn filled() -> (LexicalIndex, MetadataIndex) {
        let (lexical, metadata) = (LexicalIndex::new(), MetadataIndex::new());
        let texts = [
            "how do I learn rust",
            "what is the best way to learn rust quickly",
            "how to cook rice",
            "rust or go for a web server",
            "learn rust learn rust",
        ];
        for (i, t) in texts.iter().enumerate() {
            let id = 10 * i as u64 + 3;
            lexical.upsert(id, t);
            let m = json!({"site": if i % 2 == 0 { "a" } else { "b" }, "n": i, "tags": ["x", "y", "x"]});
            metadata.upsert(id, m.as_object().expect("object"));
        }
        lexical.remove(13);
        metadata.remove(13);
        lexical.upsert(99, "how do I learn go");
        (lexical, metadata)
    }

    #[test]
    fn saved_indexes_read_back_the_same() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (lexical, metadata) = filled();
        save(dir.path(), 7, &lexical, &metadata).expect("save");
        assert!(
            load(dir.path(), 6).is_none(),
            "a save after the store's checkpoint"
        );
        let (lex, meta, seq) = load(dir.path(), 9).expect("loads");
        assert_eq!(seq, 7);
        assert_eq!(lex.snapshot(), lexical.snapshot());
        assert_eq!(meta.snapshot(), metadata.snapshot());
        for q in ["learn rust", "how do I", "rice", "go web server"] {
            assert_eq!(lex.search(q, 10), lexical.search(q, 10), "{q}");
        }
        let f = crate::index::Filter::parse(json!({"site": "a"}).as_object().unwrap()).unwrap();
        assert_eq!(meta.matching(&f), vec![3, 23, 43]);
        assert!(lex.holds(43, "learn rust learn rust"));
        assert!(!lex.holds(43, "learn rust"));
        assert!(!lex.holds(13, "what is the best way to learn rust quickly"));
        let m = json!({"site": "a", "n": 4, "tags": ["y", "x"]});
        assert!(meta.holds(43, m.as_object().unwrap()));
        assert!(!meta.holds(43, json!({"site": "a"}).as_object().unwrap()));
        assert!(meta.holds(99, &serde_json::Map::new()));
    }

    #[test]
    fn damaged_files_are_refused_without_panicking() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (lexical, metadata) = filled();
        save(dir.path(), 7, &lexical, &metadata).expect("save");
        let path = dir.path().join("text-7.index");
        let good = std::fs::read(&path).expect("read");
        let before = crate::index::hnsw::refused_files();
        for at in [0, 9, good.len() / 2, good.len() - 1] {
            let mut bad = good.clone();
            bad[at] ^= 0x40;
            std::fs::write(&path, &bad).expect("write");
            assert!(load(dir.path(), 7).is_none(), "byte {at} flipped");
        }
        std::fs::write(&path, &good[..good.len() / 3]).expect("write");
        assert!(load(dir.path(), 7).is_none(), "truncated");
        assert!(crate::index::hnsw::refused_files() >= before + 5);
        // Any byte string under a valid checksum decodes or is refused, never panics.
        let mut rng = crate::score::stats::SplitMix64(5);
        for _ in 0..300 {
            let mut body = good[..good.len() - 8].to_vec();
            let at = MAGIC.len() + 4 + (rng.next_u64() as usize % (body.len() - 12));
            body[at] = rng.next_u64() as u8;
            let sum = Checksum::crc32().of(&body);
            body.extend_from_slice(&sum);
            let _ = decode(&body);
        }
        // An id twice is refused.
        let mut snap = lexical.snapshot();
        snap.docs.push(snap.docs[0].clone());
        assert!(LexicalIndex::from_snapshot(snap).is_none());
    }
}
