//! The CLI's one progress-bar style: what is being done, a bar, the count, a message (loss,
//! the step, rejected lines), the rate and the time left. Every command that shows progress
//! draws it through [`bar`].

use indicatif::{ProgressBar, ProgressStyle};

/// The template every bar uses.
const TEMPLATE: &str = "{spinner} {prefix} [{bar:30}] {pos}/{len} {msg} ({per_sec}, eta {eta})";

/// A bar of `len` steps (0: set later with `set_length`) for work named `what`.
pub fn bar(len: u64, what: &str) -> ProgressBar {
    let style = ProgressStyle::with_template(TEMPLATE)
        .expect("the template is valid")
        .progress_chars("=> ");
    let b = ProgressBar::new(len).with_style(style);
    b.set_prefix(what.to_string());
    b
}

/// The style alone, for a bar made elsewhere (a hidden one that draws once work starts).
pub fn style() -> ProgressStyle {
    ProgressStyle::with_template(TEMPLATE)
        .expect("the template is valid")
        .progress_chars("=> ")
}
