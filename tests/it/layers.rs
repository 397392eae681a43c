//! The layering of ARCHITECTURE.md, checked: no library module refers to a module of a higher
//! layer (`crate::x` in code, doc comments aside). A new module must be added to `LAYERS`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Lowest first; a module may use modules of its own layer or below.
const LAYERS: &[&[&str]] = &[
    &["types", "error", "sync", "math"],
    &["score", "text", "model"],
    &["encoder", "store"],
    &["index"],
    &["db"],
    &["search"],
    &["engine"],
    &["ingest", "eval", "review", "train"],
    &["server", "fuzzing"],
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("reads src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file under `src/` belongs to (None: lib.rs, main.rs, the CLI).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).expect("under src");
    let first = rel.components().next()?.as_os_str().to_string_lossy();
    let name = first.trim_end_matches(".rs").to_string();
    (!matches!(name.as_str(), "lib" | "main" | "cli")).then_some(name)
}

#[test]
fn no_module_refers_to_a_layer_above_it() {
    let layer: HashMap<&str, usize> = LAYERS
        .iter()
        .enumerate()
        .flat_map(|(i, mods)| mods.iter().map(move |m| (*m, i)))
        .collect();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut violations = Vec::new();
    for file in &files {
        let Some(module) = module_of(&src, file) else {
            continue;
        };
        let own = *layer
            .get(module.as_str())
            .unwrap_or_else(|| panic!("module {module} is in no layer; add it to LAYERS"));
        let text = std::fs::read_to_string(file).expect("reads");
        // Code only (doc and line comments aside), as one string so grouped imports may span
        // lines.
        let code: String = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        for target in crate_paths(&code) {
            let target = match target.as_str() {
                // Root re-exports (lib.rs) count as the module they come from.
                "Encoder" | "EncoderOptions" | "DeviceKind" => "encoder",
                "Error" | "InternalError" | "Result" | "UserError" => "error",
                "ModelDir" | "ModelIdentity" => "model",
                "Encoded" | "Gaussian" | "Precision" | "Token" => "types",
                other => other,
            };
            let Some(&theirs) = layer.get(target) else {
                panic!(
                    "{}: crate::{target} is neither a module nor a known re-export",
                    file.display()
                );
            };
            if theirs > own {
                violations.push(format!(
                    "{}: {module} (layer {own}) uses {target} (layer {theirs})",
                    file.strip_prefix(&src).unwrap().display()
                ));
            }
        }
    }
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

/// The first segment of every `crate::` path in `code` (`crate::{a, b::c}` gives a and b).
fn crate_paths(code: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        match rest.strip_prefix('{') {
            Some(group) => {
                // Split at top-level commas up to the group's closing brace.
                let (mut depth, mut start) = (0usize, 0usize);
                for (j, c) in group.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => {
                            out.push(ident(&group[start..j]));
                            break;
                        }
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            out.push(ident(&group[start..j]));
                            start = j + 1;
                        }
                        _ => {}
                    }
                }
                out.retain(|s| !s.is_empty());
            }
            None => out.push(ident(rest)),
        }
    }
    out
}

/// Every public module path (`a::b`) declared with `pub mod` under `src/`, following only
/// public modules (a `pub mod` inside a private module is not reachable).
fn public_modules(file: &Path, prefix: &str, out: &mut Vec<String>) {
    let text = std::fs::read_to_string(file).expect("reads");
    let dir = match file.file_name().and_then(|n| n.to_str()) {
        Some("lib.rs" | "mod.rs") => file.parent().expect("a parent").to_path_buf(),
        _ => file.with_extension(""),
    };
    for line in text.lines() {
        let Some(name) = line
            .trim()
            .strip_prefix("pub mod ")
            .and_then(|r| r.strip_suffix(';'))
        else {
            continue;
        };
        let path = format!("{prefix}{name}");
        out.push(path.clone());
        for child in [
            dir.join(name).join("mod.rs"),
            dir.join(format!("{name}.rs")),
        ] {
            if child.exists() {
                public_modules(&child, &format!("{path}::"), out);
            }
        }
    }
}

#[test]
fn the_public_modules_are_the_ones_architecture_md_lists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    public_modules(&root.join("src/lib.rs"), "", &mut found);
    found.sort();
    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let section = doc
        .split("## Public API")
        .nth(1)
        .expect("ARCHITECTURE.md has a Public API section");
    let block = section
        .split("```text")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("the section lists the modules in a text block");
    let mut listed: Vec<String> = block.split_whitespace().map(str::to_string).collect();
    listed.sort();
    assert!(found.len() > 10, "found only {found:?}");
    assert_eq!(
        found, listed,
        "the public modules (left) differ from ARCHITECTURE.md's list (right): make the module \
         pub(crate), or list it there and say why it is public"
    );
}

#[test]
fn crate_paths_are_read_from_plain_and_grouped_imports() {
    assert_eq!(crate_paths("use crate::db::View;"), ["db"]);
    assert_eq!(
        crate_paths("use crate::{db, model::ModelDir, store};"),
        ["db", "model", "store"]
    );
    assert_eq!(crate_paths("let x = crate::Encoder::load(d);"), ["Encoder"]);
    assert_eq!(
        crate_paths("use crate::{\n    db,\n    engine::Engine,\n};"),
        ["db", "engine"]
    );
}

/// Every path after `prefix` (`crate::` or `super::`) in `code`, as its leading segments:
/// `crate::{a, b::{c, d}}` gives [a], [b, c] and [b, d]. An occurrence inside a longer path
/// (`super::super::x`'s second `super::`) is not one.
fn paths_after(code: &str, prefix: &str) -> Vec<Vec<String>> {
    fn tree(s: &str) -> Vec<Vec<String>> {
        let s = s.trim_start();
        if let Some(group) = s.strip_prefix('{') {
            let (mut depth, mut start, mut out) = (0usize, 0usize, Vec::new());
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        out.extend(tree(&group[start..j]));
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.extend(tree(&group[start..j]));
                        start = j + 1;
                    }
                    _ => {}
                }
            }
            return out;
        }
        let ident: String = s
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if ident.is_empty() {
            return Vec::new();
        }
        let rest = &s[ident.len()..];
        match rest.strip_prefix("::") {
            Some(more) => {
                let below = tree(more);
                if below.is_empty() {
                    vec![vec![ident]]
                } else {
                    below
                        .into_iter()
                        .map(|mut p| {
                            p.insert(0, ident.clone());
                            p
                        })
                        .collect()
                }
            }
            None => vec![vec![ident]],
        }
    }
    let mut out = Vec::new();
    for (i, _) in code.match_indices(prefix) {
        let before = &code[..i];
        if before.ends_with("::") || before.ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            continue;
        }
        out.extend(tree(&code[i + prefix.len()..]));
    }
    out
}

/// A file's code without comment lines.
fn code_of(file: &Path) -> String {
    std::fs::read_to_string(file)
        .expect("reads")
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The modules of folder `dir` (its `.rs` files but `mod.rs`, `lib.rs` and `main.rs`, and its
/// folders that are modules), each with the files that make it up.
fn modules_of(dir: &Path) -> Vec<(String, Vec<PathBuf>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("reads").flatten() {
        let path = entry.path();
        let name = path
            .file_stem()
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_string();
        if path.is_dir() {
            if path.join("mod.rs").exists() {
                let mut files = Vec::new();
                rust_files(&path, &mut files);
                out.push((name, files));
            }
        } else if path.extension().is_some_and(|e| e == "rs")
            && !matches!(name.as_str(), "mod" | "lib" | "main")
        {
            out.push((name, vec![path]));
        }
    }
    out.sort();
    out
}

/// The cycles (strongly connected groups of more than one) of a graph.
fn cycles(graph: &HashMap<String, std::collections::BTreeSet<String>>) -> Vec<Vec<String>> {
    // Two nodes are in one cycle when each reaches the other.
    let reach = |from: &str| {
        let mut seen = std::collections::BTreeSet::new();
        let mut todo = vec![from.to_string()];
        while let Some(n) = todo.pop() {
            for m in graph.get(&n).into_iter().flatten() {
                if seen.insert(m.clone()) {
                    todo.push(m.clone());
                }
            }
        }
        seen
    };
    let reached: HashMap<&String, std::collections::BTreeSet<String>> =
        graph.keys().map(|n| (n, reach(n))).collect();
    let mut groups: Vec<Vec<String>> = Vec::new();
    for n in graph.keys() {
        let mut group: Vec<String> = reached[n]
            .iter()
            .filter(|m| *m != n && reached.get(m).is_some_and(|r| r.contains(n)))
            .cloned()
            .collect();
        if group.is_empty() {
            continue;
        }
        group.push(n.clone());
        group.sort();
        if !groups.contains(&group) {
            groups.push(group);
        }
    }
    groups.sort();
    groups
}

/// No module cycles: among the modules of each folder of `src/` (the files and module
/// folders side by side, a folder's `mod.rs` aside: it is their parent), and among the
/// top-level modules. An edge is a `super::x` from a file of that folder, or a `crate::`
/// path through the folder to a sibling.
#[test]
fn no_two_modules_of_a_folder_use_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut dirs = vec![src.clone()];
    let mut all = Vec::new();
    rust_files(&src, &mut all);
    dirs.extend(all.iter().filter_map(|f| f.parent().map(Path::to_path_buf)));
    dirs.sort();
    dirs.dedup();
    let mut found = Vec::new();
    for dir in dirs {
        let rel = dir.strip_prefix(&src).expect("under src");
        // The CLI is the binary's: `crate::cli::…` there, `crate::` is the binary's root.
        let mut module: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        let modules: Vec<(String, Vec<PathBuf>)> = modules_of(&dir)
            .into_iter()
            .filter(|(name, _)| !(module.is_empty() && name == "cli"))
            .collect();
        if module.first().is_some_and(|m| m == "cli") {
            module = vec!["cli".into()];
        }
        let names: std::collections::BTreeSet<&str> =
            modules.iter().map(|(n, _)| n.as_str()).collect();
        let mut graph: HashMap<String, std::collections::BTreeSet<String>> = HashMap::new();
        for (name, files) in &modules {
            let edges = graph.entry(name.clone()).or_default();
            for file in files {
                let code = code_of(file);
                let mut targets: Vec<String> = Vec::new();
                if file.parent() == Some(dir.as_path()) {
                    targets.extend(
                        paths_after(&code, "super::")
                            .into_iter()
                            .map(|p| p[0].clone()),
                    );
                }
                for p in paths_after(&code, "crate::") {
                    if p.len() > module.len() && p[..module.len()] == module[..] {
                        targets.push(p[module.len()].clone());
                    }
                }
                for t in targets {
                    let t = match (module.is_empty(), t.as_str()) {
                        (true, "Encoder" | "EncoderOptions" | "DeviceKind") => "encoder".into(),
                        (true, "Error" | "InternalError" | "Result" | "UserError") => {
                            "error".into()
                        }
                        (true, "ModelDir" | "ModelIdentity") => "model".into(),
                        (true, "Encoded" | "Gaussian" | "Precision" | "Token") => "types".into(),
                        _ => t,
                    };
                    if t != *name && names.contains(t.as_str()) {
                        edges.insert(t);
                    }
                }
            }
        }
        for group in cycles(&graph) {
            found.push(format!("src/{}: {}", rel.display(), group.join(" <-> ")));
        }
    }
    assert!(
        found.is_empty(),
        "module cycles (break each: move what both need into one of them or a module \
         below both):\n{}",
        found.join("\n")
    );
}

#[test]
fn paths_are_read_with_their_segments() {
    assert_eq!(
        paths_after("use super::{eval::bar, train_aligner::{a, b}};", "super::"),
        [
            vec!["eval", "bar"],
            vec!["train_aligner", "a"],
            vec!["train_aligner", "b"]
        ]
    );
    assert_eq!(
        paths_after("super::super::x", "super::"),
        [vec!["super", "x"]]
    );
    assert_eq!(
        paths_after("crate::score::cosine(a)", "crate::"),
        [vec!["score", "cosine"]]
    );
}
