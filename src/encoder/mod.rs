//! The encoder: text in, [`Encoded`] out (wordpieces with offsets, content token vectors, the
//! sentence vector, the default intent).
//!
//! Owns the burn network (`bert.rs`), weight loading (`weights.rs`), the packed CPU forward
//! derived from the burn module's weights in fp32 or int8 (`fast/`), the pure pooling
//! (`pooling.rs`), the device choice (`backend.rs`, the only file naming a backend), the set
//! of loaded encoders by model and precision (`registry.rs`) and the phrase chunks read from
//! early hidden states (`chunks.rs`). Knows nothing of stores, indexes
//! or servers.
//!
//! On the CPU a batch runs through the packed path unpadded (texts concatenated, attention per
//! text); on a GPU through the burn forward, with texts sorted by length so little time goes to
//! padding, which is masked out of attention and pooling. Either way a text's vectors do not
//! depend on which texts share its batch.

mod backend;
mod bert;
mod chunks;
pub(crate) mod fast;
pub mod pooling;
mod registry;
pub(crate) mod weights;

use burn::tensor::{Bool, Device, Int, Tensor, TensorData};
use tracing::instrument;

pub use backend::DeviceKind;
pub use bert::Bert;
pub use chunks::Phrasing;
pub use fast::KernelPath;
pub use registry::Encoders;

use crate::error::{InternalError, Result, UserError};
use crate::model::decoder::WordDecoder;
use crate::model::heads::Heads;
use crate::model::operators::Operators;
use crate::model::{ModelDir, ModelIdentity};
use crate::text::{TextTokenizer, Tokenized};
use crate::types::{Encoded, Precision};
use fast::PackedBert;

thread_local! {
    /// The one-thread rayon pool [`Encoder::encode_one`] runs in, per calling thread (dropped,
    /// with its thread, when the calling thread ends). None if the thread could not start.
    static SOLO_POOL: Option<rayon::ThreadPool> = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .thread_name(|_| "kindred-query".into())
        .build()
        .ok();
}

/// Encoder settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EncoderOptions {
    /// Where to run.
    pub device: DeviceKind,
    /// Texts per forward pass.
    pub batch_size: usize,
    /// Floor on the intent σ.
    pub sigma_floor: f32,
    /// Arithmetic of the linear layers (the CPU's packed path; a GPU runs fp32). Default int8.
    pub precision: Precision,
    /// The packed CPU path's instruction set, when not the fastest this CPU runs (a slower
    /// one it can run: for comparisons, and for CPUs whose vector or tile units misbehave).
    pub kernels: Option<KernelPath>,
    /// The multiple padded (GPU) batches round their length up to: burn-cuda compiles and
    /// autotunes kernels per tensor shape, so a batch of every new length would pay for new
    /// kernels. 16 by default; 1 pads to the longest text only.
    pub pad_multiple: usize,
}

impl EncoderOptions {
    /// These options with the overrides the variables `var` answers for:
    /// `KINDRED_KERNELS` (a path this CPU runs: `portable`, `avx512-vnni`, `amx`) and
    /// `KINDRED_PAD_MULTIPLE` (a whole number of 1 or more). A value that cannot apply is
    /// logged and left out (the encoder runs either way).
    pub fn with_vars(mut self, var: impl Fn(&str) -> Option<String>) -> Self {
        if let Some(forced) = var("KINDRED_KERNELS") {
            self.kernels = KernelPath::named(&forced);
        }
        if let Some(asked) = var("KINDRED_PAD_MULTIPLE") {
            match asked.trim().parse() {
                Ok(m) if m >= 1 => self.pad_multiple = m,
                _ => tracing::warn!(
                    "KINDRED_PAD_MULTIPLE={asked:?} is not a whole number of 1 or more; using {}",
                    self.pad_multiple
                ),
            }
        }
        self
    }
}

impl Default for EncoderOptions {
    fn default() -> Self {
        EncoderOptions {
            device: DeviceKind::Cpu,
            batch_size: 32,
            sigma_floor: pooling::SIGMA_FLOOR,
            precision: Precision::default(),
            kernels: None,
            pad_multiple: 16,
        }
    }
}

/// A loaded model ready to encode text.
pub struct Encoder {
    bert: Bert,
    /// The packed CPU path (None on a GPU, where the burn forward runs).
    packed: Option<PackedBert>,
    tokenizer: TextTokenizer,
    device: Device,
    /// The model directory it was loaded from.
    path: std::path::PathBuf,
    identity: ModelIdentity,
    /// `sha256:` of the network's weights alone (no heads, no precision): what its hidden
    /// states depend on.
    weights_fingerprint: String,
    options: EncoderOptions,
    heads: Heads,
    /// Compositional operators over this model's vectors, when it carries ones trained for them.
    operators: Option<Operators>,
    /// The bag-of-words decoder of this model's vectors, when it carries one trained for them.
    decoder: Option<WordDecoder>,
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder")
            .field("identity", &self.identity)
            .field("options", &self.options)
            .finish()
    }
}

impl Encoder {
    /// Loads the tokenizer and weights of `model`.
    #[instrument(skip_all, fields(model = %model.path.display()))]
    pub fn load(model: &ModelDir, options: EncoderOptions) -> Result<Self> {
        if options.batch_size == 0 {
            return Err(UserError::InvalidArgument {
                name: "batch size",
                reason: "0; use at least 1".into(),
            }
            .into());
        }
        let device = options.device.device()?;
        let tokenizer = TextTokenizer::from_file(&model.tokenizer_path(), model.max_len)?;
        let mut bert = Bert::new(&model.config, &device);
        weights::load(&mut bert, &model.weights_path())?;
        let heads = Heads::load(&model.path, model.config.hidden_size)?;
        let (identity, weights_fingerprint) = model.identity_and_weights()?;
        let operators =
            Operators::load_for(&model.path, model.config.hidden_size, &identity.fingerprint)?;
        let decoder =
            WordDecoder::load_for(&model.path, model.config.hidden_size, &identity.fingerprint)?;
        let identity = identity.with_precision(options.precision);
        let packed = pack(&bert, model, options)?;
        tracing::info!(id = %identity.id, fingerprint = %identity.fingerprint,
            heads = ?heads.names(), precision = %options.precision,
            kernels = packed.as_ref().map_or("burn", |p| p.path().name()), "model loaded");
        Ok(Encoder {
            packed,
            bert,
            tokenizer,
            device,
            path: model.path.clone(),
            identity,
            weights_fingerprint,
            options,
            heads,
            operators,
            decoder,
        })
    }

    /// An encoder over a network already in memory (e.g. one being trained, in validation
    /// mode) and `heads`, with `model`'s tokenizer; `identity` names it.
    #[cfg(feature = "train")]
    pub(crate) fn from_parts(
        bert: Bert,
        heads: Heads,
        model: &ModelDir,
        identity: ModelIdentity,
        options: EncoderOptions,
    ) -> Result<Self> {
        Ok(Encoder {
            packed: pack(&bert, model, options)?,
            bert,
            tokenizer: TextTokenizer::from_file(&model.tokenizer_path(), model.max_len)?,
            device: options.device.device()?,
            path: model.path.clone(),
            // Weights in training are no file's: no shipped state-reading model fits them.
            weights_fingerprint: format!("{}+in-training", identity.fingerprint),
            identity: identity.with_precision(options.precision),
            options,
            heads,
            operators: None,
            decoder: None,
        })
    }

    /// The network.
    pub fn bert(&self) -> &Bert {
        &self.bert
    }

    /// The model directory the encoder was loaded from.
    pub fn model_path(&self) -> &std::path::Path {
        &self.path
    }

    /// The packed CPU path, when the encoder runs on one.
    pub fn packed(&self) -> Option<&PackedBert> {
        self.packed.as_ref()
    }

    /// The hidden states of one text after the embeddings and after each layer (each
    /// `len × d`, special tokens included), from the burn forward when `burn`, else from the
    /// packed path (as the encoder runs, or on `path` when given). For checking one against
    /// the other.
    pub fn layer_outputs(
        &self,
        text: &str,
        burn: bool,
        path: Option<KernelPath>,
    ) -> Result<Vec<Vec<f32>>> {
        let t = self.tokenizer.tokenize(text, 0)?;
        let mut layers = Vec::new();
        if burn {
            let ids: Vec<i64> = t.ids.iter().map(|&id| i64::from(id)).collect();
            let ids =
                Tensor::<2, Int>::from_data(TensorData::new(ids, [1, t.ids.len()]), &self.device);
            let mut err = None;
            self.bert
                .forward_traced(ids, None, |_, h| match host_f32(h.clone(), "layer") {
                    Ok(v) => layers.push(v),
                    Err(e) => err = Some(e),
                });
            return err.map_or(Ok(layers), Err);
        }
        let packed = self.packed.as_ref().ok_or_else(|| {
            InternalError::Backend("this encoder runs on a GPU, without the packed path".into())
        })?;
        let run = |p: &PackedBert| {
            let mut layers = Vec::new();
            p.forward_traced(&[&t.ids], |_, h| layers.push(h.to_vec()));
            layers
        };
        Ok(match path {
            Some(path) if path != packed.path() => run(&packed.clone().with_path(path)),
            _ => run(packed),
        })
    }

    /// The learned heads the model carries (possibly none).
    pub fn heads(&self) -> &Heads {
        &self.heads
    }

    /// The compositional operators the model carries for its own vectors (None: none, or ones
    /// trained for other vectors).
    pub fn operators(&self) -> Option<&Operators> {
        self.operators.as_ref()
    }

    /// The bag-of-words decoder the model carries for its own vectors (None: none, or one
    /// trained for other vectors).
    pub fn decoder(&self) -> Option<&WordDecoder> {
        self.decoder.as_ref()
    }

    /// `sha256:` of the network's weights alone: what its hidden states depend on (the
    /// identity's fingerprint also covers heads and precision).
    pub fn weights_fingerprint(&self) -> &str {
        &self.weights_fingerprint
    }

    /// The model's identity (id, fingerprint, dim, max length).
    pub fn identity(&self) -> &ModelIdentity {
        &self.identity
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &TextTokenizer {
        &self.tokenizer
    }

    /// The settings the encoder was loaded with.
    pub fn options(&self) -> &EncoderOptions {
        &self.options
    }

    /// Encodes one text (a query) on one core: called outside any rayon pool, it runs in a
    /// one-thread pool kept per calling thread. At batch 1 the matrices are small enough that
    /// splitting them across cores costs more than it gains, and under load the split waits
    /// for a core another job holds (BENCHMARKS.md, "Search under load"). Inside a pool (a
    /// write pool, a parallel evaluation) the pool's own setting is kept.
    pub fn encode_one(&self, text: &str) -> Result<Encoded> {
        let run = || {
            let mut out = self.encode(&[text])?;
            Ok(out.pop().expect("one text in, one out"))
        };
        if rayon::current_thread_index().is_some() {
            return run();
        }
        SOLO_POOL.with(|pool| match pool {
            Some(pool) => pool.install(run),
            None => run(),
        })
    }

    /// Encodes texts; the output is in input order. All texts are tokenized (and checked)
    /// before any is encoded, so one bad text fails the call without wasted work.
    pub fn encode<S: AsRef<str>>(&self, texts: &[S]) -> Result<Vec<Encoded>> {
        self.encode_with_progress(texts, |_| {})
    }

    /// Like [`Encoder::encode`], calling `progress(n)` after each batch of `n` texts.
    #[instrument(skip_all, fields(n = texts.len()))]
    pub fn encode_with_progress<S: AsRef<str>>(
        &self,
        texts: &[S],
        progress: impl FnMut(usize),
    ) -> Result<Vec<Encoded>> {
        self.encode_texts(texts, true, progress)
    }

    /// Like [`Encoder::encode_with_progress`] but ignoring the learned heads: the mean-pooled
    /// sentence vector and the moment-matched intent, which is what heads are trained on.
    pub fn encode_without_heads<S: AsRef<str>>(
        &self,
        texts: &[S],
        progress: impl FnMut(usize),
    ) -> Result<Vec<Encoded>> {
        self.encode_texts(texts, false, progress)
    }

    fn encode_texts<S: AsRef<str>>(
        &self,
        texts: &[S],
        with_heads: bool,
        progress: impl FnMut(usize),
    ) -> Result<Vec<Encoded>> {
        let tokenized = self.tokenize_all(texts)?;
        let refs: Vec<&Tokenized> = tokenized.iter().collect();
        self.encode_tokenized_with_progress(&refs, with_heads, progress)
    }

    /// Tokenizes every text (checking each) before any is encoded.
    fn tokenize_all<S: AsRef<str>>(&self, texts: &[S]) -> Result<Vec<Tokenized>> {
        texts
            .iter()
            .enumerate()
            .map(|(i, t)| self.tokenizer.tokenize(t.as_ref(), i))
            .collect()
    }

    /// Encodes texts tokenized already (by [`Encoder::tokenizer`]), in input order; lets a
    /// pipeline tokenize on one thread while another encodes.
    pub fn encode_tokenized(&self, tokenized: &[&Tokenized]) -> Result<Vec<Encoded>> {
        self.encode_tokenized_with_progress(tokenized, true, |_| {})
    }

    fn encode_tokenized_with_progress(
        &self,
        tokenized: &[&Tokenized],
        with_heads: bool,
        mut progress: impl FnMut(usize),
    ) -> Result<Vec<Encoded>> {
        // Length buckets: sort by length so each batch pads little.
        let mut order: Vec<usize> = (0..tokenized.len()).collect();
        order.sort_by_key(|&i| tokenized[i].ids.len());
        let mut out: Vec<Option<Encoded>> = vec![None; tokenized.len()];
        for chunk in order.chunks(self.options.batch_size) {
            let batch: Vec<&Tokenized> = chunk.iter().map(|&i| tokenized[i]).collect();
            for (&i, enc) in chunk.iter().zip(self.forward_batch(&batch, with_heads)?) {
                out[i] = Some(enc);
            }
            progress(chunk.len());
        }
        Ok(out
            .into_iter()
            .map(|e| e.expect("every text is in exactly one batch"))
            .collect())
    }

    /// Runs one batch through the network and applies the heads per text.
    fn forward_batch(&self, batch: &[&Tokenized], with_heads: bool) -> Result<Vec<Encoded>> {
        let d = self.identity.dim;
        if let Some(packed) = &self.packed {
            let ids: Vec<&[u32]> = batch.iter().map(|t| t.ids.as_slice()).collect();
            let hidden = packed.forward(&ids);
            let mut start = 0;
            return Ok(batch
                .iter()
                .map(|t| {
                    let rows = &hidden[start * d..(start + t.ids.len()) * d];
                    start += t.ids.len();
                    self.derive(t, rows, d, with_heads)
                })
                .collect());
        }
        self.forward_padded(batch, with_heads)
    }

    /// Encodes `texts` in one batch through the burn network, padded as on a GPU (at
    /// `KINDRED_PAD_MULTIPLE`), on this encoder's device: lets tests on a CPU check the GPU
    /// path's padding against the packed path.
    #[cfg(any(test, feature = "test-support"))]
    pub fn encode_padded<S: AsRef<str>>(&self, texts: &[S]) -> Result<Vec<Encoded>> {
        let tokenized = self.tokenize_all(texts)?;
        let batch: Vec<&Tokenized> = tokenized.iter().collect();
        self.forward_padded(&batch, true)
    }

    /// Runs one padded batch through the burn network (the GPU path) and applies the heads.
    fn forward_padded(&self, batch: &[&Tokenized], with_heads: bool) -> Result<Vec<Encoded>> {
        let b = batch.len();
        let longest = batch.iter().map(|t| t.ids.len()).max().unwrap_or(0);
        let len = padded_len(longest, self.options.pad_multiple, self.identity.max_len);
        let pad_id = i64::from(self.tokenizer.pad_id());
        let mut ids = Vec::with_capacity(b * len);
        let mut pad = Vec::with_capacity(b * len);
        for t in batch {
            ids.extend(t.ids.iter().map(|&id| i64::from(id)));
            ids.extend(std::iter::repeat_n(pad_id, len - t.ids.len()));
            pad.extend(std::iter::repeat_n(false, t.ids.len()));
            pad.extend(std::iter::repeat_n(true, len - t.ids.len()));
        }
        let ids = Tensor::<2, Int>::from_data(TensorData::new(ids, [b, len]), &self.device);
        let pad = pad
            .contains(&true)
            .then(|| Tensor::<2, Bool>::from_data(TensorData::new(pad, [b, len]), &self.device));
        let hidden = host_f32(self.bert.forward(ids, pad), "hidden states")?;
        let d = self.identity.dim;
        if hidden.len() != b * len * d {
            return Err(InternalError::Backend(format!(
                "hidden states have {} values, expected {b}×{len}×{d}",
                hidden.len()
            ))
            .into());
        }
        Ok(batch
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let rows = &hidden[i * len * d..(i * len + t.ids.len()) * d];
                self.derive(t, rows, d, with_heads)
            })
            .collect())
    }

    /// The intent of content token vectors (`n × d`, unit rows) as this model makes intents:
    /// moment-matched, through its intent head when it carries one. E.g. of two texts' tokens
    /// together.
    pub fn intent_of_tokens(&self, token_vectors: &[f32]) -> crate::types::Gaussian {
        let d = self.identity.dim;
        let intent = pooling::moment_intent(token_vectors, d, self.options.sigma_floor);
        match &self.heads.intent {
            Some(head) => head.intent(&intent, self.options.sigma_floor),
            None => intent,
        }
    }

    /// Sentence vector, normalised content token vectors and intent from one text's
    /// non-pad hidden states, through the model's learned heads when it carries them.
    fn derive(&self, t: &Tokenized, rows: &[f32], d: usize, with_heads: bool) -> Encoded {
        let none = Heads::default();
        let learned = if with_heads { &self.heads } else { &none };
        let mut sentence = pooling::sentence_vector(rows, d);
        if let Some(transition) = &learned.transition {
            sentence = transition.apply(&sentence);
        }
        let mut token_vectors = Vec::with_capacity(t.tokens.len() * d);
        for (row, &special) in rows.chunks_exact(d).zip(&t.special) {
            if !special {
                let start = token_vectors.len();
                token_vectors.extend_from_slice(row);
                pooling::l2_normalize(&mut token_vectors[start..]);
            }
        }
        let mut intent = pooling::moment_intent(&token_vectors, d, self.options.sigma_floor);
        if let Some(head) = &learned.intent {
            intent = head.intent(&intent, self.options.sigma_floor);
        }
        Encoded {
            tokens: t.tokens.clone(),
            truncated: t.truncated,
            token_vectors,
            sentence,
            intent,
        }
    }
}

/// The sequence length a padded batch whose longest text has `longest` wordpieces runs at:
/// rounded up to a multiple of `multiple`, but not past `cap` (the model's length limit)
/// unless the text itself is longer.
fn padded_len(longest: usize, multiple: usize, cap: usize) -> usize {
    longest
        .next_multiple_of(multiple.max(1))
        .min(cap.max(longest))
}

/// The packed CPU path of `bert` for `options`, or None when the encoder runs on a GPU.
fn pack(bert: &Bert, model: &ModelDir, options: EncoderOptions) -> Result<Option<PackedBert>> {
    match options.device {
        DeviceKind::Cpu => {
            let host = bert.to_host(model.config.layer_norm_eps)?;
            Ok(Some(PackedBert::new(
                host,
                options.precision,
                options.kernels.unwrap_or_else(KernelPath::detect),
            )))
        }
        DeviceKind::Cuda(_) if options.precision == Precision::Int8 => {
            Err(UserError::InvalidArgument {
                name: "precision",
                reason: "int8 runs on the CPU only; use --precision fp32 with a GPU".into(),
            }
            .into())
        }
        DeviceKind::Cuda(_) => Ok(None),
    }
}

/// A tensor's values copied to the host as f32; `what` names them in the error.
pub(crate) fn host_f32<const D: usize>(t: Tensor<D>, what: &str) -> Result<Vec<f32>> {
    t.into_data()
        .try_into_vec::<f32>()
        .map_err(|e| InternalError::Backend(format!("reading {what}: {e:?}")).into())
}

#[cfg(test)]
mod tests {
    use super::padded_len;

    #[test]
    fn padded_batches_round_their_length_up_within_the_model_limit() {
        assert_eq!(padded_len(1, 16, 256), 16);
        assert_eq!(padded_len(16, 16, 256), 16);
        assert_eq!(padded_len(17, 16, 256), 32);
        assert_eq!(padded_len(250, 16, 256), 256);
        assert_eq!(padded_len(250, 16, 252), 252);
        assert_eq!(padded_len(300, 16, 256), 300);
        assert_eq!(padded_len(17, 1, 256), 17);
        assert_eq!(padded_len(17, 0, 256), 17);
        assert_eq!(padded_len(0, 16, 256), 0);
    }
}
