//! Fitting the neural chunk-boundary model ([`Mlp`]): several networks from different seeds
//! (an ensemble) trained with AdamW on standardised inputs, then stacked into one wider
//! network whose logit is their mean, so inference is one small matrix product per text.
//! Pure functions of their inputs; deterministic.

use rayon::prelude::*;

use crate::math::{dot_simd as dot, SplitMix64};
use crate::text::chunk::mlp::{gelu, Mlp};

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
    let mut net = init(inputs, h, &mut rng);
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
        let a = init(4, 3, &mut rng);
        let b = init(4, 2, &mut rng);
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
