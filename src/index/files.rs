//! How index files are saved at a store checkpoint, so that a crash never leaves half a save in
//! force: `dir/BASENAME-SEQ.EXT` is written whole and synced, then `dir/BASENAME.meta.json`
//! (naming that file and the checkpoint `seq`) is replaced atomically, then the folder is
//! synced; older saves of the same basename are removed after the switch. What a file holds
//! and how it is checked is its owner's: the graphs ([`super::hnsw`]) and the text indexes
//! ([`super::text`]). Also the checksum both file formats end with.

use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{io_err, Result};

/// The 8-byte checksum an index file ends with: CRC-32 (IEEE, zero-extended; SIMD, over 10
/// GB/s) in files written now, FNV-1a 64 in graph files of format 1 and 2 (byte by byte:
/// about 4 s over the 4.8 GB of a 1M-document collection's graphs).
#[derive(Clone)]
pub(crate) enum Checksum {
    /// FNV-1a 64 so far.
    Fnv(u64),
    /// CRC-32 so far.
    Crc32(crc32fast::Hasher),
}

impl Checksum {
    /// FNV-1a 64 (graph files of format 1 and 2).
    pub(crate) fn fnv() -> Self {
        Checksum::Fnv(0xcbf2_9ce4_8422_2325)
    }

    /// CRC-32.
    pub(crate) fn crc32() -> Self {
        Checksum::Crc32(crc32fast::Hasher::new())
    }

    /// Adds `bytes`.
    pub(crate) fn update(&mut self, bytes: &[u8]) {
        match self {
            Checksum::Fnv(h) => {
                for &b in bytes {
                    *h = (*h ^ b as u64).wrapping_mul(0x100_0000_01b3);
                }
            }
            Checksum::Crc32(c) => c.update(bytes),
        }
    }

    /// The 8 bytes a file ends with.
    pub(crate) fn value(&self) -> [u8; 8] {
        match self {
            Checksum::Fnv(h) => h.to_le_bytes(),
            Checksum::Crc32(c) => u64::from(c.clone().finalize()).to_le_bytes(),
        }
    }

    /// The checksum of `bytes` alone.
    pub(crate) fn of(mut self, bytes: &[u8]) -> [u8; 8] {
        self.update(bytes);
        self.value()
    }
}

static REFUSED_FILES: AtomicU64 = AtomicU64::new(0);

/// Index files found damaged (unreadable, garbled meta files, or files disagreeing with their
/// meta) and so rebuilt from the store, since the process started
/// (`kindred_damaged_index_files_total`).
pub fn refused_files() -> u64 {
    REFUSED_FILES.load(Ordering::Relaxed)
}

/// Counts an index file refused as damaged (its reader logs why).
pub(crate) fn note_refused_file() {
    REFUSED_FILES.fetch_add(1, Ordering::Relaxed);
}

/// The meta file of the save named `basename` in `dir`, if it is there and reads as `M`. A
/// meta file that is there but cannot be read or parsed is damaged: logged and counted
/// ([`refused_files`]), and the caller rebuilds as if there were none.
pub(crate) fn read_meta<M: DeserializeOwned>(dir: &Path, basename: &str) -> Option<M> {
    let path = dir.join(format!("{basename}.meta.json"));
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => return damaged(&path, &e.to_string()),
    };
    match serde_json::from_slice(&bytes) {
        Ok(meta) => Some(meta),
        Err(e) => damaged(&path, &e.to_string()),
    }
}

/// The file a meta file of `basename` names, in `dir`: refused as damaged (logged, counted)
/// unless it is a plain file name of that save (`BASENAME-SEQ.EXT`), so a meta file can never
/// send a load outside its folder.
pub(crate) fn saved_file(dir: &Path, basename: &str, file: &str) -> Option<std::path::PathBuf> {
    let plain = file
        .strip_prefix(basename)
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|rest| {
            !rest.is_empty()
                && rest
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_')
                && !rest.contains("..")
        });
    if plain {
        Some(dir.join(file))
    } else {
        damaged(
            &dir.join(format!("{basename}.meta.json")),
            &format!("it names {file:?}, not a file of this save"),
        )
    }
}

fn damaged<T>(path: &Path, why: &str) -> Option<T> {
    tracing::warn!(file = %path.display(), why,
        "index meta file damaged; rebuilding the index from the store");
    note_refused_file();
    None
}

/// The store checkpoint the save named `basename` in `dir` reflects, if its meta file is there
/// and readable.
pub fn saved_seq(dir: &Path, basename: &str) -> Option<u64> {
    #[derive(serde::Deserialize)]
    struct Seq {
        seq: u64,
    }
    // Quietly: the load that follows reports a damaged meta file once.
    let bytes = std::fs::read(dir.join(format!("{basename}.meta.json"))).ok()?;
    serde_json::from_slice::<Seq>(&bytes).ok().map(|m| m.seq)
}

/// Saves `basename` at checkpoint `seq`: `write` fills the new file, `meta` (given the file's
/// name) is what its meta file records. On error the previous save stays in force.
pub(crate) fn save<M: Serialize>(
    dir: &Path,
    (basename, ext): (&str, &str),
    seq: u64,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    meta: impl FnOnce(String) -> M,
) -> Result<()> {
    let file = format!("{basename}-{seq}.{ext}");
    std::fs::create_dir_all(dir).map_err(io_err(format!("creating {}", dir.display())))?;
    let target = dir.join(&file);
    let tmp = dir.join(format!("{file}.tmp"));
    let written = (|| {
        let mut w = BufWriter::new(std::fs::File::create(&tmp)?);
        write(&mut w)?;
        w.flush()?;
        w.into_inner().map_err(|e| e.into_error())?.sync_all()
    })();
    written.map_err(io_err(format!("writing {}", tmp.display())))?;
    std::fs::rename(&tmp, &target).map_err(io_err("installing the index file"))?;
    let meta_path = dir.join(format!("{basename}.meta.json"));
    let meta_tmp = dir.join(format!("{basename}.meta.json.tmp"));
    std::fs::write(
        &meta_tmp,
        serde_json::to_vec(&meta(file.clone())).expect("json"),
    )
    .map_err(io_err("writing index meta"))?;
    std::fs::File::open(&meta_tmp)
        .and_then(|f| f.sync_all())
        .map_err(io_err("syncing index meta"))?;
    std::fs::rename(&meta_tmp, &meta_path).map_err(io_err("installing index meta"))?;
    // The renames are durable only once the folder's entries are.
    sync_dir(dir)?;
    // Remove superseded saves (older files, and hnsw_rs dump folders of index format 1).
    let prefix = format!("{basename}-");
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(&prefix) && name != file {
                let path = e.path();
                let _ = if path.is_dir() {
                    std::fs::remove_dir_all(path)
                } else {
                    std::fs::remove_file(path)
                };
            }
        }
    }
    Ok(())
}

/// Syncs a folder's entries (new and renamed files) to disk (a no-op where folders cannot be
/// opened, as on Windows).
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    #[cfg(unix)]
    std::fs::File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(io_err(format!("syncing the folder {}", dir.display())))?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}
