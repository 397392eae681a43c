//! Phrase chunks read from the encoder's own hidden states. The contextual chunker
//! ([`Chunker::builtin_contextual`]) decides each chunk boundary from the word units' hidden
//! states after an early layer; this module runs the first layers for the texts an
//! explanation shows, maps the states onto the chunker's units, and falls back to the word
//! chunker for a model whose states the shipped weights were not trained on.

use std::ops::Range;

use burn::tensor::{Int, Tensor, TensorData};

use super::{host_f32, Encoder};
use crate::error::Result;
use crate::score::explain::{chunk_spans, ChunkSource};
use crate::text::chunk::{units, Chunker, Contextual};
use crate::text::normalize::normalize;
use crate::types::Token;

impl Encoder {
    /// Each text's unit states after `layer` layers (0: the embeddings): for text `t`,
    /// `spans[t].len() × dim` values, row `u` the mean of the layer's rows of the content
    /// wordpieces overlapping char span `spans[t][u]` of the text (zeros for a span without
    /// one, e.g. past the truncation point). Runs only the first `layer` layers. Errors as
    /// [`Encoder::encode`] does (an empty text).
    pub fn unit_states(
        &self,
        texts: &[&str],
        spans: &[Vec<Range<usize>>],
        layer: usize,
    ) -> Result<Vec<Vec<f32>>> {
        let d = self.identity.dim;
        let tokenized: Vec<_> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| self.tokenizer.tokenize(t, i))
            .collect::<Result<_>>()?;
        let mut out = Vec::with_capacity(texts.len());
        if let Some(packed) = &self.packed {
            // In batches of the encoder's size, so a long list stays within its memory.
            let batch = self.options.batch_size.max(1);
            for (group, group_spans) in tokenized.chunks(batch).zip(spans.chunks(batch)) {
                let ids: Vec<&[u32]> = group.iter().map(|t| t.ids.as_slice()).collect();
                let hidden = packed.forward_until(&ids, layer);
                let mut start = 0;
                for (t, spans) in group.iter().zip(group_spans) {
                    let rows = &hidden[start * d..(start + t.ids.len()) * d];
                    start += t.ids.len();
                    out.push(span_means(
                        content_rows(rows, &t.special, d),
                        &t.tokens,
                        spans,
                        d,
                    ));
                }
            }
            return Ok(out);
        }
        // A GPU: the burn forward's first layers, one text at a time (no padding).
        for (t, spans) in tokenized.iter().zip(spans) {
            let ids: Vec<i64> = t.ids.iter().map(|&id| i64::from(id)).collect();
            let ids =
                Tensor::<2, Int>::from_data(TensorData::new(ids, [1, t.ids.len()]), &self.device);
            let rows = host_f32(self.bert.forward_until(ids, None, layer), "hidden states")?;
            out.push(span_means(
                content_rows(&rows, &t.special, d),
                &t.tokens,
                spans,
                d,
            ));
        }
        Ok(out)
    }

    /// Whether `c`'s weights were trained on this encoder's states: the same network weights
    /// (either precision, whatever heads) and hidden size, and the layer exists.
    pub fn reads(&self, c: &Contextual) -> bool {
        c.model == self.weights_fingerprint
            && c.dim == self.identity.dim
            && c.layer <= self.bert.layers()
    }

    /// Each text's phrase chunks as char spans of the text, by the shipped chunkers: the
    /// contextual one where its weights read this encoder's states ([`Encoder::reads`]), else
    /// the word chunker.
    pub fn phrase_chunks(&self, texts: &[&str]) -> Vec<Vec<Range<usize>>> {
        self.phrase_chunks_with(Chunker::builtin_contextual(), texts)
    }

    /// Each text's phrase chunks by `model`: a word model as it is; a contextual model with
    /// this encoder's states when it reads them, else the shipped word chunker instead (a
    /// contextual model's word weights were fitted beside its states, not alone). A text that
    /// cannot be encoded (empty) gets the word chunker's chunks.
    pub fn phrase_chunks_with(&self, model: &Chunker, texts: &[&str]) -> Vec<Vec<Range<usize>>> {
        let words = |m: &Chunker| texts.iter().map(|t| chunk_spans(m, t)).collect();
        let c = match model.contextual() {
            None => return words(model),
            Some(c) if !self.reads(c) => return words(Chunker::builtin()),
            Some(c) => c,
        };
        let normal: Vec<_> = texts.iter().map(|t| normalize(t)).collect();
        // The chunker's units of each normalized text, as spans of the original.
        let spans: Vec<Vec<Range<usize>>> = normal
            .iter()
            .map(|n| {
                units(&n.text)
                    .into_iter()
                    .map(|r| n.to_original(r))
                    .collect()
            })
            .collect();
        let states = match self.unit_states(texts, &spans, c.layer) {
            Ok(states) => states,
            Err(e) => {
                tracing::debug!(error = %e, "chunking without hidden states");
                return words(Chunker::builtin());
            }
        };
        normal
            .iter()
            .zip(states)
            .map(|(n, rows)| {
                model
                    .chunk_with(&n.text, |_| Some(rows))
                    .into_iter()
                    .map(|r| n.to_original(r))
                    .collect()
            })
            .collect()
    }
}

impl ChunkSource for Encoder {
    fn chunks(&self, texts: &[&str]) -> Vec<Vec<Range<usize>>> {
        self.phrase_chunks(texts)
    }
}

/// A chunker model (e.g. one being evaluated) read with an encoder's states, as
/// [`Encoder::phrase_chunks_with`] reads it.
#[derive(Debug, Clone, Copy)]
pub struct Phrasing<'a> {
    /// Gives the hidden states.
    pub encoder: &'a Encoder,
    /// The chunker.
    pub model: &'a Chunker,
}

impl ChunkSource for Phrasing<'_> {
    fn chunks(&self, texts: &[&str]) -> Vec<Vec<Range<usize>>> {
        self.encoder.phrase_chunks_with(self.model, texts)
    }
}

/// The rows of the content wordpieces (special ones dropped), in order.
fn content_rows<'a>(rows: &'a [f32], special: &'a [bool], d: usize) -> Vec<&'a [f32]> {
    rows.chunks_exact(d)
        .zip(special)
        .filter(|(_, &s)| !s)
        .map(|(r, _)| r)
        .collect()
}

/// Per span, the mean of the rows of the tokens overlapping it (zeros when none does).
fn span_means(rows: Vec<&[f32]>, tokens: &[Token], spans: &[Range<usize>], d: usize) -> Vec<f32> {
    let mut out = vec![0f32; spans.len() * d];
    for (span, mean) in spans.iter().zip(out.chunks_exact_mut(d)) {
        let mut n = 0usize;
        for (token, row) in tokens.iter().zip(&rows) {
            if token.start < span.end && token.end > span.start {
                mean.iter_mut().zip(*row).for_each(|(m, v)| *m += v);
                n += 1;
            }
        }
        if n > 1 {
            let inv = 1.0 / n as f32;
            mean.iter_mut().for_each(|m| *m *= inv);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(start: usize, end: usize) -> Token {
        Token {
            text: String::new(),
            id: 0,
            start,
            end,
        }
    }

    #[test]
    fn unit_rows_are_the_means_of_their_wordpieces() {
        // "playing ok": play ##ing | ok, rows [1,0], [3,2], [5,5].
        let rows: Vec<&[f32]> = vec![&[1.0, 0.0], &[3.0, 2.0], &[5.0, 5.0]];
        let tokens = [token(0, 4), token(4, 7), token(8, 10)];
        let out = span_means(rows, &tokens, &[0..7, 8..10, 11..12], 2);
        assert_eq!(out, [2.0, 1.0, 5.0, 5.0, 0.0, 0.0]);
        let special = [true, false, false, true];
        let all = [9.0, 9.0, 1.0, 2.0, 3.0, 4.0, 9.0, 9.0];
        assert_eq!(
            content_rows(&all, &special, 2),
            [&[1.0, 2.0][..], &[3.0, 4.0][..]]
        );
    }
}
