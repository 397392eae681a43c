//! Weight-space ensembling (WiSE-FT; Wortsman et al., "Robust fine-tuning of zero-shot models",
//! 2022): a model whose every encoder weight is θ = (1 − α)·θ_base + α·θ_tuned. Fine-tuning on
//! one task (CLRCMD on QQP duplicates) moves the encoder away from what made it general (graded
//! similarity on STS-B and SICK); blending walks back along that path, keeping much of the
//! gain for a fraction of the loss. With several tuned models of one base, θ_tuned is their
//! mean (a uniform model soup; Wortsman et al., "Model soups", 2022): runs that differ only in
//! their batch order average into one model steadier — and on the forum better — than its
//! members. Pure arithmetic on tensors of one architecture; the heads are not blended (they
//! were trained on the tuned encoder's outputs — train them again on the blend).

use std::path::Path;

use safetensors::tensor::{Dtype, SafeTensors};

use crate::encoder::{weights, Bert};
use crate::error::{io_err, InternalError, Result, UserError};
use crate::model::heads::{le_f32s, serialize_f32, Heads};
use crate::model::ModelDir;

/// `(1 − alpha)·base + alpha·tuned`, element-wise.
pub fn blend(base: &[f32], tuned: &[f32], alpha: f32) -> Vec<f32> {
    base.iter()
        .zip(tuned)
        .map(|(b, t)| b + alpha * (t - b))
        .collect()
}

/// The element-wise mean of equally long rows (pure; summed in f64, in order).
pub fn mean(rows: &[&[f32]]) -> Vec<f32> {
    let n = rows.len().max(1) as f64;
    let len = rows.first().map_or(0, |r| r.len());
    (0..len)
        .map(|i| (rows.iter().map(|r| f64::from(r[i])).sum::<f64>() / n) as f32)
        .collect()
}

/// Refuses a blend weight outside [0, 1].
pub fn check_alpha(alpha: f32) -> Result<()> {
    if (0.0..=1.0).contains(&alpha) {
        return Ok(());
    }
    Err(UserError::InvalidArgument {
        name: "--alpha",
        reason: format!("{alpha}; use a weight between 0 (the base) and 1 (the tuned model)"),
    }
    .into())
}

/// The blended encoder of a base and one or more tuned model directories of its
/// architecture: (1 − α)·base + α·mean(tuned). All are read through the encoder's own weight
/// loader, so any layout it reads works for any of them.
pub fn blend_models(
    base: &ModelDir,
    tuned: &[ModelDir],
    alpha: f32,
    scratch: &Path,
) -> Result<Bert> {
    check_alpha(alpha)?;
    if tuned.is_empty() {
        return Err(UserError::InvalidArgument {
            name: "--tuned",
            reason: "no tuned model; name at least one".into(),
        }
        .into());
    }
    if let Some(other) = tuned.iter().find(|t| t.config != base.config) {
        return Err(UserError::InvalidArgument {
            name: "--tuned",
            reason: format!(
                "{} has another architecture than {} (config.json differs); blend a model \
                 with the base it was trained from",
                other.path.display(),
                base.path.display()
            ),
        }
        .into());
    }
    // Every side in the layout `weights::save` writes, so their tensors pair up by name.
    let device = crate::DeviceKind::Cpu.device()?;
    let canonical = |dir: &ModelDir, name: &str| -> Result<Vec<u8>> {
        let mut bert = Bert::new(&dir.config, &device);
        weights::load(&mut bert, &dir.weights_path())?;
        let path = scratch.join(name);
        weights::save(&bert, &path)?;
        let bytes = std::fs::read(&path).map_err(io_err(format!("reading {}", path.display())))?;
        std::fs::remove_file(&path).map_err(io_err(format!("removing {}", path.display())))?;
        Ok(bytes)
    };
    let base_bytes = canonical(base, "base.tmp")?;
    let tuned_bytes = tuned
        .iter()
        .enumerate()
        .map(|(i, t)| canonical(t, &format!("tuned-{i}.tmp")))
        .collect::<Result<Vec<_>>>()?;
    let parse = |bytes| -> Result<SafeTensors<'_>> {
        SafeTensors::deserialize(bytes)
            .map_err(|e| InternalError::Backend(format!("reading saved weights: {e}")).into())
    };
    let b = parse(&base_bytes)?;
    let ts = tuned_bytes
        .iter()
        .map(|bytes| parse(bytes))
        .collect::<Result<Vec<_>>>()?;
    let mut blended: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for (name, view) in b.tensors() {
        let mut rows = Vec::with_capacity(ts.len());
        for t in &ts {
            let other = t.tensor(&name).map_err(|e| {
                InternalError::Backend(format!("tensor {name} in a tuned model: {e}"))
            })?;
            if view.dtype() != Dtype::F32
                || other.dtype() != Dtype::F32
                || view.shape() != other.shape()
            {
                return Err(InternalError::Backend(format!(
                    "tensor {name} differs in type or shape"
                ))
                .into());
            }
            rows.push(le_f32s(other.data()));
        }
        let rows: Vec<&[f32]> = rows.iter().map(Vec::as_slice).collect();
        let mixed = blend(&le_f32s(view.data()), &mean(&rows), alpha);
        let bytes = mixed.iter().flat_map(|x| x.to_le_bytes()).collect();
        blended.push((name, view.shape().to_vec(), bytes));
    }
    let path = scratch.join("blend.tmp");
    std::fs::write(&path, serialize_f32(&blended, None)?)
        .map_err(io_err(format!("writing {}", path.display())))?;
    let mut bert = Bert::new(&base.config, &device);
    let loaded = weights::load(&mut bert, &path);
    std::fs::remove_file(&path).map_err(io_err(format!("removing {}", path.display())))?;
    loaded?;
    Ok(bert)
}

/// Writes to `out` the model directory of [`blend_models`]: the base's files, the blended
/// encoder, no heads (they do not fit it), and `kindred-model.json` naming every tuned model.
pub fn write_blend(base: &ModelDir, tuned: &[ModelDir], alpha: f32, out: &Path) -> Result<()> {
    std::fs::create_dir_all(out).map_err(io_err(format!("creating {}", out.display())))?;
    let bert = blend_models(base, tuned, alpha, out)?;
    let by = super::TrainedBy::Blend {
        alpha,
        tuned: tuned
            .iter()
            .map(ModelDir::identity)
            .collect::<Result<Vec<_>>>()?,
    };
    super::write_model_dir(base, out, Some(&bert), Some(&Heads::default()), &by)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blend_walks_the_straight_line() {
        let (b, t) = ([1.0, -2.0, 0.0], [3.0, 2.0, 1.0]);
        assert_eq!(blend(&b, &t, 0.0), b.to_vec());
        assert_eq!(blend(&b, &t, 1.0), t.to_vec());
        assert_eq!(blend(&b, &t, 0.5), vec![2.0, 0.0, 0.5]);
    }

    #[test]
    fn a_soup_is_the_mean_of_its_models() {
        let (a, b, c) = ([1.0f32, -2.0], [3.0f32, 2.0], [2.0f32, 3.0]);
        assert_eq!(mean(&[&a, &b, &c]), vec![2.0, 1.0]);
        assert_eq!(mean(&[&a]), a.to_vec());
        assert!(mean(&[]).is_empty());
    }
}
