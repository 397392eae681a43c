//! CLRCMD's events on the CLI's progress bar: the loss, pairs/s and dev AUC on the bar, the
//! rest logged as lines. Shared by `train clrcmd` and `train context` (and so `adapt`).

use anyhow::{Context, Result};
use indicatif::ProgressBar;

use kindred::train::clrcmd::{self, Event};

/// Runs CLRCMD behind a [`ClrcmdBar`].
pub(super) fn run_clrcmd(run: &clrcmd::ClrcmdRun<'_>) -> Result<clrcmd::ClrcmdReport> {
    let mut bar = ClrcmdBar::new();
    let report = clrcmd::train_clrcmd(run, |event| bar.on(event))
        .with_context(|| format!("training into {}", run.out.display()))?;
    bar.finish();
    Ok(report)
}

/// One CLRCMD run's bar, drawn from its events.
pub(super) struct ClrcmdBar {
    bar: ProgressBar,
    /// The last dev AUC, shown beside the loss.
    dev_msg: String,
}

impl ClrcmdBar {
    pub(super) fn new() -> Self {
        ClrcmdBar {
            bar: super::progress::bar(0, "clrcmd (steps)"),
            dev_msg: String::new(),
        }
    }

    /// A line: above the bar, or on stderr where the bar draws nothing (no terminal), so that
    /// it is in the log either way.
    pub(super) fn say(&self, line: String) {
        if self.bar.is_hidden() {
            eprintln!("{line}");
        } else {
            self.bar.println(line);
        }
    }

    /// Shows `event`.
    pub(super) fn on(&mut self, event: Event) {
        let bar = &self.bar;
        match event {
            Event::Started {
                step,
                total,
                items,
                linked_negatives,
                mined_negatives,
                batch_size,
                graded,
                graded_batch,
                graded_weight,
                dev,
            } => {
                bar.set_length(total as u64);
                bar.set_position(step as u64);
                bar.set_message("");
                let graded_msg = if graded == 0 {
                    String::new()
                } else {
                    format!(
                        " + {graded} graded pairs (CoSENT, {graded_batch} per step, weight \
                         {graded_weight})"
                    )
                };
                self.say(format!(
                    "{items} duplicate pairs ({linked_negatives} with a labelled hard negative, \
                     {mined_negatives} mined){graded_msg}, {dev} dev pairs; {total} steps of \
                     {batch_size}"
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
                    "loss {loss:.4}, {pairs_per_sec:.1} pairs/s{}",
                    self.dev_msg
                ));
            }
            Event::Eval { step, auc, best } => {
                self.dev_msg = format!(", dev AUC {auc:.4}");
                let note = match (step, best) {
                    (0, _) => " (the base model, saved until a step beats it)",
                    (_, true) => " (best, saved)",
                    _ => "",
                };
                self.say(format!("step {step}: dev s_RCMD AUC {auc:.4}{note}"));
            }
            Event::Mining { done, total } => {
                bar.set_length(total as u64);
                bar.set_position(done as u64);
                bar.set_message("questions encoded to mine hard negatives");
                if done == total {
                    self.say(format!("{total} questions encoded to mine hard negatives"));
                }
            }
            Event::Checkpoint { .. } => {}
        }
    }

    /// Clears the bar.
    pub(super) fn finish(self) {
        self.bar.finish_and_clear();
    }
}
