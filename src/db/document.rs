//! A document as a user gives it, the checks a write must pass, and the export format.

use serde::{Deserialize, Serialize};

use crate::error::{io_err, Result, UserError};
use crate::model::ModelIdentity;
use crate::store::{validate_id, CollectionSettings, StoredDoc};
use crate::text::TextFormat;
use crate::types::Encoded;

/// A document as a user gives it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewDocument {
    /// External id (1–512 bytes).
    pub id: String,
    /// The question.
    pub text: String,
    /// A JSON object (or absent).
    #[serde(default)]
    pub metadata: serde_json::Value,
    /// Context: texts that go with the question (answers, comments, the FAQ entry it was
    /// filed under), stored verbatim with it and returned with it, never encoded or searched.
    /// In JSON a string or a list of strings (absent, `""` or `[]`: none); empty or
    /// whitespace-only texts are dropped. At most [`MAX_CONTEXT_TEXTS`] texts of
    /// [`MAX_CONTEXT_BYTES`] in all.
    #[serde(
        default,
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub context: Vec<String>,
}

/// Most context texts a document may carry.
pub const MAX_CONTEXT_TEXTS: usize = 64;

/// Most bytes (UTF-8) a document's context texts may hold in all: 64 KiB.
pub const MAX_CONTEXT_BYTES: usize = 64 << 10;

impl NewDocument {
    /// The document as stored when its texts are written in `format`: for
    /// [`TextFormat::Html`], its text and each context text become their visible text.
    pub fn in_format(mut self, format: TextFormat) -> Self {
        let visible = |t: String| match format.visible(&t) {
            std::borrow::Cow::Borrowed(_) => t,
            std::borrow::Cow::Owned(v) => v,
        };
        if format != TextFormat::Text {
            self.text = visible(self.text);
            self.context = self.context.into_iter().map(visible).collect();
        }
        self
    }

    /// The context as stored: its texts that are not empty or whitespace only.
    fn stored_context(&self) -> Vec<String> {
        self.context
            .iter()
            .filter(|c| !c.trim().is_empty())
            .cloned()
            .collect()
    }

    /// The record a backend stores for this document encoded as `encoded` (its internal id
    /// is the backend's to give).
    pub(crate) fn record(&self, encoded: &Encoded) -> StoredDoc {
        let metadata = match &self.metadata {
            serde_json::Value::Null => "{}".to_string(),
            m => m.to_string(),
        };
        StoredDoc::new(self.id.clone(), 0, self.text.clone(), metadata, encoded)
            .with_context(self.stored_context())
    }
}

impl From<&StoredDoc> for NewDocument {
    /// The stored document as a user gives one: its id, text (as stored: HTML already made
    /// visible), metadata (an object, `{}` when it had none) and context.
    fn from(d: &StoredDoc) -> Self {
        NewDocument {
            id: d.id.clone(),
            text: d.text.clone(),
            metadata: serde_json::Value::Object(d.metadata()),
            context: d.context.clone(),
        }
    }
}

/// Writes `docs` to `out` as an export, one line per document: the JSON object ingest reads
/// ({"id", "text", "metadata", "context"}, context left out when empty). An export ingested
/// into a collection gives it the same documents (new vectors: they are the target's model's
/// to make). `written(n)` is told after each of them; `out` is flushed at the end. Returns how
/// many were written; stops at the first error, reading a document or writing it.
pub fn write_export(
    docs: impl Iterator<Item = Result<StoredDoc>>,
    out: &mut impl std::io::Write,
    mut written: impl FnMut(u64),
) -> Result<u64> {
    let mut n = 0u64;
    for doc in docs {
        serde_json::to_writer(&mut *out, &NewDocument::from(&doc?))
            .map_err(|e| io_err("writing an export")(e.into()))?;
        out.write_all(b"\n").map_err(io_err("writing an export"))?;
        n += 1;
        written(n);
    }
    out.flush().map_err(io_err("writing an export"))?;
    Ok(n)
}

/// Reads a document's context: one string, or a list of strings (`null` reads as none).
pub fn one_or_many<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Vec<String>, D::Error> {
    struct Texts;
    impl<'de> serde::de::Visitor<'de> for Texts {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a string or a list of strings")
        }
        fn visit_str<E: serde::de::Error>(self, s: &str) -> std::result::Result<Self::Value, E> {
            Ok(vec![s.to_string()])
        }
        fn visit_string<E: serde::de::Error>(
            self,
            s: String,
        ) -> std::result::Result<Self::Value, E> {
            Ok(vec![s])
        }
        fn visit_unit<E: serde::de::Error>(self) -> std::result::Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_none<E: serde::de::Error>(self) -> std::result::Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> std::result::Result<Self::Value, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(MAX_CONTEXT_TEXTS));
            while let Some(s) = seq.next_element::<String>()? {
                out.push(s);
            }
            Ok(out)
        }
    }
    d.deserialize_any(Texts)
}

/// Checks a document as an upsert would: id length, non-empty text, object metadata, context
/// within [`MAX_CONTEXT_TEXTS`] and [`MAX_CONTEXT_BYTES`].
pub fn validate(d: &NewDocument) -> Result<()> {
    validate_id(&d.id)?;
    let reject = |reason: &str| -> Result<()> {
        Err(UserError::InvalidDocument {
            id: d.id.chars().take(40).collect(),
            reason: reason.into(),
        }
        .into())
    };
    if d.text.trim().is_empty() {
        return reject("the text is empty; give the question's text");
    }
    if !matches!(
        d.metadata,
        serde_json::Value::Object(_) | serde_json::Value::Null
    ) {
        return reject("metadata must be a JSON object, like {\"source\": \"faq\"}");
    }
    let context = d.context.iter().filter(|c| !c.trim().is_empty());
    let (texts, bytes) = context.fold((0, 0), |(n, b), c| (n + 1, b + c.len()));
    if texts > MAX_CONTEXT_TEXTS {
        return reject(&format!(
            "its context has {texts} texts; the limit is {MAX_CONTEXT_TEXTS}: keep the most useful ones or join short ones"
        ));
    }
    if bytes > MAX_CONTEXT_BYTES {
        return reject(&format!(
            "its context is {bytes} bytes; the limit is {MAX_CONTEXT_BYTES} (64 KiB) in all: shorten or drop some of its texts"
        ));
    }
    Ok(())
}

/// Refuses vectors the indexes cannot hold: of another size than `model`'s, or not finite.
pub(super) fn sound_vectors(d: &NewDocument, e: &Encoded, model: &ModelIdentity) -> Result<()> {
    let sizes = e.sentence.len() == model.dim
        && e.intent.mu.len() == model.intent_dim()
        && e.intent.sigma.len() == model.intent_dim();
    let finite = e
        .sentence
        .iter()
        .chain(&e.intent.mu)
        .chain(&e.intent.sigma)
        .all(|x| x.is_finite());
    if sizes && finite {
        return Ok(());
    }
    Err(UserError::InvalidDocument {
        id: d.id.chars().take(40).collect(),
        reason: format!(
            "its vectors are {}; encode it with {} ({}-dimensional)",
            if sizes {
                "not finite"
            } else {
                "of the wrong size"
            },
            model.id,
            model.dim
        ),
    }
    .into())
}

/// Refuses `model` unless it is the one `settings` says the collection's vectors come from.
pub(crate) fn check_model(
    name: &str,
    settings: &CollectionSettings,
    model: &ModelIdentity,
) -> Result<()> {
    if settings.model.fingerprint != model.fingerprint
        || settings.model.dim != model.dim
        || settings.model.intent_dim() != model.intent_dim()
    {
        return Err(UserError::ModelMismatch {
            collection: name.into(),
            expected: format!("{} ({})", settings.model.id, settings.model.fingerprint),
            found: format!("{} ({})", model.id, model.fingerprint),
        }
        .into());
    }
    Ok(())
}
