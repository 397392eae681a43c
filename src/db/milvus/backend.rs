//! The Milvus backend behind [`Backend`]: each operation checks the collection exists in the
//! shared metadata, then goes to the server. What it does not offer (reindex, context
//! vectors) is refused by the trait's defaults.

use super::view::MilvusView;
use super::*;
use crate::db::backend::{Backend, Capability, CollectionView};
use crate::db::info::CALIBRATION_KEY;
use crate::db::{CollectionInfo, IndexInfo, MilvusSettings, NewDocument, SearchDefaultsInfo};
use crate::model::ModelIdentity;
use crate::score::calibration::Calibrator;
use crate::store::{SearchDefaults, SEARCH_DEFAULTS_KEY};
use crate::types::Encoded;

/// Collections in a Milvus server or cluster.
pub(crate) struct Milvus {
    remote: Arc<Remote>,
}

impl Milvus {
    /// Connects to the server at `url` ([`Remote::connect`]).
    pub fn connect(url: &str, settings: &MilvusSettings) -> Result<Self> {
        Ok(Milvus {
            remote: Arc::new(Remote::connect(url, settings)?),
        })
    }
}

impl Backend for Milvus {
    fn name(&self) -> &'static str {
        crate::db::backend::MILVUS
    }

    fn supports(&self, capability: Capability) -> bool {
        crate::db::backend::milvus_offers(capability)
    }

    fn settings(&self, name: &str) -> Result<CollectionSettings> {
        self.remote.require(name)
    }

    fn count(&self, name: &str) -> Result<u64> {
        self.remote.require(name)?;
        self.remote.count(name)
    }

    fn collections(&self) -> Result<Vec<(String, CollectionSettings)>> {
        self.remote.collections()
    }

    /// Milvus keeps its own HNSW graphs, in f32: `hnsw.vectors` sq8 is refused, not ignored.
    fn create_collection(&self, name: &str, settings: &CollectionSettings) -> Result<()> {
        if !settings.hnsw.vectors.is_f32() {
            return Err(crate::error::UserError::InvalidArgument {
                name: "hnsw.vectors",
                reason: format!(
                    "{}: graph vectors in int8 are the embedded backend's; Milvus builds its \
                     own HNSW indexes over f32 vectors. Leave `vectors` out (f32)",
                    settings.hnsw.vectors.name()
                ),
            }
            .into());
        }
        self.remote.create_collection(name, settings)
    }

    fn drop_collection(&self, name: &str) -> Result<()> {
        self.remote.drop_collection(name)
    }

    /// Index sizes are the server's business: its graphs hold the live documents; the lexical
    /// count is this node's BM25 index, 0 until it is built (a stats call does not scan the
    /// collection); sizes are extrapolated from a sample ([`Remote::stats`]).
    fn info(&self, name: &str) -> Result<CollectionInfo> {
        let r = &self.remote;
        let settings = r.require(name)?;
        let documents = r.count(name)?;
        let search_defaults = search_defaults(r, name)?.map(|d| SearchDefaultsInfo {
            stale: d.is_stale(&settings.model.fingerprint),
            defaults: (*d).clone(),
        });
        Ok(CollectionInfo {
            name: name.into(),
            index: IndexInfo {
                cosine_points: documents as usize,
                w2_points: documents as usize,
                tombstones: 0,
                w2_tombstones: 0,
                lexical_documents: r.lexical_len(name),
                graph_vector_bytes: None,
                opened: None,
            },
            settings,
            format_version: 0,
            stats: r.stats(name, documents)?,
            search_defaults,
            context_vectors: None,
        })
    }

    fn set_search_defaults(&self, name: &str, defaults: Option<SearchDefaults>) -> Result<()> {
        self.remote.require(name)?;
        let key = meta_key(name, SEARCH_DEFAULTS_KEY);
        match &defaults {
            Some(d) => self
                .remote
                .set_meta(&key, &serde_json::to_string(d).expect("serialises")),
            None => self.remote.remove_meta(&key).map(|_| ()),
        }
    }

    fn search_defaults(&self, name: &str) -> Result<Option<SearchDefaults>> {
        self.remote.require(name)?;
        Ok(search_defaults(&self.remote, name)?.map(|d| (*d).clone()))
    }

    fn set_calibrator(&self, name: &str, calibrator: &Calibrator) -> Result<()> {
        self.remote.require(name)?;
        let json = serde_json::to_string(calibrator).expect("calibrator serialises");
        self.remote
            .set_meta(&meta_key(name, CALIBRATION_KEY), &json)
    }

    fn upsert(
        &self,
        name: &str,
        _model: &ModelIdentity,
        _docs: &[(NewDocument, Encoded)],
        records: Vec<StoredDoc>,
    ) -> Result<Vec<Upserted>> {
        self.remote.upsert(name, records)
    }

    fn delete(&self, name: &str, id: &str) -> Result<bool> {
        self.remote.require(name)?;
        Ok(self.remote.delete(name, id)?.is_some())
    }

    fn get(&self, name: &str, id: &str) -> Result<Option<StoredDoc>> {
        self.remote.require(name)?;
        self.remote.get(name, id)
    }

    fn documents<'a>(
        &'a self,
        name: &str,
    ) -> Result<Box<dyn Iterator<Item = Result<StoredDoc>> + 'a>> {
        self.remote.require(name)?;
        Ok(Box::new(self.remote.iter(name)))
    }

    fn recent(&self, name: &str, before: Option<u64>, limit: usize) -> Result<Vec<(u64, String)>> {
        self.remote.require(name)?;
        self.remote.recent(name, before, limit)
    }

    fn put_pair(&self, name: &str, key: &str, value: &[u8]) -> Result<()> {
        self.remote.put_pair(name, key, value)
    }

    fn pairs(&self, name: &str) -> Result<Vec<(String, Vec<u8>)>> {
        self.remote.pairs(name)
    }

    fn pair(&self, name: &str, key: &str) -> Result<Option<Vec<u8>>> {
        self.remote.pair(name, key)
    }

    fn remove_pair(&self, name: &str, key: &str) -> Result<bool> {
        self.remote.remove_pair(name, key)
    }

    fn view<'a>(&'a self, name: &str) -> Result<Box<dyn CollectionView + 'a>> {
        let r = &self.remote;
        Ok(Box::new(MilvusView {
            settings: r.require(name)?,
            layout: r.layout(name)?,
            lexical: r.lexical(name)?,
            remote: r.clone(),
            name: name.to_string(),
            loaded: Mutex::new(HashMap::new()),
        }))
    }

    /// The vectors are Milvus's to load; this node builds its BM25 indexes.
    fn warm_up(&self) -> Result<()> {
        for (name, _) in self.remote.collections()? {
            self.remote.lexical(&name)?;
        }
        Ok(())
    }
}
