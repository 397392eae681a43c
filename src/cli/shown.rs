//! The library's progress reports ([`kindred::train::adapt::Progress`]: an adaptation's, a
//! tuning's) on the CLI's bars: steps on one bar, CLRCMD runs on a [`ClrcmdBar`], notes as
//! lines.

use indicatif::ProgressBar;

use kindred::train::adapt::Progress;

use super::clrcmd::ClrcmdBar;

/// An adaptation's progress as the CLI shows it: the harvest's steps on one bar, CLRCMD runs
/// on a [`ClrcmdBar`], notes as lines.
#[derive(Default)]
pub(super) struct Shown {
    steps: Option<ProgressBar>,
    clrcmd: Option<ClrcmdBar>,
}

impl Shown {
    pub(super) fn on(&mut self, progress: Progress<'_>) {
        match progress {
            Progress::Note(line) => match (&self.clrcmd, &self.steps) {
                (Some(bar), _) => bar.say(line),
                (None, Some(bar)) if !bar.is_hidden() => bar.println(line),
                _ => eprintln!("{line}"),
            },
            Progress::Step { what, done, total } => {
                let bar = self
                    .steps
                    .get_or_insert_with(|| super::progress::bar(0, ""));
                bar.set_message(what.to_string());
                bar.set_length(total);
                bar.set_position(done);
            }
            Progress::Clrcmd(event) => self.clrcmd.get_or_insert_with(ClrcmdBar::new).on(event),
            Progress::Done => self.finish(),
        }
    }

    /// Clears whatever bar is shown.
    pub(super) fn finish(&mut self) {
        if let Some(bar) = self.steps.take() {
            bar.finish_and_clear();
        }
        if let Some(bar) = self.clrcmd.take() {
            bar.finish();
        }
    }
}
