//! `kindred model fetch | info`: make sure the model is available, show what is in use.

use anyhow::Result;
use clap::Subcommand;
use serde_json::json;

use kindred::model::decoder::WordDecoder;
use kindred::model::operators::Operators;

use super::Global;

/// `kindred model …`
#[derive(Debug, Subcommand)]
pub enum ModelCommand {
    /// Make sure the model is available (fetch the default model into the cache if needed).
    Fetch,
    /// Print the model's id, fingerprint, dimension, maximum length, and the operators and
    /// decoder it carries.
    Info {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(g: &Global, command: &ModelCommand) -> Result<()> {
    match command {
        ModelCommand::Fetch => {
            let dir = g.model_dir()?;
            println!("model ready: {} ({})", dir.path.display(), dir.id);
        }
        ModelCommand::Info { json } => {
            let dir = g.model_dir()?;
            let identity = dir.identity()?;
            // Operators count only when trained for this model's vectors, as the encoder
            // loads them.
            let operators = Operators::load_for(&dir.path, identity.dim, &identity.fingerprint)?
                .map(|o| o.names())
                .unwrap_or_default();
            let decoder = WordDecoder::load_for(&dir.path, identity.dim, &identity.fingerprint)?
                .map(|d| d.words.len());
            if *json {
                let out = json!({ "path": dir.path, "identity": identity, "config": dir.config,
                    "operators": operators, "decoder_words": decoder });
                println!("{}", serde_json::to_string_pretty(&out)?);
            } else {
                println!("path:        {}", dir.path.display());
                println!("id:          {}", identity.id);
                println!("fingerprint: {}", identity.fingerprint);
                println!("precision:   {} (--precision picks)", g.precision());
                println!("dim:         {}", identity.dim);
                println!("intent dim:  {}", identity.intent_dim());
                println!("layers:      {}", dir.config.num_hidden_layers);
                println!("max length:  {} wordpieces", identity.max_len);
                let ops = if operators.is_empty() {
                    "none (kindred train operators)".to_string()
                } else {
                    operators.join(", ")
                };
                println!("operators:   {ops}");
                match decoder {
                    Some(n) => println!("decoder:     a bag of words over {n} words"),
                    None => println!("decoder:     none (kindred train decoder)"),
                }
            }
        }
    }
    Ok(())
}
