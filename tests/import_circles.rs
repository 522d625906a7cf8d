#![allow(clippy::unwrap_used, clippy::expect_used)]
//! No import circles: in every workspace crate but the embedded API server, the modules'
//! references to each other form no circle.
//!
//! A module here is a **file** (`x.rs`, `x/mod.rs`, or a `#[path]` file): inline modules,
//! `#[cfg(test)] mod tests { … }` included, belong to the file they are written in. Folders
//! would hide a circle between two files of one folder, and a folder's files are where a
//! circle is cheapest to break.
//!
//! A module refers to another when its source names a path into it: `crate::a::b`,
//! `super::…`, `self::…`, or a child module's name (`child::…`), in `use` items and in code
//! alike (macros' `$crate::…` count for the file the macro is written in). A path is resolved
//! to the file that defines its item: through the re-exports (`pub use`, `pub(crate) use`) of
//! the modules it passes, so `crate::Error` leads to the module `Error` is written in. A
//! re-export itself is not a reference (the modules that use the name refer to its source),
//! nor is a `mod` declaration. Comments, doc links and string literals are not read.
//!
//! Each crate's library and binaries are read from their roots, following `mod` declarations;
//! test, bench and example targets are not. The embedded API server (`src/apiserver` and its
//! object semantics, `src/apiserver/semantics`: a stand-in for tests and development, shaped
//! after the Go packages it follows) is exempt.
//!
//! The graph's strongly connected components (Tarjan) with more than one module are the
//! circles; the test fails naming each one's modules, except the circles of other crates not
//! broken yet, listed exactly in [`KNOWN`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Crates whose circles are not checked, as paths from the workspace root.
const EXEMPT: &[&str] = &["src/apiserver", "src/apiserver/semantics"];

/// Circles not broken yet, each exactly as found (a crate root, the modules of the circle):
/// one that grows, shrinks or disappears fails the test until this list says so, and a new
/// one fails it.
const KNOWN: &[(&str, &[&str])] = &[
    (
        "benches/scale/src/lib.rs",
        &[
            "crate::args",
            "crate::report",
            "crate::report::tenants",
            "crate::scenario",
            "crate::scenario::pool",
            "crate::scenario::tenants",
            "crate::scenario::tenants::burst",
            "crate::scenario::tenants::storm",
        ],
    ),
    (
        "src/api/lib.rs",
        &[
            "crate",
            "crate::common",
            "crate::gpu_instance",
            "crate::lifetime",
            "crate::snapshot",
            "crate::volume",
        ],
    ),
    (
        "src/simulator/lib.rs",
        &["crate::engine", "crate::engine::accrual"],
    ),
    (
        "src/simulator/lib.rs",
        &["crate::engine::instances", "crate::engine::volumes"],
    ),
    (
        "src/simulator/lib.rs",
        &[
            "crate::handlers",
            "crate::handlers::account",
            "crate::handlers::ai",
            "crate::handlers::catalog",
            "crate::handlers::firewalls",
            "crate::handlers::images",
            "crate::handlers::instances",
            "crate::handlers::snapshots",
            "crate::handlers::ssh_keys",
            "crate::handlers::startup_scripts",
            "crate::handlers::volumes",
        ],
    ),
];

#[test]
fn no_crate_has_an_import_circle() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for member in members(&root) {
        if EXEMPT.contains(&member.as_str()) {
            continue;
        }
        for target in targets(&root.join(&member)) {
            let crate_root = target.strip_prefix(&root).unwrap_or(&target).display();
            for circle in Graph::read(&target).circles() {
                found.push((crate_root.to_string(), circle));
            }
        }
    }
    let is_known = |(crate_root, circle): &(String, Vec<String>)| {
        KNOWN
            .iter()
            .any(|(r, modules)| r == crate_root && modules == circle)
    };
    let new: Vec<String> = found
        .iter()
        .filter(|c| !is_known(c))
        .map(|(crate_root, circle)| {
            format!(
                "{crate_root} ({} modules): {}",
                circle.len(),
                circle.join(", ")
            )
        })
        .collect();
    assert!(
        new.is_empty(),
        "import circles (each line: a crate root and the modules of one circle):\n{}",
        new.join("\n")
    );
    let gone: Vec<String> = KNOWN
        .iter()
        .filter(|(r, modules)| {
            !found
                .iter()
                .any(|(crate_root, circle)| crate_root == r && circle == modules)
        })
        .map(|(r, modules)| format!("{r}: {}", modules.join(", ")))
        .collect();
    assert!(
        gone.is_empty(),
        "circles in KNOWN no longer found (remove them from the list):\n{}",
        gone.join("\n")
    );
}

/// The workspace's member folders, from the root manifest's `members = [...]`.
fn members(root: &Path) -> Vec<String> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let start = manifest.find("members = [").expect("a members list");
    let list = &manifest[start..];
    let end = list.find(']').unwrap();
    list[..end]
        .split('"')
        .skip(1)
        .step_by(2)
        .map(|member| member.to_string())
        .collect()
}

/// A package's library and binary roots: `[lib]`'s and `[[bin]]`'s `path`, or Cargo's
/// defaults (`src/lib.rs`, `src/main.rs`).
fn targets(package: &Path) -> Vec<PathBuf> {
    let manifest = std::fs::read_to_string(package.join("Cargo.toml")).unwrap();
    let mut roots = BTreeSet::new();
    let mut section = String::new();
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            section = line.to_string();
        } else if (section == "[lib]" || section == "[[bin]]")
            && let Some(value) = line.strip_prefix("path")
        {
            let path = value.trim_start().trim_start_matches('=').trim();
            roots.insert(package.join(path.trim_matches('"')));
        }
    }
    for default in ["src/lib.rs", "src/main.rs"] {
        if package.join(default).is_file() {
            roots.insert(package.join(default));
        }
    }
    roots.into_iter().collect()
}

// === Reading source ===

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    /// `::`
    Path,
    Punct(char),
    Str(String),
}

/// The tokens of `source` that paths and module declarations are made of: comments dropped,
/// string literals kept as their text (for `#[path]`), character literals and lifetimes
/// dropped, numbers left as identifiers.
fn tokens(source: &str) -> Vec<Token> {
    let chars: Vec<char> = source.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let ident_char = |c: char| c.is_alphanumeric() || c == '_';
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c.is_whitespace() {
            i += 1;
        } else if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == '"' || ((c == 'r' || c == 'b') && raw_or_byte_string(&chars, i)) {
            let (text, end) = string_literal(&chars, i);
            out.push(Token::Str(text));
            i = end;
        } else if c == '\'' {
            // A character literal ('a', '\n', '\u{1F600}') or a lifetime ('a).
            if next == Some('\\') {
                i += 3;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
                while i < chars.len() && ident_char(chars[i]) {
                    i += 1;
                }
            }
        } else if ident_char(c) {
            let start = i;
            while i < chars.len() && ident_char(chars[i]) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            out.push(Token::Ident(word.trim_start_matches("r#").to_string()));
        } else if c == ':' && next == Some(':') {
            out.push(Token::Path);
            i += 2;
        } else {
            out.push(Token::Punct(c));
            i += 1;
        }
    }
    out
}

/// Whether a string literal starts at `i` with a prefix: `r"`, `r#"`, `b"`, `br"`, `br#"`.
fn raw_or_byte_string(chars: &[char], i: usize) -> bool {
    if i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_') {
        return false;
    }
    let mut j = i;
    if chars.get(j) == Some(&'b') {
        j += 1;
    }
    if chars.get(j) == Some(&'r') {
        j += 1;
        while chars.get(j) == Some(&'#') {
            j += 1;
        }
    }
    j > i && chars.get(j) == Some(&'"')
}

/// The text of the string literal starting at `start` and the index just after it.
fn string_literal(chars: &[char], start: usize) -> (String, usize) {
    let mut i = start;
    let mut raw = false;
    if chars[i] == 'b' {
        i += 1;
    }
    let mut hashes = 0;
    if chars[i] == 'r' {
        raw = true;
        i += 1;
        while chars[i] == '#' {
            hashes += 1;
            i += 1;
        }
    }
    i += 1; // the opening quote
    let mut text = String::new();
    while i < chars.len() {
        if !raw && chars[i] == '\\' {
            text.push(chars[i]);
            if let Some(&escaped) = chars.get(i + 1) {
                text.push(escaped);
            }
            i += 2;
        } else if chars[i] == '"' && (0..hashes).all(|h| chars.get(i + 1 + h) == Some(&'#')) {
            return (text, i + 1 + hashes);
        } else {
            text.push(chars[i]);
            i += 1;
        }
    }
    (text, i)
}

// === The module graph ===

/// A logical module path from the crate root (`["plan", "core"]`; the root is `[]`).
type ModPath = Vec<String>;

#[derive(Default)]
struct Graph {
    /// The file modules, by logical path.
    files: BTreeSet<ModPath>,
    /// Every module (file or inline) and its child modules.
    children: BTreeMap<ModPath, BTreeSet<String>>,
    /// Re-exported names per module: name to the path it stands for.
    reexports: BTreeMap<ModPath, BTreeMap<String, ModPath>>,
    /// Every path each file names, already absolute.
    references: Vec<(ModPath, ModPath)>,
}

/// A module's file read: what it declares, what it names.
struct Parsed {
    tokens: Vec<Token>,
}

impl Graph {
    fn read(root: &Path) -> Graph {
        let mut graph = Graph::default();
        let mut pending = vec![(Vec::new(), root.to_path_buf(), true)];
        let mut sources = Vec::new();
        while let Some((path, file, owns_dir)) = pending.pop() {
            let source = std::fs::read_to_string(&file)
                .unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
            let parsed = Parsed {
                tokens: tokens(&source),
            };
            // The folder its `mod x;` files are found in.
            let dir = if owns_dir {
                file.parent().unwrap().to_path_buf()
            } else {
                file.with_extension("")
            };
            let declaring_dir = file.parent().unwrap().to_path_buf();
            graph.files.insert(path.clone());
            for (declared, attr_path) in graph.declare(&path, &parsed) {
                let (child_file, child_owns_dir) = match attr_path {
                    Some(p) => (declaring_dir.join(p), true),
                    None => {
                        let name = declared.last().unwrap();
                        let flat = dir.join(format!("{name}.rs"));
                        if flat.is_file() {
                            (flat, false)
                        } else {
                            (dir.join(name).join("mod.rs"), true)
                        }
                    }
                };
                pending.push((declared, child_file, child_owns_dir));
            }
            sources.push((path, parsed));
        }
        for (path, parsed) in &sources {
            graph.collect_references(path, parsed);
        }
        graph
    }

    /// Records the modules `parsed` declares (inline ones and files), and its re-exports;
    /// answers the file modules to read, with their `#[path]`.
    fn declare(&mut self, file: &ModPath, parsed: &Parsed) -> Vec<(ModPath, Option<String>)> {
        let mut files = Vec::new();
        let mut walker = Walker::new(file);
        let t = &parsed.tokens;
        let mut path_attr: Option<String> = None;
        let mut i = 0;
        while i < t.len() {
            if t[i] == Token::Punct('#')
                && t.get(i + 1) == Some(&Token::Punct('['))
                && t.get(i + 2) == Some(&Token::Ident("path".into()))
                && t.get(i + 3) == Some(&Token::Punct('='))
                && let Some(Token::Str(p)) = t.get(i + 4)
            {
                path_attr = Some(p.clone());
            }
            if t[i] == Token::Ident("mod".into())
                && let Some(Token::Ident(name)) = t.get(i + 1)
            {
                let mut declared = walker.current();
                declared.push(name.clone());
                self.children
                    .entry(walker.current())
                    .or_default()
                    .insert(name.clone());
                // An inline module (`mod x { … }`) is entered by the walker at its `{`.
                if t.get(i + 2) == Some(&Token::Punct(';')) {
                    files.push((declared, path_attr.take()));
                }
            }
            if t[i] == Token::Ident("use".into()) && is_reexport(t, i) {
                let module = walker.current();
                for (mut target, alias) in use_tree(t, i + 1) {
                    if target.last().is_some_and(|l| l == "self") {
                        target.pop();
                    }
                    let Some(name) = alias.or_else(|| target.last().cloned()) else {
                        continue;
                    };
                    if name == "*" || name == "_" {
                        continue;
                    }
                    if let Some(absolute) = self.absolute(&module, &target) {
                        self.reexports
                            .entry(module.clone())
                            .or_default()
                            .insert(name, absolute);
                    }
                }
            }
            walker.step(t, i);
            i += 1;
        }
        files
    }

    /// Records every path the file names.
    fn collect_references(&mut self, file: &ModPath, parsed: &Parsed) {
        let t = &parsed.tokens;
        let mut walker = Walker::new(file);
        let mut found = Vec::new();
        let mut i = 0;
        while i < t.len() {
            if t[i] == Token::Ident("use".into()) && (i == 0 || t[i - 1] != Token::Path) {
                let end = (i..t.len())
                    .find(|&j| t[j] == Token::Punct(';'))
                    .unwrap_or(t.len());
                if !is_reexport(t, i) {
                    let module = walker.current();
                    for (target, _) in use_tree(t, i + 1) {
                        if let Some(absolute) = self.absolute(&module, &target) {
                            found.push(absolute);
                        }
                    }
                }
                while i < end {
                    walker.step(t, i);
                    i += 1;
                }
                continue;
            }
            let after_path = i > 0 && t[i - 1] == Token::Path;
            if let Token::Ident(first) = &t[i]
                && !after_path
                && t.get(i + 1) == Some(&Token::Path)
            {
                let mut segments = vec![first.clone()];
                let mut j = i + 1;
                while t.get(j) == Some(&Token::Path)
                    && let Some(Token::Ident(next)) = t.get(j + 1)
                {
                    segments.push(next.clone());
                    j += 2;
                }
                if let Some(absolute) = self.absolute(&walker.current(), &segments) {
                    found.push(absolute);
                }
                while i < j - 1 {
                    walker.step(t, i);
                    i += 1;
                }
            }
            walker.step(t, i);
            i += 1;
        }
        for target in found {
            self.references.push((file.clone(), target));
        }
    }

    /// `segments`, named in `module`, as a path from the crate root; `None` for a path into
    /// another crate (or a name this graph does not know).
    fn absolute(&self, module: &ModPath, segments: &[String]) -> Option<ModPath> {
        let first = segments.first()?;
        let mut base = module.clone();
        let mut rest = segments;
        match first.as_str() {
            "crate" => {
                base.clear();
                rest = &segments[1..];
            }
            "self" => rest = &segments[1..],
            "super" => {
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop()?;
                    rest = &rest[1..];
                }
            }
            _ => {
                let is_child = self
                    .children
                    .get(module)
                    .is_some_and(|children| children.contains(first));
                if !is_child {
                    return None;
                }
            }
        }
        base.extend(rest.iter().cloned());
        Some(base)
    }

    /// The file module an absolute path's item is written in, following re-exports.
    fn file_of(&self, path: &ModPath) -> ModPath {
        let mut path = path.clone();
        for _ in 0..16 {
            // The deepest module the path passes through, and the name after it.
            let mut depth = 0;
            while depth < path.len()
                && self
                    .children
                    .get(&path[..depth])
                    .is_some_and(|c| c.contains(&path[depth]))
            {
                depth += 1;
            }
            let module = path[..depth].to_vec();
            let reexported = path
                .get(depth)
                .and_then(|name| self.reexports.get(&module)?.get(name));
            match reexported {
                Some(target) if *target != path[..=depth] => {
                    let mut next = target.clone();
                    next.extend(path[depth + 1..].iter().cloned());
                    path = next;
                }
                _ => {
                    let mut module = module;
                    while !self.files.contains(&module) {
                        module.pop();
                    }
                    return module;
                }
            }
        }
        path.truncate(0);
        path
    }

    /// The strongly connected components of more than one file module, each as the modules'
    /// names (`crate::a::b`), sorted.
    fn circles(&self) -> Vec<Vec<String>> {
        let nodes: Vec<&ModPath> = self.files.iter().collect();
        let index: BTreeMap<&ModPath, usize> =
            nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
        let mut edges = vec![BTreeSet::new(); nodes.len()];
        for (from, to) in &self.references {
            let to = self.file_of(to);
            if let (Some(&a), Some(&b)) = (index.get(from), index.get(&to))
                && a != b
            {
                edges[a].insert(b);
            }
        }
        let mut circles: Vec<Vec<String>> = tarjan(&edges)
            .into_iter()
            .filter(|component| component.len() > 1)
            .map(|component| {
                let mut names: Vec<String> = component
                    .into_iter()
                    .map(|n| {
                        std::iter::once("crate")
                            .chain(nodes[n].iter().map(String::as_str))
                            .collect::<Vec<_>>()
                            .join("::")
                    })
                    .collect();
                names.sort();
                names
            })
            .collect();
        circles.sort();
        circles
    }
}

/// Whether the `use` at `i` is `pub use` or `pub(…) use`.
fn is_reexport(t: &[Token], i: usize) -> bool {
    match i.checked_sub(1).map(|p| &t[p]) {
        Some(Token::Ident(word)) => word == "pub",
        Some(Token::Punct(')')) => (0..i)
            .rev()
            .find(|&j| t[j] == Token::Punct('('))
            .and_then(|j| j.checked_sub(1))
            .is_some_and(|j| t[j] == Token::Ident("pub".into())),
        _ => false,
    }
}

/// The paths of the use tree starting at `i` (after `use`), each with its `as` alias.
fn use_tree(t: &[Token], i: usize) -> Vec<(Vec<String>, Option<String>)> {
    let mut out = Vec::new();
    let mut i = i;
    if t.get(i) == Some(&Token::Path) {
        i += 1; // a leading `::` names an external crate; kept as its first segment
    }
    use_subtree(t, &mut i, Vec::new(), &mut out);
    out
}

fn use_subtree(
    t: &[Token],
    i: &mut usize,
    prefix: Vec<String>,
    out: &mut Vec<(Vec<String>, Option<String>)>,
) {
    let mut path = prefix;
    loop {
        match t.get(*i) {
            Some(Token::Ident(word)) => {
                path.push(word.clone());
                *i += 1;
                if t.get(*i) == Some(&Token::Path) {
                    *i += 1;
                    continue;
                }
                let mut alias = None;
                if t.get(*i) == Some(&Token::Ident("as".into()))
                    && let Some(Token::Ident(name)) = t.get(*i + 1)
                {
                    alias = Some(name.clone());
                    *i += 2;
                }
                out.push((path, alias));
                return;
            }
            Some(Token::Punct('*')) => {
                *i += 1;
                path.push("*".into());
                out.push((path, None));
                return;
            }
            Some(Token::Punct('{')) => {
                *i += 1;
                loop {
                    match t.get(*i) {
                        Some(Token::Punct('}')) => {
                            *i += 1;
                            return;
                        }
                        Some(Token::Punct(',')) => *i += 1,
                        None => return,
                        _ => use_subtree(t, i, path.clone(), out),
                    }
                }
            }
            _ => return,
        }
    }
}

/// Which inline module a token is in, as a file's tokens are walked.
struct Walker {
    file: ModPath,
    /// The inline modules entered, each with the brace depth its `{` opened.
    inline: Vec<(String, usize)>,
    depth: usize,
    opening: Option<usize>,
}

impl Walker {
    fn new(file: &ModPath) -> Self {
        Walker {
            file: file.clone(),
            inline: Vec::new(),
            depth: 0,
            opening: None,
        }
    }

    fn current(&self) -> ModPath {
        let mut path = self.file.clone();
        path.extend(self.inline.iter().map(|(name, _)| name.clone()));
        path
    }

    /// Notes that an inline module `name` opens with the `{` at token `at`.
    fn enter(&mut self, name: &str, at: usize) {
        self.opening = Some(at);
        self.inline.push((name.to_string(), usize::MAX));
    }

    fn step(&mut self, t: &[Token], i: usize) {
        if t[i] == Token::Ident("mod".into())
            && let Some(Token::Ident(name)) = t.get(i + 1)
            && t.get(i + 2) == Some(&Token::Punct('{'))
        {
            self.enter(name, i + 2);
        }
        match t[i] {
            Token::Punct('{') => {
                self.depth += 1;
                if self.opening == Some(i) {
                    self.opening = None;
                    if let Some(last) = self.inline.last_mut() {
                        last.1 = self.depth;
                    }
                }
            }
            Token::Punct('}') => {
                if self.inline.last().is_some_and(|(_, d)| *d == self.depth) {
                    self.inline.pop();
                }
                self.depth = self.depth.saturating_sub(1);
            }
            _ => {}
        }
    }
}

/// Tarjan's strongly connected components of a graph given as adjacency sets.
fn tarjan(edges: &[BTreeSet<usize>]) -> Vec<Vec<usize>> {
    struct State<'a> {
        edges: &'a [BTreeSet<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        components: Vec<Vec<usize>>,
    }
    fn visit(s: &mut State, v: usize) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for &w in s.edges[v].iter() {
            match s.index[w] {
                None => {
                    visit(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(iw) if s.on_stack[w] => s.low[v] = s.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            s.components.push(component);
        }
    }
    let n = edges.len();
    let mut s = State {
        edges,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        components: Vec::new(),
    };
    for v in 0..n {
        if s.index[v].is_none() {
            visit(&mut s, v);
        }
    }
    s.components
}

// === The reader's own tests ===

fn graph_of(files: &[(&str, &str)]) -> Graph {
    let dir = std::env::temp_dir().join(format!(
        "import-circles-{}-{}",
        std::process::id(),
        files.len()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let graph = Graph::read(&dir.join("lib.rs"));
    let _ = std::fs::remove_dir_all(&dir);
    graph
}

#[test]
fn a_circle_through_crate_super_and_reexports_is_found() {
    let graph = graph_of(&[
        ("lib.rs", "mod a;\nmod b;\npub use a::Thing;\n"),
        ("a.rs", "pub struct Thing;\nmod inner;\n"),
        (
            "a/inner.rs",
            "fn f() -> super::super::b::Other { todo!() }\n",
        ),
        (
            "b.rs",
            "// crate::a::Thing in a comment is no reference\npub struct Other;\nfn g(_: crate::Thing) {}\n",
        ),
    ]);
    // a::inner -> b -> a (through the root's re-export) is no circle: a refers to neither.
    assert!(graph.circles().is_empty());
    // An inline module's `super` is the file it is written in.
    let graph = graph_of(&[
        ("lib.rs", "mod a;\n"),
        ("a.rs", "mod part;\nuse part::Piece;\n"),
        (
            "a/part.rs",
            "pub struct Piece;\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
        ),
    ]);
    assert!(graph.circles().is_empty());
    let graph = graph_of(&[
        ("lib.rs", "mod a;\nmod b;\npub use a::Thing;\n"),
        (
            "a.rs",
            "use crate::b::{self, Other as O};\npub struct Thing(O);\nmod tests { use super::*; }\n",
        ),
        ("b.rs", "pub struct Other;\nfn g(_: crate::Thing) {}\n"),
    ]);
    assert_eq!(
        graph.circles(),
        vec![vec!["crate::a".to_string(), "crate::b".to_string()]]
    );
}
