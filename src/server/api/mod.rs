//! The wire types: what the HTTP API reads and writes, one module per resource.
//!
//! The library's structs are not the wire format. Each type here mirrors one of them field for
//! field, with the same serde attributes, so the JSON is the same; the OpenAPI schemas are
//! derived from these types (utoipa lives only in `server`). Handlers convert at the edge:
//! `From<library type>` for what they answer, `From<wire type>` into the library for what they
//! read. A change to a library struct does not change the API until it is made here too.

pub mod collections;
pub mod jobs;
pub mod review;
pub mod search;

pub use collections::{CollectionInfo, HnswParams, Precision, ReindexReport, SearchDefaultsInfo};
pub use jobs::{format_name, IngestSummary, Rejected};
pub use review::{ReviewPage, StoredVerdict, Verdict};
pub use search::{
    Depths, DuplicateVerdict, FusionWeights, Mode, OperationAnswer, OperationKind, PairExplanation,
    Rerank, SearchOutcome, Weighting,
};

#[cfg(test)]
mod tests {
    //! The wire types answer exactly the JSON the library types serialise to, and read request
    //! bodies exactly as the library types would.

    use serde::de::DeserializeOwned;
    use serde::Serialize;
    use serde_json::json;

    use crate::score::explain::{explain, Explanation, Sentence};
    use crate::score::rcmd::{Tokens, Weights};
    use crate::types::Token;
    use crate::{db, ingest, model, review, search, store, types};

    /// The library value and its wire type serialise to the same bytes.
    fn same_json<L, D>(lib: L)
    where
        L: Serialize + Clone,
        D: Serialize + From<L>,
    {
        let want = serde_json::to_string(&lib).expect("library value serialises");
        let got = serde_json::to_string(&D::from(lib.clone())).expect("wire value serialises");
        assert_eq!(got, want);
        assert_eq!(
            serde_json::to_value(D::from(lib.clone())).expect("serialises"),
            serde_json::to_value(&lib).expect("serialises")
        );
    }

    /// A request body reads the same through the wire type as through the library type (or
    /// both refuse it).
    fn same_read<D, L>(body: serde_json::Value)
    where
        D: DeserializeOwned + Into<L>,
        L: DeserializeOwned + PartialEq + std::fmt::Debug,
    {
        let wire = serde_json::from_value::<D>(body.clone()).map(Into::into);
        let lib = serde_json::from_value::<L>(body.clone());
        match (wire, lib) {
            (Ok(w), Ok(l)) => assert_eq!(w, l, "{body}"),
            (Err(_), Err(_)) => {}
            (w, l) => panic!("{body}: the wire type reads {w:?}, the library type {l:?}"),
        }
    }

    fn token(text: &str, id: u32, start: usize, end: usize) -> Token {
        Token {
            text: text.into(),
            id,
            start,
            end,
        }
    }

    fn explanation() -> Explanation {
        let a_tokens = [
            token("big", 1, 0, 3),
            token("cat", 2, 4, 7),
            token("##s", 3, 7, 8),
        ];
        let b_tokens = [token("large", 4, 0, 5), token("cat", 2, 6, 9)];
        let s = std::f32::consts::FRAC_1_SQRT_2;
        let a_vec = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, s, s];
        let b_vec = [s, 0.0, s, 0.0, 1.0, 0.0];
        explain(
            Sentence {
                text: "big cats",
                tokens: &a_tokens,
                vectors: Tokens::new(&a_vec, 3),
            },
            Sentence {
                text: "large cat",
                tokens: &b_tokens,
                vectors: Tokens::new(&b_vec, 3),
            },
            Weights::Uniform,
        )
    }

    fn stage(score: f32, rank: Option<usize>) -> search::Stage {
        search::Stage { score, rank }
    }

    fn hit(id: &str, explained: bool) -> search::Hit {
        let metadata = json!({ "lang": "en", "tags": ["a", "b"], "n": 3, "nested": { "x": null } });
        search::Hit {
            id: id.into(),
            text: format!("question \"{id}\" — ünïcode"),
            metadata: metadata.as_object().expect("an object").clone(),
            score: 0.8125,
            probability: 0.93,
            stages: search::Stages {
                cosine: stage(0.91, Some(1)),
                w2: stage(0.37, None),
                lexical: stage(0.0, None),
                fused: stage(0.0327, Some(2)),
                rcmd: search::RcmdStage {
                    score: 0.8125,
                    forward: 0.8,
                    backward: 0.825,
                    rank: 1,
                },
                context: None,
            },
            explanation: explained.then(|| search::Explained {
                vectors: search::Vectors::StoredInt8,
                explanation: explanation(),
            }),
        }
    }

    fn timings() -> search::Timings {
        search::Timings {
            encode_ms: 1.5,
            candidates_ms: 0.25,
            rerank_ms: 3.0,
            total_ms: 4.75,
        }
    }

    fn identity(precision: types::Precision, intent_dim: Option<usize>) -> model::ModelIdentity {
        model::ModelIdentity {
            id: "all-MiniLM-L6-v2".into(),
            fingerprint: "sha256:abc+int8".into(),
            dim: 384,
            max_len: 256,
            intent_dim,
            precision,
        }
    }

    fn compound() -> search::Compound {
        search::Compound {
            covers: vec![search::Covered {
                id: "q1".into(),
                text: "How do I reset my password?".into(),
                probability: 0.4,
                phrases: vec!["reset my password".into()],
            }],
            probability: 0.8,
        }
    }

    fn settings(stale: bool) -> search::Settings {
        search::Settings {
            mode: search::Mode::Cosine,
            rerank: search::Rerank::None,
            weights: search::Weighting::Idf,
            fusion: search::FusionWeights {
                lexical: 0.5,
                ..Default::default()
            },
            source: search::Sources {
                mode: search::Source::Collection,
                rerank: search::Source::Request,
                weights: search::Source::Default,
                fusion: search::Source::Collection,
            },
            stale_defaults: stale,
        }
    }

    fn search_defaults(evidence: serde_json::Value) -> store::SearchDefaults {
        store::SearchDefaults {
            mode: search::Mode::Lexical,
            rerank: search::Rerank::Rcmd,
            weights: search::Weighting::Uniform,
            fusion: search::FusionWeights::default(),
            source: store::DefaultsSource::Learned,
            reason: "lexical then RCMD: nDCG@10 0.71 against 0.69 for the default".into(),
            model_fingerprint: "sha256:abc+int8".into(),
            chosen_at: "2026-11-24T09:30:00Z".into(),
            evidence,
        }
    }

    #[test]
    fn search_answers_are_unchanged() {
        same_json::<_, super::search::Hit>(hit("q1", true));
        same_json::<_, super::search::Hit>(hit("q2", false));
        same_json::<_, super::SearchOutcome>(search::SearchOutcome {
            hits: vec![hit("q1", true), hit("q2", false)],
            candidates: 42,
            calibration: "logistic".into(),
            threshold: 0.5,
            filtered: Some(search::Filtered {
                matching: 7,
                exact: true,
            }),
            unexplained: 3,
            compound: Some(compound()),
            settings: Some(settings(false)),
            timings: timings(),
        });
        same_json::<_, super::SearchOutcome>(search::SearchOutcome {
            hits: vec![],
            candidates: 0,
            calibration: "default".into(),
            threshold: 0.5,
            filtered: None,
            unexplained: 0,
            compound: None,
            settings: None,
            timings: search::Timings::default(),
        });
        same_json::<_, super::PairExplanation>(search::PairExplanation {
            cosine: 0.75,
            w2: 1.25,
            lexical: 0.5,
            probability: 0.875,
            calibration: "default".into(),
            explanation: search::Explained {
                vectors: search::Vectors::FreshF32,
                explanation: explanation(),
            },
        });
    }

    #[test]
    fn duplicate_verdicts_are_unchanged() {
        same_json::<_, super::DuplicateVerdict>(search::DuplicateVerdict {
            is_duplicate: true,
            probability: 0.93,
            threshold: 0.5,
            matches: vec![
                search::DuplicateMatch {
                    is_duplicate: true,
                    hit: hit("q1", true),
                    beyond: None,
                },
                search::DuplicateMatch {
                    is_duplicate: false,
                    hit: hit("q2", false),
                    beyond: Some(search::Beyond {
                        phrases: vec!["with PayPal".into()],
                        nearest: vec![search::Nearest {
                            id: "q9".into(),
                            text: "Can I pay with PayPal?".into(),
                            cosine: 0.71,
                        }],
                        words: vec!["paypal".into()],
                    }),
                },
            ],
            compound: Some(compound()),
            calibration: "siamese".into(),
            filtered: Some(search::Filtered {
                matching: 12,
                exact: true,
            }),
            unexplained: 1,
            settings: Some(settings(true)),
            timings: timings(),
        });
    }

    #[test]
    fn collection_info_is_unchanged() {
        for (precision, intent_dim, generation, model_path, defaults) in [
            (types::Precision::Int8, None, None, None, None),
            (
                types::Precision::Fp32,
                Some(64),
                Some(3),
                Some("/models/trained".to_string()),
                Some(db::SearchDefaultsInfo {
                    defaults: search_defaults(
                        json!({ "rows": [{ "name": "lexical", "ndcg": 0.71 }] }),
                    ),
                    stale: true,
                }),
            ),
            (
                types::Precision::Int8,
                None,
                None,
                None,
                Some(db::SearchDefaultsInfo {
                    defaults: search_defaults(serde_json::Value::Null),
                    stale: false,
                }),
            ),
        ] {
            let info = db::CollectionInfo {
                name: "faq".into(),
                settings: store::CollectionSettings {
                    model: identity(precision, intent_dim),
                    codec: "int8".into(),
                    hnsw: types::HnswParams::default(),
                    generation,
                    model_path,
                },
                format_version: 4,
                stats: store::CollectionStats {
                    documents: 10,
                    token_vectors: 120,
                    record_bytes: 65_536,
                    token_vector_bytes: 46_080,
                    bytes_per_document: 6553.6,
                    bytes_per_token_vector: 384.0,
                    seq: 17,
                    sampled: None,
                },
                index: db::IndexInfo {
                    cosine_points: 11,
                    w2_points: 11,
                    tombstones: 1,
                    w2_tombstones: 2,
                    lexical_documents: 10,
                    graph_vector_bytes: Some(12_672),
                    opened: Some(db::OpenedFrom {
                        saved_seq: Some(12),
                        inserted: 4,
                        removed: 1,
                        text_saved_seq: Some(13),
                        records_read: 1004,
                    }),
                },
                search_defaults: defaults,
                context_vectors: generation.map(|g| db::ContextVectorsInfo {
                    stamp: db::ContextVectorsStamp {
                        model: "9f2c0a11".into(),
                        documents: 8,
                    },
                    stale: g > 2,
                }),
            };
            same_json::<_, super::CollectionInfo>(info);
        }
        same_json::<_, super::ReindexReport>(db::ReindexReport {
            documents: 10,
            encoded: 12,
            generation: 1,
            model: identity(types::Precision::Fp32, None),
            seconds: 2.5,
        });
    }

    #[test]
    fn review_pages_and_verdicts_are_unchanged() {
        let verdict = review::Verdict {
            a: review::PairSide {
                id: Some("q1".into()),
                text: "how do I reset my password".into(),
            },
            b: review::PairSide {
                id: None,
                text: "forgot password".into(),
            },
            duplicate: true,
            probability: Some(0.875),
        };
        for next_before in [Some(1234), None] {
            same_json::<_, super::ReviewPage>(review::ReviewPage {
                items: vec![
                    review::ReviewItem {
                        document: verdict.a.clone(),
                        matched: hit("q9", true),
                        key: "0123456789abcdef0123456789abcdef".into(),
                        beyond: Some(search::Beyond {
                            phrases: vec!["with PayPal".into()],
                            nearest: vec![search::Nearest {
                                id: "q3".into(),
                                text: "Can I pay with PayPal?".into(),
                                cosine: 0.625,
                            }],
                            words: vec![],
                        }),
                        compound: None,
                    },
                    review::ReviewItem {
                        document: verdict.b.clone(),
                        matched: hit("q8", false),
                        key: "fedcba9876543210fedcba9876543210".into(),
                        beyond: None,
                        compound: Some(compound()),
                    },
                ],
                threshold: 0.5,
                scanned: 100,
                unexplained: next_before.map_or(0, |_| 2),
                next_before,
            });
        }
        same_json::<_, super::StoredVerdict>(review::StoredVerdict {
            key: review::pair_key(&verdict.a, &verdict.b),
            verdict: verdict.clone(),
            at: 1_700_000_000,
        });
        same_json::<_, super::StoredVerdict>(review::StoredVerdict {
            key: "k".into(),
            verdict: review::Verdict {
                probability: None,
                ..verdict
            },
            at: 0,
        });
    }

    #[test]
    fn ingest_results_are_unchanged() {
        let rejected = ingest::Rejected {
            line: 7,
            reason: "no text column".into(),
        };
        same_json::<_, super::Rejected>(rejected.clone());
        // Jobs showed the format as its lowercased Debug name; format_name keeps those names.
        for format in [
            ingest::Format::Tsv,
            ingest::Format::Csv,
            ingest::Format::Jsonl,
            ingest::Format::Qqp,
        ] {
            let name = super::format_name(format);
            assert_eq!(name, format!("{format:?}").to_lowercase());
            assert_eq!(name.parse::<ingest::Format>().expect("parses back"), format);
        }
        same_json::<_, super::IngestSummary>(ingest::Summary {
            file: "/data/uploads/job-1-42".into(),
            collection: "faq".into(),
            resumed_after_line: 0,
            ingested: 90,
            updated: 3,
            rejected: 1,
            rejects: vec![rejected],
            seconds: 1.5,
            docs_per_sec: 62.0,
        });
    }

    #[test]
    fn request_bodies_read_the_same() {
        for body in [
            json!({ "id": "a", "text": "t", "metadata": { "k": 1 } }),
            json!({ "id": "a", "text": "t" }),
            json!({ "id": "a", "text": "t", "extra": true }),
            json!({ "id": "a" }),
            json!({ "id": "a", "text": "t", "context": "an answer" }),
            json!({ "id": "a", "text": "t", "context": ["one", "two"] }),
            json!({ "id": "a", "text": "t", "context": null }),
            json!({ "id": "a", "text": "t", "context": 3 }),
        ] {
            same_read::<super::collections::NewDocument, db::NewDocument>(body);
        }
        for body in [
            json!({}),
            json!({ "w2": 5 }),
            json!({ "cosine": 1, "bogus": 2 }),
        ] {
            same_read::<super::Depths, search::Depths>(body);
        }
        for body in [
            json!({}),
            json!({ "k0": 10.0, "lexical": 0.5 }),
            json!({ "x": 1 }),
        ] {
            same_read::<super::FusionWeights, search::FusionWeights>(body);
        }
        for body in [
            json!("cosine"),
            json!("w2"),
            json!("lexical"),
            json!("hybrid"),
            json!("W2"),
        ] {
            same_read::<super::Mode, search::Mode>(body);
        }
        for body in [json!("rcmd"), json!("none"), json!("RCMD")] {
            same_read::<super::Rerank, search::Rerank>(body);
        }
        for body in [json!("uniform"), json!("idf"), json!("IDF"), json!("tfidf")] {
            same_read::<super::Weighting, search::Weighting>(body);
        }
        for body in [json!("fp32"), json!("int8"), json!("Int8")] {
            same_read::<super::Precision, types::Precision>(body);
        }
        for body in [
            json!({ "m": 8, "ef_construction": 100, "ef_search": 32 }),
            json!({ "m": 8 }),
        ] {
            same_read::<super::HnswParams, types::HnswParams>(body);
        }
        for body in [
            json!({ "a": { "id": "x", "text": "one" }, "b": { "text": "two" }, "duplicate": true }),
            json!({ "a": { "text": "one" }, "b": { "text": "two" }, "duplicate": false, "probability": 0.25 }),
            json!({ "a": { "text": "one" }, "duplicate": false }),
        ] {
            same_read::<super::Verdict, review::Verdict>(body);
        }
    }
}
