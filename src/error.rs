//! The library's one error type.
//!
//! Errors are split by whose fault they are, as milli does: a [`UserError`] is something the
//! caller can fix (bad text, a model directory that is not a BERT model, a missing tool) and its
//! message says how; an [`InternalError`] is kindred's or the machine's problem (I/O, a corrupt
//! tokenizer, a backend failure). Later layers (the HTTP server) map `User` to 4xx and `Internal`
//! to 5xx; this module knows no status codes.

use std::path::PathBuf;

/// Result alias used throughout the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every error the library returns.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The caller can fix this; the message says how.
    #[error(transparent)]
    User(#[from] UserError),
    /// Not the caller's fault.
    #[error(transparent)]
    Internal(#[from] InternalError),
}

impl Error {
    /// True when the caller (not kindred) is at fault.
    pub fn is_user(&self) -> bool {
        matches!(self, Error::User(_))
    }
}

/// Problems the caller can fix.
#[derive(Debug, thiserror::Error)]
pub enum UserError {
    /// Empty or whitespace-only input text.
    #[error("text #{index} is empty or whitespace only: give a question with at least one word")]
    EmptyText {
        /// Position of the text in the request.
        index: usize,
    },
    /// The text tokenized to nothing but special tokens.
    #[error(
        "text #{index} ({preview:?}) has no content tokens after tokenization (only special tokens \
         such as [CLS]/[SEP]/[PAD]): give a question with at least one word"
    )]
    NoContentTokens {
        /// Position of the text in the request.
        index: usize,
        /// The start of the text.
        preview: String,
    },
    /// A model directory that cannot be used.
    #[error(
        "model directory {path} is not usable: {reason}. A model directory needs config.json, \
         model.safetensors and tokenizer.json of a BERT-family model (pass another with --model DIR \
         or KINDRED_MODEL, or drop the option to use the default model)"
    )]
    InvalidModelDir {
        /// The directory.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A collection's model is no longer where the collection recorded it.
    #[error(
        "collection {collection:?} uses model {model}, recorded at {path}, which no longer holds \
         it ({reason}): if the model directory moved, `kindred reindex --collection {collection} \
         --model NEWDIR` records its new place (or give --model NEWDIR to each command)"
    )]
    ModelMoved {
        /// The collection.
        collection: String,
        /// Its model (id and fingerprint).
        model: String,
        /// Where the collection recorded it.
        path: PathBuf,
        /// What opening it said.
        reason: String,
    },
    /// The weights do not fit the architecture in config.json.
    #[error(
        "model weights in {path} do not match config.json:\n  {}\nIs this a BERT-family checkpoint \
         (BertModel / MiniLM) and does config.json belong to these weights?",
        problems.join("\n  ")
    )]
    WeightsMismatch {
        /// model.safetensors.
        path: PathBuf,
        /// One line per missing, unexpected or mis-shaped tensor.
        problems: Vec<String>,
    },
    /// The default model is not cached and cannot be fetched.
    #[error("cannot fetch the default model: {reason}. {fix}")]
    FetchUnavailable {
        /// Why it failed.
        reason: String,
        /// What to do about it.
        fix: String,
    },
    /// A device that this build or machine does not have.
    #[error("device {requested:?} is not available: {fix}")]
    DeviceUnavailable {
        /// The device asked for.
        requested: String,
        /// What to do about it.
        fix: String,
    },
    /// A store this build cannot open.
    #[error("cannot open the store at {path}: {reason}")]
    IncompatibleStore {
        /// The store directory.
        path: PathBuf,
        /// Why, and what to do.
        reason: String,
    },
    /// No collection of that name.
    #[error(
        "collection {name:?} does not exist: create it first (or check `kindred collection list`)"
    )]
    UnknownCollection {
        /// The name asked for.
        name: String,
    },
    /// A collection of that name already exists.
    #[error("collection {name:?} already exists: pick another name, or drop it first")]
    CollectionExists {
        /// The name.
        name: String,
    },
    /// A document that cannot be stored as given.
    #[error("document {id:?} rejected: {reason}")]
    InvalidDocument {
        /// Its external id (possibly truncated for display).
        id: String,
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// Vectors from a model other than the collection's.
    #[error(
        "collection {collection:?} was created with model {expected}, but the encoder runs {found}: \
         open it with the same model and precision (--model, --precision; an int8 fingerprint ends in +int8), \
         or move it onto this model with `kindred reindex`"
    )]
    ModelMismatch {
        /// The collection.
        collection: String,
        /// Its model (id and fingerprint).
        expected: String,
        /// The model offered.
        found: String,
    },
    /// The storage backend (a Milvus server) cannot be reached or gave up; nothing of the
    /// request was acknowledged.
    #[error(
        "the storage backend ({backend}) is unavailable: {reason}. Check that it runs and is \
         reachable, then retry: nothing of this request was acknowledged"
    )]
    BackendUnavailable {
        /// Which backend.
        backend: String,
        /// What failed.
        reason: String,
    },
    /// An operation the collection's backend does not offer.
    #[error("{what} is not available on the {backend} backend: {fix}")]
    NotSupported {
        /// The operation.
        what: String,
        /// The backend.
        backend: &'static str,
        /// What to do instead.
        fix: String,
    },
    /// An argument outside its allowed range.
    #[error("invalid {name}: {reason}")]
    InvalidArgument {
        /// The argument.
        name: &'static str,
        /// What is wrong and what is allowed.
        reason: String,
    },
}

/// Problems that are not the caller's fault.
#[derive(Debug, thiserror::Error)]
pub enum InternalError {
    /// File-system trouble, with what kindred was doing.
    #[error("{context}: {source}")]
    Io {
        /// What kindred was doing.
        context: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The tokenizers library failed.
    #[error("tokenizer failed: {0}")]
    Tokenizer(String),
    /// The downloaded model did not verify or unpack.
    #[error("model fetch failed: {0}")]
    Fetch(String),
    /// The storage engine failed.
    #[error("storage engine failed: {0}")]
    Store(String),
    /// Data on disk that cannot be decoded.
    #[error("corrupt data: {0}")]
    Corrupt(String),
    /// The tensor backend failed or returned data of an unexpected shape.
    #[error("encoder backend failed: {0}")]
    Backend(String),
    /// The store cannot take writes until the server is restarted (or the data directory
    /// restored): an I/O error that is not a full disk, such as its files removed under it.
    /// The message names no server paths; the server answers it 503 `store_failed`.
    #[error("{0}")]
    StoreFailed(String),
}

impl InternalError {
    /// True for an I/O failure because the disk (or the quota) is full.
    pub fn is_disk_full(&self) -> bool {
        const ENOSPC: i32 = 28;
        const EDQUOT: i32 = 122;
        match self {
            InternalError::Io { source, .. } => {
                source.kind() == std::io::ErrorKind::StorageFull
                    || matches!(source.raw_os_error(), Some(ENOSPC | EDQUOT))
            }
            InternalError::Store(message) => message.contains("No space left on device"),
            _ => false,
        }
    }

    /// Wraps an I/O error with what kindred was doing.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        InternalError::Io {
            context: context.into(),
            source,
        }
    }
}

/// Shorthand for an I/O error with context, as an [`Error`].
pub(crate) fn io_err(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let context = context.into();
    move |source| Error::Internal(InternalError::Io { context, source })
}

/// Set once sled has met damaged data in this process: a restore from backup is needed, so a
/// server is no longer ready (`/readyz` says so).
static ENGINE_DAMAGED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// Set once sled has reported an I/O error (a full disk): sled then fails every later write
/// (and sometimes reads) until the store is reopened ([`crate::store::Store::reopen`], which
/// clears it through [`storage_engine_reopened`]).
static ENGINE_IO_FAILED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// Whether the I/O error behind [`ENGINE_IO_FAILED`] was a full disk (or quota): only then is
/// waiting for space the way out.
static ENGINE_IO_DISK_FULL: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// True once the storage engine has met damaged data, or an I/O error it has not been
/// reopened after, in this process.
pub fn storage_engine_failed() -> bool {
    ENGINE_DAMAGED.load(std::sync::atomic::Ordering::Acquire) || storage_engine_io_failed()
}

/// True when the storage engine met an I/O error and has not been reopened since.
pub fn storage_engine_io_failed() -> bool {
    ENGINE_IO_FAILED.load(std::sync::atomic::Ordering::Acquire)
}

/// True when the I/O error the storage engine met (see [`storage_engine_io_failed`]) was a
/// full disk or quota.
pub fn storage_engine_disk_full() -> bool {
    ENGINE_IO_DISK_FULL.load(std::sync::atomic::Ordering::Acquire)
}

/// Marks the storage engine failed by an I/O error (`disk_full`: ENOSPC or EDQUOT).
pub(crate) fn storage_engine_io_error(disk_full: bool) {
    ENGINE_IO_DISK_FULL.store(disk_full, std::sync::atomic::Ordering::Release);
    ENGINE_IO_FAILED.store(true, std::sync::atomic::Ordering::Release);
}

/// Marks the storage engine failed because it did not finish a flush in time (as an I/O
/// error: writes are refused until the store is reopened).
pub(crate) fn storage_engine_stalled() {
    storage_engine_io_error(false);
}

/// Marks the storage engine as reopened after an I/O error.
pub(crate) fn storage_engine_reopened() {
    ENGINE_IO_FAILED.store(false, std::sync::atomic::Ordering::Release);
}

impl From<sled::Error> for Error {
    fn from(e: sled::Error) -> Self {
        const DAMAGED: &str = "the store's files are damaged; restore the data directory \
                               from a backup (index files are rebuilt from the store, but the \
                               store itself cannot be rebuilt)";
        match e {
            // A damaged page met after the store opened (a file cut or overwritten under it).
            sled::Error::Corruption { .. } => {
                ENGINE_DAMAGED.store(true, std::sync::atomic::Ordering::Release);
                Error::Internal(InternalError::Corrupt(format!("{DAMAGED} ({e})")))
            }
            sled::Error::Io(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
                ENGINE_DAMAGED.store(true, std::sync::atomic::Ordering::Release);
                Error::Internal(InternalError::Corrupt(format!(
                    "{DAMAGED} (a file is shorter than its records say: {io})"
                )))
            }
            sled::Error::Io(io) => {
                // sled keeps failing (reads too, at times) after an I/O error until it is
                // reopened: the process is not ready until then.
                let e = InternalError::Io {
                    context: "storage engine I/O".into(),
                    source: io,
                };
                storage_engine_io_error(e.is_disk_full());
                Error::Internal(e)
            }
            other => Error::Internal(InternalError::Store(other.to_string())),
        }
    }
}
