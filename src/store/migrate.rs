//! On-disk format versions and the ordered migration steps between them (one file per format
//! change in `migrations/`). A store records its version in the `format_version` key of sled's
//! default tree; opening applies every step from its version up to [`FORMAT_VERSION`], then
//! stamps the new version last, and refuses a store that is newer than this build or older than
//! [`OLDEST_SUPPORTED`].

use crate::error::{Result, UserError};

/// The format this build writes.
pub const FORMAT_VERSION: u32 = 3;
/// The oldest format this build can migrate from.
pub const OLDEST_SUPPORTED: u32 = 1;

/// One migration step: from `from` to `from + 1`.
pub struct Step {
    /// The version the step starts from.
    pub from: u32,
    /// What it changes, for logs.
    pub what: &'static str,
    /// The change itself.
    pub run: fn(&sled::Db) -> Result<()>,
}

/// The steps, in order.
pub const STEPS: &[Step] = &[
    Step {
        from: 1,
        what: "generations (migrations/0002_generations.md): nothing to rewrite",
        // A format-1 collection has no `generation`, which format 2 reads as "the plain name".
        run: |_| Ok(()),
    },
    Step {
        from: 2,
        what: "intent dimension (migrations/0003_intent_dim.md): nothing to rewrite",
        // A format-2 model identity has no `intent_dim`: its intents have the model dimension.
        run: |_| Ok(()),
    },
];

/// Checks `found` against this build and runs the steps it needs; returns the steps run.
pub fn check_and_migrate(db: &sled::Db, found: u32, path: &std::path::Path) -> Result<usize> {
    if found > FORMAT_VERSION {
        return Err(UserError::IncompatibleStore {
            path: path.to_path_buf(),
            reason: format!(
                "it has format version {found}, newer than this kindred's {FORMAT_VERSION}; \
                 upgrade kindred to open it"
            ),
        }
        .into());
    }
    if found < OLDEST_SUPPORTED {
        return Err(UserError::IncompatibleStore {
            path: path.to_path_buf(),
            reason: format!(
                "it has format version {found}, older than the oldest this kindred migrates \
                 ({OLDEST_SUPPORTED}); open it with an older kindred first or re-ingest"
            ),
        }
        .into());
    }
    let mut ran = 0;
    for step in STEPS
        .iter()
        .filter(|s| s.from >= found && s.from < FORMAT_VERSION)
    {
        tracing::info!(from = step.from, what = step.what, "migrating store");
        (step.run)(db)?;
        ran += 1;
    }
    Ok(ran)
}
