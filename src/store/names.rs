//! Names that become paths: the one check a collection name passes before anything is done
//! with it, and the one way a file path is built from one ([`child`]).
//!
//! A collection's index folder (`indexes/<physical>`), its ingest checkpoints
//! (`ingest/<name>`) and its sled trees are named after it, so a name that is `..`, empty, `.`,
//! absolute or holds a separator would reach outside them. Every such path is made by
//! [`child`], which checks the name first and then that the path it returns is one entry
//! directly inside the root: no filesystem call ever sees an unchecked name.

use std::path::{Component, Path, PathBuf};

use crate::error::{Result, UserError};

/// Longest accepted collection name, in bytes.
pub const MAX_NAME_BYTES: usize = 64;

/// The entry of `indexes/` that is not a collection's folder (the file naming the store the
/// index files belong to): no collection may be called so, in any case (a file system may
/// ignore case).
pub const RESERVED: &str = "STORE";

/// Checks a new collection's name: 1–64 bytes of ASCII letters, digits, `_` and `-`, and not
/// [`RESERVED`].
pub fn validate_name(name: &str) -> Result<()> {
    if name.eq_ignore_ascii_case(RESERVED) {
        return Err(UserError::InvalidArgument {
            name: "collection name",
            reason: format!(
                "{name:?} is reserved (kindred keeps a file of that name beside the collections' index folders); choose another name"
            ),
        }
        .into());
    }
    if is_name(name) {
        Ok(())
    } else {
        let shown: String = name.chars().take(80).collect();
        Err(UserError::InvalidArgument {
            name: "collection name",
            reason: format!(
                "{shown:?}; use 1-{MAX_NAME_BYTES} ASCII letters, digits, '_' or '-' \
                 (no dots, slashes or spaces)"
            ),
        }
        .into())
    }
}

fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Whether `physical` is a collection name or a generation's physical name (`name@G`, G
/// decimal digits).
fn is_physical(physical: &str) -> bool {
    match physical.split_once('@') {
        None => is_name(physical) && physical != RESERVED,
        Some((name, generation)) => {
            is_name(name)
                && !generation.is_empty()
                && generation.len() <= 20
                && generation.bytes().all(|b| b.is_ascii_digit())
        }
    }
}

/// The path of entry `physical` (a collection name or `name@G`) directly inside `root`.
///
/// A name that fails [`validate_name`] is the caller's error (422); the path is also checked
/// to be one normal component below `root`, so nothing built here can name `root` itself, its
/// parent or anywhere else.
pub fn child(root: &Path, physical: &str) -> Result<PathBuf> {
    if !is_physical(physical) {
        let name = physical.split_once('@').map_or(physical, |(n, _)| n);
        validate_name(name)?;
        return Err(UserError::InvalidArgument {
            name: "collection name",
            reason: format!("{physical:?} is not a collection or generation name"),
        }
        .into());
    }
    let path = root.join(physical);
    let mut below = path
        .strip_prefix(root)
        .map_err(|_| outside(root, &path))?
        .components();
    match (below.next(), below.next()) {
        (Some(Component::Normal(c)), None) if c == physical => Ok(path),
        _ => Err(outside(root, &path).into()),
    }
}

fn outside(root: &Path, path: &Path) -> UserError {
    UserError::InvalidArgument {
        name: "collection name",
        reason: format!("{} is not an entry of {}", path.display(), root.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn hostile_names_are_refused_before_a_path_is_made() {
        let root = Path::new("/data/indexes");
        for bad in [
            "", ".", "..", "/", "/etc", "a/b", "a\\b", "../x", "x/..", "a b", " a", "a\0", "é",
            "a.b", "@1", "a@", "a@x", "a@1@2", "a@-1", "~", "$HOME", "a\nb",
        ] {
            assert!(child(root, bad).is_err(), "{bad:?} was accepted");
            assert!(
                validate_name(bad).is_err(),
                "{bad:?} was accepted as a name"
            );
        }
        assert!(child(root, RESERVED).is_err());
        assert!(validate_name("store").is_err() && validate_name("Store").is_err());
        let long = "a".repeat(MAX_NAME_BYTES + 1);
        assert!(child(root, &long).is_err());
        assert_eq!(child(root, "faq").unwrap(), root.join("faq"));
        assert_eq!(child(root, "faq@12").unwrap(), root.join("faq@12"));
        assert_eq!(child(root, "a-b_C9").unwrap(), root.join("a-b_C9"));
    }

    #[test]
    fn the_refusal_names_the_rule() {
        let e = validate_name("..").unwrap_err().to_string();
        assert!(e.contains("\"..\"") && e.contains("ASCII letters"), "{e}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]
        /// Whatever the input, an accepted name's path is exactly one entry inside the root.
        #[test]
        fn an_accepted_name_is_one_entry_inside_the_root(name in any::<String>()) {
            let root = Path::new("/data/indexes");
            if let Ok(path) = child(root, &name) {
                prop_assert_eq!(path.parent(), Some(root));
                prop_assert_eq!(path.file_name().and_then(|f| f.to_str()), Some(name.as_str()));
                prop_assert!(!name.contains(['.', '/', '\\']));
            }
        }

        #[test]
        fn names_from_the_path_alphabet_never_escape(
            name in "[a-z./\\\\@0-9 -]{0,12}",
        ) {
            let root = Path::new("/data/indexes");
            if let Ok(path) = child(root, &name) {
                prop_assert_eq!(path.parent(), Some(root));
            }
        }
    }
}
