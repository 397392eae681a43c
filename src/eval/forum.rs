//! SemEval-2016 Task 3 (community question answering on the Qatar Living forum), subtask B:
//! reading the task's XML files and its measure. Each original question comes with ten related
//! questions a search engine found, labelled PerfectMatch / Relevant / Irrelevant to it, each
//! with its comment thread (the context [`crate::train::context`] learns from). A system ranks
//! the ten; the task's measure is MAP over the top 10 with PerfectMatch and Relevant counted
//! relevant ([`average_precision`], the official scorer's definition). [`eval_forum`] ranks
//! every original question's related questions with kindred's real search pipeline (one
//! collection of all related questions, each search filtered to the question's own ten); with
//! a model that carries a compression operator, also by the cosine of compressed vectors for
//! long texts ([`compressed_rows`]).

use std::path::Path;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::db::NewDocument;
use crate::error::{io_err, Result, UserError};
use crate::model::operators::{Operation, Operators};
use crate::score::dot;
use crate::search::{self, Mode, Rerank, SearchParams, Weighting};
use crate::Encoder;

/// A related question's label with respect to its original question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Relevance {
    /// The same question.
    PerfectMatch,
    /// Answers to it would help.
    Relevant,
    /// Neither.
    Irrelevant,
}

impl Relevance {
    /// Counted relevant by the task's scorer.
    pub fn relevant(self) -> bool {
        !matches!(self, Relevance::Irrelevant)
    }
}

/// One related question, its label and its comments.
#[derive(Debug, Clone, PartialEq)]
pub struct RelatedQuestion {
    /// RELQ_ID (unique per original question: a thread found for two originals has two ids).
    pub id: String,
    /// Subject line.
    pub subject: String,
    /// Body.
    pub body: String,
    /// The search engine's rank (RELQ_RANKING_ORDER, 1 = first): the task's IR baseline.
    pub rank: u32,
    /// Label with respect to the original question.
    pub relevance: Relevance,
    /// The thread's comments, in order.
    pub comments: Vec<String>,
}

/// One original question and its related questions.
#[derive(Debug, Clone, PartialEq)]
pub struct OriginalQuestion {
    /// ORGQ_ID.
    pub id: String,
    /// Subject line.
    pub subject: String,
    /// Body.
    pub body: String,
    /// The related questions, file order.
    pub related: Vec<RelatedQuestion>,
}

/// The question as kindred stores it: subject and body, the subject left out when the body
/// starts with it.
pub fn question_text(subject: &str, body: &str) -> String {
    let (s, b) = (subject.trim(), body.trim());
    if s.is_empty() || b.starts_with(s.trim_end_matches(['.', '?', '!'])) {
        b.to_string()
    } else if b.is_empty() {
        s.to_string()
    } else {
        format!("{s} {b}")
    }
}

impl OriginalQuestion {
    /// Subject and body as one text.
    pub fn text(&self) -> String {
        question_text(&self.subject, &self.body)
    }
}

impl RelatedQuestion {
    /// Subject and body as one text.
    pub fn text(&self) -> String {
        question_text(&self.subject, &self.body)
    }
}

/// Reads a task file (`SemEval2016-Task3-CQA-QL-*.xml`): original questions in first-seen
/// order, each with its related questions (the file repeats an original question's element
/// once per thread; they are merged by ORGQ_ID).
pub fn read_forum(path: &Path) -> Result<Vec<OriginalQuestion>> {
    let xml = std::fs::read_to_string(path).map_err(io_err(format!(
        "reading {} (a SemEval-2016 Task 3 file, e.g. \
         ../shared/data/semeval2016_task3/SemEval2016-Task3-CQA-QL-dev.xml)",
        path.display()
    )))?;
    parse_forum(&xml).map_err(|reason| {
        UserError::InvalidArgument {
            name: "forum file",
            reason: format!(
                "{}: {reason}; give a SemEval-2016 Task 3 CQA-QL XML file",
                path.display()
            ),
        }
        .into()
    })
}

/// Parses a task file's text (see [`read_forum`]).
pub fn parse_forum(xml: &str) -> std::result::Result<Vec<OriginalQuestion>, String> {
    let mut out: Vec<OriginalQuestion> = Vec::new();
    let mut rest = xml;
    while let Some(at) = rest.find("<OrgQuestion ") {
        let block_start = &rest[at..];
        let end = block_start
            .find("</OrgQuestion>")
            .ok_or("an <OrgQuestion> element is not closed")?;
        let block = &block_start[..end];
        rest = &block_start[end + "</OrgQuestion>".len()..];
        let id = attribute(block, "ORGQ_ID").ok_or("an <OrgQuestion> has no ORGQ_ID")?;
        let related = parse_threads(block)?;
        match out.iter_mut().find(|q| q.id == id) {
            Some(q) => q.related.extend(related),
            None => out.push(OriginalQuestion {
                id: id.clone(),
                subject: element(block, "OrgQSubject").unwrap_or_default(),
                body: element(block, "OrgQBody").unwrap_or_default(),
                related,
            }),
        }
    }
    if out.is_empty() {
        return Err("no <OrgQuestion> element".into());
    }
    Ok(out)
}

fn parse_threads(block: &str) -> std::result::Result<Vec<RelatedQuestion>, String> {
    let mut related = Vec::new();
    let mut rest = block;
    while let Some(at) = rest.find("<Thread ") {
        let thread = &rest[at..];
        let end = thread
            .find("</Thread>")
            .ok_or("a <Thread> element is not closed")?;
        let t = &thread[..end];
        rest = &thread[end..];
        let head_end = t
            .find("<RelQuestion ")
            .ok_or("a <Thread> has no <RelQuestion>")?;
        let head = &t[head_end..t[head_end..].find('>').map_or(t.len(), |e| head_end + e)];
        let id = attribute(head, "RELQ_ID").ok_or("a <RelQuestion> has no RELQ_ID")?;
        let relevance = match attribute(head, "RELQ_RELEVANCE2ORGQ").as_deref() {
            Some("PerfectMatch") => Relevance::PerfectMatch,
            Some("Relevant") => Relevance::Relevant,
            Some("Irrelevant") => Relevance::Irrelevant,
            other => return Err(format!("{id}: RELQ_RELEVANCE2ORGQ is {other:?}")),
        };
        let rank = attribute(head, "RELQ_RANKING_ORDER")
            .and_then(|r| r.parse().ok())
            .ok_or_else(|| format!("{id}: RELQ_RANKING_ORDER is missing or not a number"))?;
        let mut comments = Vec::new();
        let mut c = t;
        while let Some(at) = c.find("<RelCText>") {
            let from = at + "<RelCText>".len();
            let to = c[from..]
                .find("</RelCText>")
                .ok_or("a <RelCText> is not closed")?;
            comments.push(unescape(c[from..from + to].trim()));
            c = &c[from + to..];
        }
        related.push(RelatedQuestion {
            id,
            subject: element(t, "RelQSubject").unwrap_or_default(),
            body: element(t, "RelQBody").unwrap_or_default(),
            rank,
            relevance,
            comments,
        });
    }
    Ok(related)
}

/// The value of `name="…"` in a start tag.
fn attribute(tag: &str, name: &str) -> Option<String> {
    let key = format!(" {name}=\"");
    let from = tag.find(&key)? + key.len();
    let to = tag[from..].find('"')?;
    Some(unescape(&tag[from..from + to]))
}

/// The text of the first `<name>…</name>` (empty element: empty text).
fn element(block: &str, name: &str) -> Option<String> {
    let open = format!("<{name}>");
    let close = format!("</{name}>");
    let from = block.find(&open)? + open.len();
    let to = block[from..].find(&close)?;
    Some(unescape(block[from..from + to].trim()))
}

/// The five predefined XML entities and numeric references.
fn unescape(s: &str) -> String {
    if !s.contains('&') {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        let end = tail.find(';').filter(|&e| e <= 10);
        let decoded = end.and_then(|e| match &tail[1..e] {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            num if num.starts_with("#x") => u32::from_str_radix(&num[2..], 16)
                .ok()
                .and_then(char::from_u32),
            num if num.starts_with('#') => num[1..].parse().ok().and_then(char::from_u32),
            _ => None,
        });
        match (decoded, end) {
            (Some(ch), Some(e)) => {
                out.push(ch);
                rest = &tail[e + 1..];
            }
            _ => {
                out.push('&');
                rest = &tail[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Average precision of one ranked list of relevance flags over its top `th`, as the task's
/// scorer computes it (MAP_scripts/metrics.py): the mean of the precisions at each relevant
/// position within the top `th`; 0 when none is relevant there.
pub fn average_precision(ranked: &[bool], th: usize) -> f64 {
    let mut correct = 0usize;
    let mut sum = 0.0;
    for (i, &rel) in ranked.iter().take(th).enumerate() {
        if rel {
            correct += 1;
            sum += correct as f64 / (i + 1) as f64;
        }
    }
    if correct == 0 {
        0.0
    } else {
        sum / correct as f64
    }
}

/// Reciprocal rank of the first relevant item within the top `th` (0 if none).
pub fn reciprocal_rank(ranked: &[bool], th: usize) -> f64 {
    ranked
        .iter()
        .take(th)
        .position(|&r| r)
        .map_or(0.0, |i| 1.0 / (i + 1) as f64)
}

/// The task's depth: MAP and MRR over the top 10.
pub const TOP: usize = 10;

/// Mean average precision (×100, as the task reports it) and MRR (×100) of rankings, one per
/// original question (every question counts, as in the official scorer).
pub fn map_mrr(rankings: &[Vec<bool>]) -> (f64, f64) {
    let n = rankings.len().max(1) as f64;
    let map = rankings
        .iter()
        .map(|r| average_precision(r, TOP))
        .sum::<f64>()
        / n;
    let mrr = rankings
        .iter()
        .map(|r| reciprocal_rank(r, TOP))
        .sum::<f64>()
        / n;
    (100.0 * map, 100.0 * mrr)
}

/// One ranking's quality on the task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForumRow {
    /// What ranks: a search configuration ("hybrid → RCMD"), "P(duplicate)" or the task's
    /// search-engine baseline.
    pub ranking: String,
    /// MAP over the top 10, ×100 (the task's measure).
    pub map: f64,
    /// MRR over the top 10, ×100.
    pub mrr: f64,
    /// Questions whose search returned fewer than their related questions (the rest were
    /// appended in search-engine order; 0 for the vector stages, which see every document).
    pub incomplete: usize,
    /// Each original question's average precision ×100, in file order: what a paired
    /// comparison of two runs needs (`scripts/forum-paired.py`).
    #[serde(default)]
    pub ap: Vec<f64>,
}

impl ForumRow {
    /// The row of `ranking` from each question's ranked labels.
    fn of(ranking: &str, rankings: &[Vec<bool>], incomplete: usize) -> ForumRow {
        let (map, mrr) = map_mrr(rankings);
        ForumRow {
            ranking: ranking.into(),
            map,
            mrr,
            incomplete,
            ap: per_question_ap(rankings),
        }
    }
}

/// Each ranking's average precision over the top [`TOP`], ×100.
pub fn per_question_ap(rankings: &[Vec<bool>]) -> Vec<f64> {
    rankings
        .iter()
        .map(|r| 100.0 * average_precision(r, TOP))
        .collect()
}

/// The report of [`eval_forum`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForumReport {
    /// Original questions (queries).
    pub questions: usize,
    /// Related questions (documents).
    pub related: usize,
    /// Seconds to encode and index the related questions.
    pub index_seconds: f64,
    /// One row per ranking.
    pub rows: Vec<ForumRow>,
}

/// The metadata key holding a related question's original question id in [`eval_forum`]'s
/// collection.
pub const ORIGINAL_KEY: &str = "orgq";

/// The related questions as documents: id RELQ_ID, metadata `{"orgq": ORGQ_ID}`, the
/// comment thread as context.
pub fn related_documents(questions: &[OriginalQuestion]) -> Vec<NewDocument> {
    questions
        .iter()
        .flat_map(|q| {
            q.related.iter().map(|r| NewDocument {
                id: r.id.clone(),
                text: r.text(),
                metadata: serde_json::json!({ ORIGINAL_KEY: q.id }),
                context: r.comments.clone(),
            })
        })
        .collect()
}

/// Ranks each original question's related questions with the search pipeline in a temporary
/// collection, for every first stage alone, with RCMD rerank (uniform and IDF weights), with
/// the context channel (`rerank: context`, from each thread's comments) and by P(duplicate);
/// plus the task's search-engine order, and [`compressed_rows`] when the model carries a
/// compression operator. `progress(what, done, total)`.
/// `extra` adds named configurations (e.g. a collection's learned search defaults), ranked
/// like the built-in ones.
pub fn eval_forum(
    encoder: &Encoder,
    questions: &[OriginalQuestion],
    extra: &[(String, SearchParams)],
    progress: &dyn Fn(&str, u64, u64),
) -> Result<ForumReport> {
    let docs = related_documents(questions);
    let start = Instant::now();
    let (_dir, db) = super::temporary_collection(
        encoder,
        COLLECTION,
        &docs,
        (64, "indexing related questions"),
        progress,
    )?;
    let index_seconds = start.elapsed().as_secs_f64();
    // The context channel's vectors (`rerank: context`), from each thread's comments.
    crate::engine::make_context_vectors(&db, COLLECTION, encoder, |done, total| {
        progress("encoding comments", done, total)
    })?;
    let view = db.view(COLLECTION)?;
    let judge = search::Judge::Calibrated(view.calibrator()?);

    let texts: Vec<String> = questions.iter().map(|q| q.text()).collect();
    let mut queries = Vec::with_capacity(texts.len());
    for (i, t) in texts.iter().enumerate() {
        queries.push(encoder.encode_one(t)?);
        progress(
            "encoding original questions",
            i as u64 + 1,
            texts.len() as u64,
        );
    }

    let baseline: Vec<Vec<bool>> = questions.iter().map(|q| ranked_labels(q, &[]).0).collect();
    let mut rows = vec![ForumRow::of(
        "search engine (the task's baseline)",
        &baseline,
        0,
    )];
    let mut configs = built_in_configs();
    configs.extend(extra.iter().cloned());
    for (c, (name, base)) in configs.iter().enumerate() {
        let mut rankings = Vec::with_capacity(questions.len());
        let mut by_probability = Vec::with_capacity(questions.len());
        let mut incomplete = 0;
        for (i, q) in questions.iter().enumerate() {
            let mut filter = serde_json::Map::new();
            filter.insert(ORIGINAL_KEY.into(), q.id.clone().into());
            let params = SearchParams {
                k: q.related.len().max(1),
                filter,
                ..base.clone()
            };
            let mut hits =
                search::search_encoded(&view, &judge, (&texts[i], &queries[i]), &params, encoder)?
                    .hits;
            let ids: Vec<&str> = hits.iter().map(|h| h.id.as_str()).collect();
            let (ranked, complete) = ranked_labels(q, &ids);
            incomplete += usize::from(!complete);
            rankings.push(ranked);
            hits.sort_by(|a, b| b.probability.total_cmp(&a.probability));
            let ids: Vec<&str> = hits.iter().map(|h| h.id.as_str()).collect();
            by_probability.push(ranked_labels(q, &ids).0);
        }
        rows.push(ForumRow::of(name, &rankings, incomplete));
        if *name == config_name(Mode::Hybrid, Rerank::Rcmd, Weighting::Uniform) {
            // The built-in default's hits, ordered by P(duplicate) instead.
            rows.push(ForumRow::of(
                "P(duplicate), calibrated",
                &by_probability,
                incomplete,
            ));
        }
        progress("ranking", c as u64 + 1, configs.len() as u64);
    }
    if let Some(ops) = encoder
        .operators()
        .filter(|o| o.has(Operation::Compression))
    {
        // The related questions' vectors as the collection stores them.
        let mut related = Vec::with_capacity(questions.len());
        for q in questions {
            let mut stored = Vec::with_capacity(q.related.len());
            for r in &q.related {
                let doc = view.get(&r.id)?.ok_or_else(|| {
                    crate::InternalError::Store(format!("{} is not in the forum collection", r.id))
                })?;
                stored.push((doc.sentence, doc.tokens.len()));
            }
            related.push(stored);
        }
        let queries: Vec<(Vec<f32>, usize)> = queries
            .iter()
            .map(|e| (e.sentence.clone(), e.tokens.len()))
            .collect();
        rows.extend(compressed_rows(ops, questions, &queries, &related));
    }
    drop(view);
    drop(db);
    Ok(ForumReport {
        questions: questions.len(),
        related: docs.len(),
        index_seconds,
        rows,
    })
}

/// The lengths (content wordpieces) above which [`compressed_rows`] compress a text's vector:
/// about the median forum post (subject and body, 45 wordpieces) and a long one.
pub const COMPRESS_ABOVE: [usize; 2] = [32, 64];

/// Cosine rankings where a long text's sentence vector is replaced by the compression
/// operator's output (what a first stage would search with if long posts were compressed):
/// for each threshold of [`COMPRESS_ABOVE`], compressing the original question only, and
/// compressing it and its related questions. Each text is its sentence vector and its count
/// of content wordpieces: `queries[i]` question `i`'s, `related[i]` its related questions' in
/// file order.
pub fn compressed_rows(
    ops: &Operators,
    questions: &[OriginalQuestion],
    queries: &[(Vec<f32>, usize)],
    related: &[Vec<(Vec<f32>, usize)>],
) -> Vec<ForumRow> {
    let vector = |(sentence, wordpieces): &(Vec<f32>, usize), above: usize| -> Vec<f32> {
        if *wordpieces > above {
            ops.apply(Operation::Compression, sentence, None)
        } else {
            sentence.clone()
        }
    };
    let mut rows = Vec::new();
    for above in COMPRESS_ABOVE {
        for both in [false, true] {
            let rankings: Vec<Vec<bool>> = questions
                .iter()
                .zip(queries)
                .zip(related)
                .map(|((q, query), related)| {
                    let qv = vector(query, above);
                    let mut scored: Vec<(f32, bool)> = (q.related.iter().zip(related))
                        .map(|(r, e)| {
                            let score = if both {
                                dot(&qv, &vector(e, above))
                            } else {
                                dot(&qv, &e.0)
                            };
                            (score, r.relevance.relevant())
                        })
                        .collect();
                    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
                    scored.into_iter().map(|(_, relevant)| relevant).collect()
                })
                .collect();
            let which = if both {
                "question and related"
            } else {
                "question"
            };
            let name = format!("cosine, compressed above {above} wordpieces ({which})");
            rows.push(ForumRow::of(&name, &rankings, 0));
        }
    }
    rows
}

/// The configurations every forum evaluation ranks with: each first stage alone, the RCMD
/// reranks (uniform and idf weights) and the context reranks.
fn built_in_configs() -> Vec<(String, SearchParams)> {
    [Mode::Cosine, Mode::W2, Mode::Lexical, Mode::Hybrid]
        .into_iter()
        .map(|m| (m, Rerank::None, Weighting::Uniform))
        .chain([
            (Mode::Cosine, Rerank::Rcmd, Weighting::Uniform),
            (Mode::Hybrid, Rerank::Rcmd, Weighting::Uniform),
            (Mode::Hybrid, Rerank::Rcmd, Weighting::Idf),
            (Mode::Cosine, Rerank::Context, Weighting::Uniform),
            (Mode::Hybrid, Rerank::Context, Weighting::Uniform),
        ])
        .map(|(mode, rerank, weights)| {
            let params = SearchParams {
                mode,
                rerank,
                weights,
                ..SearchParams::default()
            };
            (config_name(mode, rerank, weights), params)
        })
        .collect()
}

/// The temporary collection [`eval_forum`] ranks in.
const COLLECTION: &str = "forum";

/// The relevance flags of `q`'s related questions in the order of `ids` (its own ids among
/// them), the ones missing from `ids` appended in search-engine order; and whether none was
/// missing.
fn ranked_labels(q: &OriginalQuestion, ids: &[&str]) -> (Vec<bool>, bool) {
    let mut order: Vec<&RelatedQuestion> = Vec::with_capacity(q.related.len());
    for id in ids {
        if let Some(r) = q.related.iter().find(|r| r.id == *id) {
            order.push(r);
        }
    }
    let complete = order.len() == q.related.len();
    let mut rest: Vec<&RelatedQuestion> = q
        .related
        .iter()
        .filter(|r| !ids.contains(&r.id.as_str()))
        .collect();
    rest.sort_by_key(|r| r.rank);
    order.extend(rest);
    (
        order.iter().map(|r| r.relevance.relevant()).collect(),
        complete,
    )
}

/// "hybrid", "hybrid → RCMD", "hybrid → IDF-RCMD".
fn config_name(mode: Mode, rerank: Rerank, weights: Weighting) -> String {
    let mode = serde_json::to_value(mode)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    match (rerank, weights) {
        (Rerank::None, _) => mode,
        (Rerank::Probability, _) => format!("{mode} → P(duplicate)"),
        (Rerank::Rcmd, Weighting::Uniform) => format!("{mode} → RCMD"),
        (Rerank::Rcmd, Weighting::Idf) => format!("{mode} → IDF-RCMD"),
        (Rerank::Context, _) => format!("{mode} → context"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"<xml version="1.0">
<OrgQuestion ORGQ_ID="Q1">
	<OrgQSubject>Good Bank</OrgQSubject>
	<OrgQBody>Which is a good bank in Doha</OrgQBody>
	<Thread THREAD_SEQUENCE="Q1_R2">
		<RelQuestion RELQ_ID="Q1_R2" RELQ_RANKING_ORDER="2" RELQ_CATEGORY="Advice" RELQ_RELEVANCE2ORGQ="Irrelevant">
			<RelQSubject>Cars &amp; bikes</RelQSubject>
			<RelQBody>Where to buy a car?</RelQBody>
		</RelQuestion>
		<RelComment RELC_ID="Q1_R2_C1"><RelCText>Try the &quot;souq&quot;</RelCText></RelComment>
	</Thread>
</OrgQuestion>
<OrgQuestion ORGQ_ID="Q1">
	<OrgQSubject>Good Bank</OrgQSubject>
	<OrgQBody>Which is a good bank in Doha</OrgQBody>
	<Thread THREAD_SEQUENCE="Q1_R1">
		<RelQuestion RELQ_ID="Q1_R1" RELQ_RANKING_ORDER="1" RELQ_RELEVANCE2ORGQ="PerfectMatch">
			<RelQSubject>Best bank</RelQSubject>
			<RelQBody>Best bank? Which bank is best in Qatar</RelQBody>
		</RelQuestion>
		<RelComment RELC_ID="Q1_R1_C1"><RelCText>QNB</RelCText></RelComment>
		<RelComment RELC_ID="Q1_R1_C2"><RelCText>Commercial bank</RelCText></RelComment>
	</Thread>
</OrgQuestion>
"#;

    #[test]
    fn threads_of_one_original_question_are_merged_with_labels_ranks_and_comments() {
        let qs = parse_forum(SAMPLE).unwrap();
        assert_eq!(qs.len(), 1);
        let q = &qs[0];
        assert_eq!(
            (q.id.as_str(), q.text().as_str()),
            ("Q1", "Good Bank Which is a good bank in Doha")
        );
        assert_eq!(q.related.len(), 2);
        let r = &q.related[0];
        assert_eq!(
            (r.id.as_str(), r.rank, r.relevance),
            ("Q1_R2", 2, Relevance::Irrelevant)
        );
        assert_eq!(r.text(), "Cars & bikes Where to buy a car?");
        assert_eq!(r.comments, vec!["Try the \"souq\"".to_string()]);
        let r = &q.related[1];
        assert_eq!(r.relevance, Relevance::PerfectMatch);
        assert_eq!(
            r.text(),
            "Best bank? Which bank is best in Qatar",
            "subject repeated by the body"
        );
        assert_eq!(r.comments.len(), 2);
    }

    #[test]
    fn malformed_files_are_errors_naming_the_problem() {
        assert!(parse_forum("<xml/>")
            .unwrap_err()
            .contains("no <OrgQuestion>"));
        let bad = SAMPLE.replace(
            "RELQ_RELEVANCE2ORGQ=\"Irrelevant\"",
            "RELQ_RELEVANCE2ORGQ=\"Maybe\"",
        );
        assert!(parse_forum(&bad).unwrap_err().contains("Q1_R2"));
        assert!(parse_forum("<OrgQuestion ORGQ_ID=\"Q\">")
            .unwrap_err()
            .contains("not closed"));
    }

    #[test]
    fn average_precision_is_the_official_scorers() {
        // Relevant at ranks 1 and 3: (1/1 + 2/3) / 2.
        let ap = average_precision(&[true, false, true, false], 10);
        assert!((ap - (1.0 + 2.0 / 3.0) / 2.0).abs() < 1e-12);
        // Only the top `th` count; no relevant item there gives 0.
        assert_eq!(average_precision(&[false, false, true], 2), 0.0);
        assert_eq!(reciprocal_rank(&[false, true], 10), 0.5);
        let (map, mrr) = map_mrr(&[vec![true], vec![false, false]]);
        assert_eq!((map, mrr), (50.0, 50.0));
        // Per question, in order; their mean is the MAP.
        assert_eq!(
            per_question_ap(&[vec![true], vec![false, false]]),
            vec![100.0, 0.0]
        );
    }

    /// A text of `n` wordpieces whose sentence vector is `v`.
    fn text(v: [f32; 2], n: usize) -> (Vec<f32>, usize) {
        (v.to_vec(), n)
    }

    #[test]
    fn compressed_rows_move_only_texts_above_the_threshold() {
        // A compression that sends every text towards (0, 1): zero hidden layer, output bias
        // (0, 100), so compress(u) = normalise(u + (0, 100)).
        let dense = |inputs: usize, outputs: usize, bias: Vec<f32>| crate::model::heads::Dense {
            inputs,
            outputs,
            weight: vec![0.0; inputs * outputs],
            bias,
        };
        let net = crate::model::operators::Mlp {
            hidden: dense(2, 1, vec![0.0]),
            out: dense(1, 2, vec![0.0, 100.0]),
        };
        let ops = Operators {
            nets: [(Operation::Compression, net)].into_iter().collect(),
            trained_for: "test".into(),
        };
        let mut q = parse_forum(SAMPLE).unwrap().remove(0);
        // Q1_R2 (irrelevant) points at (0, 1), Q1_R1 (perfect match) at the question's own
        // (1, 0): by their own vectors the match is first.
        q.related.swap(0, 1);
        let related = vec![vec![text([1.0, 0.0], 10), text([0.0, 1.0], 10)]];
        let ap = |query: (Vec<f32>, usize)| -> Vec<f64> {
            compressed_rows(&ops, std::slice::from_ref(&q), &[query], &related)
                .iter()
                .map(|r| r.map)
                .collect()
        };
        // Short (10 wordpieces): never compressed, the match first everywhere.
        assert_eq!(ap(text([1.0, 0.0], 10)), vec![100.0; 4]);
        // 40 wordpieces: compressed above 32 (towards the irrelevant one: AP 1/2), not above 64.
        assert_eq!(ap(text([1.0, 0.0], 40)), vec![50.0, 50.0, 100.0, 100.0]);
        let names: Vec<String> = compressed_rows(
            &ops,
            std::slice::from_ref(&q),
            &[text([1.0, 0.0], 40)],
            &related,
        )
        .into_iter()
        .map(|r| r.ranking)
        .collect();
        assert_eq!(
            names[..2],
            [
                "cosine, compressed above 32 wordpieces (question)",
                "cosine, compressed above 32 wordpieces (question and related)"
            ]
        );
    }

    #[test]
    fn entities_are_decoded_and_unknown_ones_kept() {
        assert_eq!(
            unescape("a &amp; b &#233; &#x41; &nbsp; &"),
            "a & b é A &nbsp; &"
        );
    }
}
