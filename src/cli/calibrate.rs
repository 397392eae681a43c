//! `kindred calibrate`: fits the duplicate model on labelled pairs, reports how well each score
//! and the fitted probability separate duplicates (on the fitting pairs and on held-out ones),
//! and saves the fit to a file or as a collection's calibration.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args as ClapArgs;
use serde_json::json;

use kindred::db::Database;
use kindred::score::stats as metrics;
use kindred::search::{Calibrator, PairFeatures};
use kindred::Encoder;

use super::eval::{load, scored};
use super::Global;

#[derive(Debug, ClapArgs)]
pub struct CalibrateArgs {
    /// Labelled pair files: label<TAB>question1<TAB>question2[<TAB>id], label 0 or 1
    /// (the Quora layout, e.g. ../shared/data/qqp_bimpm/dev.tsv).
    #[arg(long, required = true, num_args = 1.., value_name = "FILE")]
    pub pairs: Vec<PathBuf>,
    /// Held-out pair files to report on (never fitted on).
    #[arg(long, num_args = 1.., value_name = "FILE")]
    pub test: Vec<PathBuf>,
    /// Save the fit as this collection's calibration (IDF weights from the collection).
    #[arg(long, short)]
    pub collection: Option<String>,
    /// Write the fitted model as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Print the model and the report as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(g: &Global, args: &CalibrateArgs) -> Result<()> {
    let db = match &args.collection {
        Some(_) => Some(g.database()?),
        None => None,
    };
    // A collection's calibration is fitted on its own model and precision.
    let encoder = match (&db, &args.collection) {
        (Some(db), Some(c)) => g.collection_encoder(db, c)?,
        _ => g.encoder()?,
    };
    fit(&encoder, db.as_ref(), args)
}

fn fit(encoder: &Encoder, db: Option<&Database>, args: &CalibrateArgs) -> Result<()> {
    let fit_pairs = load(&args.pairs)?;
    let view = match (db, args.collection.as_deref()) {
        (Some(db), Some(c)) => {
            db.check_model(c, encoder.identity())?;
            Some(db.view(c)?)
        }
        _ => None,
    };
    let lexicon = view.as_ref().map(|v| v.lexical_index());
    let fit_set = scored(encoder, &fit_pairs, lexicon, "encoding fit pairs")?;
    let names: Vec<String> = args.pairs.iter().map(|p| file_name(p)).collect();
    let fitted_on = match args.collection.as_deref() {
        Some(c) => format!("collection {c}: {}", names.join(", ")),
        None => names.join(", "),
    };
    let cal = Calibrator::fit(&fit_set, &encoder.identity().fingerprint, &fitted_on)?;
    let mut report = vec![summary("fit", &names.join(", "), &cal, &fit_set)];
    if !args.test.is_empty() {
        let test_pairs = load(&args.test)?;
        let test_set = scored(encoder, &test_pairs, lexicon, "encoding test pairs")?;
        let test_names: Vec<String> = args.test.iter().map(|p| file_name(p)).collect();
        report.push(summary("test", &test_names.join(", "), &cal, &test_set));
    }
    if let (Some(db), Some(c)) = (db, args.collection.as_deref()) {
        db.set_calibrator(c, &cal)?;
        eprintln!("saved as the calibration of collection {c}");
    }
    if let Some(out) = &args.out {
        std::fs::write(out, serde_json::to_string_pretty(&cal)? + "\n")
            .with_context(|| format!("writing {}", out.display()))?;
        eprintln!("wrote {}", out.display());
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({ "calibrator": cal, "report": report }))?
        );
    } else {
        print_table(&cal, &report);
    }
    Ok(())
}

fn file_name(p: &std::path::Path) -> String {
    let parent = p
        .parent()
        .and_then(|d| d.file_name())
        .map(|d| d.to_string_lossy() + "/");
    format!(
        "{}{}",
        parent.unwrap_or_default(),
        p.file_name().unwrap_or_default().to_string_lossy()
    )
}

/// AUC of every score and of the probability, and accuracy at the calibrator's threshold.
fn summary(
    set: &str,
    files: &str,
    cal: &Calibrator,
    data: &[(PairFeatures, bool)],
) -> serde_json::Value {
    let labels: Vec<bool> = data.iter().map(|(_, l)| *l).collect();
    let auc = |f: &dyn Fn(&PairFeatures) -> f64| {
        let s: Vec<f64> = data.iter().map(|(x, _)| f(x)).collect();
        metrics::auc(&s, &labels)
    };
    let m = cal.evaluate(data);
    json!({
        "set": set,
        "files": files,
        "pairs": data.len(),
        "duplicates": labels.iter().filter(|&&l| l).count(),
        "auc": {
            "cosine": auc(&|x| x.cosine as f64),
            "w2": auc(&|x| -(x.w2 as f64)),
            "rcmd": auc(&|x| x.rcmd() as f64),
            "rcmd_forward": auc(&|x| x.rcmd_forward as f64),
            "rcmd_backward": auc(&|x| x.rcmd_backward as f64),
            "lexical": auc(&|x| x.lexical as f64),
            "probability": m.auc,
        },
        "probability": m,
    })
}

fn print_table(cal: &Calibrator, report: &[serde_json::Value]) {
    println!(
        "duplicate model: P = sigmoid({:+.4} + Σ w·(x − mean)/scale), threshold {:.4}",
        cal.bias, cal.threshold
    );
    for (i, name) in cal.features.iter().enumerate() {
        println!(
            "  {name:<14} w {:+.4}  mean {:.4}  scale {:.4}",
            cal.weights[i], cal.mean[i], cal.scale[i]
        );
    }
    println!();
    println!("| set | files | pairs | AUC cosine | AUC W2 | AUC RCMD | AUC RCMD a→b | AUC RCMD b→a | AUC lexical | AUC P(dup) | accuracy P(dup) | log loss |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in report {
        let a = |k: &str| {
            r["auc"][k]
                .as_f64()
                .map_or("-".into(), |v| format!("{v:.4}"))
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.4} | {:.4} |",
            r["set"].as_str().unwrap_or(""),
            r["files"].as_str().unwrap_or(""),
            r["pairs"],
            a("cosine"),
            a("w2"),
            a("rcmd"),
            a("rcmd_forward"),
            a("rcmd_backward"),
            a("lexical"),
            a("probability"),
            r["probability"]["accuracy"].as_f64().unwrap_or(f64::NAN),
            r["probability"]["log_loss"].as_f64().unwrap_or(f64::NAN),
        );
    }
}
