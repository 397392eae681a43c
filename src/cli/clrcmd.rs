//! CLRCMD behind the CLI's progress bar: the loss, pairs/s and dev AUC on the bar, its events
//! logged as lines. Shared by `train clrcmd` and `train context` (and so `adapt`).

use anyhow::{Context, Result};

use kindred::train::clrcmd::{self, Event};

/// Runs CLRCMD behind a progress bar (loss, pairs/s, dev AUC), its events logged as lines.
pub(super) fn run_clrcmd(run: &clrcmd::ClrcmdRun<'_>) -> Result<clrcmd::ClrcmdReport> {
    let (graded, dev, options) = (run.graded, run.dev, run.options);
    let bar = super::progress::bar(0, "clrcmd (steps)");
    let mut dev_msg = String::new();
    // Without a terminal the bar draws nothing; its lines still belong in the log.
    let say = |line: String| {
        if bar.is_hidden() {
            eprintln!("{line}");
        } else {
            bar.println(line);
        }
    };
    let report = clrcmd::train_clrcmd(run, |event| match event {
        Event::Started {
            step,
            total,
            items,
            linked_negatives,
            mined_negatives,
        } => {
            bar.set_length(total as u64);
            bar.set_position(step as u64);
            bar.set_message("");
            let graded_msg = if graded.is_empty() {
                String::new()
            } else {
                format!(
                    " + {} graded pairs (CoSENT, {} per step, weight {})",
                    graded.len(),
                    options.graded_batch,
                    options.graded_weight
                )
            };
            say(format!(
                "{items} duplicate pairs ({linked_negatives} with a labelled hard negative, \
                     {mined_negatives} mined){graded_msg}, {} dev pairs; {total} steps of {}",
                dev.len(),
                options.batch_size
            ));
        }
        Event::Step {
            step,
            loss,
            pairs_per_sec,
        } => {
            bar.set_position(step as u64);
            if bar.is_hidden() && step % 10 == 0 {
                eprintln!("step {step}: loss {loss:.4}, {pairs_per_sec:.1} pairs/s");
            }
            bar.set_message(format!(
                "loss {loss:.4}, {pairs_per_sec:.1} pairs/s{dev_msg}"
            ));
        }
        Event::Eval { step, auc, best } => {
            dev_msg = format!(", dev AUC {auc:.4}");
            let note = match (step, best) {
                (0, _) => " (the base model, saved until a step beats it)",
                (_, true) => " (best, saved)",
                _ => "",
            };
            say(format!("step {step}: dev s_RCMD AUC {auc:.4}{note}"));
        }
        Event::Mining { done, total } => {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
            bar.set_message("questions encoded to mine hard negatives");
            if done == total {
                say(format!("{total} questions encoded to mine hard negatives"));
            }
        }
        Event::Checkpoint { .. } => {}
    })
    .with_context(|| format!("training into {}", run.out.display()))?;
    bar.finish_and_clear();
    Ok(report)
}
