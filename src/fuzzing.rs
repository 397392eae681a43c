//! Fuzz targets: every way untrusted bytes enter kindred, as functions of one byte slice that
//! must return (an error is fine) and never panic, hang or allocate without bound. The same
//! functions run under cargo-fuzz (`fuzz/`, libFuzzer, nightly) and, for a fixed budget, in
//! the test suite on stable (`tests/it/fuzz.rs`: the committed corpus in `fuzz/corpus/`, then
//! random mutations of it). Owns no behaviour of its own: each target calls the real reader.
//!
//! Targets ([`TARGETS`]): the ingest readers (JSON Lines, TSV, CSV, QQP), the JSON request
//! bodies of the API, text normalisation and markup stripping, stored-record decoding,
//! index-file loading, and collection names and document ids (the names that become paths).

use std::io::Cursor;
use std::path::Path;

use crate::index::graph::{Graph, Metric, Params};
use crate::ingest::source::{read_records, Fields, Format, Record};
use crate::store::StoredDoc;
use crate::text::{normalize, strip_markup};

/// A fuzz target: takes any bytes, returns or panics (a finding).
pub type Target = fn(&[u8]);

/// Every target, by the name its corpus folder and cargo-fuzz binary carry.
pub const TARGETS: &[(&str, Target)] = &[
    ("ingest", ingest),
    ("request_body", request_body),
    ("text", text),
    ("record", record),
    ("graph_file", graph_file),
    ("names", names),
];

/// The ingest readers. The first byte picks the format and the record bound; the rest is
/// the file. Every record stays within the bound; reading ends.
pub fn ingest(data: &[u8]) {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let format = [Format::Jsonl, Format::Tsv, Format::Csv, Format::Qqp][usize::from(pick & 3)];
    let max = if pick & 4 == 0 { 64 } else { 1 << 20 };
    let fields = Fields {
        id: "id".into(),
        text: "text".into(),
        meta: if pick & 8 == 0 {
            Vec::new()
        } else {
            vec!["m".into()]
        },
        context: if pick & 16 == 0 {
            Vec::new()
        } else {
            vec!["context".into()]
        },
    };
    let reader = Cursor::new(body.to_vec());
    let Ok(records) = read_records(reader, Path::new("fuzz.txt"), format, &fields, max) else {
        return;
    };
    // At most two records per line (a QQP pair), plus one.
    let limit = 2 * (body.iter().filter(|&&b| b == b'\n').count() + 1) + 1;
    let mut n = 0;
    for r in records {
        n += 1;
        assert!(n <= limit, "more records than lines");
        if let Ok(Record::Doc(_, d)) = r {
            assert!(d.text.len() <= max, "a text over the bound");
        }
    }
}

/// The API's JSON request bodies: any bytes are a request or an error naming the problem.
#[cfg(feature = "server")]
pub fn request_body(data: &[u8]) {
    use crate::index::Filter;
    use crate::server::extract::parse;
    let b = || Ok(axum::body::Bytes::copy_from_slice(data));
    if let Ok(r) = parse::<crate::server::search::SearchRequest>(b()) {
        if let Some(f) = &r.filter {
            if let Ok(filter) = Filter::parse(f) {
                let _ = filter.matches(&serde_json::Map::new());
            }
        }
        let params = crate::search::SearchParams {
            k: r.k.unwrap_or(10),
            rerank_depth: r.rerank_depth.unwrap_or(100),
            filter: r.filter.unwrap_or_default(),
            ..Default::default()
        };
        let _ = crate::search::validate(&params);
    }
    let _ = parse::<crate::server::search::DuplicatesRequest>(b());
    let _ = parse::<crate::server::search::ExplainRequest>(b());
    let _ = parse::<Vec<crate::server::api::collections::NewDocument>>(b());
    let _ = parse::<Vec<crate::server::documents::DocumentUpsert>>(b());
    let _ = parse::<crate::server::api::Verdict>(b());
    let _ = parse::<crate::server::collections::CreateCollection>(b());
    let _ = parse::<crate::server::reindex::ReindexRequest>(b());
    let _ = parse::<crate::server::collections::SetSearchDefaults>(b());
}

/// Without the server there are no request bodies to read.
#[cfg(not(feature = "server"))]
pub fn request_body(_data: &[u8]) {}

/// A collection name and a document id (the bytes before and after the first newline): a
/// name is refused or makes a path that is exactly one entry of the folder it is made in
/// (never the folder itself, its parent, an absolute path or a deeper one); an id is
/// accepted or refused, never a panic.
pub fn names(data: &[u8]) {
    let s = String::from_utf8_lossy(data);
    let (name, id) = s.split_once('\n').unwrap_or((&s, ""));
    let root = Path::new("/data/indexes");
    let named = crate::store::names::child(root, name);
    if let Ok(path) = &named {
        assert_eq!(
            path.parent(),
            Some(root),
            "{name:?} made {}",
            path.display()
        );
        assert_eq!(path.file_name().and_then(|f| f.to_str()), Some(name));
        assert!(!name.contains(['.', '/', '\\']) && !name.is_empty());
    }
    if crate::store::validate_name(name).is_ok() {
        assert!(named.is_ok(), "{name:?} is a valid name but makes no path");
    }
    let _ = crate::store::validate_id(id);
}

/// Text normalisation (entities, whitespace, the map back to the original) and markup
/// stripping, on the bytes read as UTF-8 (lossily).
pub fn text(data: &[u8]) {
    let s = String::from_utf8_lossy(data);
    let norm = normalize(&s);
    let chars = s.chars().count();
    assert_eq!(norm.origin.len(), norm.text.chars().count() + 1);
    assert!(norm.origin.windows(2).all(|w| w[0] <= w[1]));
    assert!(norm.origin.iter().all(|&o| o <= chars));
    let stripped = strip_markup(&s);
    assert!(
        stripped.len() <= s.len() * 4 + 16,
        "markup stripping grew the text"
    );
}

/// A stored record's decoder: any bytes are an error or a record every reader can use.
pub fn record(data: &[u8]) {
    if let Ok(doc) = StoredDoc::from_bytes(data) {
        let _ = doc.token_vectors().decode();
        let _ = doc.encoded();
        let _ = doc.metadata();
    }
}

/// An index file: any bytes are refused or load as a graph that can be searched.
pub fn graph_file(data: &[u8]) {
    if let Ok(g) = Graph::read_from(&mut &data[..]) {
        let q = vec![0.5f32; g.dim()];
        let _ = g.search(&q, 3, 8);
        let _ = g.ids();
    }
}

/// A small real graph file, a seed for [`graph_file`].
pub fn graph_seed() -> Vec<u8> {
    let g = Graph::new(
        Metric::Cosine,
        4,
        Params {
            m: 4,
            ef_construction: 8,
            ..Params::default()
        },
    );
    let pts: Vec<(u64, Vec<f32>)> = (0..12u64)
        .map(|i| {
            let mut v = vec![0.1f32; 4];
            v[(i % 4) as usize] = 1.0 + i as f32 / 10.0;
            (i, v)
        })
        .collect();
    let refs: Vec<(u64, &[f32])> = pts.iter().map(|(i, v)| (*i, v.as_slice())).collect();
    g.insert_many(&refs).expect("a valid seed graph");
    g.remove(3);
    let mut out = Vec::new();
    g.write_to(&mut out).expect("written to memory");
    out
}

/// A real stored record, a seed for [`record`].
pub fn record_seed() -> Vec<u8> {
    use crate::types::{Encoded, Gaussian, Token};
    let token = |text: &str, id, start, end| Token {
        text: text.into(),
        id,
        start,
        end,
    };
    let enc = Encoded {
        tokens: vec![token("how", 2129, 0, 3), token("password", 20786, 18, 26)],
        truncated: false,
        token_vectors: vec![0.6, 0.8, 0.0, 0.0, 0.6, 0.8],
        sentence: vec![0.6, 0.8, 0.0],
        intent: Gaussian {
            mu: vec![0.1; 3],
            sigma: vec![1.0; 3],
        },
    };
    StoredDoc::new(
        "pw".into(),
        7,
        "How do I reset my password?".into(),
        "{\"site\":\"faq\"}".into(),
        &enc,
    )
    .with_context(vec!["Use the link on the sign-in page.".into()])
    .to_bytes()
}

#[cfg(all(test, feature = "server"))]
mod request_bodies {
    //! The request bodies under proptest (as well as the mutation runner): any bytes and any JSON, read as every request type the API
    //! takes, then (for a search) through the filter and parameter checks, answer an error
    //! or a value; nothing panics.

    use proptest::prelude::*;
    use serde_json::Value;

    fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<f64>().prop_map(|x| serde_json::json!(x)),
            any::<i64>().prop_map(|x| serde_json::json!(x)),
            "[a-z_]{0,8}|\\PC{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::btree_map(
                    prop_oneof![
                        Just("text".to_string()),
                        Just("k".to_string()),
                        Just("filter".to_string()),
                        Just("id".to_string()),
                        Just("in".to_string()),
                        Just("gte".to_string()),
                        Just("depths".to_string()),
                        Just("a".to_string()),
                        Just("format".to_string()),
                        Just("context".to_string()),
                        "[a-z]{1,6}"
                    ],
                    inner,
                    0..6
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// The fuzz target reads every request type from the bytes.
    fn read_all(bytes: &[u8]) {
        super::request_body(bytes);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

        #[test]
        fn any_json_body_is_an_error_or_a_request(v in json()) {
            read_all(v.to_string().as_bytes());
            // The same value as the filter and the documents of a request.
            read_all(serde_json::json!({ "text": "q", "filter": v }).to_string().as_bytes());
            read_all(serde_json::json!([{ "id": "x", "text": "t", "metadata": v }]).to_string().as_bytes());
            read_all(serde_json::json!([{ "id": "x", "text": "t", "context": v }]).to_string().as_bytes());
        }

        #[test]
        fn any_bytes_are_an_error_or_a_request(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            read_all(&bytes);
        }
    }
}
