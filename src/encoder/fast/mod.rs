//! The packed inference path of the encoder: the same BERT as `bert.rs`, its weights copied
//! out of the burn module once ([`HostBert`], made by [`super::Bert::to_host`]) and packed
//! for hand-written CPU kernels, in fp32 or int8 ([`Precision`]). Training stays in burn; this
//! module only runs forward, and is tested layer by layer against the burn forward on real
//! weights (tests/it/encoder.rs), so there is one model definition, not two.
//!
//! What makes it faster than the burn forward on a CPU:
//! - no padding: the texts of a batch are concatenated into one `Σ len × d` matrix for the
//!   linear layers, and attention runs per text;
//! - one fused Q/K/V projection (`d × 3d`), heads read in place (no transposing copies);
//! - bias and GELU applied while an output tile is still in cache; residual + LayerNorm in one
//!   pass per row;
//! - weights packed once in the micro-kernels' layout (`kernels.rs`), with an int8 path on
//!   AVX-512 VNNI.
//!
//! Owns the kernels (`kernels.rs`) and the element-wise operations (`ops.rs`); knows nothing
//! of tokenizers, heads or stores.

pub mod kernels;
pub mod ops;
mod path;
mod team;

pub use kernels::KernelPath;
use kernels::{Epilogue, PackedF32, PackedI8, QuantRows};

use crate::types::Precision;

/// A linear layer's host weights: `w` is `k × n` row-major (burn's layout, `y = x·w + b`).
#[derive(Debug, Clone)]
pub struct HostLinear {
    /// Input width.
    pub k: usize,
    /// Output width.
    pub n: usize,
    /// `k × n` weights.
    pub w: Vec<f32>,
    /// `n` biases.
    pub b: Vec<f32>,
}

/// A LayerNorm's scale and shift.
#[derive(Debug, Clone)]
pub struct HostNorm {
    /// Scale γ.
    pub gamma: Vec<f32>,
    /// Shift β.
    pub beta: Vec<f32>,
}

/// One encoder layer's host weights.
#[derive(Debug, Clone)]
pub struct HostLayer {
    /// Query projection.
    pub query: HostLinear,
    /// Key projection.
    pub key: HostLinear,
    /// Value projection.
    pub value: HostLinear,
    /// Attention output projection.
    pub attn_out: HostLinear,
    /// LayerNorm after attention.
    pub attn_norm: HostNorm,
    /// Feed-forward expansion.
    pub ff_in: HostLinear,
    /// Feed-forward contraction.
    pub ff_out: HostLinear,
    /// LayerNorm after the feed-forward block.
    pub ff_norm: HostNorm,
}

/// A BERT's weights on the host, as plain f32 arrays.
#[derive(Debug, Clone)]
pub struct HostBert {
    /// Hidden size d.
    pub d: usize,
    /// Attention heads.
    pub heads: usize,
    /// GELU's tanh form instead of erf.
    pub gelu_tanh: bool,
    /// LayerNorm ε.
    pub eps: f32,
    /// Word embeddings, `vocab × d`.
    pub word: Vec<f32>,
    /// Position embeddings, `positions × d`.
    pub position: Vec<f32>,
    /// Token type 0's embedding, `d`.
    pub token_type: Vec<f32>,
    /// LayerNorm of the embeddings.
    pub embed_norm: HostNorm,
    /// The layers.
    pub layers: Vec<HostLayer>,
}

/// A packed linear layer in one precision.
#[derive(Debug, Clone)]
enum Linear {
    F32(PackedF32),
    I8(PackedI8),
}

impl Linear {
    fn new(precision: Precision, l: &HostLinear) -> Self {
        match precision {
            Precision::Fp32 => Linear::F32(PackedF32::new(&l.w, &l.b, l.k, l.n)),
            Precision::Int8 => Linear::I8(PackedI8::new(&l.w, &l.b, l.k, l.n)),
        }
    }

    /// Q, K and V as one `d × 3d` layer.
    fn fused(precision: Precision, parts: [&HostLinear; 3]) -> Self {
        let (k, n) = (parts[0].k, parts.iter().map(|p| p.n).sum::<usize>());
        let mut w = vec![0f32; k * n];
        let mut b = Vec::with_capacity(n);
        let mut c0 = 0;
        for p in parts {
            assert_eq!(p.k, k, "fused projections share their input");
            for r in 0..k {
                w[r * n + c0..r * n + c0 + p.n].copy_from_slice(&p.w[r * p.n..(r + 1) * p.n]);
            }
            b.extend_from_slice(&p.b);
            c0 += p.n;
        }
        Linear::new(precision, &HostLinear { k, n, w, b })
    }

    fn n(&self) -> usize {
        match self {
            Linear::F32(l) => l.n(),
            Linear::I8(l) => l.n(),
        }
    }

    /// `out = x·W + b`, epilogue applied; `m` rows.
    fn apply(&self, cx: &mut Scratch, x: &[f32], m: usize, out: &mut [f32], ep: Epilogue) {
        match self {
            Linear::F32(l) => l.apply(cx.path, x, m, out, ep),
            Linear::I8(l) => {
                kernels::quantize_rows(cx.path, x, m, l.k(), &mut cx.quant);
                l.apply(cx.path, &cx.quant, m, out, ep);
            }
        }
    }
}

#[derive(Debug, Clone)]
struct PackedLayer {
    qkv: Linear,
    attn_out: Linear,
    attn_norm: HostNorm,
    ff_in: Linear,
    ff_out: Linear,
    ff_norm: HostNorm,
}

/// Per-forward buffers.
struct Scratch {
    path: KernelPath,
    quant: QuantRows,
}

/// A BERT packed for the CPU kernels in one precision.
#[derive(Debug, Clone)]
pub struct PackedBert {
    d: usize,
    heads: usize,
    gelu_tanh: bool,
    eps: f32,
    precision: Precision,
    path: KernelPath,
    word: Vec<f32>,
    position: Vec<f32>,
    token_type: Vec<f32>,
    embed_norm: HostNorm,
    layers: Vec<PackedLayer>,
}

/// Rows per parallel task of the row-wise passes.
const ROWS_PER_TASK: usize = 16;

/// Most wordpieces of a forward that forms a team ([`PackedBert::run`]). Measured on 2
/// cores (BENCHMARKS.md): a team is faster than rayon jobs up to batch 32 of questions
/// (about 480 wordpieces) and level with them at batch 128.
const TEAM_ROWS: usize = 1024;

impl PackedBert {
    /// Packs `host` for `precision`, running on `path`.
    pub fn new(host: HostBert, precision: Precision, path: KernelPath) -> Self {
        let layers = host
            .layers
            .iter()
            .map(|l| PackedLayer {
                qkv: Linear::fused(precision, [&l.query, &l.key, &l.value]),
                attn_out: Linear::new(precision, &l.attn_out),
                attn_norm: l.attn_norm.clone(),
                ff_in: Linear::new(precision, &l.ff_in),
                ff_out: Linear::new(precision, &l.ff_out),
                ff_norm: l.ff_norm.clone(),
            })
            .collect();
        PackedBert {
            d: host.d,
            heads: host.heads,
            gelu_tanh: host.gelu_tanh,
            eps: host.eps,
            precision,
            path,
            word: host.word,
            position: host.position,
            token_type: host.token_type,
            embed_norm: host.embed_norm,
            layers,
        }
    }

    /// The precision of the linear layers.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// The kernels in use.
    pub fn path(&self) -> KernelPath {
        self.path
    }

    /// The same weights on another kernel path (tests compare paths).
    pub fn with_path(mut self, path: KernelPath) -> Self {
        self.path = path;
        self
    }

    /// Last hidden states of each text (`ids`: wordpiece ids, special tokens included), all
    /// texts' rows concatenated: `Σ len × d`.
    pub fn forward(&self, texts: &[&[u32]]) -> Vec<f32> {
        self.forward_traced(texts, |_, _| {})
    }

    /// Like [`PackedBert::forward`], calling `trace(i, hidden)` with the hidden states after
    /// the embeddings (`i` = 0) and after each layer `i` (1-based).
    pub fn forward_traced(&self, texts: &[&[u32]], trace: impl FnMut(usize, &[f32])) -> Vec<f32> {
        self.run(texts, self.layers.len(), trace)
    }

    /// The hidden states after the first `layers` layers (0: the embeddings), rows as
    /// [`PackedBert::forward`] gives them; the later layers are not run.
    pub fn forward_until(&self, texts: &[&[u32]], layers: usize) -> Vec<f32> {
        self.run(texts, layers.min(self.layers.len()), |_, _| {})
    }

    /// The embeddings and the first `layers` layers, tracing each. A forward of at most
    /// [`TEAM_ROWS`] wordpieces (batch 1 to about 32 questions, or a few long texts) runs as
    /// a [`team`]: its products, heads and row blocks are shared with the pool's free workers
    /// without a rayon job each.
    fn run(&self, texts: &[&[u32]], layers: usize, trace: impl FnMut(usize, &[f32])) -> Vec<f32> {
        let m: usize = texts.iter().map(|t| t.len()).sum();
        if m <= TEAM_ROWS {
            team::lead(|| self.run_layers(texts, layers, trace))
        } else {
            self.run_layers(texts, layers, trace)
        }
    }

    /// [`PackedBert::run`]'s work.
    fn run_layers(
        &self,
        texts: &[&[u32]],
        layers: usize,
        mut trace: impl FnMut(usize, &[f32]),
    ) -> Vec<f32> {
        let d = self.d;
        let lens: Vec<usize> = texts.iter().map(|t| t.len()).collect();
        let m: usize = lens.iter().sum();
        let mut cx = Scratch {
            path: self.path,
            quant: QuantRows::default(),
        };
        let mut x = self.embed(texts);
        trace(0, &x);
        let ff = self.layers.first().map_or(0, |l| l.ff_in.n());
        let mut qkv = vec![0f32; m * 3 * d];
        let mut ctx = vec![0f32; m * d];
        let mut a = vec![0f32; m * d];
        let mut h = vec![0f32; m * ff];
        for (i, layer) in self.layers.iter().take(layers).enumerate() {
            layer.qkv.apply(&mut cx, &x, m, &mut qkv, Epilogue::Bias);
            self.attention(&qkv, &lens, &mut ctx);
            layer
                .attn_out
                .apply(&mut cx, &ctx, m, &mut a, Epilogue::Bias);
            self.norm_rows(&mut a, Some(&x), &layer.attn_norm);
            let gelu = Epilogue::Gelu {
                tanh: self.gelu_tanh,
            };
            layer.ff_in.apply(&mut cx, &a, m, &mut h, gelu);
            layer.ff_out.apply(&mut cx, &h, m, &mut x, Epilogue::Bias);
            self.norm_rows(&mut x, Some(&a), &layer.ff_norm);
            trace(i + 1, &x);
        }
        x
    }

    /// Word + position + token-type embeddings, then LayerNorm.
    fn embed(&self, texts: &[&[u32]]) -> Vec<f32> {
        let d = self.d;
        let m: usize = texts.iter().map(|t| t.len()).sum();
        let mut x = Vec::with_capacity(m * d);
        let vocab = self.word.len() / d;
        for t in texts {
            for (pos, &id) in t.iter().enumerate() {
                // The tokenizer only emits ids of its vocabulary; the model checks it matches.
                let id = (id as usize).min(vocab - 1);
                let w = &self.word[id * d..(id + 1) * d];
                let p = &self.position[pos * d..(pos + 1) * d];
                x.extend(
                    w.iter()
                        .zip(p)
                        .zip(&self.token_type)
                        .map(|((w, p), t)| w + p + t),
                );
            }
        }
        self.norm_rows(&mut x, None, &self.embed_norm);
        x
    }

    /// Residual + LayerNorm over every row, in parallel chunks.
    fn norm_rows(&self, x: &mut [f32], residual: Option<&[f32]>, norm: &HostNorm) {
        let (d, path, eps) = (self.d, self.path, self.eps);
        let chunk = ROWS_PER_TASK * d;
        let lens: Vec<usize> = (0..x.len())
            .step_by(chunk)
            .map(|at| chunk.min(x.len() - at))
            .collect();
        team::for_each_part_mut(x, &lens, |t, rows| {
            let res = residual.map(|r| &r[t * chunk..t * chunk + rows.len()]);
            ops::layer_norm(path, rows, res, &norm.gamma, &norm.beta, eps);
        });
    }

    /// Multi-head self-attention of every text: one task per text (its heads in sequence,
    /// so a task owns its rows), or, for a single text in a team's forward, one task per head
    /// (each into a buffer of its own, then copied into place).
    fn attention(&self, qkv: &[f32], lens: &[usize], ctx: &mut [f32]) {
        let (d, heads, path) = (self.d, self.heads, self.path);
        let dh = d / heads;
        if let [len] = *lens {
            if team::leading() {
                let mut own = vec![0f32; heads * len * dh];
                team::for_each_part_mut(&mut own, &vec![len * dh; heads], |h, out| {
                    ops::attend(path, qkv, len, d, h, dh, out, dh, &mut Vec::new());
                });
                for (i, row) in ctx.chunks_exact_mut(d).take(len).enumerate() {
                    for (h, cols) in row.chunks_exact_mut(dh).enumerate() {
                        cols.copy_from_slice(&own[(h * len + i) * dh..][..dh]);
                    }
                }
                return;
            }
        }
        let mut starts = Vec::with_capacity(lens.len());
        let mut s = 0;
        for &l in lens {
            starts.push(s);
            s += l;
        }
        let parts: Vec<usize> = lens.iter().map(|l| l * d).collect();
        team::for_each_part_mut(ctx, &parts, |t, out| {
            let (start, len) = (starts[t], lens[t]);
            let rows = &qkv[start * 3 * d..(start + len) * 3 * d];
            let mut scratch = Vec::new();
            for h in 0..heads {
                ops::attend(
                    path,
                    rows,
                    len,
                    d,
                    h,
                    dh,
                    &mut out[h * dh..],
                    d,
                    &mut scratch,
                );
            }
        });
    }
}
