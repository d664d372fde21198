//! The layering ARCHITECTURE.md promises, checked on the source: no library
//! module imports one above it (test code aside), every module has a layer,
//! no CLI subcommand imports another's file, and no file imports itself
//! back through others. And the test harness: every integration test is in
//! a module's `tests![...]` list. And the public API: every item at the
//! crate root is one ARCHITECTURE.md lists, and the examples use only those.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

tests![
    no_module_imports_a_layer_above_it,
    no_subcommand_imports_another,
    no_module_circles,
    use_paths_reads_groups_renames_and_expressions,
    circles_are_found_through_re_exports,
    no_test_attribute_in_the_harness,
    public_api_is_listed,
    root_items_reads_uses_groups_renames_and_items,
    examples_use_only_the_root,
    no_two_public_types_share_a_name,
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

/// The source before its unit tests: up to the first `#[cfg(test)]` module
/// written inline (one declared as `mod tests;` is only skipped, so that a
/// `mod.rs` is read past it).
fn production(text: &str) -> &str {
    const ATTR: &str = "#[cfg(test)]\n";
    let mut from = 0;
    while let Some(i) = text[from..].find(ATTR) {
        let at = from + i;
        let item = text[at + ATTR.len()..].lines().next().unwrap_or_default();
        let item = item.trim_start_matches("pub(crate) ").trim_start_matches("pub ");
        if item.starts_with("mod ") && item.trim_end().ends_with('{') {
            return &text[..at];
        }
        from = at + ATTR.len();
    }
    text
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
        .map(|l| l.trim_start_matches("pub(crate) ").trim_start_matches("pub "))
        .filter_map(|l| l.strip_prefix("mod "))
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

/// No subcommand's file imports another's: `mod.rs` dispatches to them
/// all, and what they share is in `common`, `output` and `planning`.
fn no_subcommand_imports_another() {
    let shared = ["common", "output", "planning"];
    let subcommand = |file: &str| -> Option<String> {
        let first = file.strip_prefix("src/cli/")?.split('/').next()?;
        Some(first.trim_end_matches(".rs").to_string())
    };
    let mut found = Vec::new();
    for (from, edges) in import_graph(&sources()) {
        let Some(own) = subcommand(&from).filter(|own| own != "mod") else { continue };
        for to in edges.keys() {
            let Some(used) = subcommand(to) else { continue };
            if used != own && used != "mod" && !shared.contains(&used.as_str()) {
                found.push(format!("{from} imports {to}"));
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// `text` without its comments: `//` lines, and a trailing ` // ...`.
fn code(text: &str) -> String {
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .map(|l| l.find(" // ").map_or(l, |i| &l[..i]))
        .flat_map(|l| [l, "\n"])
        .collect()
}

/// One path a file names, as written: `super::table::gpt::Gpt` is
/// `["super", "table", "gpt", "Gpt"]`, a group yields one path per item.
#[derive(Debug, PartialEq)]
struct UsePath {
    path: Vec<String>,
    /// The name a `use ... as NAME` gives it.
    alias: Option<String>,
    /// Part of a `pub use` (any visibility): a re-export.
    reexport: bool,
}

/// Every path in `code` that starts at `crate::`, `super::` or `self::`,
/// or at one of the module's own `children` (`detect::read` in a
/// `mod.rs`, read as `self::detect::read`): in `use` statements, groups
/// and renames included, and in expressions.
fn use_paths(code: &str, children: &BTreeSet<String>) -> Vec<UsePath> {
    let bytes = code.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        // A path starts at a word that follows no identifier and no `::`.
        let inside = at > 0 && (ident(bytes[at - 1]) || bytes[at - 1] == b':');
        if inside || !(bytes[at].is_ascii_alphabetic() || bytes[at] == b'_') {
            at += 1;
            continue;
        }
        let end = at + bytes[at..].iter().take_while(|&&b| ident(b)).count();
        let word = &code[at..end];
        let rooted = ["crate", "super", "self"].contains(&word) || children.contains(word);
        if !rooted || !code[end..].starts_with("::") {
            at = end;
            continue;
        }
        let line = &code[code[..at].rfind('\n').map_or(0, |i| i + 1)..at];
        let reexport = line.trim_start().starts_with("pub") && line.trim_end().ends_with(" use");
        let prefix = if children.contains(word) { vec!["self".to_string()] } else { Vec::new() };
        let mut cursor = Cursor { text: code, at };
        let mut found = Vec::new();
        cursor.tree(prefix, &mut found);
        out.extend(found.into_iter().map(|(path, alias)| UsePath { path, alias, reexport }));
        at = cursor.at.max(end);
    }
    out
}

/// A reader of one path or use tree.
struct Cursor<'a> {
    text: &'a str,
    at: usize,
}

impl Cursor<'_> {
    fn rest(&self) -> &str {
        &self.text[self.at..]
    }

    fn skip_space(&mut self) {
        let rest = self.rest();
        self.at += rest.len() - rest.trim_start().len();
    }

    fn eat(&mut self, token: &str) -> bool {
        let found = self.rest().starts_with(token);
        if found {
            self.at += token.len();
        }
        found
    }

    fn word(&mut self) -> Option<String> {
        let word: String =
            self.rest().chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        self.at += word.len();
        (!word.is_empty()).then_some(word)
    }

    /// The paths of the tree at the cursor, each after `prefix`, with the
    /// name an `as` gives it.
    fn tree(&mut self, mut path: Vec<String>, out: &mut Vec<(Vec<String>, Option<String>)>) {
        loop {
            if self.eat("{") {
                loop {
                    self.skip_space();
                    while self.eat(",") {
                        self.skip_space();
                    }
                    if self.eat("}") || self.rest().is_empty() {
                        return;
                    }
                    let before = self.at;
                    self.tree(path.clone(), out);
                    if self.at == before {
                        self.at += self.rest().chars().next().map_or(0, char::len_utf8);
                    }
                }
            }
            if self.eat("*") {
                path.push("*".to_string());
                out.push((path, None));
                return;
            }
            let Some(word) = self.word() else {
                out.push((path, None));
                return;
            };
            path.push(word);
            if self.eat("::") {
                continue;
            }
            let before = self.at;
            self.skip_space();
            let alias = if self.eat("as ") {
                self.skip_space();
                self.word()
            } else {
                self.at = before;
                None
            };
            out.push((path, alias));
            return;
        }
    }
}

/// A file of src/ as a module (`table::gpt` for src/table/gpt.rs, `cli`
/// for src/cli/mod.rs) with its production code, comments left out.
struct Source {
    module: Vec<String>,
    file: String,
    code: String,
}

/// Every file of src/ but the crate roots (lib.rs and main.rs only declare
/// modules) and the test-only ones.
fn sources() -> Vec<Source> {
    let src = Path::new(ROOT).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    all.sort();
    all.iter()
        .filter(|f| !test_only(f))
        .filter_map(|file| {
            let rel = file.strip_prefix(&src).unwrap();
            let mut module: Vec<String> =
                rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
            let last = module.pop()?;
            let stem = last.trim_end_matches(".rs");
            if module.is_empty() && ["lib", "main"].contains(&stem) {
                return None;
            }
            if stem != "mod" {
                module.push(stem.to_string());
            }
            let text = fs::read_to_string(file).unwrap();
            let code = code(production(&text));
            Some(Source { module, file: format!("src/{}", rel.display()), code })
        })
        .collect()
}

/// Which file imports which, and through which paths: `from -> to ->
/// paths`, keyed by file name. A path names the file of the module it
/// reaches; an item a `mod.rs` re-exports (`pub use detect::read`) is
/// followed to the file that defines it, and a `mod.rs`'s re-exports
/// themselves are no import of its own: it is the folder's face.
type Graph = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

fn import_graph(sources: &[Source]) -> Graph {
    let by_module: BTreeMap<&[String], &Source> =
        sources.iter().map(|s| (s.module.as_slice(), s)).collect();
    let children = |module: &[String]| -> BTreeSet<String> {
        let deeper = by_module.keys().filter(|m| m.len() == module.len() + 1);
        deeper.filter(|m| m.starts_with(module)).filter_map(|m| m.last().cloned()).collect()
    };
    let paths: BTreeMap<&[String], Vec<UsePath>> = sources
        .iter()
        .map(|s| (s.module.as_slice(), use_paths(&s.code, &children(&s.module))))
        .collect();
    let mut reexports: BTreeMap<&[String], BTreeMap<String, Vec<String>>> = BTreeMap::new();
    for (&module, used) in &paths {
        for u in used.iter().filter(|u| u.reexport) {
            let Some(last) = u.path.last().filter(|l| *l != "*" && *l != "self") else { continue };
            let name = u.alias.clone().unwrap_or_else(|| last.clone());
            if let Some(target) = absolute(module, &u.path) {
                reexports.entry(module).or_default().insert(name, target);
            }
        }
    }
    // The module whose file defines what `path` names; None outside src/.
    let resolve = |mut path: Vec<String>| -> Option<Vec<String>> {
        for _ in 0..8 {
            let depth = (1..=path.len()).rev().find(|&n| by_module.contains_key(&path[..n]))?;
            let (module, rest) = path.split_at(depth);
            let via = rest
                .first()
                .filter(|name| *name != "*" && *name != "self")
                .and_then(|name| reexports.get(module)?.get(name));
            let Some(target) = via else { return Some(module.to_vec()) };
            path = target.iter().chain(&rest[1..]).cloned().collect();
        }
        None
    };
    let mut graph = Graph::new();
    for source in sources {
        let face = source.file.ends_with("mod.rs");
        for u in &paths[source.module.as_slice()] {
            if u.reexport && face {
                continue;
            }
            let Some(target) = absolute(&source.module, &u.path).and_then(&resolve) else {
                continue;
            };
            if target != source.module {
                let to = by_module[target.as_slice()].file.clone();
                let edges = graph.entry(source.file.clone()).or_default();
                edges.entry(to).or_default().insert(u.path.join("::"));
            }
        }
    }
    graph
}

/// `path` as written in `module`, from the crate root.
fn absolute(module: &[String], path: &[String]) -> Option<Vec<String>> {
    let (mut base, mut rest) = match path.first().map(String::as_str) {
        Some("crate") => (Vec::new(), &path[1..]),
        _ => (module.to_vec(), path),
    };
    while let Some((first, tail)) = rest.split_first() {
        match first.as_str() {
            "self" => {}
            "super" => {
                base.pop()?;
            }
            _ => break,
        }
        rest = tail;
    }
    Some(base.into_iter().chain(rest.iter().cloned()).collect())
}

/// Each set of files that import one another round (a strongly connected
/// part of `graph`), as one cycle through them and every import between
/// them.
fn circles(graph: &Graph) -> Vec<String> {
    let nodes: Vec<&String> = graph.keys().collect();
    let mut found = Vec::new();
    let mut seen = BTreeSet::new();
    for &start in &nodes {
        if seen.contains(start) {
            continue;
        }
        let part: BTreeSet<&String> =
            reach(graph, start).intersection(&reach_back(graph, start)).copied().collect();
        seen.extend(part.iter().copied());
        if part.len() < 2 {
            continue;
        }
        let mut text = format!("cycle: {}", cycle_through(graph, start, &part).join(" -> "));
        for &from in &part {
            for (to, paths) in graph[from].iter().filter(|(to, _)| part.contains(to)) {
                let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
                text += &format!("\n  {from} -> {to}: {}", paths.join(", "));
            }
        }
        found.push(text);
    }
    found
}

/// The files `start` reaches, itself included.
fn reach<'a>(graph: &'a Graph, start: &'a String) -> BTreeSet<&'a String> {
    let mut out = BTreeSet::from([start]);
    let mut todo = vec![start];
    while let Some(at) = todo.pop() {
        for next in graph.get(at).into_iter().flat_map(BTreeMap::keys) {
            if out.insert(next) {
                todo.push(next);
            }
        }
    }
    out
}

/// The files that reach `start`, itself included.
fn reach_back<'a>(graph: &'a Graph, start: &'a String) -> BTreeSet<&'a String> {
    let mut out = BTreeSet::from([start]);
    loop {
        let more: Vec<&String> = graph
            .iter()
            .filter(|(from, to)| !out.contains(from) && to.keys().any(|t| out.contains(t)))
            .map(|(from, _)| from)
            .collect();
        if more.is_empty() {
            return out;
        }
        out.extend(more);
    }
}

/// A shortest way from `start` back to itself inside `part`.
fn cycle_through<'a>(graph: &'a Graph, start: &'a String, part: &BTreeSet<&String>) -> Vec<&'a str> {
    let mut came_from: BTreeMap<&String, &String> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(at) = queue.pop_front() {
        for next in graph[at].keys().filter(|n| part.contains(n)) {
            if next == start {
                let mut way = vec![start.as_str()];
                let mut back = at;
                while back != start {
                    way.push(back.as_str());
                    back = came_from[back];
                }
                way.push(start.as_str());
                way.reverse();
                return way;
            }
            if !came_from.contains_key(next) {
                came_from.insert(next, at);
                queue.push_back(next);
            }
        }
    }
    vec![start.as_str()]
}

/// No file imports, through others, a file that imports it: every folder
/// reads bottom up (a `mod.rs` that dispatches to its files keeps what
/// they share in a leaf file), and so does src/ across folders.
fn no_module_circles() {
    let found = circles(&import_graph(&sources()));
    assert!(found.is_empty(), "files that import themselves back:\n{}", found.join("\n"));
}

fn use_paths_reads_groups_renames_and_expressions() {
    let text = "use crate::{table::{gpt, mbr::Mbr}, io::ReadAt};\n\
                use super::{a, b::{self, C as D}};\n\
                pub use detect::{read, TableError};\n\
                // crate::comment::ignored\n\
                let x = crate::units::human_size(1); // super::trailing\n\
                other::crate::no; Kind::Ext; super::super::up::Item;\n\
                crate::cli::audit::run(a);";
    let children = BTreeSet::from(["detect".to_string()]);
    let found: Vec<(String, Option<String>, bool)> = use_paths(&code(text), &children)
        .into_iter()
        .map(|u| (u.path.join("::"), u.alias, u.reexport))
        .collect();
    let want = [
        ("crate::table::gpt", None, false),
        ("crate::table::mbr::Mbr", None, false),
        ("crate::io::ReadAt", None, false),
        ("super::a", None, false),
        ("super::b::self", None, false),
        ("super::b::C", Some("D"), false),
        ("self::detect::read", None, true),
        ("self::detect::TableError", None, true),
        ("crate::units::human_size", None, false),
        ("super::super::up::Item", None, false),
        ("crate::cli::audit::run", None, false),
    ];
    let want: Vec<(String, Option<String>, bool)> =
        want.iter().map(|&(p, a, r)| (p.to_string(), a.map(String::from), r)).collect();
    assert_eq!(found, want);
}

/// A circle that only shows once a re-export is followed to its file.
fn circles_are_found_through_re_exports() {
    let source = |module: &str, file: &str, code: &str| Source {
        module: module.split("::").map(String::from).collect(),
        file: file.to_string(),
        code: code.to_string(),
    };
    let sources = [
        source("a", "a/mod.rs", "pub use x::X;\nfn f() { y::g() }"),
        source("a::x", "a/x.rs", "pub struct X;\nfn h() { super::y::g() }"),
        source("a::y", "a/y.rs", "use super::X;\npub fn g() {}"),
        source("b", "b.rs", "use crate::a::X;"),
    ];
    let graph = import_graph(&sources);
    assert_eq!(graph["b.rs"].keys().collect::<Vec<_>>(), ["a/x.rs"]);
    assert_eq!(
        circles(&graph),
        ["cycle: a/x.rs -> a/y.rs -> a/x.rs\n  a/x.rs -> a/y.rs: super::y::g\n  \
          a/y.rs -> a/x.rs: super::X"]
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

/// The public API: the names between the markers in ARCHITECTURE.md, each
/// in backticks.
fn api_list() -> BTreeSet<String> {
    let doc = fs::read_to_string(Path::new(ROOT).join("ARCHITECTURE.md")).unwrap();
    let start = doc.find("<!-- api -->").expect("ARCHITECTURE.md has an api block");
    let end = doc.find("<!-- /api -->").expect("the api block ends");
    let block = &doc[start..end];
    block.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

/// What a crate root makes public: the name of each `pub` item (`pub fn`,
/// `pub struct`, ..., a `pub mod` not marked `#[doc(hidden)]`) and each
/// name a `pub use` gives (a group's items, a rename's new name, `*` for
/// a glob); `pub(crate)` and private items aside.
fn root_items(lib: &str) -> BTreeSet<String> {
    let code = code(lib);
    let mut out = BTreeSet::new();
    // The root's statements: up to a `;` or a closing brace at depth 0.
    let (mut depth, mut from) = (0usize, 0);
    let mut statements = Vec::new();
    for (i, c) in code.char_indices() {
        match c {
            '{' | '(' | '[' => depth += 1,
            '}' | ')' | ']' => {
                depth = depth.saturating_sub(1);
                let head = code[from..i].split('{').next().unwrap_or_default();
                let is_use = head.split_whitespace().any(|w| w == "use");
                if depth == 0 && c == '}' && !is_use {
                    statements.push(&code[from..=i]);
                    from = i + 1;
                }
            }
            ';' if depth == 0 => {
                statements.push(&code[from..=i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    for statement in statements {
        let mut item = statement.trim();
        let mut hidden = false;
        while item.starts_with("#[") {
            let end = item.find(']').map_or(item.len(), |i| i + 1);
            hidden |= item[..end].replace(' ', "") == "#[doc(hidden)]";
            item = item[end..].trim_start();
        }
        let Some(rest) = item.strip_prefix("pub ") else { continue };
        if let Some(tree) = rest.strip_prefix("use ") {
            let mut cursor = Cursor { text: tree, at: 0 };
            let mut paths = Vec::new();
            cursor.tree(Vec::new(), &mut paths);
            for (path, alias) in paths {
                let last = path.iter().rev().find(|w| *w != "self").cloned().unwrap_or_default();
                out.insert(alias.unwrap_or(last));
            }
            continue;
        }
        let words: Vec<&str> = rest
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| !w.is_empty())
            .collect();
        let kinds = ["mod", "fn", "struct", "enum", "union", "trait", "type", "const", "static"];
        let Some(at) = words.iter().position(|w| kinds.contains(w)) else { continue };
        // `pub const fn f`: the name follows the last keyword.
        let at = if words.get(at + 1) == Some(&"fn") { at + 1 } else { at };
        if words[at] == "mod" && hidden {
            continue;
        }
        if let Some(name) = words.get(at + 1) {
            out.insert(name.to_string());
        }
    }
    out
}

/// Every item src/lib.rs makes public is listed in ARCHITECTURE.md's api
/// block, and every name listed there is one: a new `pub` item at the
/// root fails here until it is listed. The modules, `#[doc(hidden)]`, are
/// the CLI's and are listed as layers instead.
fn public_api_is_listed() {
    let lib = fs::read_to_string(Path::new(ROOT).join("src/lib.rs")).unwrap();
    let public = root_items(&lib);
    let listed = api_list();
    assert!(public.len() > 20, "src/lib.rs makes {} items public: {public:?}", public.len());
    let unlisted: Vec<&String> = public.difference(&listed).collect();
    let gone: Vec<&String> = listed.difference(&public).collect();
    assert!(
        unlisted.is_empty() && gone.is_empty(),
        "public at the crate root but not in ARCHITECTURE.md's api block: {unlisted:?}; \
         listed there but not public: {gone:?}"
    );
}

fn root_items_reads_uses_groups_renames_and_items() {
    let lib = "//! doc\n\
        pub use a::{b, c as d, e::{f, self}};\n\
        pub use g::h;\n\
        pub use i::*;\n\
        pub(crate) use j::k;\n\
        use l::m;\n\
        #[doc(hidden)]\npub mod hidden;\n\
        pub mod shown;\n\
        pub(crate) mod inner;\n\
        #[derive(Debug)]\npub struct S { pub x: u8 }\n\
        pub enum E { A, B }\n\
        pub const fn cf() {}\n\
        pub fn f2(x: u8) -> u8 { if x > 0 { x } else { 1 } }\n\
        pub const C: u8 = 1;\n\
        fn private() {}\n\
        pub trait T { fn t(&self); }\n\
        pub type A = u8; // pub fn commented() {}\n";
    let got: Vec<String> = root_items(lib).into_iter().collect();
    let want =
        ["*", "A", "C", "E", "S", "T", "cf", "d", "b", "e", "f", "f2", "h", "shown"].map(String::from);
    let mut want = want.to_vec();
    want.sort();
    assert_eq!(got, want);
}

/// The examples show the library as an installer would use it: only the
/// items at its root, no module paths.
fn examples_use_only_the_root() {
    let listed = api_list();
    let mut sources = Vec::new();
    files(&Path::new(ROOT).join("examples"), &mut sources);
    assert!(sources.len() >= 2, "examples/ has {} files", sources.len());
    let mut found = Vec::new();
    for file in &sources {
        let code = code(&fs::read_to_string(file).unwrap());
        let mut rest = code.as_str();
        while let Some(i) = rest.find("blkalign::") {
            let mut cursor = Cursor { text: &rest[i..], at: 0 };
            let mut paths = Vec::new();
            cursor.tree(Vec::new(), &mut paths);
            for (path, _) in paths {
                if path.len() != 2 || !listed.contains(&path[1]) {
                    found.push(format!("{}: {}", file.display(), path.join("::")));
                }
            }
            rest = &rest[i + cursor.at.max(1)..];
        }
    }
    assert!(found.is_empty(), "examples use what is not the root's API: {found:?}");
}

/// Distinct names for distinct things: no two `pub` types of the library
/// (outside its unit tests) share a name, so a caller never has to tell
/// `plan::Label` from `table::Label` by its path.
fn no_two_public_types_share_a_name() {
    let src = Path::new(ROOT).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    all.sort();
    let kinds = ["struct", "enum", "trait", "type", "union"];
    let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for file in all.iter().filter(|f| !f.starts_with(src.join("cli")) && !test_only(f)) {
        let text = fs::read_to_string(file).unwrap();
        for line in code(production(&text)).lines() {
            let Some(rest) = line.trim_start().strip_prefix("pub ") else { continue };
            let mut words = rest.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'));
            if !words.next().is_some_and(|w| kinds.contains(&w)) {
                continue;
            }
            if let Some(name) = words.next().filter(|n| !n.is_empty()) {
                let place = file.strip_prefix(ROOT).unwrap().display().to_string();
                seen.entry(name.to_string()).or_default().push(place);
            }
        }
    }
    assert!(seen.len() > 100, "{} public types found", seen.len());
    let shared: Vec<String> = seen
        .iter()
        .filter(|(_, places)| places.len() > 1)
        .map(|(name, places)| format!("{name}: {}", places.join(", ")))
        .collect();
    assert!(shared.is_empty(), "public types sharing a name:\n{}", shared.join("\n"));
}
