//! Learned heads a model directory may carry beside its BERT weights, in
//! `kindred-heads.safetensors`: the sentence transition matrix, the intent head and the
//! variational-siamese duplicate classifier (design.md §3). Owns their file format and their
//! math; the math (`apply`, `intent`, `probability`) is pure — slices in, numbers out.
//!
//! Tensor names and shapes (row-major, `[out, in]` like PyTorch linear layers):
//!
//! | name | shape | meaning |
//! |---|---|---|
//! | `transition.weight` | `[d, d]` | sentence vector s ↦ normalise(W·s) |
//! | `intent.mu.weight` / `.bias` | `[k, d]` / `[k]` | μ = W·μ₀ + b |
//! | `intent.logvar.weight` / `.bias` | `[k, d]` / `[k]` | log σ² = W·log σ₀² + b |
//! | `classifier.hidden.weight` / `.bias` | `[h, 2k]` / `[h]` | ReLU layer over [(μ₁−μ₂)² + (σ₁−σ₂)², μ₁⊙μ₂] |
//! | `classifier.out.weight` / `.bias` | `[1, h]` / `[1]` | logit of P(duplicate) |
//!
//! μ₀, σ₀ are the moment-matched intent of the content token vectors.

use std::collections::HashMap;
use std::path::Path;

use safetensors::tensor::{Dtype, SafeTensors, TensorView};

use crate::error::{io_err, Result, UserError};
use crate::types::Gaussian;

/// File name of the heads inside a model directory.
pub const HEADS_FILE: &str = "kindred-heads.safetensors";

/// A dense layer y = W·x + b, W row-major `[out, in]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Dense {
    /// Input size.
    pub inputs: usize,
    /// Output size.
    pub outputs: usize,
    /// `outputs × inputs`, row-major.
    pub weight: Vec<f32>,
    /// `outputs`.
    pub bias: Vec<f32>,
}

impl Dense {
    /// The d×d identity with zero bias.
    pub fn identity(d: usize) -> Dense {
        Dense {
            inputs: d,
            outputs: d,
            weight: (0..d * d)
                .map(|i| if i % (d + 1) == 0 { 1.0 } else { 0.0 })
                .collect(),
            bias: vec![0.0; d],
        }
    }

    /// W·x + b.
    pub fn forward(&self, x: &[f32]) -> Vec<f32> {
        debug_assert_eq!(x.len(), self.inputs);
        self.weight
            .chunks_exact(self.inputs)
            .zip(&self.bias)
            .map(|(row, b)| row.iter().zip(x).map(|(w, v)| w * v).sum::<f32>() + b)
            .collect()
    }

    pub(crate) fn check(&self, name: &str) -> std::result::Result<(), String> {
        if self.weight.len() != self.inputs * self.outputs || self.bias.len() != self.outputs {
            return Err(format!("{name} has inconsistent shapes"));
        }
        Ok(())
    }
}

/// The sentence transition matrix (papers/sentence-transition-matrix.txt): sentence vectors
/// become normalise(W·s) at encode time.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    /// `d × d` (no bias).
    pub weight: Dense,
}

impl Transition {
    /// normalise(W·s).
    pub fn apply(&self, s: &[f32]) -> Vec<f32> {
        let mut y = self.weight.forward(s);
        crate::score::cosine::l2_normalize(&mut y);
        y
    }
}

/// The learned intent head: maps the moment-matched intent (μ₀, σ₀) to N(μ, diag σ²).
#[derive(Debug, Clone, PartialEq)]
pub struct IntentHead {
    /// μ = W·μ₀ + b.
    pub mu: Dense,
    /// log σ² = W·log σ₀² + b.
    pub logvar: Dense,
}

impl IntentHead {
    /// The learned intent of a moment-matched one; σ floored at `floor`.
    pub fn intent(&self, moment: &Gaussian, floor: f32) -> Gaussian {
        let log_var: Vec<f32> = moment
            .sigma
            .iter()
            .map(|s| 2.0 * s.max(floor).ln())
            .collect();
        Gaussian {
            mu: self.mu.forward(&moment.mu),
            sigma: self
                .logvar
                .forward(&log_var)
                .iter()
                .map(|lv| (0.5 * lv).exp().max(floor))
                .collect(),
        }
    }

    /// Intent dimension k.
    pub fn dim(&self) -> usize {
        self.mu.outputs
    }
}

/// The variational-siamese duplicate classifier (papers/variational-siamese-wasserstein-quora.txt
/// §4): an MLP over [(μ₁−μ₂)² + (σ₁−σ₂)², μ₁⊙μ₂].
#[derive(Debug, Clone, PartialEq)]
pub struct Classifier {
    /// Hidden layer (ReLU), `2k → h`.
    pub hidden: Dense,
    /// Output layer, `h → 1` (a logit).
    pub out: Dense,
}

impl Classifier {
    /// The classifier's input for two intents: per-dimension W2² terms, then μ₁⊙μ₂. Symmetric.
    pub fn features(a: &Gaussian, b: &Gaussian) -> Vec<f32> {
        let w2: Vec<f32> = (0..a.mu.len())
            .map(|i| (a.mu[i] - b.mu[i]).powi(2) + (a.sigma[i] - b.sigma[i]).powi(2))
            .collect();
        let prod = a.mu.iter().zip(&b.mu).map(|(x, y)| x * y);
        w2.into_iter().chain(prod).collect()
    }

    /// P(duplicate) of two intents.
    pub fn probability(&self, a: &Gaussian, b: &Gaussian) -> f32 {
        let h: Vec<f32> = self
            .hidden
            .forward(&Self::features(a, b))
            .into_iter()
            .map(|x| x.max(0.0))
            .collect();
        let logit = self.out.forward(&h)[0];
        1.0 / (1.0 + (-logit).exp())
    }
}

/// The heads a model carries (any subset).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Heads {
    /// Sentence transition matrix.
    pub transition: Option<Transition>,
    /// Learned intent head.
    pub intent: Option<IntentHead>,
    /// Variational-siamese classifier (needs the intent head).
    pub classifier: Option<Classifier>,
}

impl Heads {
    /// True when the model carries no head.
    pub fn is_empty(&self) -> bool {
        self.names().is_empty()
    }

    /// Names of the heads present: `transition`, `intent`, `classifier`.
    pub fn names(&self) -> Vec<&'static str> {
        [
            self.transition.as_ref().map(|_| "transition"),
            self.intent.as_ref().map(|_| "intent"),
            self.classifier.as_ref().map(|_| "classifier"),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// Checks the shapes against each other and the model dimension `d`.
    pub fn validate(&self, d: usize) -> std::result::Result<(), String> {
        if let Some(t) = &self.transition {
            t.weight.check("transition")?;
            if t.weight.inputs != d || t.weight.outputs != d {
                return Err(format!(
                    "transition is {}×{}, the model's dimension is {d}",
                    t.weight.outputs, t.weight.inputs
                ));
            }
        }
        if let Some(i) = &self.intent {
            i.mu.check("intent.mu")?;
            i.logvar.check("intent.logvar")?;
            if i.mu.inputs != d || i.logvar.inputs != d || i.logvar.outputs != i.mu.outputs {
                return Err(format!("intent head shapes do not fit dimension {d}"));
            }
        }
        if let Some(c) = &self.classifier {
            c.hidden.check("classifier.hidden")?;
            c.out.check("classifier.out")?;
            let k = self.intent.as_ref().map_or(d, IntentHead::dim);
            if c.hidden.inputs != 2 * k || c.out.inputs != c.hidden.outputs || c.out.outputs != 1 {
                return Err(format!("classifier shapes do not fit intent dimension {k}"));
            }
        }
        Ok(())
    }

    /// Loads `dir`'s heads file; no file means no heads. `d` is the model dimension.
    pub fn load(dir: &Path, d: usize) -> Result<Heads> {
        let path = dir.join(HEADS_FILE);
        let invalid = |reason: String| UserError::InvalidModelDir {
            path: dir.to_path_buf(),
            reason: format!("{HEADS_FILE}: {reason}"),
        };
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Heads::default()),
            Err(e) => return Err(io_err(format!("reading {}", path.display()))(e)),
        };
        let st = SafeTensors::deserialize(&bytes).map_err(|e| invalid(e.to_string()))?;
        let dense = |name: &str| read_dense(&st, name);
        let heads = (|| -> std::result::Result<Heads, String> {
            let intent = match (dense("intent.mu")?, dense("intent.logvar")?) {
                (Some(mu), Some(logvar)) => Some(IntentHead { mu, logvar }),
                (None, None) => None,
                _ => return Err("intent.mu and intent.logvar come together".into()),
            };
            let classifier = match (dense("classifier.hidden")?, dense("classifier.out")?) {
                (Some(hidden), Some(out)) => Some(Classifier { hidden, out }),
                (None, None) => None,
                _ => return Err("classifier.hidden and classifier.out come together".into()),
            };
            let heads = Heads {
                transition: dense("transition")?.map(|weight| Transition { weight }),
                intent,
                classifier,
            };
            heads.validate(d)?;
            Ok(heads)
        })()
        .map_err(invalid)?;
        Ok(heads)
    }

    /// Writes the heads file into `dir` (atomically: a temporary file, then a rename); with no
    /// heads, removes it.
    pub fn save(&self, dir: &Path) -> Result<()> {
        let path = dir.join(HEADS_FILE);
        if self.is_empty() {
            return match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(io_err(format!("removing {}", path.display()))(e))
                }
                _ => Ok(()),
            };
        }
        let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
        let mut put = |name: &str, d: &Dense| tensors.extend(dense_tensors(name, d));
        if let Some(t) = &self.transition {
            put("transition", &t.weight);
        }
        if let Some(i) = &self.intent {
            put("intent.mu", &i.mu);
            put("intent.logvar", &i.logvar);
        }
        if let Some(c) = &self.classifier {
            put("classifier.hidden", &c.hidden);
            put("classifier.out", &c.out);
        }
        let meta = HashMap::from([("heads".to_string(), self.names().join(","))]);
        write_atomically(dir, HEADS_FILE, &serialize_f32(&tensors, Some(meta))?)
    }
}

/// The dense layer `name` (`{name}.weight`, optional `{name}.bias`) of a safetensors file;
/// None when the file has no such weight.
pub(crate) fn read_dense(
    st: &SafeTensors<'_>,
    name: &str,
) -> std::result::Result<Option<Dense>, String> {
    let w = match st.tensor(&format!("{name}.weight")) {
        Ok(w) => w,
        Err(_) => return Ok(None),
    };
    let [outputs, inputs] = match *w.shape() {
        [o, i] => [o, i],
        _ => return Err(format!("{name}.weight is not 2-D")),
    };
    let bias = match st.tensor(&format!("{name}.bias")) {
        Ok(b) => f32s(&b)?,
        Err(_) => vec![0.0; outputs],
    };
    let dense = Dense {
        inputs,
        outputs,
        weight: f32s(&w)?,
        bias,
    };
    dense.check(name)?;
    Ok(Some(dense))
}

/// `name.weight` and `name.bias` of `d`, as `(name, shape, bytes)` for [`serialize_f32`].
pub(crate) fn dense_tensors(name: &str, d: &Dense) -> [(String, Vec<usize>, Vec<u8>); 2] {
    [
        (
            format!("{name}.weight"),
            vec![d.outputs, d.inputs],
            bytes(&d.weight),
        ),
        (format!("{name}.bias"), vec![d.outputs], bytes(&d.bias)),
    ]
}

/// Writes `data` to `dir/name` atomically (a temporary file, then a rename).
pub(crate) fn write_atomically(dir: &Path, name: &str, data: &[u8]) -> Result<()> {
    let path = dir.join(name);
    let tmp = dir.join(format!("{name}.tmp"));
    std::fs::write(&tmp, data).map_err(io_err(format!("writing {}", tmp.display())))?;
    std::fs::rename(&tmp, &path).map_err(io_err(format!("renaming {}", path.display())))
}

fn f32s(view: &TensorView<'_>) -> std::result::Result<Vec<f32>, String> {
    if view.dtype() != Dtype::F32 {
        return Err(format!("tensors must be f32, found {:?}", view.dtype()));
    }
    Ok(le_f32s(view.data()))
}

/// Little-endian f32 bytes (safetensors' layout) as numbers.
pub(crate) fn le_f32s(data: &[u8]) -> Vec<f32> {
    data.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// A safetensors file of f32 tensors `(name, shape, little-endian bytes)`.
pub(crate) fn serialize_f32(
    tensors: &[(String, Vec<usize>, Vec<u8>)],
    meta: Option<HashMap<String, String>>,
) -> Result<Vec<u8>> {
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(n, shape, data)| {
            let view =
                TensorView::new(Dtype::F32, shape.clone(), data).expect("shape matches data");
            (n.clone(), view)
        })
        .collect();
    safetensors::serialize(views, meta).map_err(|e| {
        crate::error::InternalError::Backend(format!("serialising tensors: {e}")).into()
    })
}

fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dense(inputs: usize, outputs: usize, seed: f32) -> Dense {
        Dense {
            inputs,
            outputs,
            weight: (0..inputs * outputs)
                .map(|i| (i as f32 * seed).sin())
                .collect(),
            bias: (0..outputs).map(|i| i as f32 * 0.1).collect(),
        }
    }

    #[test]
    fn heads_round_trip_through_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(Heads::load(dir.path(), 4).expect("none"), Heads::default());
        let heads = Heads {
            transition: Some(Transition {
                weight: dense(4, 4, 0.3),
            }),
            intent: Some(IntentHead {
                mu: dense(4, 3, 0.5),
                logvar: dense(4, 3, 0.7),
            }),
            classifier: Some(Classifier {
                hidden: dense(6, 5, 0.9),
                out: dense(5, 1, 1.1),
            }),
        };
        heads.save(dir.path()).expect("save");
        assert_eq!(Heads::load(dir.path(), 4).expect("load"), heads);
        let err = Heads::load(dir.path(), 8)
            .expect_err("wrong dim")
            .to_string();
        assert!(err.contains("dimension is 8"), "{err}");
        Heads::default().save(dir.path()).expect("remove");
        assert!(!dir.path().join(HEADS_FILE).exists());
    }

    #[test]
    fn identity_intent_head_reproduces_the_moment_intent() {
        let d = 3;
        let head = IntentHead {
            mu: Dense::identity(d),
            logvar: Dense::identity(d),
        };
        let g = Gaussian {
            mu: vec![0.1, -0.2, 0.3],
            sigma: vec![0.5, 0.25, 0.125],
        };
        let out = head.intent(&g, 1e-3);
        for (a, b) in out
            .mu
            .iter()
            .zip(&g.mu)
            .chain(out.sigma.iter().zip(&g.sigma))
        {
            assert!((a - b).abs() < 1e-6, "{a} vs {b}");
        }
    }

    #[test]
    fn classifier_is_symmetric_and_a_probability() {
        let c = Classifier {
            hidden: dense(4, 3, 0.9),
            out: dense(3, 1, 1.3),
        };
        let a = Gaussian {
            mu: vec![0.1, 0.4],
            sigma: vec![0.2, 0.3],
        };
        let b = Gaussian {
            mu: vec![-0.3, 0.2],
            sigma: vec![0.1, 0.5],
        };
        let (p, q) = (c.probability(&a, &b), c.probability(&b, &a));
        assert!((p - q).abs() < 1e-6 && p > 0.0 && p < 1.0);
    }
}
