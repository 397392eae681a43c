//! How a kindred collection is laid out in Milvus: the server's capabilities, the layouts, collection names and internal ids, the schemas, and creating and dropping a collection.

use super::*;

/// Longest VarChar Milvus stores.
pub(super) const CHUNK_CHARS: usize = 65_535;

/// Record chunks per document (`rec0..rec3`): a record may be up to 4 × 64 KiB of base64.
pub(super) const CHUNKS: usize = 4;

/// What a Milvus server can do that kindred's layouts use ([`capabilities`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Capabilities {
    /// Several vector fields in one collection (Milvus 2.4).
    pub vector_fields: bool,
    /// Full-text search: analysed VarChar fields, the BM25 function and sparse BM25 search
    /// (Milvus 2.5).
    pub full_text: bool,
}

/// How one kindred collection is laid out in Milvus (the module doc describes each); ordered
/// by what the server must offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Layout {
    /// `c_docs` and `c_intent`.
    Split,
    /// `c_docs` with both vector fields.
    One,
    /// `c_docs` with both vector fields and the BM25 field.
    FullText,
}

impl Layout {
    /// The best layout a server with `c` offers.
    pub(super) fn for_server(c: Capabilities) -> Layout {
        match (c.vector_fields, c.full_text) {
            (true, true) => Layout::FullText,
            (true, false) => Layout::One,
            _ => Layout::Split,
        }
    }

    /// Its name in the shared metadata and the docs.
    pub fn name(self) -> &'static str {
        match self {
            Layout::Split => "split",
            Layout::One => "one",
            Layout::FullText => "full-text",
        }
    }

    pub(super) fn from_name(name: &str) -> Option<Layout> {
        [Layout::Split, Layout::One, Layout::FullText]
            .into_iter()
            .find(|l| l.name() == name)
    }

    /// The Milvus collection (suffix) holding the intents' `w2` field.
    pub(super) fn intent_part(self) -> &'static str {
        match self {
            Layout::Split => "intent",
            Layout::One | Layout::FullText => "docs",
        }
    }
}

/// What a server of `version` can do: "v2.3.5-lite" neither, "v2.4.x" several vector fields,
/// "v2.5" and later both; milvus-lite 3 ("milvus_lite-3.2.2", the Python server speaking the
/// Milvus 2.6 API) both. An unknown version gets the split layout, which every server from 2.3
/// serves.
pub(crate) fn capabilities(version: &str) -> Capabilities {
    match version.strip_prefix("milvus_lite-") {
        Some(lite) => {
            let three = major_minor(lite).is_some_and(|v| v >= (3, 0));
            Capabilities {
                vector_fields: three,
                full_text: three,
            }
        }
        None => {
            let v = major_minor(version);
            Capabilities {
                vector_fields: v.is_some_and(|v| v >= (2, 4)),
                full_text: v.is_some_and(|v| v >= (2, 5)),
            }
        }
    }
}

/// The major and minor number of a version string ("v2.3.5-lite" → (2, 3)).
pub(super) fn major_minor(version: &str) -> Option<(u32, u32)> {
    let mut parts = version
        .split(|c: char| !c.is_ascii_digit())
        .filter(|p| !p.is_empty())
        .map(|p| p.parse::<u32>().ok());
    Some((parts.next()??, parts.next()??))
}

/// The Milvus collection names of kindred collection `name` (letters, digits and `_` only:
/// `_` becomes `__` and `-` becomes `_h`, so distinct names stay distinct).
pub(crate) fn physical(name: &str) -> String {
    let mut out = String::from("kd_");
    for c in name.chars() {
        match c {
            '_' => out.push_str("__"),
            '-' => out.push_str("_h"),
            c => out.push(c),
        }
    }
    out
}

/// A document's internal id on the Milvus backend: the first 63 bits of SHA-256 of its
/// external id, the same on every node.
pub(crate) fn internal_id(id: &str) -> u64 {
    use sha2::Digest;
    let h = sha2::Sha256::digest(id.as_bytes());
    u64::from_le_bytes(h[..8].try_into().expect("8 bytes")) & (i64::MAX as u64)
}

pub(super) fn pk_int(name: &str) -> FieldSchema {
    FieldSchema::new()
        .name(name)
        .data_type(DataType::Int64)
        .primary_key(true)
        .auto_id(false)
}

pub(super) fn pk_varchar(name: &str) -> FieldSchema {
    FieldSchema::new()
        .name(name)
        .data_type(DataType::VarChar)
        .max_length(1024)
        .primary_key(true)
        .auto_id(false)
}

pub(super) fn varchar(name: &str, max: usize) -> FieldSchema {
    FieldSchema::new()
        .name(name)
        .data_type(DataType::VarChar)
        .max_length(max as _)
}

pub(super) fn vector(name: &str, dim: usize) -> FieldSchema {
    FieldSchema::new()
        .name(name)
        .data_type(DataType::FloatVector)
        .dimension(dim as u32)
}

/// The name of record chunk `c` (`rec0..rec3`).
pub(super) fn record_field(c: usize) -> String {
    format!("rec{c}")
}

/// Every record chunk's field name.
pub(super) fn record_fields() -> impl Iterator<Item = String> {
    (0..CHUNKS).map(record_field)
}

impl Remote {
    /// The layout new collections get: the best the server offers, or the one the settings
    /// name ([`crate::db::MilvusSettings::layout`]: `split`, `one`, `full-text`) if the server
    /// has what it needs.
    pub(super) fn new_layout(&self) -> Result<Layout> {
        let best = Layout::for_server(self.capabilities);
        let Some(asked) = &self.layout_asked else {
            return Ok(best);
        };
        let bad = |reason: String| -> crate::Error {
            UserError::InvalidArgument {
                name: "KINDRED_MILVUS_LAYOUT",
                reason,
            }
            .into()
        };
        let layout = Layout::from_name(asked.trim())
            .ok_or_else(|| bad(format!("{asked:?}: use split, one or full-text")))?;
        if layout > best {
            return Err(bad(format!(
                "Milvus {} offers at most the {} layout: unset it or upgrade the server",
                self.version,
                best.name()
            )));
        }
        Ok(layout)
    }

    /// Collection `name`'s layout: recorded in the shared metadata when it was created (no
    /// record: the split layout, all collections created before there were others).
    pub fn layout(&self, name: &str) -> Result<Layout> {
        if let Some(&l) = self.layouts.locked().get(name) {
            return Ok(l);
        }
        let layout = match self.meta(&meta_key(name, "layout"))? {
            Some(n) => Layout::from_name(&n).ok_or_else(|| {
                crate::error::InternalError::Corrupt(format!(
                    "collection {name:?} in Milvus has the unknown layout {n:?} (written by a newer kindred?)"
                ))
            })?,
            // A collection with settings and no record predates layouts (the record is
            // written before the settings); without settings it may be one another node is
            // creating, so that answer is not kept.
            None if self.settings(name)?.is_some() => Layout::Split,
            None => return Ok(Layout::Split),
        };
        self.layouts.locked().insert(name.to_string(), layout);
        Ok(layout)
    }

    /// Creates kindred collection `name` in the layout new collections get
    /// ([`Remote::new_layout`]): its Milvus collections, indexed and loaded, then its layout
    /// record, then its settings (written last: a collection exists once they are).
    pub fn create_collection(&self, name: &str, settings: &CollectionSettings) -> Result<()> {
        crate::store::validate_name(name)?;
        if self.settings(name)?.is_some() {
            return Err(UserError::CollectionExists { name: name.into() }.into());
        }
        let layout = self.new_layout()?;
        let p = physical(name);
        let (dim, k) = (settings.model.dim, settings.model.intent_dim());
        // Leftovers of a create that stopped before writing the settings.
        self.drop_milvus(&format!("{p}_docs"))?;
        self.drop_milvus(&format!("{p}_intent"))?;
        let mut docs = CollectionSchema::new()
            .add_field(pk_int("id"))
            .add_field(varchar("doc", 2048))
            .add_field(varchar("text", TEXT_BYTES))
            .add_field(FieldSchema::new().name("meta").data_type(DataType::Json));
        for field in record_fields() {
            docs = docs.add_field(varchar(&field, CHUNK_CHARS));
        }
        docs = docs.add_field(vector("sentence", dim));
        let hnsw = Some(settings.hnsw);
        let mut indexes = vec![("sentence", MetricType::Cosine, hnsw)];
        if layout != Layout::Split {
            docs = docs.add_field(vector("w2", 2 * k));
            indexes.push(("w2", MetricType::L2, hnsw));
        }
        if layout == Layout::FullText {
            docs = docs
                .add_field(
                    varchar("lex", CHUNK_CHARS)
                        .enable_analyzer(true)
                        .analyzer_params(json!({"tokenizer": "standard"})),
                )
                .add_field(
                    FieldSchema::new()
                        .name("bm25")
                        .data_type(DataType::SparseFloatVector),
                )
                .add_function(
                    Function::new()
                        .name("bm25")
                        .function_type(FunctionType::Bm25)
                        .input_fields(["lex"])
                        .output_fields(["bm25"]),
                );
            indexes.push(("bm25", MetricType::Bm25, None));
        }
        self.create(&format!("{p}_docs"), docs, &indexes)?;
        self.load(&format!("{p}_docs"))?;
        if layout == Layout::Split {
            let intent = CollectionSchema::new()
                .add_field(pk_int("id"))
                .add_field(FieldSchema::new().name("meta").data_type(DataType::Json))
                .add_field(vector("w2", 2 * k));
            self.create(
                &format!("{p}_intent"),
                intent,
                &[("w2", MetricType::L2, hnsw)],
            )?;
            self.load(&format!("{p}_intent"))?;
        }
        self.set_meta(&meta_key(name, "layout"), layout.name())?;
        self.layouts.locked().insert(name.to_string(), layout);
        let json = serde_json::to_string(settings).expect("settings serialise");
        self.set_meta(&settings_key(name), &json)
    }

    /// Drops collection `name`: settings first (so it stops existing at once), then its
    /// Milvus collections and its metadata.
    pub fn drop_collection(&self, name: &str) -> Result<()> {
        if self.settings(name)?.is_none() {
            return Err(UserError::UnknownCollection { name: name.into() }.into());
        }
        self.remove_meta(&settings_key(name))?;
        let p = physical(name);
        self.drop_milvus(&format!("{p}_docs"))?;
        self.drop_milvus(&format!("{p}_intent"))?;
        self.delete_where(
            META,
            &format!("key like {}", json!(format!("meta/{name}/%"))),
        )?;
        self.lexical.locked().remove(name);
        self.layouts.locked().remove(name);
        let prefix = meta_key(name, "");
        self.meta_cache
            .locked()
            .retain(|k, _| !k.starts_with(&prefix));
        Ok(())
    }
}
