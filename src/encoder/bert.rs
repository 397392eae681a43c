//! BERT (post-LN) as burn modules, field names mirroring Hugging Face's `BertModel` so the
//! safetensors keys map one-to-one (see `weights.rs` for the two renames burn needs).
//!
//! Linear layers see 2-D `[batch·len, d]` inputs: measured on 2 cores this is about twice as
//! fast as 3-D inputs on burn's CPU backends (shared/stack-notes.md).

use burn::module::Module;
use burn::nn::{Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::activation::{gelu, gelu_approximate};
use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Bool, Device, Int, Tensor};

use super::host_f32;

use super::fast::{HostBert, HostLayer, HostLinear, HostNorm};
use crate::error::Result;
use crate::model::{Activation, BertConfig};

/// Embeddings: word + position + token type, then LayerNorm.
#[derive(Module, Debug)]
pub struct BertEmbeddings {
    word_embeddings: Embedding,
    position_embeddings: Embedding,
    token_type_embeddings: Embedding,
    layer_norm: LayerNorm,
}

/// Q, K, V projections (`attention.self` in Hugging Face; `self` is a Rust keyword).
#[derive(Module, Debug)]
pub struct BertSelfAttention {
    query: Linear,
    key: Linear,
    value: Linear,
}

/// Attention output projection + residual LayerNorm.
#[derive(Module, Debug)]
pub struct BertSelfOutput {
    dense: Linear,
    layer_norm: LayerNorm,
}

/// Multi-head self-attention block.
#[derive(Module, Debug)]
pub struct BertAttention {
    self_attn: BertSelfAttention,
    output: BertSelfOutput,
}

/// Feed-forward expansion.
#[derive(Module, Debug)]
pub struct BertIntermediate {
    dense: Linear,
}

/// Feed-forward contraction + residual LayerNorm.
#[derive(Module, Debug)]
pub struct BertOutput {
    dense: Linear,
    layer_norm: LayerNorm,
}

/// One post-LN encoder layer.
#[derive(Module, Debug)]
pub struct BertLayer {
    attention: BertAttention,
    intermediate: BertIntermediate,
    output: BertOutput,
}

/// The layer stack (`encoder.layer.N` in Hugging Face).
#[derive(Module, Debug)]
pub struct BertEncoder {
    layer: Vec<BertLayer>,
}

/// BERT without the pooler: token ids in, last hidden states out.
#[derive(Module, Debug)]
pub struct Bert {
    embeddings: BertEmbeddings,
    encoder: BertEncoder,
    num_heads: usize,
    gelu_tanh: bool,
}

fn linear(d_in: usize, d_out: usize, device: &Device) -> Linear {
    LinearConfig::new(d_in, d_out).init(device)
}

fn layer_norm(config: &BertConfig, device: &Device) -> LayerNorm {
    LayerNormConfig::new(config.hidden_size)
        .with_epsilon(config.layer_norm_eps)
        .init(device)
}

impl Bert {
    /// Builds a randomly initialised network of `config`'s shape (weights are loaded after).
    pub fn new(config: &BertConfig, device: &Device) -> Self {
        let d = config.hidden_size;
        let layer = (0..config.num_hidden_layers)
            .map(|_| BertLayer {
                attention: BertAttention {
                    self_attn: BertSelfAttention {
                        query: linear(d, d, device),
                        key: linear(d, d, device),
                        value: linear(d, d, device),
                    },
                    output: BertSelfOutput {
                        dense: linear(d, d, device),
                        layer_norm: layer_norm(config, device),
                    },
                },
                intermediate: BertIntermediate {
                    dense: linear(d, config.intermediate_size, device),
                },
                output: BertOutput {
                    dense: linear(config.intermediate_size, d, device),
                    layer_norm: layer_norm(config, device),
                },
            })
            .collect();
        Bert {
            embeddings: BertEmbeddings {
                word_embeddings: EmbeddingConfig::new(config.vocab_size, d).init(device),
                position_embeddings: EmbeddingConfig::new(config.max_position_embeddings, d)
                    .init(device),
                token_type_embeddings: EmbeddingConfig::new(config.type_vocab_size, d).init(device),
                layer_norm: layer_norm(config, device),
            },
            encoder: BertEncoder { layer },
            num_heads: config.num_attention_heads,
            gelu_tanh: config.activation() == Activation::GeluTanh,
        }
    }

    /// Runs the encoder. `ids` is `[batch, len]`; `pad` is `[batch, len]`, true at padding, or
    /// `None` when no text in the batch is padded (a batch of one, or of equal lengths).
    /// Returns the last hidden states `[batch, len, d]`. All texts use token type 0.
    pub fn forward(&self, ids: Tensor<2, Int>, pad: Option<Tensor<2, Bool>>) -> Tensor<3> {
        self.forward_traced(ids, pad, |_, _| {})
    }

    /// Like [`Bert::forward`], calling `trace(i, hidden)` with the `[batch·len, d]` hidden
    /// states after the embeddings (`i` = 0) and after each layer `i` (1-based): what the
    /// packed path is checked against, layer by layer.
    pub fn forward_traced(
        &self,
        ids: Tensor<2, Int>,
        pad: Option<Tensor<2, Bool>>,
        trace: impl FnMut(usize, &Tensor<2>),
    ) -> Tensor<3> {
        let [batch, len] = ids.dims();
        let x = self.run(ids, pad, self.encoder.layer.len(), trace);
        let [_, d] = x.dims();
        x.reshape([batch, len, d])
    }

    /// The `[batch·len, d]` hidden states after the first `layers` layers (0: the
    /// embeddings); the later layers are not run.
    pub fn forward_until(
        &self,
        ids: Tensor<2, Int>,
        pad: Option<Tensor<2, Bool>>,
        layers: usize,
    ) -> Tensor<2> {
        self.run(ids, pad, layers, |_, _| {})
    }

    /// The embeddings and the first `layers` layers, tracing each; `[batch·len, d]`.
    fn run(
        &self,
        ids: Tensor<2, Int>,
        pad: Option<Tensor<2, Bool>>,
        layers: usize,
        mut trace: impl FnMut(usize, &Tensor<2>),
    ) -> Tensor<2> {
        let [batch, len] = ids.dims();
        let emb = &self.embeddings;
        let words = emb.word_embeddings.forward(ids);
        let [_, d] = emb.position_embeddings.weight.dims();
        let positions = emb.position_embeddings.weight.val().slice(0..len);
        let token_type = emb.token_type_embeddings.weight.val().slice(0..1);
        let x = words + (positions + token_type).unsqueeze::<3>();
        let x = emb.layer_norm.forward(x).reshape([batch * len, d]);
        trace(0, &x);

        // Key-padding mask broadcast over heads and query positions; true = masked.
        let mask = pad.map(|pad| {
            pad.reshape([batch, 1, 1, len])
                .expand([batch, self.num_heads, len, len])
        });
        let mut x = x;
        for (i, layer) in self.encoder.layer.iter().take(layers).enumerate() {
            x = layer.forward(x, batch, len, self.num_heads, self.gelu_tanh, mask.as_ref());
            trace(i + 1, &x);
        }
        x
    }

    /// Number of transformer layers.
    pub fn layers(&self) -> usize {
        self.encoder.layer.len()
    }

    /// A copy of the weights on the host (for the packed CPU path); `eps` is the model's
    /// LayerNorm ε.
    pub fn to_host(&self, eps: f64) -> Result<HostBert> {
        let emb = &self.embeddings;
        let [_, d] = emb.word_embeddings.weight.dims();
        let token_type = emb.token_type_embeddings.weight.val().slice(0..1);
        let layers = self
            .encoder
            .layer
            .iter()
            .map(|l| {
                let sa = &l.attention.self_attn;
                Ok(HostLayer {
                    query: host_linear(&sa.query)?,
                    key: host_linear(&sa.key)?,
                    value: host_linear(&sa.value)?,
                    attn_out: host_linear(&l.attention.output.dense)?,
                    attn_norm: host_norm(&l.attention.output.layer_norm, d)?,
                    ff_in: host_linear(&l.intermediate.dense)?,
                    ff_out: host_linear(&l.output.dense)?,
                    ff_norm: host_norm(&l.output.layer_norm, d)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(HostBert {
            d,
            heads: self.num_heads,
            gelu_tanh: self.gelu_tanh,
            eps: eps as f32,
            word: host_f32(emb.word_embeddings.weight.val(), "word embeddings")?,
            position: host_f32(emb.position_embeddings.weight.val(), "position embeddings")?,
            token_type: host_f32(token_type, "token type embeddings")?,
            embed_norm: host_norm(&emb.layer_norm, d)?,
            layers,
        })
    }
}

fn host_linear(l: &Linear) -> Result<HostLinear> {
    let [k, n] = l.weight.dims();
    let b = match &l.bias {
        Some(b) => host_f32(b.val(), "linear bias")?,
        None => vec![0.0; n],
    };
    Ok(HostLinear {
        k,
        n,
        w: host_f32(l.weight.val(), "linear weight")?,
        b,
    })
}

fn host_norm(n: &LayerNorm, d: usize) -> Result<HostNorm> {
    let beta = match &n.beta {
        Some(b) => host_f32(b.val(), "LayerNorm beta")?,
        None => vec![0.0; d],
    };
    Ok(HostNorm {
        gamma: host_f32(n.gamma.val(), "LayerNorm gamma")?,
        beta,
    })
}

impl BertLayer {
    fn forward(
        &self,
        x: Tensor<2>,
        batch: usize,
        len: usize,
        heads: usize,
        gelu_tanh: bool,
        mask: Option<&Tensor<4, Bool>>,
    ) -> Tensor<2> {
        let [_, d] = x.dims();
        let split = |t: Tensor<2>| t.reshape([batch, len, heads, d / heads]).swap_dims(1, 2);
        let sa = &self.attention.self_attn;
        let q = split(sa.query.forward(x.clone()));
        let k = split(sa.key.forward(x.clone()));
        let v = split(sa.value.forward(x.clone()));
        let context = attention(
            q,
            k,
            v,
            mask.cloned(),
            None,
            AttentionModuleOptions::default(),
        )
        .swap_dims(1, 2)
        .reshape([batch * len, d]);
        let out = &self.attention.output;
        let a = out.layer_norm.forward(out.dense.forward(context) + x);

        let h = self.intermediate.dense.forward(a.clone());
        let h = if gelu_tanh {
            gelu_approximate(h)
        } else {
            gelu(h)
        };
        self.output
            .layer_norm
            .forward(self.output.dense.forward(h) + a)
    }
}
