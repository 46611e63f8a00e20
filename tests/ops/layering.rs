//! The folders of `src/` and which may import which: the crate's layering
//! as data, held against the source.
//!
//! Each folder of `src/` (and each file at its top, but `lib.rs`) is a
//! unit. A unit's code may name another unit (`crate::scan::...`) only
//! where the table below allows it, and the table is ordered: a unit uses
//! only units listed before it, so no two folders can ever import each
//! other. A new arrow fails here with the files that draw it; either it
//! points the right way and is added to the table (and to ARCHITECTURE.md,
//! which prints the table and is checked against it), or the code moves.
//!
//! Test modules (`#[cfg(test)] mod tests`, at the end of a file by the
//! crate's convention) and comments are not code here: a test may reach
//! anywhere, and a doc link draws no arrow.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every unit, bottom first, with the units its code may name.
const LAYERS: &[(&str, &[&str])] = &[
    ("error", &[]),
    ("sync", &[]),
    ("at_rest", &["error"]),
    ("obs", &["error"]),
    ("config", &["at_rest", "error", "obs"]),
    ("segment", &["at_rest", "config", "error", "obs", "sync"]),
    ("scan", &["at_rest", "error", "segment"]),
    (
        "write",
        &["at_rest", "config", "error", "obs", "segment", "sync"],
    ),
    (
        "read",
        &["at_rest", "config", "error", "scan", "segment", "write"],
    ),
    (
        "recovery",
        &[
            "at_rest", "config", "error", "obs", "read", "scan", "segment",
        ],
    ),
    (
        "wal",
        &[
            "at_rest", "config", "error", "obs", "read", "recovery", "scan", "segment", "write",
        ],
    ),
    (
        "files",
        &["at_rest", "config", "error", "recovery", "segment"],
    ),
    (
        "layers",
        &[
            "at_rest", "config", "error", "obs", "read", "recovery", "segment", "sync", "wal",
            "write",
        ],
    ),
    (
        "archive",
        &[
            "at_rest", "config", "error", "obs", "scan", "segment", "wal", "write",
        ],
    ),
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The unit a file of `src/` belongs to.
fn unit_of(rel: &Path) -> String {
    let first = rel.components().next().expect("a path under src/");
    let name = first.as_os_str().to_string_lossy();
    name.strip_suffix(".rs").unwrap_or(&name).to_string()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src/") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file: without its test module and its comments.
fn code(text: &str) -> String {
    let body = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    body.lines()
        .map(|l| l.find("//").map_or(l, |at| &l[..at]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The names that follow `crate::` in `code`: `crate::a::b` gives `a`,
/// `crate::{a::x, b}` gives `a` and `b`.
fn named_after_crate(code: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').expect("a closed use group");
            for item in group[..end].split(',') {
                names.extend(ident(item.trim_start()));
            }
        } else {
            names.extend(ident(rest));
        }
    }
    names
}

fn ident(s: &str) -> Option<String> {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    (end > 0).then(|| s[..end].to_string())
}

/// Arrows `(from, to)` between units, each with the files that draw it.
type Arrows = BTreeMap<(String, String), BTreeSet<String>>;

/// Every arrow the source draws, with the files that draw it; and every
/// `crate::Name` that hides its unit behind a re-export of `lib.rs`.
fn arrows() -> (Arrows, Vec<String>) {
    let units: BTreeSet<&str> = LAYERS.iter().map(|(u, _)| *u).collect();
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let (mut arrows, mut hidden) = (BTreeMap::new(), Vec::new());
    for path in files {
        let rel = path.strip_prefix(src()).expect("under src/").to_path_buf();
        let from = unit_of(&rel);
        if from == "lib" {
            continue;
        }
        assert!(
            units.contains(from.as_str()),
            "{}: unit {from} is not in the layering table",
            rel.display()
        );
        let text = std::fs::read_to_string(&path).expect("read a source file");
        for to in named_after_crate(&code(&text)) {
            if to == from || to == "self" {
                continue;
            }
            if units.contains(to.as_str()) {
                let files: &mut BTreeSet<String> = arrows.entry((from.clone(), to)).or_default();
                files.insert(rel.display().to_string());
            } else {
                hidden.push(format!("{}: crate::{to}", rel.display()));
            }
        }
    }
    (arrows, hidden)
}

#[test]
fn the_layering_table_points_one_way() {
    let mut below = BTreeSet::new();
    for (unit, uses) in LAYERS {
        for used in *uses {
            assert!(
                below.contains(used),
                "{unit} may use {used}, which is not listed before it: the table has a circle"
            );
        }
        assert!(below.insert(*unit), "{unit} is listed twice");
    }
}

#[test]
fn every_import_between_folders_is_in_the_layering_table() {
    let allowed: BTreeSet<(&str, &str)> = LAYERS
        .iter()
        .flat_map(|(u, uses)| uses.iter().map(move |used| (*u, *used)))
        .collect();
    let (arrows, hidden) = arrows();
    let new: Vec<String> = arrows
        .iter()
        .filter(|((f, t), _)| !allowed.contains(&(f.as_str(), t.as_str())))
        .map(|((f, t), files)| format!("{f} -> {t} in {files:?}"))
        .collect();
    assert!(
        new.is_empty(),
        "arrows the layering table does not allow:\n{}",
        new.join("\n")
    );
    assert!(
        hidden.is_empty(),
        "name the unit, not a re-export of lib.rs, so the arrow shows:\n{}",
        hidden.join("\n")
    );
    // The table stays exact: an allowed arrow nothing draws any more goes.
    let unused: Vec<_> = allowed
        .iter()
        .filter(|(f, t)| !arrows.contains_key(&(f.to_string(), t.to_string())))
        .collect();
    assert!(
        unused.is_empty(),
        "allowed arrows no code draws: {unused:?}"
    );
}

/// The table as ARCHITECTURE.md prints it, one line per unit.
fn printed() -> Vec<String> {
    LAYERS
        .iter()
        .map(|(unit, uses)| match uses {
            [] => format!("- `{unit}`: nothing"),
            _ => format!("- `{unit}`: {}", uses.join(", ")),
        })
        .collect()
}

#[test]
fn architecture_md_prints_the_layering_table() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("ARCHITECTURE.md");
    let doc = std::fs::read_to_string(&path).expect("read ARCHITECTURE.md");
    let missing: Vec<String> = printed()
        .into_iter()
        .filter(|line| !doc.lines().any(|l| l == line))
        .collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md lacks these lines of the layering table:\n{}",
        missing.join("\n")
    );
}
