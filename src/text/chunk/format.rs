//! The chunker's model file: a text format (a header naming the kind, `weight feature`
//! lines, `@contextual`/`@mlp`/`@weights` lines for a contextual model) written by
//! [`Chunker::to_text`] and read back, checked, by [`Chunker::from_text`]; and the two models
//! compiled into the binary.

use std::collections::HashMap;
use std::fmt::Write as _;

use super::mlp::Mlp;
use super::{mlp_width, Chunker, Contextual, ContextualSpec, Term};
use crate::error::{InternalError, Result};

/// Feature template version, written in the model file: a model is read only by the code
/// whose features it was trained on.
const FORMAT: &str = "kindred-chunker 1";
/// The header of a model with a contextual term.
const FORMAT_CONTEXTUAL: &str = "kindred-chunker 2";
/// The header of a neural model (an MLP over the states, no word features).
const FORMAT_NEURAL: &str = "kindred-chunker 3";

/// The shipped model: `kindred train chunker --data ../shared/data/ists2016_train --out
/// src/text/chunker.model`.
pub(crate) const BUILTIN: &str = include_str!("../chunker.model");

/// The shipped contextual model: `kindred train chunker --contextual --data
/// ../shared/data/ists2016_train --out src/text/chunker-contextual.model`.
pub(crate) const BUILTIN_CONTEXTUAL: &str = include_str!("../chunker-contextual.model");

impl Chunker {
    /// The model as text: a header line, then one `weight feature` line per feature, sorted;
    /// a contextual model has a second header and its weights on two `@` lines before them.
    pub fn to_text(&self) -> String {
        if let Some(Contextual {
            term: Term::Mlp(net),
            ..
        }) = &self.contextual
        {
            return self.neural_text(net);
        }
        let mut lines: Vec<(&String, f32)> = self.weights.iter().map(|(f, &w)| (f, w)).collect();
        lines.sort_by(|a, b| a.0.cmp(b.0));
        let mut out = format!(
            "{FORMAT}\n# An averaged perceptron over unit features (src/text/chunk/): a unit \
             starts a chunk when its features' weights sum above 0. {} features.\n",
            lines.len()
        );
        if let Some(
            c @ Contextual {
                term: Term::Linear(weights),
                ..
            },
        ) = &self.contextual
        {
            out = format!(
                "{FORMAT_CONTEXTUAL}\n# An averaged perceptron over unit features and the \
                 hidden states of the model below (src/text/chunk/): a unit starts a chunk when \
                 its features' weights plus the states' term sum above 0. {} features.\n\
                 @contextual layer={} dim={} scale={} model={}\n@weights",
                lines.len(),
                c.layer,
                c.dim,
                c.scale,
                c.model
            );
            for w in weights {
                write!(out, " {w}").expect("writing to a String cannot fail");
            }
            out.push('\n');
        }
        for (f, w) in lines {
            writeln!(out, "{w} {f}").expect("writing to a String cannot fail");
        }
        out
    }

    /// A neural model's text: the header, a comment, its @contextual and @mlp lines and one
    /// @weights line ([`Mlp::values`], four significant digits).
    fn neural_text(&self, net: &Mlp) -> String {
        let c = self
            .contextual
            .as_ref()
            .expect("a neural model is contextual");
        let mut out = format!(
            "{FORMAT_NEURAL}\n# A neural chunker (src/text/chunk/): a unit \
             starts a chunk when the MLP's logit over the states of the units before, at and after \
             it (and the glued flags) is above 0.\n@contextual layer={} dim={} scale={} model={}\n\
             @mlp inputs={} hidden={}\n@weights",
            c.layer, c.dim, c.scale, c.model, net.inputs, net.hidden
        );
        for w in net.values() {
            write!(out, " {w:.3e}").expect("writing to a String cannot fail");
        }
        out.push('\n');
        out
    }

    /// Reads a model written by [`Chunker::to_text`].
    pub fn from_text(text: &str) -> Result<Chunker> {
        let corrupt = |line: usize, why: &str| {
            InternalError::Corrupt(format!("chunker model, line {line}: {why}")).into()
        };
        let mut lines = text.lines().enumerate();
        let (with_contextual, neural) = match lines.next() {
            Some((_, header)) if header.trim_end() == FORMAT => (false, false),
            Some((_, header)) if header.trim_end() == FORMAT_CONTEXTUAL => (true, false),
            Some((_, header)) if header.trim_end() == FORMAT_NEURAL => (true, true),
            Some((_, header)) => {
                return Err(corrupt(
                    1,
                    &format!(
                        "header {header:?} is not {FORMAT:?}, {FORMAT_CONTEXTUAL:?} or \
                         {FORMAT_NEURAL:?}: a model of another kindred version"
                    ),
                ))
            }
            None => return Err(corrupt(1, "empty file")),
        };
        let mut weights = HashMap::new();
        let mut spec: Option<ContextualSpec> = None;
        let mut dense: Option<Vec<f32>> = None;
        let mut shape: Option<(usize, usize)> = None;
        for (n, line) in lines {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some(rest) = line.strip_prefix("@contextual ") {
                spec = Some(parse_spec(rest).map_err(|why| corrupt(n + 1, &why))?);
                continue;
            }
            if let Some(rest) = line.strip_prefix("@mlp ") {
                shape = Some(parse_shape(rest).map_err(|why| corrupt(n + 1, &why))?);
                continue;
            }
            if let Some(rest) = line.strip_prefix("@weights") {
                let parsed: Option<Vec<f32>> = rest
                    .split_whitespace()
                    .map(|w| w.parse().ok().filter(|w: &f32| w.is_finite()))
                    .collect();
                dense = Some(parsed.ok_or_else(|| corrupt(n + 1, "a weight is not a number"))?);
                continue;
            }
            let (w, feature) = line
                .split_once(' ')
                .ok_or_else(|| corrupt(n + 1, "expected `weight feature`"))?;
            let w: f32 = w
                .parse()
                .ok()
                .filter(|w: &f32| w.is_finite())
                .ok_or_else(|| corrupt(n + 1, &format!("weight {w:?} is not a number")))?;
            if weights.insert(feature.to_string(), w).is_some() {
                return Err(corrupt(
                    n + 1,
                    &format!("feature {feature:?} appears twice"),
                ));
            }
        }
        if neural {
            return neural_model(spec, shape, dense, weights.len()).map_err(|why| corrupt(1, &why));
        }
        if shape.is_some() {
            return Err(corrupt(
                1,
                &format!("an @mlp line goes with {FORMAT_NEURAL:?} and only with it"),
            ));
        }
        let contextual = match (with_contextual, spec, dense) {
            (false, None, None) => None,
            (true, Some(spec), Some(w)) if w.len() == 2 * spec.dim => {
                Some(Contextual {
                    layer: spec.layer,
                    dim: spec.dim,
                    model: spec.model,
                    scale: spec.scale,
                    term: Term::Linear(w),
                })
            }
            (true, Some(spec), Some(w)) => {
                return Err(corrupt(
                    3,
                    &format!("{} contextual weights, expected 2 × {}", w.len(), spec.dim),
                ))
            }
            _ => {
                return Err(corrupt(
                    1,
                    &format!("the contextual lines (@contextual, @weights) go with {FORMAT_CONTEXTUAL:?} and only with it"),
                ))
            }
        };
        Ok(Chunker {
            weights,
            contextual,
        })
    }
}

/// The neural chunker a [`FORMAT_NEURAL`] file describes, from its `@contextual`, `@mlp` and
/// `@weights` lines and the count of its word-feature lines (there must be none).
fn neural_model(
    spec: Option<ContextualSpec>,
    shape: Option<(usize, usize)>,
    values: Option<Vec<f32>>,
    word_features: usize,
) -> std::result::Result<Chunker, String> {
    let (Some(spec), Some((inputs, hidden)), Some(values)) = (spec, shape, values) else {
        return Err(format!(
            "{FORMAT_NEURAL:?} needs an @contextual, an @mlp and a @weights line"
        ));
    };
    if word_features > 0 {
        return Err(format!(
            "{FORMAT_NEURAL:?} has no word features, found {word_features}"
        ));
    }
    if inputs != mlp_width(spec.dim) {
        return Err(format!(
            "@mlp inputs={inputs}, expected 3 × dim + 2 = {}",
            mlp_width(spec.dim)
        ));
    }
    let count = values.len();
    let net = Mlp::from_values(inputs, hidden, &values).ok_or_else(|| {
        format!(
            "{count} weights, expected {} for inputs={inputs} hidden={hidden}",
            Mlp::size(inputs, hidden)
        )
    })?;
    Ok(Chunker {
        weights: HashMap::new(),
        contextual: Some(Contextual {
            layer: spec.layer,
            dim: spec.dim,
            model: spec.model,
            scale: spec.scale,
            term: Term::Mlp(net),
        }),
    })
}

/// Reads `inputs=1154 hidden=96`.
fn parse_shape(text: &str) -> std::result::Result<(usize, usize), String> {
    let mut inputs = None;
    let mut hidden = None;
    for pair in text.split_whitespace() {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| format!("expected key=value, got {pair:?}"))?;
        let v: usize = v
            .parse()
            .map_err(|_| format!("{k} is not a whole number"))?;
        match k {
            "inputs" => inputs = Some(v),
            "hidden" => hidden = Some(v),
            _ => return Err(format!("unknown @mlp key {k:?}")),
        }
    }
    Ok((
        inputs.ok_or("no inputs= in @mlp")?,
        hidden.ok_or("no hidden= in @mlp")?,
    ))
}

/// Reads `layer=2 dim=384 scale=0.3 model=sha256:…`.
fn parse_spec(text: &str) -> std::result::Result<ContextualSpec, String> {
    let mut fields: HashMap<&str, &str> = HashMap::new();
    for pair in text.split_whitespace() {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| format!("expected key=value, got {pair:?}"))?;
        fields.insert(k, v);
    }
    let get = |k: &str| {
        fields
            .get(k)
            .copied()
            .ok_or_else(|| format!("no {k}= in @contextual"))
    };
    let number = |k: &str| -> std::result::Result<usize, String> {
        get(k)?
            .parse()
            .map_err(|_| format!("{k} is not a whole number"))
    };
    let scale: f32 = get("scale")?
        .parse()
        .ok()
        .filter(|s: &f32| s.is_finite())
        .ok_or("scale is not a number")?;
    let dim = number("dim")?;
    if dim == 0 {
        return Err("dim is 0".into());
    }
    Ok(ContextualSpec {
        layer: number("layer")?,
        dim,
        model: get("model")?.to_string(),
        scale,
    })
}
