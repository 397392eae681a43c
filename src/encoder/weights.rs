//! Loading Hugging Face BERT weights from `model.safetensors` into [`Bert`] with burn's store
//! API (turning everything that does not fit into one readable error), and saving them back in
//! the same Hugging Face layout, so a trained model is a model directory like any other.

use std::path::Path;

use burn::store::{
    FloatCastAdapter, ModuleAdapter, ModuleSnapshot, PyTorchToBurnAdapter, SafetensorsStore,
};
use burn::tensor::DType;

use super::bert::Bert;
use crate::error::{Result, UserError};

/// Tensors a BERT checkpoint may carry that the encoder does not use.
const IGNORED: [&str; 4] = [
    "embeddings.position_ids",
    "pooler.",
    "cls.",
    "embeddings.token_type_ids",
];

/// Burn's module names → Hugging Face's, for error messages.
fn hf_name(burn_name: &str) -> String {
    burn_name
        .replace("attention.self_attn.", "attention.self.")
        .replace("layer_norm", "LayerNorm")
        .replace(".gamma", ".weight")
        .replace(".beta", ".bias")
}

/// Loads `path` into `bert`. Fails with a [`UserError::WeightsMismatch`] listing every missing,
/// unexpected or mis-shaped tensor.
pub fn load(bert: &mut Bert, path: &Path) -> Result<()> {
    let mut store = SafetensorsStore::from_file(path)
        // Linear weights [out, in] → [in, out]; LayerNorm weight/bias → gamma/beta; f16/bf16 → f32.
        .with_from_adapter(PyTorchToBurnAdapter.chain(FloatCastAdapter::to(DType::F32)))
        // `bert.` prefix of BertForXxx checkpoints; Rust keyword `self`; snake_case LayerNorm.
        .with_key_remapping(r"^bert\.", "")
        .with_key_remapping(r"attention\.self\.", "attention.self_attn.")
        .with_key_remapping(r"LayerNorm", "layer_norm")
        .validate(false)
        .allow_partial(true);
    let result = bert
        .load_from(&mut store)
        .map_err(|e| UserError::WeightsMismatch {
            path: path.to_path_buf(),
            problems: vec![format!("cannot read the safetensors file: {e}")],
        })?;

    let mut problems: Vec<String> = Vec::new();
    problems.extend(
        result
            .missing
            .iter()
            .map(|(name, _)| format!("missing tensor {}", hf_name(name))),
    );
    problems.extend(result.errors.iter().map(|e| hf_name(&e.to_string())));
    problems.extend(
        result
            .unused
            .iter()
            .filter(|name| !IGNORED.iter().any(|p| name.starts_with(p)))
            .map(|name| format!("unexpected tensor {}", hf_name(name))),
    );
    if problems.is_empty() {
        Ok(())
    } else {
        Err(UserError::WeightsMismatch {
            path: path.to_path_buf(),
            problems,
        }
        .into())
    }
}

/// Saves `bert` to `path` as a Hugging Face `model.safetensors` (PyTorch linear layout,
/// `LayerNorm.weight/bias`, `attention.self.` names), which [`load`] and sentence-transformers
/// read back. Overwrites `path`.
#[cfg(feature = "train")]
pub fn save(bert: &Bert, path: &Path) -> Result<()> {
    let mut store = SafetensorsStore::from_file(path)
        .with_to_adapter(burn::store::BurnToPyTorchAdapter)
        .with_key_remapping(r"attention\.self_attn\.", "attention.self.")
        .with_key_remapping(r"layer_norm", "LayerNorm")
        .overwrite(true);
    bert.save_into(&mut store).map_err(|e| {
        crate::error::InternalError::Backend(format!("saving {}: {e}", path.display())).into()
    })
}
