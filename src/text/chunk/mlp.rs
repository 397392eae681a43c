//! The neural chunk-boundary model's network: a one-hidden-layer perceptron (MLP) over the
//! encoder's hidden states around a unit boundary, its forward pass and its weights as a flat
//! list (what the model file stores). [`crate::text::chunk`] builds its inputs from sentences
//! and reads the decisions; `crate::train::chunker` fits it. Pure arithmetic.
//!
//! The standardisation stays a step of its own (folding it into the first layer would give
//! near-constant inputs huge weights whose rounding in the model file no longer cancels).

use crate::math::{dot4, dot_simd as dot};

/// Standardised inputs, one hidden layer, GELU (tanh form), one logit:
/// `w2 · gelu(W1 ((x − mean) ⊙ inv_std) + b1) + b2`.
#[derive(Debug, Clone, PartialEq)]
pub struct Mlp {
    /// Input width.
    pub inputs: usize,
    /// Hidden units.
    pub hidden: usize,
    /// `inputs`: subtracted from the input.
    pub mean: Vec<f32>,
    /// `inputs`: multiplies the centred input.
    pub inv_std: Vec<f32>,
    /// `hidden × inputs`, row-major.
    pub w1: Vec<f32>,
    /// `hidden`.
    pub b1: Vec<f32>,
    /// `hidden`.
    pub w2: Vec<f32>,
    /// The output bias.
    pub b2: f32,
}

const SQRT_2_OVER_PI: f32 = 0.797_884_6;

/// GELU, tanh form, and its derivative.
pub(crate) fn gelu(x: f32) -> (f32, f32) {
    let inner = SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x);
    let t = inner.tanh();
    let d_inner = SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044_715 * x * x);
    (
        0.5 * x * (1.0 + t),
        0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * d_inner,
    )
}

impl Mlp {
    /// The logit of each input (`xs`: rows of `inputs` values; above 0 means yes), computed a
    /// hidden unit at a time over all rows, so that each row of the first layer is read once
    /// per call rather than once per input.
    pub fn logits(&self, xs: &[f32]) -> Vec<f32> {
        let n = xs.len() / self.inputs;
        let standard: Vec<f32> = xs
            .chunks_exact(self.inputs)
            .flat_map(|x| {
                x.iter()
                    .zip(self.mean.iter().zip(&self.inv_std))
                    .map(|(v, (m, s))| (v - m) * s)
            })
            .collect();
        let mut out = vec![self.b2; n];
        for ((row, b), w) in self
            .w1
            .chunks_exact(self.inputs)
            .zip(&self.b1)
            .zip(&self.w2)
        {
            let mut rows = standard.chunks_exact(self.inputs);
            let mut outs = out.chunks_mut(4);
            for o in outs.by_ref() {
                if o.len() < 4 {
                    for (o, x) in o.iter_mut().zip(rows.by_ref()) {
                        *o += w * gelu(dot(row, x) + b).0;
                    }
                    break;
                }
                let x: [&[f32]; 4] =
                    std::array::from_fn(|_| rows.next().expect("a row per output"));
                for (o, v) in o.iter_mut().zip(dot4(row, x)) {
                    *o += w * gelu(v + b).0;
                }
            }
        }
        out
    }

    /// Every value in a fixed order (mean, inv_std, w1, b1, w2, b2): what a model file stores.
    pub fn values(&self) -> impl Iterator<Item = f32> + '_ {
        self.mean
            .iter()
            .chain(&self.inv_std)
            .chain(&self.w1)
            .chain(&self.b1)
            .chain(&self.w2)
            .copied()
            .chain(std::iter::once(self.b2))
    }

    /// The network of `inputs` × `hidden` whose weights [`Mlp::values`] gave, or None when
    /// their count does not fit.
    pub fn from_values(inputs: usize, hidden: usize, values: &[f32]) -> Option<Mlp> {
        if values.len() != Mlp::size(inputs, hidden) || inputs == 0 || hidden == 0 {
            return None;
        }
        let (mean, rest) = values.split_at(inputs);
        let (inv_std, rest) = rest.split_at(inputs);
        let (w1, rest) = rest.split_at(hidden * inputs);
        let (b1, rest) = rest.split_at(hidden);
        let (w2, b2) = rest.split_at(hidden);
        Some(Mlp {
            inputs,
            hidden,
            mean: mean.to_vec(),
            inv_std: inv_std.to_vec(),
            w1: w1.to_vec(),
            b1: b1.to_vec(),
            w2: w2.to_vec(),
            b2: b2[0],
        })
    }

    /// How many values [`Mlp::values`] gives for this shape.
    pub fn size(inputs: usize, hidden: usize) -> usize {
        2 * inputs + hidden * inputs + 2 * hidden + 1
    }
}
