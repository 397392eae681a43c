//! The neural chunk-boundary model: a one-hidden-layer perceptron (MLP) over the encoder's
//! hidden states around a unit boundary, and its trainer. It owns the arithmetic only — the
//! forward pass, backpropagation, AdamW and the input standardisation — as pure functions of
//! their inputs; [`crate::text::chunk`] builds the inputs from sentences and reads the decisions.
//!
//! Training fits several networks from different seeds (an ensemble) on standardised inputs,
//! then stacks them into one wider network whose logit is their mean: inference is one small
//! matrix product per text (its units' boundaries at once). The standardisation stays a step of its own (folding it
//! into the first layer would give near-constant inputs huge weights whose rounding in the
//! model file no longer cancels).

use rayon::prelude::*;

use crate::math::SplitMix64;

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

/// How [`train`] fits the networks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MlpOptions {
    /// Hidden units per network.
    pub hidden: usize,
    /// Networks in the ensemble (each from its own seed).
    pub nets: usize,
    /// Passes over the examples.
    pub epochs: usize,
    /// Examples per AdamW step.
    pub batch: usize,
    /// AdamW's learning rate.
    pub lr: f32,
    /// AdamW's decoupled weight decay.
    pub weight_decay: f32,
    /// Dropout probability on the inputs and on the hidden units, in training.
    pub dropout: f32,
}

impl Default for MlpOptions {
    /// The settings chosen on the iSTS development pairs (EVALUATION.md).
    fn default() -> Self {
        MlpOptions {
            hidden: 32,
            nets: 3,
            epochs: 30,
            batch: 256,
            lr: 1e-3,
            weight_decay: 1e-4,
            dropout: 0.2,
        }
    }
}

const SQRT_2_OVER_PI: f32 = 0.797_884_6;

/// GELU, tanh form, and its derivative.
fn gelu(x: f32) -> (f32, f32) {
    let inner = SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x);
    let t = inner.tanh();
    let d_inner = SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044_715 * x * x);
    (
        0.5 * x * (1.0 + t),
        0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * d_inner,
    )
}

/// `a · b` by the crate's dot-product kernel ([`crate::math::dot`]), compiled with AVX2 where
/// the CPU has it (the same partial sums on every path, so the same bits): a neural chunker's
/// unit is ~100,000 multiply-adds.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked above).
        return unsafe { dot_avx2(a, b) };
    }
    crate::math::dot(a, b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    crate::math::dot(a, b)
}

/// `w · x` for four `x` at once, each with exactly [`crate::math::dot`]'s partial sums (the same
/// bits), so the four accumulator chains overlap and `w` is read once.
#[inline(always)]
fn dot4_body(w: &[f32], x: [&[f32]; 4]) -> [f32; 4] {
    let (mut a0, mut a1, mut a2, mut a3) = ([0f32; 8], [0f32; 8], [0f32; 8], [0f32; 8]);
    let rows = w
        .chunks_exact(8)
        .zip(x[0].chunks_exact(8))
        .zip(x[1].chunks_exact(8))
        .zip(x[2].chunks_exact(8))
        .zip(x[3].chunks_exact(8));
    for ((((w, x0), x1), x2), x3) in rows {
        for k in 0..8 {
            a0[k] += w[k] * x0[k];
            a1[k] += w[k] * x1[k];
            a2[k] += w[k] * x2[k];
            a3[k] += w[k] * x3[k];
        }
    }
    let acc = [a0, a1, a2, a3];
    std::array::from_fn(|r| finish_dot(&acc[r], w, x[r]))
}

/// One row's dot product from its eight lane accumulators: the lanes summed in order, plus
/// the products past the last whole group of eight (as [`crate::math::dot`] ends).
#[inline(always)]
fn finish_dot(lanes: &[f32; 8], w: &[f32], x: &[f32]) -> f32 {
    let whole = w.len() - w.len() % 8;
    let tail: f32 = w[whole..].iter().zip(&x[whole..]).map(|(a, b)| a * b).sum();
    lanes.iter().sum::<f32>() + tail
}

/// [`dot4_body`]'s four dot products: in AVX2 intrinsics ([`dot4_avx2`]) where the CPU has
/// AVX2, else the plain body.
fn dot4(w: &[f32], x: [&[f32]; 4]) -> [f32; 4] {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked above).
        return unsafe { dot4_avx2(w, x) };
    }
    dot4_body(w, x)
}

/// [`dot4_body`] in AVX2 intrinsics (the compiler's own vectorisation of it shuffles lanes):
/// per row, the eight lanes are eight accumulators, each a separate multiply then add as in
/// [`crate::math::dot`], summed in lane order at the end.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn dot4_avx2(w: &[f32], x: [&[f32]; 4]) -> [f32; 4] {
    use std::arch::x86_64::*;
    let n = w.len();
    assert!(x.iter().all(|x| x.len() == n), "dot4 lengths");
    let whole = n - n % 8;
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i < whole {
        // SAFETY: i + 8 <= whole <= n, the length of w and of every x (asserted).
        let wv = unsafe { _mm256_loadu_ps(w.as_ptr().add(i)) };
        for (acc, x) in acc.iter_mut().zip(&x) {
            let xv = unsafe { _mm256_loadu_ps(x.as_ptr().add(i)) };
            *acc = _mm256_add_ps(*acc, _mm256_mul_ps(wv, xv));
        }
        i += 8;
    }
    std::array::from_fn(|r| {
        let mut lanes = [0f32; 8];
        // SAFETY: lanes holds 8 values.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), acc[r]) };
        finish_dot(&lanes, w, x[r])
    })
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

    /// A network with PyTorch's default initialisation (uniform within ±1/√fan-in), inputs
    /// taken as they come (mean 0, inv_std 1).
    fn init(inputs: usize, hidden: usize, rng: &mut SplitMix64) -> Mlp {
        let mut uniform = |n: usize, fan_in: usize| -> Vec<f32> {
            let bound = 1.0 / (fan_in as f32).sqrt();
            (0..n)
                .map(|_| (rng.next_f64() as f32 * 2.0 - 1.0) * bound)
                .collect()
        };
        let w1 = uniform(hidden * inputs, inputs);
        let b1 = uniform(hidden, inputs);
        let w2 = uniform(hidden, hidden);
        let b2 = uniform(1, hidden)[0];
        Mlp {
            inputs,
            hidden,
            mean: vec![0.0; inputs],
            inv_std: vec![1.0; inputs],
            w1,
            b1,
            w2,
            b2,
        }
    }
}

/// Per input column, its mean and standard deviation (+1e-6) over the rows of `xs`.
fn moments(xs: &[f32], inputs: usize) -> (Vec<f32>, Vec<f32>) {
    let n = (xs.len() / inputs).max(1) as f64;
    let mut sum = vec![0f64; inputs];
    let mut sq = vec![0f64; inputs];
    for row in xs.chunks_exact(inputs) {
        for ((s, q), &v) in sum.iter_mut().zip(&mut sq).zip(row) {
            *s += f64::from(v);
            *q += f64::from(v) * f64::from(v);
        }
    }
    sum.iter()
        .zip(&sq)
        .map(|(&s, &q)| {
            let mean = s / n;
            let var = (q / n - mean * mean).max(0.0);
            (mean as f32, (var.sqrt() + 1e-6) as f32)
        })
        .unzip()
}

/// Trains `options.nets` networks on examples `xs` (`ys.len()` rows of `inputs` values) with
/// targets `ys` (binary cross-entropy on the logit), each from its own seed, and returns them
/// as one network: the inputs standardised by the examples' mean and standard deviation, the
/// hidden layers stacked, the output the networks' mean logit. `progress` gets each finished
/// epoch of any network. Deterministic: the same examples and options give the same network.
pub fn train(
    xs: &[f32],
    ys: &[bool],
    inputs: usize,
    options: &MlpOptions,
    progress: impl Fn() + Sync,
) -> Mlp {
    assert_eq!(xs.len(), ys.len() * inputs, "examples × inputs");
    let (mean, std) = moments(xs, inputs);
    let standard: Vec<f32> = xs
        .chunks_exact(inputs)
        .flat_map(|row| {
            row.iter()
                .zip(mean.iter().zip(&std))
                .map(|(v, (m, s))| (v - m) / s)
        })
        .collect();
    let nets: Vec<Mlp> = (0..options.nets)
        .into_par_iter()
        .map(|seed| fit_one(&standard, ys, inputs, options, seed as u64, &progress))
        .collect();
    stack(&nets, &mean, &std)
}

/// One network, AdamW on mini-batches in a seeded shuffled order, dropout on inputs and
/// hidden units.
fn fit_one(
    xs: &[f32],
    ys: &[bool],
    inputs: usize,
    o: &MlpOptions,
    seed: u64,
    progress: &(impl Fn() + Sync),
) -> Mlp {
    let mut rng = SplitMix64(0x6d6c_7063_6875_6e6b ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let h = o.hidden;
    let mut net = Mlp::init(inputs, h, &mut rng);
    let mut adam = AdamW::new(h * inputs + 2 * h + 1);
    // The examples come standardised: the network's own mean and inv_std stay 0 and 1 until
    // `stack` sets them.
    let keep = 1.0 - o.dropout;
    let drop_below = (o.dropout * 256.0).round() as u8;
    let (mut x, mut z1, mut a1) = (vec![0f32; inputs], vec![0f32; h], vec![0f32; h]);
    let (mut d1, mut mask_h) = (vec![0f32; h], vec![0f32; h]);
    let mut grad = vec![0f32; h * inputs + 2 * h + 1];
    debug_assert!(net.mean.iter().all(|&m| m == 0.0) && net.inv_std.iter().all(|&s| s == 1.0));
    for _ in 0..o.epochs {
        let order = rng.permutation(ys.len());
        for batch in order.chunks(o.batch) {
            grad.fill(0.0);
            let (gw1, rest) = grad.split_at_mut(h * inputs);
            let (gb1, rest) = rest.split_at_mut(h);
            let (gw2, gb2) = rest.split_at_mut(h);
            let scale = 1.0 / batch.len() as f32;
            for &e in batch {
                // Inputs with dropout: each random byte below `drop_below` drops one input.
                let row = &xs[e * inputs..(e + 1) * inputs];
                let mut bits = 0u64;
                for (k, (xv, &v)) in x.iter_mut().zip(row).enumerate() {
                    if k % 8 == 0 {
                        bits = rng.next_u64();
                    }
                    let byte = (bits >> (8 * (k % 8))) as u8;
                    *xv = if byte < drop_below { 0.0 } else { v / keep };
                }
                let mut logit = net.b2;
                for j in 0..h {
                    z1[j] = dot(&net.w1[j * inputs..(j + 1) * inputs], &x) + net.b1[j];
                    mask_h[j] = if (rng.next_u64() as u8) < drop_below {
                        0.0
                    } else {
                        1.0 / keep
                    };
                    a1[j] = gelu(z1[j]).0 * mask_h[j];
                    logit += net.w2[j] * a1[j];
                }
                let target = if ys[e] { 1.0 } else { 0.0 };
                let dz2 = (1.0 / (1.0 + (-logit).exp()) - target) * scale;
                gb2[0] += dz2;
                for j in 0..h {
                    gw2[j] += dz2 * a1[j];
                    d1[j] = dz2 * net.w2[j] * mask_h[j] * gelu(z1[j]).1;
                    gb1[j] += d1[j];
                }
                for (j, &d) in d1.iter().enumerate() {
                    if d != 0.0 {
                        gw1[j * inputs..(j + 1) * inputs]
                            .iter_mut()
                            .zip(&x)
                            .for_each(|(g, v)| *g += d * v);
                    }
                }
            }
            adam.step(&mut net, &grad, o.lr, o.weight_decay);
        }
        progress();
    }
    net
}

/// Adam with decoupled weight decay (PyTorch's AdamW: β 0.9 / 0.999, ε 1e-8) over a network's
/// weights (w1, b1, w2, b2; the standardisation is not trained).
struct AdamW {
    m: Vec<f32>,
    v: Vec<f32>,
    t: i32,
}

impl AdamW {
    fn new(n: usize) -> Self {
        AdamW {
            m: vec![0.0; n],
            v: vec![0.0; n],
            t: 0,
        }
    }

    fn step(&mut self, net: &mut Mlp, grad: &[f32], lr: f32, weight_decay: f32) {
        const B1: f32 = 0.9;
        const B2: f32 = 0.999;
        self.t += 1;
        let c1 = 1.0 - B1.powi(self.t);
        let c2 = 1.0 - B2.powi(self.t);
        let params = net
            .w1
            .iter_mut()
            .chain(&mut net.b1)
            .chain(&mut net.w2)
            .chain(std::iter::once(&mut net.b2));
        for (((p, g), m), v) in params.zip(grad).zip(&mut self.m).zip(&mut self.v) {
            *p -= lr * weight_decay * *p;
            *m = B1 * *m + (1.0 - B1) * g;
            *v = B2 * *v + (1.0 - B2) * g * g;
            *p -= lr * (*m / c1) / ((*v / c2).sqrt() + 1e-8);
        }
    }
}

/// The networks (trained on standardised inputs) as one over raw inputs: `(x − mean) / std`
/// first, the hidden units side by side, the logit the networks' mean.
fn stack(nets: &[Mlp], mean: &[f32], std: &[f32]) -> Mlp {
    let inputs = mean.len();
    let share = 1.0 / nets.len() as f32;
    let mut out = Mlp {
        inputs,
        hidden: 0,
        mean: mean.to_vec(),
        inv_std: std.iter().map(|s| 1.0 / s).collect(),
        w1: Vec::new(),
        b1: Vec::new(),
        w2: Vec::new(),
        b2: 0.0,
    };
    for net in nets {
        out.w1.extend_from_slice(&net.w1);
        out.b1.extend_from_slice(&net.b1);
        out.w2.extend(net.w2.iter().map(|w| w * share));
        out.b2 += net.b2 * share;
        out.hidden += net.hidden;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gelu_and_its_derivative() {
        let (y, _) = gelu(1.0);
        assert!((y - 0.841_192).abs() < 1e-5, "{y}");
        for x in [-3.0f32, -0.5, 0.0, 0.7, 2.5] {
            let numeric = (gelu(x + 1e-3).0 - gelu(x - 1e-3).0) / 2e-3;
            assert!(
                (numeric - gelu(x).1).abs() < 1e-3,
                "{x}: {numeric} vs {}",
                gelu(x).1
            );
        }
    }

    #[test]
    fn four_dots_at_once_are_the_same_bits_as_one_at_a_time() {
        let mut rng = SplitMix64(3);
        for len in [1, 7, 8, 17, 1154] {
            let v = |rng: &mut SplitMix64| -> Vec<f32> {
                (0..len)
                    .map(|_| rng.next_f64() as f32 * 2.0 - 1.0)
                    .collect()
            };
            let w = v(&mut rng);
            let xs: Vec<Vec<f32>> = (0..4).map(|_| v(&mut rng)).collect();
            let four = dot4(&w, std::array::from_fn(|r| xs[r].as_slice()));
            for (x, got) in xs.iter().zip(four) {
                assert_eq!(got.to_bits(), dot(&w, x).to_bits(), "length {len}");
            }
        }
    }

    /// A target no linear model gets: the sign of x0·x1 (XOR of the signs), on inputs with
    /// an offset and scale the standardisation has to undo.
    fn xor_examples(n: usize, seed: u64) -> (Vec<f32>, Vec<bool>) {
        let mut rng = SplitMix64(seed);
        let mut xs = Vec::new();
        let mut ys = Vec::new();
        for _ in 0..n {
            let a = rng.next_f64() as f32 * 2.0 - 1.0;
            let b = rng.next_f64() as f32 * 2.0 - 1.0;
            xs.extend([10.0 + 5.0 * a, -3.0 + 0.1 * b, rng.next_f64() as f32]);
            ys.push(a * b > 0.0);
        }
        (xs, ys)
    }

    #[test]
    fn learns_a_nonlinear_boundary_and_stacks_its_ensemble_exactly() {
        let (xs, ys) = xor_examples(2000, 1);
        let options = MlpOptions {
            hidden: 16,
            nets: 2,
            epochs: 60,
            batch: 32,
            lr: 1e-2,
            weight_decay: 1e-4,
            dropout: 0.0,
        };
        let net = train(&xs, &ys, 3, &options, || {});
        assert_eq!((net.inputs, net.hidden), (3, 32));
        let (test, truth) = xor_examples(500, 2);
        let logits = net.logits(&test);
        let right = logits
            .iter()
            .zip(&truth)
            .filter(|(&l, &y)| (l > 0.0) == y)
            .count();
        assert!(right >= 470, "{right} of 500 right");
        assert_eq!(train(&xs, &ys, 3, &options, || {}), net, "deterministic");
        let values: Vec<f32> = net.values().collect();
        let one_by_one: Vec<f32> = test.chunks_exact(3).flat_map(|x| net.logits(x)).collect();
        assert_eq!(one_by_one, logits, "a batch gives each input's own logit");
        assert_eq!(values.len(), Mlp::size(3, 32));
        assert_eq!(Mlp::from_values(3, 32, &values), Some(net.clone()));
        assert_eq!(Mlp::from_values(3, 31, &values), None);
    }

    #[test]
    fn the_stacked_network_is_the_mean_of_its_members_on_raw_inputs() {
        let mut rng = SplitMix64(7);
        let a = Mlp::init(4, 3, &mut rng);
        let b = Mlp::init(4, 2, &mut rng);
        let (mean, std) = (vec![1.0, -2.0, 0.5, 0.0], vec![2.0, 0.5, 1.0, 4.0]);
        let stacked = stack(&[a.clone(), b.clone()], &mean, &std);
        let x = [0.3f32, -1.0, 2.0, 5.0];
        let z: Vec<f32> = x
            .iter()
            .zip(mean.iter().zip(&std))
            .map(|(v, (m, s))| (v - m) / s)
            .collect();
        let expected = (a.logits(&z)[0] + b.logits(&z)[0]) / 2.0;
        assert!((stacked.logits(&x)[0] - expected).abs() < 1e-5);
    }
}
