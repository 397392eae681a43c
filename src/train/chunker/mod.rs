//! Training the phrase chunkers ([`Chunker`]): the averaged perceptron over word features
//! (with or without a linear term over hidden states) and the neural boundary model ([`mlp`]).
//! Deterministic: the same sentences give the same model. Needs no burn: plain arithmetic.

pub mod mlp;

use std::collections::HashMap;
use std::ops::Range;

pub use mlp::MlpOptions;

use crate::math::SplitMix64;
use crate::text::chunk::{
    advance, features, mlp_input, mlp_width, Chunker, Context, Contextual, ContextualSpec, History,
    Term, UnitSentence,
};

/// How one epoch of training went.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Epoch {
    /// 1-based.
    pub epoch: usize,
    /// Decisions (units after a sentence's first) made in the epoch.
    pub decisions: usize,
    /// Of those, the ones the model got wrong (and learned from).
    pub mistakes: usize,
}

/// Features seen fewer times than this in training are left out of the model.
const MIN_COUNT: u32 = 2;
/// Largest quantized weight.
const QUANT: f32 = 999.0;
/// Quantized weights below this are dropped.
const MIN_WEIGHT: f32 = 30.0;

/// A binary averaged perceptron over feature ids, with the lazy-averaging trick (Daumé III):
/// `total[f]` sums `step × update`, so the average weight is `w − total / step`.
#[derive(Debug)]
struct Perceptron {
    w: Vec<f32>,
    total: Vec<f64>,
    /// Weights of the dense features, and their step-weighted sums.
    dense: Vec<f32>,
    dense_total: Vec<f64>,
    step: u64,
}

impl Perceptron {
    fn new(features: usize, dense: usize) -> Self {
        Perceptron {
            w: vec![0.0; features],
            total: vec![0.0; features],
            dense: vec![0.0; dense],
            dense_total: vec![0.0; dense],
            step: 0,
        }
    }

    /// Decides on `features` and the dense features `x` (when given), learns from `gold`,
    /// returns the decision made before learning.
    fn learn(&mut self, features: &[usize], x: Option<&[f32]>, gold: bool) -> bool {
        self.step += 1;
        let mut score: f32 = features.iter().map(|&f| self.w[f]).sum();
        if let Some(x) = x {
            score += self.dense.iter().zip(x).map(|(w, x)| w * x).sum::<f32>();
        }
        let predicted = score > 0.0;
        if predicted != gold {
            let y = if gold { 1.0 } else { -1.0 };
            let step = self.step as f64;
            for &f in features {
                self.w[f] += y;
                self.total[f] += step * y as f64;
            }
            if let Some(x) = x {
                for ((w, t), &x) in self.dense.iter_mut().zip(&mut self.dense_total).zip(x) {
                    *w += y * x;
                    *t += step * f64::from(y * x);
                }
            }
        }
        predicted
    }

    /// The averaged word and dense weights.
    fn averaged(&self) -> (Vec<f32>, Vec<f32>) {
        let step = self.step.max(1) as f64;
        let average = |w: &[f32], total: &[f64]| -> Vec<f32> {
            w.iter()
                .zip(total)
                .map(|(&w, &t)| (w as f64 - t / step) as f32)
                .collect()
        };
        (
            average(&self.w, &self.total),
            average(&self.dense, &self.dense_total),
        )
    }
}

/// A weight as the neural model's file writes it (`{:.3e}`: four significant digits), so that a
/// model read back is the one trained.
fn rounded(w: f32) -> f32 {
    format!("{w:.3e}").parse().unwrap_or(w)
}

impl Chunker {
    /// Trains on iSTS sentences (tokens and gold chunks as [`parse_bracketed`] returns them)
    /// for `epochs` passes.
    pub fn train(sentences: &[(Vec<String>, Vec<Range<usize>>)], epochs: usize) -> Chunker {
        Chunker::train_with(sentences, epochs, |_| {})
    }

    /// [`Chunker::train`], reporting each epoch to `progress`. An averaged perceptron: the
    /// sentences in a fixed-seed shuffled order each epoch, each unit decided greedily with the
    /// model's own earlier decisions as history, every mistake adding the gold decision's
    /// sign (+1 starts a chunk) to its features' weights; the model is the average of the
    /// weights over all steps. Features seen only once are left out, and the model is pruned
    /// of its smallest weights. Deterministic: the same sentences give the same model.
    pub fn train_with(
        sentences: &[(Vec<String>, Vec<Range<usize>>)],
        epochs: usize,
        progress: impl FnMut(Epoch),
    ) -> Chunker {
        Chunker::fit(sentences, None, epochs, progress)
    }

    /// [`Chunker::train_with`] with a contextual term: `states[s]` holds sentence `s`'s unit
    /// states (`units × spec.dim`, the units of its tokens as [`IstsSentence::text`] cuts them);
    /// a sentence whose states do not have that size trains the word features only. The
    /// perceptron learns both kinds of weights together.
    pub fn train_contextual(
        sentences: &[(Vec<String>, Vec<Range<usize>>)],
        states: &[Vec<f32>],
        spec: ContextualSpec,
        epochs: usize,
        progress: impl FnMut(Epoch),
    ) -> Chunker {
        Chunker::fit(sentences, Some((states, spec)), epochs, progress)
    }

    /// A neural chunker: an [`Mlp`] over each boundary's [`mlp_input`] (the states of the
    /// units before, at and after it, and the glued flags), trained with `options` on every
    /// unit after a sentence's first whose sentence has states of `spec.dim` (`states[s]` as
    /// in [`Chunker::train_contextual`]; the others are left out). `spec.scale` is not used.
    /// `progress` gets each finished epoch of any of the ensemble's networks.
    pub fn train_neural(
        sentences: &[(Vec<String>, Vec<Range<usize>>)],
        states: &[Vec<f32>],
        spec: ContextualSpec,
        options: &MlpOptions,
        progress: impl Fn() + Sync,
    ) -> Chunker {
        let dim = spec.dim;
        let width = mlp_width(dim);
        let (mut xs, mut ys) = (Vec::new(), Vec::new());
        let mut x = vec![0f32; width];
        for ((tokens, chunks), rows) in sentences.iter().zip(states) {
            let sentence = UnitSentence::of_tokens(tokens, chunks);
            if rows.is_empty() || rows.len() != sentence.units.len() * dim {
                continue;
            }
            for i in 1..sentence.units.len() {
                mlp_input(rows, &sentence.glued, dim, i, &mut x);
                xs.extend_from_slice(&x);
                ys.push(sentence.starts[i]);
            }
        }
        let mut net = mlp::train(&xs, &ys, width, options, progress);
        // The values as the model file writes them, so that a model read back is this one.
        let all = (net.mean.iter_mut().chain(&mut net.inv_std))
            .chain(&mut net.w1)
            .chain(&mut net.b1)
            .chain(&mut net.w2);
        for w in all {
            *w = rounded(*w);
        }
        net.b2 = rounded(net.b2);
        Chunker {
            weights: HashMap::new(),
            contextual: Some(Contextual {
                layer: spec.layer,
                dim,
                model: spec.model,
                scale: 1.0,
                term: Term::Mlp(net),
            }),
        }
    }

    fn fit(
        sentences: &[(Vec<String>, Vec<Range<usize>>)],
        contextual: Option<(&[Vec<f32>], ContextualSpec)>,
        epochs: usize,
        mut progress: impl FnMut(Epoch),
    ) -> Chunker {
        let data: Vec<UnitSentence> = sentences
            .iter()
            .map(|(t, c)| UnitSentence::of_tokens(t, c))
            .collect();
        let scaled = match &contextual {
            Some((states, spec)) => scaled_states(&data, states, spec),
            None => vec![None; data.len()],
        };
        let dim = contextual.as_ref().map_or(0, |(_, spec)| spec.dim);
        let contexts: Vec<Context<'_>> = data
            .iter()
            .map(|s| Context::new(&s.units, &s.glued))
            .collect();
        let names = kept_features(&data, &contexts);
        let ids: HashMap<&str, usize> = names
            .iter()
            .enumerate()
            .map(|(id, f)| (f.as_str(), id))
            .collect();
        let mut perceptron = Perceptron::new(names.len(), 2 * dim);
        let mut dense = vec![0f32; 2 * dim];
        let mut rng = SplitMix64(0x0063_6875_6e6b_6572);
        let mut fired = Vec::new();
        for epoch in 1..=epochs {
            let mut report = Epoch {
                epoch,
                decisions: 0,
                mistakes: 0,
            };
            for s in rng.permutation(data.len()) {
                let (sentence, cx) = (&data[s], &contexts[s]);
                let mut h = History::START;
                for i in 1..sentence.units.len() {
                    fired.clear();
                    features(cx, i, h, |f| fired.extend(ids.get(f)));
                    let x = scaled[s].as_ref().map(|rows| {
                        dense[..dim].copy_from_slice(&rows[i * dim..(i + 1) * dim]);
                        dense[dim..].copy_from_slice(&rows[(i - 1) * dim..i * dim]);
                        dense.as_slice()
                    });
                    let gold = sentence.starts[i];
                    let start = perceptron.learn(&fired, x, gold);
                    report.decisions += 1;
                    report.mistakes += usize::from(start != gold);
                    h = advance(h, i, start);
                }
            }
            progress(report);
        }
        let (sparse, dense) = perceptron.averaged();
        let weights = names
            .iter()
            .zip(sparse)
            .filter(|&(_, w)| w != 0.0)
            .map(|(f, w)| (f.clone(), w))
            .collect();
        let contextual = contextual.map(|(_, spec)| Contextual {
            layer: spec.layer,
            dim: spec.dim,
            model: spec.model,
            scale: spec.scale,
            term: Term::Linear(dense),
        });
        Chunker {
            weights,
            contextual,
        }
        .quantized()
    }

    /// The word weights scaled to integers of at most [`QUANT`] and the contextual weights by
    /// the same factor (the decisions are the same up to rounding), the smallest word weights
    /// dropped: a compact model file.
    fn quantized(self) -> Chunker {
        let max = self.weights.values().fold(0.0f32, |m, w| m.max(w.abs()));
        if max == 0.0 {
            return self;
        }
        let factor = QUANT / max;
        let weights = self
            .weights
            .into_iter()
            .map(|(f, w)| (f, (w * factor).round()))
            .filter(|&(_, w)| w.abs() >= MIN_WEIGHT)
            .collect();
        let contextual = self.contextual.map(|mut c| {
            if let Term::Linear(weights) = &mut c.term {
                weights.iter_mut().for_each(|w| *w *= factor);
            }
            c
        });
        Chunker {
            weights,
            contextual,
        }
    }
}

/// Per sentence, its contextual states scaled by `spec.scale`, or `None` where the states do not
/// fit the sentence's units (missing or another length).
fn scaled_states(
    data: &[UnitSentence],
    states: &[Vec<f32>],
    spec: &ContextualSpec,
) -> Vec<Option<Vec<f32>>> {
    data.iter()
        .enumerate()
        .map(|(s, sentence)| {
            states
                .get(s)
                .filter(|r| !r.is_empty() && r.len() == sentence.units.len() * spec.dim)
                .map(|r| r.iter().map(|v| v * spec.scale).collect())
        })
        .collect()
}

/// The features that fire at least [`MIN_COUNT`] times along the gold decisions; the rarer
/// ones are left out of the model.
fn kept_features(data: &[UnitSentence], contexts: &[Context<'_>]) -> Vec<String> {
    let mut counts: HashMap<String, u32> = HashMap::new();
    for (sentence, cx) in data.iter().zip(contexts) {
        let mut h = History::START;
        for i in 1..sentence.units.len() {
            features(cx, i, h, |f| match counts.get_mut(f) {
                Some(n) => *n += 1,
                None => {
                    counts.insert(f.to_string(), 1);
                }
            });
            h = advance(h, i, sentence.starts[i]);
        }
    }
    counts
        .into_iter()
        .filter(|&(_, n)| n >= MIN_COUNT)
        .map(|(f, _)| f)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::chunks::{score, IstsSentence, Method};
    use crate::text::chunk::units;

    /// Sentences of filler words where a chunk starts at every "the" and at every "on".
    fn toy_sentences(n: usize) -> Vec<(Vec<String>, Vec<Range<usize>>)> {
        let fillers = ["dog", "cat", "runs", "sleeps", "big", "red", "house", "mat"];
        let mut rng = SplitMix64(7);
        (0..n)
            .map(|_| {
                let mut tokens = vec!["the".to_string()];
                for _ in 0..3 + rng.below(8) {
                    let t = match rng.below(6) {
                        0 => "the",
                        1 => "on",
                        _ => fillers[rng.below(fillers.len())],
                    };
                    tokens.push(t.to_string());
                }
                let mut starts: Vec<usize> = (0..tokens.len())
                    .filter(|&i| i == 0 || tokens[i] == "the" || tokens[i] == "on")
                    .collect();
                starts.push(tokens.len());
                let chunks = starts.windows(2).map(|w| w[0]..w[1]).collect();
                (tokens, chunks)
            })
            .collect()
    }

    #[test]
    fn learns_an_obvious_rule() {
        let chunker = Chunker::train(&toy_sentences(200), 5);
        let units = [
            "the", "red", "cat", "sleeps", "on", "the", "mat", "the", "dog",
        ];
        assert_eq!(chunker.chunk_units(&units), [0..4, 4..5, 5..7, 7..9]);
        assert_eq!(chunker.chunk("the big dog  runs the mat"), [0..17, 18..25]);
        assert_eq!(chunker.chunk("the cat on the mat"), [0..7, 8..10, 11..18]);
        // Held-out toy sentences: every chunk right.
        let test = toy_sentences(250).split_off(200);
        let scored: Vec<IstsSentence> = test
            .into_iter()
            .map(|(tokens, chunks)| IstsSentence {
                genre: "toy".into(),
                pair: 5,
                tokens,
                chunks,
                states: Vec::new(),
            })
            .collect();
        let all: Vec<&IstsSentence> = scored.iter().collect();
        let counts = score(Method::Model(&chunker), &all);
        assert_eq!(counts.correct, counts.gold, "{counts:?}");
        assert_eq!(counts.f1(), 1.0);
        // Training is deterministic.
        assert_eq!(Chunker::train(&toy_sentences(200), 5), chunker);
        assert!(chunker.chunk_units(&[]).is_empty());
        assert_eq!(chunker.chunk("  "), Vec::<Range<usize>>::new());
    }

    #[test]
    fn model_text_round_trips() {
        let chunker = Chunker::train(&toy_sentences(100), 3);
        assert!(!chunker.is_empty());
        let text = chunker.to_text();
        assert!(text.starts_with("kindred-chunker 1\n"));
        let back = Chunker::from_text(&text).expect("parses");
        assert_eq!(back, chunker);
        assert_eq!(back.to_text(), text);

        let err = |t: &str| Chunker::from_text(t).expect_err("refused").to_string();
        assert_eq!(
            err("kindred-chunker 9\n1 b\n"),
            "corrupt data: chunker model, line 1: header \"kindred-chunker 9\" is not \
             \"kindred-chunker 1\", \"kindred-chunker 2\" or \"kindred-chunker 3\": a model of \
             another kindred version"
        );
        assert_eq!(
            err("kindred-chunker 1\n# note\nx b\n"),
            "corrupt data: chunker model, line 3: weight \"x\" is not a number"
        );
        assert_eq!(
            err("kindred-chunker 1\n3\n"),
            "corrupt data: chunker model, line 2: expected `weight feature`"
        );
        assert_eq!(
            err("kindred-chunker 1\n3 w a\n4 w a\n"),
            "corrupt data: chunker model, line 3: feature \"w a\" appears twice"
        );
        assert!(err("").contains("empty file"));
    }

    /// Sentences (tokens, gold chunks) and each one's unit states.
    type Stateful = (Vec<(Vec<String>, Vec<Range<usize>>)>, Vec<Vec<f32>>);

    /// Toy sentences of words that say nothing, where a chunk starts wherever a unit's
    /// "state" (dimension 0 of a 2-d row) is positive: only the contextual term can learn it.
    fn stateful_sentences(n: usize) -> Stateful {
        let mut rng = SplitMix64(11);
        let mut sentences = Vec::new();
        let mut states = Vec::new();
        for _ in 0..n {
            let len = 4 + rng.below(6);
            let tokens: Vec<String> = (0..len).map(|_| "w".to_string()).collect();
            let starts: Vec<bool> = (0..len).map(|i| i == 0 || rng.below(3) == 0).collect();
            let rows: Vec<f32> = starts
                .iter()
                .flat_map(|&s| [if s { 1.0 } else { -1.0 }, 0.5])
                .collect();
            let mut bounds: Vec<usize> = (0..len).filter(|&i| starts[i]).collect();
            bounds.push(len);
            sentences.push((tokens, bounds.windows(2).map(|w| w[0]..w[1]).collect()));
            states.push(rows);
        }
        (sentences, states)
    }

    /// What the toy models read: two-value states of layer 2 of a model "sha256:toy".
    fn toy_spec() -> ContextualSpec {
        ContextualSpec {
            layer: 2,
            dim: 2,
            model: "sha256:toy".into(),
            scale: 1.0,
        }
    }

    #[test]
    fn a_contextual_chunker_learns_from_states_and_round_trips() {
        let (sentences, states) = stateful_sentences(200);
        let spec = toy_spec();
        let model = Chunker::train_contextual(&sentences, &states, spec, 5, |_| {});
        let c = model.contextual().expect("contextual");
        assert_eq!((c.layer, c.dim, c.model.as_str()), (2, 2, "sha256:toy"));
        // Every chunk of unseen sentences right with their states; words alone cannot tell.
        let (test, test_states) = stateful_sentences(240);
        let text = |tokens: &[String]| tokens.join(" ");
        for ((tokens, gold), rows) in test.iter().zip(&test_states).skip(200) {
            let t = text(tokens);
            let spans = units(&t);
            let chunks = model.chunk_with(&t, |s| {
                assert_eq!(s, spans.as_slice(), "the units' spans");
                Some(rows.clone())
            });
            let expected: Vec<Range<usize>> = gold
                .iter()
                .map(|r| spans[r.start].start..spans[r.end - 1].end)
                .collect();
            assert_eq!(chunks, expected, "{t}");
        }
        let scored: Vec<IstsSentence> = test
            .into_iter()
            .zip(test_states)
            .skip(200)
            .map(|((tokens, chunks), states)| IstsSentence {
                genre: "toy".into(),
                pair: 5,
                tokens,
                chunks,
                states,
            })
            .collect();
        let all: Vec<&IstsSentence> = scored.iter().collect();
        assert_eq!(score(Method::Model(&model), &all).f1(), 1.0);
        // Without states (or with rows of the wrong size) the term is left out.
        assert_eq!(
            model.chunk("w w w w"),
            model.chunk_with("w w w w", |_| Some(vec![1.0; 3]))
        );

        let text = model.to_text();
        assert!(text.starts_with("kindred-chunker 2\n"), "{text}");
        let back = Chunker::from_text(&text).expect("parses");
        assert_eq!(back, model);
        assert_eq!(back.to_text(), text);
        assert_eq!(
            Chunker::train_contextual(&sentences, &states, model_spec(&model), 5, |_| {}),
            model,
            "training is deterministic"
        );

        let err = |t: &str| Chunker::from_text(t).expect_err("refused").to_string();
        let header = "kindred-chunker 2\n@contextual layer=2 dim=2 scale=1 model=m\n";
        assert!(err(&format!("{header}@weights 1 2 3\n"))
            .contains("3 contextual weights, expected 2 × 2"));
        assert!(err(&format!("{header}@weights 1 x 3 4\n")).contains("a weight is not a number"));
        assert!(
            err("kindred-chunker 2\n@contextual layer=2 dim=2 model=m\n@weights 1 2 3 4\n")
                .contains("no scale=")
        );
        assert!(err("kindred-chunker 2\n3 b\n")
            .contains("go with \"kindred-chunker 2\" and only with it"));
        assert!(err(
            "kindred-chunker 1\n@contextual layer=2 dim=1 scale=1 model=m\n@weights 1 2\n"
        )
        .contains("only with it"));
    }

    fn model_spec(c: &Chunker) -> ContextualSpec {
        let c = c.contextual().expect("contextual");
        ContextualSpec {
            layer: c.layer,
            dim: c.dim,
            model: c.model.clone(),
            scale: c.scale,
        }
    }

    #[test]
    fn a_neural_chunker_learns_from_states_and_round_trips() {
        let (sentences, states) = stateful_sentences(200);
        let spec = toy_spec();
        let options = MlpOptions {
            hidden: 8,
            nets: 2,
            epochs: 20,
            batch: 16,
            lr: 1e-2,
            ..MlpOptions::default()
        };
        let model = Chunker::train_neural(&sentences, &states, spec.clone(), &options, || {});
        let c = model.contextual().expect("contextual");
        assert!(c.is_neural() && model.is_empty());
        // Every chunk of unseen sentences right with their states.
        let (test, test_states) = stateful_sentences(240);
        for ((tokens, gold), rows) in test.iter().zip(&test_states).skip(200) {
            let t = tokens.join(" ");
            let spans = units(&t);
            let expected: Vec<Range<usize>> = gold
                .iter()
                .map(|r| spans[r.start].start..spans[r.end - 1].end)
                .collect();
            assert_eq!(
                model.chunk_with(&t, |_| Some(rows.clone())),
                expected,
                "{t}"
            );
            // Without states (or with rows of the wrong size): the word chunker's chunks.
            let words = Chunker::builtin().chunk(&t);
            assert_eq!(model.chunk(&t), words);
            assert_eq!(model.chunk_with(&t, |_| Some(vec![1.0; 3])), words);
            // Units without a state (zero rows, as past the encoder's truncation) take the word
            // chunker's decisions; the others keep the model's.
            let mut cut = rows.clone();
            let kept = 2;
            cut[kept * 2..].fill(0.0);
            let starts_of = |chunks: &[Range<usize>]| -> Vec<bool> {
                spans
                    .iter()
                    .map(|s| chunks.iter().any(|c| c.start == s.start))
                    .collect()
            };
            let (ours, theirs) = (starts_of(&expected), starts_of(&words));
            let mixed: Vec<bool> = (0..spans.len())
                .map(|u| if u < kept { ours[u] } else { theirs[u] })
                .collect();
            assert_eq!(
                starts_of(&model.chunk_with(&t, |_| Some(cut.clone()))),
                mixed,
                "{t}"
            );
        }

        let text = model.to_text();
        assert!(text.starts_with("kindred-chunker 3\n"), "{}", &text[..80]);
        let back = Chunker::from_text(&text).expect("parses");
        assert_eq!(back, model);
        assert_eq!(back.to_text(), text);
        assert_eq!(
            Chunker::train_neural(&sentences, &states, spec, &options, || {}),
            model,
            "training is deterministic"
        );

        let err = |t: &str| Chunker::from_text(t).expect_err("refused").to_string();
        let header = "kindred-chunker 3\n@contextual layer=2 dim=1 scale=1 model=m\n";
        // dim 1: inputs 5; hidden 1: 2 × 5 + 5 + 1 + 1 + 1 = 18 values.
        let values: Vec<String> = (1..=18).map(|v| v.to_string()).collect();
        let ok = format!(
            "{header}@mlp inputs=5 hidden=1\n@weights {}\n",
            values.join(" ")
        );
        assert!(Chunker::from_text(&ok).is_ok());
        assert!(
            err(&format!("{header}@mlp inputs=5 hidden=1\n@weights 1 2 3\n"))
                .contains("3 weights, expected 18")
        );
        assert!(
            err(&format!("{header}@mlp inputs=6 hidden=1\n@weights 1 2 3\n"))
                .contains("expected 3 × dim + 2 = 5")
        );
        assert!(err(&format!("{header}@weights 1 2 3\n")).contains("needs an @contextual, an @mlp"));
        assert!(err(&format!("{ok}3 b\n")).contains("has no word features, found 1"));
        assert!(err(&format!("{header}@mlp inputs=5\n@weights 1\n")).contains("no hidden="));
        assert!(err(&ok.replace("kindred-chunker 3", "kindred-chunker 2"))
            .contains("an @mlp line goes with \"kindred-chunker 3\" and only with it"));
    }
}
