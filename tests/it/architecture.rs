//! The layering ARCHITECTURE.md promises, checked on the source: no library
//! module imports one above it (test code aside), every module has a layer,
//! and no CLI subcommand imports another's file. And the test harness:
//! every integration test is in a module's `tests![...]` list.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

tests![
    no_module_imports_a_layer_above_it,
    no_subcommand_imports_another,
    super_imports_sees_uses_groups_and_expressions,
    no_test_attribute_in_the_harness,
];

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The layer list between the markers in ARCHITECTURE.md, bottom first.
fn layers() -> Vec<String> {
    let doc = fs::read_to_string(Path::new(ROOT).join("ARCHITECTURE.md")).unwrap();
    let start = doc.find("<!-- layers -->").expect("ARCHITECTURE.md has a layers block");
    let end = doc.find("<!-- /layers -->").expect("the layers block ends");
    doc[start..end]
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- `"))
        .filter_map(|l| l.split('`').next())
        .map(str::to_string)
        .collect()
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// Whether `file` is a module its parent declares under `#[cfg(test)]`.
fn test_only(file: &Path) -> bool {
    let name = file.file_stem().unwrap().to_string_lossy().into_owned();
    let dir = file.parent().unwrap();
    let parent = dir.join("mod.rs");
    let text = fs::read_to_string(&parent).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines.windows(2).any(|w| {
        w[0].trim() == "#[cfg(test)]"
            && w[1].trim_start_matches("pub(crate) ").trim() == format!("mod {name};")
    })
}

/// The source before its unit tests.
fn production(text: &str) -> &str {
    let cut = ["#[cfg(test)]\nmod ", "#[cfg(test)]\npub(crate) mod ", "#[cfg(test)]\npub mod "]
        .iter()
        .filter_map(|m| text.find(m))
        .min();
    &text[..cut.unwrap_or(text.len())]
}

/// Every `crate::NAME` a library file uses outside its tests.
fn imports(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = production(text);
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + 7..];
        let name: String =
            rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        out.insert(name);
    }
    out
}

fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel.components().next().unwrap().as_os_str().to_string_lossy().into_owned();
    first.trim_end_matches(".rs").to_string()
}

fn no_module_imports_a_layer_above_it() {
    let layers = layers();
    let src = Path::new(ROOT).join("src");
    let lib = fs::read_to_string(src.join("lib.rs")).unwrap();
    let declared: BTreeSet<String> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("pub mod "))
        .map(|l| l.trim_end_matches(';').to_string())
        .collect();
    let listed: BTreeSet<String> = layers.iter().cloned().collect();
    assert_eq!(declared, listed, "ARCHITECTURE.md's layers must list exactly lib.rs's modules");
    let rank = |m: &str| layers.iter().position(|l| l == m);
    let mut all = Vec::new();
    files(&src, &mut all);
    let mut upward = Vec::new();
    for file in all.iter().filter(|f| !f.starts_with(src.join("cli")) && !test_only(f)) {
        let module = module_of(&src, file);
        let Some(own) = rank(&module) else { continue };
        for used in imports(&fs::read_to_string(file).unwrap()) {
            if rank(&used).is_some_and(|r| r > own) {
                upward
                    .push(format!("{} imports {used}", file.strip_prefix(ROOT).unwrap().display()));
            }
        }
    }
    assert!(upward.is_empty(), "upward imports:\n{}", upward.join("\n"));
}

fn no_subcommand_imports_another() {
    let cli = Path::new(ROOT).join("src/cli");
    let shared = ["mod", "output", "planning"];
    let mut subcommands = Vec::new();
    files(&cli, &mut subcommands);
    let names: Vec<String> = subcommands
        .iter()
        .map(|f| f.file_stem().unwrap().to_string_lossy().into_owned())
        .filter(|n| !shared.contains(&n.as_str()))
        .collect();
    let mut found = Vec::new();
    for file in &subcommands {
        let own = file.file_stem().unwrap().to_string_lossy().into_owned();
        let text = fs::read_to_string(file).unwrap();
        for used in super_imports(production(&text)) {
            if used != own && names.contains(&used) {
                found.push(format!("cli/{own}.rs imports cli/{used}.rs"));
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// The first segment of every path through `super::` (or `crate::cli::`,
/// the same files named from the root): in `use` statements, groups
/// included, and in expressions such as `super::bench::with_progress(..)`.
/// Comment lines are skipped: naming another file in prose is no import.
fn super_imports(text: &str) -> Vec<String> {
    let code: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .flat_map(|l| [l, "\n"])
        .collect();
    let mut out = Vec::new();
    for prefix in ["super::", "crate::cli::"] {
        for (i, _) in code.match_indices(prefix) {
            // `super::super::x` and `a::super::x` start no path of their own.
            let before = code[..i].chars().next_back();
            if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
                out.extend(first_segments(&code[i + prefix.len()..]));
            }
        }
    }
    out
}

/// The first segment of the path that starts `text`, or of each item of
/// the `{...}` group it starts with.
fn first_segments(text: &str) -> Vec<String> {
    let word = |s: &str| -> String {
        s.trim().chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect()
    };
    let Some(group) = text.strip_prefix('{') else {
        return vec![word(text)].into_iter().filter(|w| !w.is_empty()).collect();
    };
    let mut out = Vec::new();
    let (mut depth, mut item) = (0, String::new());
    for c in group.chars() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.extend(Some(word(&item)).filter(|w| !w.is_empty()));
                item.clear();
                continue;
            }
            _ => {}
        }
        item.push(c);
    }
    out.extend(Some(word(&item)).filter(|w| !w.is_empty()));
    out
}

fn super_imports_sees_uses_groups_and_expressions() {
    let text = "use super::output::OutputArgs;\nuse super::{bench::{self, x}, EXIT_OK};\n\
                // super::comment::ignored\nlet r = super::probe::run(a);\n\
                crate::cli::audit::run(); super::super::y;";
    assert_eq!(
        super_imports(text),
        ["output", "bench", "EXIT_OK", "probe", "super", "audit"].map(String::from)
    );
}

/// tests/it is built without libtest (harness = false), where `#[test]`
/// drops its function without a word: a test written so would never run.
/// Each module lists its tests in `tests![...]` instead (common/harness.rs).
fn no_test_attribute_in_the_harness() {
    let mut sources = Vec::new();
    files(&Path::new(ROOT).join("tests/it"), &mut sources);
    assert!(sources.len() > 20, "tests/it has {} files", sources.len());
    let attribute = ["#[", "test]"].concat();
    let found: Vec<String> = sources
        .iter()
        .flat_map(|file| {
            let text = fs::read_to_string(file).unwrap();
            let lines: Vec<String> = text
                .lines()
                .enumerate()
                .filter(|(_, l)| l.trim() == attribute)
                .map(|(i, _)| format!("{}:{}", file.display(), i + 1))
                .collect();
            lines
        })
        .collect();
    assert!(found.is_empty(), "#[test] where no harness reads it, list these instead: {found:?}");
}
