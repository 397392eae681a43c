//! Compositional operators on sentence vectors (papers/intersent-compositional-sentence-
//! operations.txt; design.md §3): fusion f(u, v) ≈ E(a ⊕ b), difference g(u, v) ≈ E(a ⊖ b)
//! (what a says that b does not) and compression h(u) ≈ E(compress(a)). Owns their file
//! (`kindred-operators.safetensors` in a model directory) and their math, which is pure.
//!
//! Each operator is its arithmetic starting point plus a learned two-layer ReLU correction,
//! normalised (an untrained correction is zero, so an operator starts as plain arithmetic):
//!
//! ```text
//! fusion(u, v)     = normalise(normalise(u + v) + MLP([u + v; u ⊙ v]))   symmetric in u, v
//! difference(u, v) = normalise(normalise(u − v) + MLP([u; v]))
//! compression(u)   = normalise(u + MLP(u))
//! ```
//!
//! The file sits apart from the heads file on purpose: operators read vectors, they do not make
//! them, so adding them changes no stored vector and no model fingerprint. It records the
//! fingerprint of the vectors it was trained on (`trained_for`); a model whose vectors differ
//! (its weights or heads changed since) loads without them, with a warning.
//!
//! | tensor | shape |
//! |---|---|
//! | `fusion.hidden.weight` / `.bias` | `[h, 2d]` / `[h]` |
//! | `fusion.out.weight` / `.bias` | `[d, h]` / `[d]` |
//! | `difference.hidden…`, `difference.out…` | the same |
//! | `compression.hidden.weight` / `.bias` | `[h', d]` / `[h']` |
//! | `compression.out.weight` / `.bias` | `[d, h']` / `[d]` |

use std::collections::HashMap;
use std::path::Path;

use safetensors::SafeTensors;
use serde::{Deserialize, Serialize};

use super::heads::{dense_tensors, read_dense, serialize_f32, write_atomically, Dense};
use crate::error::{io_err, Result, UserError};
use crate::math::l2_normalize;

/// File name of the operators inside a model directory.
pub const OPERATORS_FILE: &str = "kindred-operators.safetensors";

/// The three operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    /// Two sentences as one: `a ⊕ b`.
    Fusion,
    /// What the first says that the second does not: `a ⊖ b`.
    Difference,
    /// A sentence said shorter.
    Compression,
}

impl Operation {
    /// Every operation, in file order.
    pub const ALL: [Operation; 3] = [
        Operation::Fusion,
        Operation::Difference,
        Operation::Compression,
    ];

    /// `fusion`, `difference` or `compression`.
    pub fn name(self) -> &'static str {
        match self {
            Operation::Fusion => "fusion",
            Operation::Difference => "difference",
            Operation::Compression => "compression",
        }
    }

    /// Vectors the operation takes (2, or 1 for compression).
    pub fn arity(self) -> usize {
        match self {
            Operation::Compression => 1,
            _ => 2,
        }
    }

    /// The MLP's input size for vectors of dimension `d`.
    pub fn input_dim(self, d: usize) -> usize {
        self.arity() * d
    }

    /// The arithmetic starting point: normalise(u + v), normalise(u − v), or u itself.
    pub fn arithmetic(self, u: &[f32], v: Option<&[f32]>) -> Vec<f32> {
        let mut out: Vec<f32> = match (self, v) {
            (Operation::Fusion, Some(v)) => u.iter().zip(v).map(|(a, b)| a + b).collect(),
            (Operation::Difference, Some(v)) => u.iter().zip(v).map(|(a, b)| a - b).collect(),
            _ => u.to_vec(),
        };
        l2_normalize(&mut out);
        out
    }

    /// The MLP's input: `[u + v; u ⊙ v]`, `[u; v]` or `u`.
    pub fn features(self, u: &[f32], v: Option<&[f32]>) -> Vec<f32> {
        match (self, v) {
            (Operation::Fusion, Some(v)) => u
                .iter()
                .zip(v)
                .map(|(a, b)| a + b)
                .chain(u.iter().zip(v).map(|(a, b)| a * b))
                .collect(),
            (Operation::Difference, Some(v)) => u.iter().chain(v).copied().collect(),
            _ => u.to_vec(),
        }
    }
}

impl std::str::FromStr for Operation {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        Operation::ALL
            .into_iter()
            .find(|o| o.name() == s)
            .ok_or_else(|| {
                format!("unknown operation {s:?}; use fusion, difference or compression")
            })
    }
}

/// A two-layer ReLU network: `out(relu(hidden(x)))`.
#[derive(Debug, Clone, PartialEq)]
pub struct Mlp {
    /// `in → h`, ReLU after.
    pub hidden: Dense,
    /// `h → d`.
    pub out: Dense,
}

impl Mlp {
    /// out(relu(hidden(x))).
    pub fn forward(&self, x: &[f32]) -> Vec<f32> {
        let h: Vec<f32> = self
            .hidden
            .forward(x)
            .into_iter()
            .map(|v| v.max(0.0))
            .collect();
        self.out.forward(&h)
    }
}

/// The learned operators a model carries (any subset), and the vectors they were trained on.
#[derive(Debug, Clone, PartialEq)]
pub struct Operators {
    /// Operation → its correction network.
    pub nets: HashMap<Operation, Mlp>,
    /// Fingerprint (fp32) of the model whose vectors they were trained on.
    pub trained_for: String,
}

impl Operators {
    /// The operations present, in file order.
    pub fn names(&self) -> Vec<&'static str> {
        Operation::ALL
            .into_iter()
            .filter(|o| self.nets.contains_key(o))
            .map(Operation::name)
            .collect()
    }

    /// True when `op` is learned.
    pub fn has(&self, op: Operation) -> bool {
        self.nets.contains_key(&op)
    }

    /// `op` applied to unit vectors `u` (and `v` for fusion and difference): the learned
    /// operator when there is one, else its arithmetic.
    pub fn apply(&self, op: Operation, u: &[f32], v: Option<&[f32]>) -> Vec<f32> {
        apply(self.nets.get(&op), op, u, v)
    }

    /// Checks every network's shapes against dimension `d`.
    pub fn validate(&self, d: usize) -> std::result::Result<(), String> {
        for (op, net) in &self.nets {
            net.hidden.check(op.name())?;
            net.out.check(op.name())?;
            if net.hidden.inputs != op.input_dim(d)
                || net.out.inputs != net.hidden.outputs
                || net.out.outputs != d
            {
                return Err(format!(
                    "{} does not fit vectors of dimension {d} (it takes {} inputs and gives {})",
                    op.name(),
                    net.hidden.inputs,
                    net.out.outputs
                ));
            }
        }
        Ok(())
    }

    /// Loads `dir`'s operators file; no file means no operators. `d` is the model dimension.
    pub fn load(dir: &Path, d: usize) -> Result<Option<Operators>> {
        let path = dir.join(OPERATORS_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(format!("reading {}", path.display()))(e)),
        };
        let invalid = |reason: String| UserError::InvalidModelDir {
            path: dir.to_path_buf(),
            reason: format!(
                "{OPERATORS_FILE}: {reason}; train them again with `kindred train operators`"
            ),
        };
        let parsed = (|| -> std::result::Result<Operators, String> {
            let (_, meta) = SafeTensors::read_metadata(&bytes).map_err(|e| e.to_string())?;
            let trained_for = meta
                .metadata()
                .as_ref()
                .and_then(|m| m.get("trained_for").cloned())
                .ok_or("no trained_for fingerprint in its metadata")?;
            let st = SafeTensors::deserialize(&bytes).map_err(|e| e.to_string())?;
            let mut nets = HashMap::new();
            for op in Operation::ALL {
                let hidden = read_dense(&st, &format!("{}.hidden", op.name()))?;
                let out = read_dense(&st, &format!("{}.out", op.name()))?;
                match (hidden, out) {
                    (Some(hidden), Some(out)) => {
                        nets.insert(op, Mlp { hidden, out });
                    }
                    (None, None) => {}
                    _ => return Err(format!("{0}.hidden and {0}.out come together", op.name())),
                }
            }
            let ops = Operators { nets, trained_for };
            ops.validate(d)?;
            Ok(ops)
        })()
        .map_err(invalid)?;
        Ok(Some(parsed))
    }

    /// [`Operators::load`], keeping them only when trained for vectors of `fingerprint` (the
    /// model's fp32 identity): ones trained for other vectors are left out with a warning, as
    /// they would answer nonsense.
    pub fn load_for(dir: &Path, d: usize, fingerprint: &str) -> Result<Option<Operators>> {
        let Some(ops) = Operators::load(dir, d)? else {
            return Ok(None);
        };
        if ops.trained_for != fingerprint {
            tracing::warn!(trained_for = %ops.trained_for, model = %fingerprint,
                "the model's operators were trained for other vectors (its weights or heads \
                 changed since); they are off — train them again with `kindred train operators`");
            return Ok(None);
        }
        Ok(Some(ops))
    }

    /// Writes the operators file into `dir` (atomically).
    pub fn save(&self, dir: &Path) -> Result<()> {
        let mut tensors = Vec::new();
        for op in Operation::ALL {
            if let Some(net) = self.nets.get(&op) {
                tensors.extend(dense_tensors(&format!("{}.hidden", op.name()), &net.hidden));
                tensors.extend(dense_tensors(&format!("{}.out", op.name()), &net.out));
            }
        }
        let meta = HashMap::from([
            ("operators".to_string(), self.names().join(",")),
            ("trained_for".to_string(), self.trained_for.clone()),
        ]);
        write_atomically(dir, OPERATORS_FILE, &serialize_f32(&tensors, Some(meta))?)
    }
}

/// `op` of `u` (and `v`) through `net` (None: plain arithmetic).
pub fn apply(net: Option<&Mlp>, op: Operation, u: &[f32], v: Option<&[f32]>) -> Vec<f32> {
    let mut out = op.arithmetic(u, v);
    if let Some(net) = net {
        for (o, c) in out.iter_mut().zip(net.forward(&op.features(u, v))) {
            *o += c;
        }
        l2_normalize(&mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(v: &[f32]) -> Vec<f32> {
        let mut v = v.to_vec();
        l2_normalize(&mut v);
        v
    }

    fn zero_mlp(inputs: usize, hidden: usize, d: usize) -> Mlp {
        let dense = |i: usize, o: usize| Dense {
            inputs: i,
            outputs: o,
            weight: vec![0.0; i * o],
            bias: vec![0.0; o],
        };
        Mlp {
            hidden: dense(inputs, hidden),
            out: dense(hidden, d),
        }
    }

    #[test]
    fn untrained_operators_are_arithmetic_and_fusion_is_symmetric() {
        let (u, v) = (unit(&[1.0, 0.0, 0.0]), unit(&[0.0, 1.0, 1.0]));
        let net = zero_mlp(6, 4, 3);
        let f = apply(Some(&net), Operation::Fusion, &u, Some(&v));
        assert_eq!(f, Operation::Fusion.arithmetic(&u, Some(&v)));
        let mut sum = vec![1.0, 0.5f32.sqrt(), 0.5f32.sqrt()];
        l2_normalize(&mut sum);
        assert!(f.iter().zip(&sum).all(|(a, b)| (a - b).abs() < 1e-6));
        assert_eq!(
            Operation::Fusion.features(&u, Some(&v)),
            Operation::Fusion.features(&v, Some(&u))
        );
        assert_eq!(apply(None, Operation::Compression, &u, None), u);
    }

    #[test]
    fn a_learned_correction_moves_the_result_and_the_file_round_trips() {
        let d = 3;
        let mut net = zero_mlp(d, 2, d);
        net.hidden.bias = vec![1.0, 0.0];
        net.out.weight[2 * 2] = 5.0; // output 2 ← hidden 0
        let u = unit(&[1.0, 0.0, 0.0]);
        let c = apply(Some(&net), Operation::Compression, &u, None);
        assert!(c[2] > c[0], "{c:?}");
        let ops = Operators {
            nets: HashMap::from([(Operation::Compression, net)]),
            trained_for: "sha256:abc".into(),
        };
        let dir = tempfile::tempdir().unwrap();
        ops.save(dir.path()).unwrap();
        let back = Operators::load(dir.path(), d).unwrap().unwrap();
        assert_eq!(back, ops);
        assert_eq!(back.names(), ["compression"]);
        let e = Operators::load(dir.path(), 4).unwrap_err().to_string();
        assert!(
            e.contains("dimension 4") && e.contains("train operators"),
            "{e}"
        );
        assert!(Operators::load(&dir.path().join("none"), d)
            .unwrap()
            .is_none());
    }
}
