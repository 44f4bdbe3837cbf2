//! Architecture invariants, checked by reading the source text.
//!
//! These are the "Architecture Invariant" paragraphs of `docs/ARCHITECTURE.md` made
//! executable, so a change that breaks one fails in CI instead of in review:
//!
//! - `src/server/` has no import cycle: every file can be read, tested and moved on its own,
//!   and the folders form layers (a `mod.rs` re-exports its children; a child never imports
//!   back from its `mod.rs`).
//! - `supervisors` knows nothing about workflows, runs or databases: it is a generic
//!   supervision crate.
//! - No SQL outside `src/store/`: other code calls store operations, so a second backend
//!   would implement the same ones. Server code may only name `rusqlite::Connection` as the
//!   parameter type of a store read closure.
//! - Operations (`src/server/ops/`) never own an OS process, and runners
//!   (`src/server/runners/`) never talk to clients.
//!
//! The checks use a small hand-written scanner, not a Rust parser: it blanks comments, string
//! and char literals, splits the rest into identifiers and punctuation, expands `use` trees,
//! and resolves `self::`, `super::`, `crate::server::` and child-module paths to files.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fs;
use std::path::{Path, PathBuf};

// ---------------------------------------------------------------------------------------
// The invariants
// ---------------------------------------------------------------------------------------

#[test]
fn server_files_have_no_import_cycle() {
    let tree = ModuleTree::from_sources(read_sources(&src_dir(), "server"));
    let graph = tree.import_graph();
    let cycles = describe_cycles(&tree, &graph);
    assert!(
        cycles.is_empty(),
        "src/server/ has import cycles. No file in a cycle can be understood, tested or moved \
         alone. Break each cycle: move the shared item into a leaf file both can import (one \
         that imports neither of them), or pass the value in as a parameter. A mod.rs may \
         re-export its children, so a child must not `use super::Item` from its own mod.rs; \
         import the item from the file that defines it.\n\n{}",
        cycles.join("\n")
    );
}

/// The brand name may appear in text the crate writes (its capture truncation marker); it
/// says nothing about workflows. Remove this to forbid even that.
const PRODUCT_NAME: &str = "pi-workflows";

#[test]
fn supervisors_crate_knows_nothing_about_workflows() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("supervisors/src");
    let mut found = Vec::new();
    for path in rust_files(&root) {
        let text = lex(&read(&path)).without_comments;
        for (number, line) in text.lines().enumerate() {
            let lowered = line.to_lowercase().replace(PRODUCT_NAME, "");
            let workflow = lowered.contains("workflow");
            let other = ["run_id", "rusqlite", "pi_workflows"]
                .iter()
                .any(|word| line.contains(word));
            if workflow || other {
                found.push(format!("{}:{}: {}", shown(&path), number + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the supervisors crate must know nothing about workflows, runs or databases. Keep \
         such knowledge in pi-workflows and hand supervisors only generic specs (a program, \
         its arguments, restart and shutdown policy):\n{}",
        found.join("\n")
    );
}

/// SQL statement starts; `UPDATE` counts only with ` SET ` in the same literal.
const SQL_MARKERS: [&str; 2] = ["SELECT ", "INSERT INTO"];
/// Connection methods that run SQL.
const SQL_METHODS: [&str; 5] = [
    ".prepare(",
    ".prepare_cached(",
    ".execute(",
    ".execute_batch(",
    ".query_row(",
];

#[test]
fn only_the_store_speaks_sql() {
    let src = src_dir();
    let store = src.join("store");
    let mut found = Vec::new();
    for path in rust_files(&src).into_iter().filter(|path| !path.starts_with(&store)) {
        let lexed = lex(&read(&path));
        let problems = sql_in_code(&lexed.code)
            .into_iter()
            .chain(sql_in_strings(&lexed.strings));
        found.extend(problems.map(|(line, what)| format!("{}:{line}: {what}", shown(&path))));
    }
    assert!(
        found.is_empty(),
        "only src/store/ speaks SQL. Add a store operation (a pub fn in the store aggregate \
         module) and call it; outside the store, `rusqlite::Connection` may appear only as the \
         parameter type of a store read closure:\n{}",
        found.join("\n")
    );
}

#[test]
fn ops_never_own_a_process() {
    let forbidden = [
        "supervisors::process",
        "ProcessChild",
        "spawn_with_channel",
        "ProcessActor",
    ];
    let found = mentions_under("server/ops", &forbidden);
    assert!(
        found.is_empty(),
        "an operation (src/server/ops/) must never own an OS process. Send a message to the \
         runner or resolver actor that owns the process instead:\n{}",
        found.join("\n")
    );
}

#[test]
fn runners_never_talk_to_clients() {
    let forbidden = [
        "ClientMessage",
        "crate::server::clients",
        "super::super::clients",
        "super::clients",
    ];
    let found = mentions_under("server/runners", &forbidden);
    assert!(
        found.is_empty(),
        "a runner (src/server/runners/) must never talk to clients. Commit to the store; \
         clients see the change through feeds and views:\n{}",
        found.join("\n")
    );
}

#[test]
fn server_sockets_go_through_the_read_only_registration() {
    let forbidden = ["into_split", "OwnedReadHalf", "OwnedWriteHalf", "UnixStream::from_std"];
    let found = mentions_under("server", &forbidden);
    assert!(
        found.is_empty(),
        "the server's end of a Unix stream socket goes through `server::socket::split`: \
         `tokio`'s stream registers for \"writable\" too, which wakes the async worker each \
         time the peer reads what the server wrote:\n{}",
        found.join("\n")
    );
}

// ---------------------------------------------------------------------------------------
// Files
// ---------------------------------------------------------------------------------------

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|err| panic!("cannot read {}: {err}", path.display()))
}

/// A path as shown in messages: relative to the repository.
fn shown(path: &Path) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    path.strip_prefix(root).unwrap_or(path).display().to_string()
}

/// Every `.rs` file below `dir`, sorted; none if `dir` does not exist.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = fs::read_dir(&dir) else { continue };
        for path in entries.map(|entry| entry.expect("a directory entry").path()) {
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// `(path relative to src/, text)` of every `.rs` file below `src/<folder>`.
fn read_sources(src: &Path, folder: &str) -> Vec<(String, String)> {
    rust_files(&src.join(folder))
        .iter()
        .map(|path| {
            let relative = path.strip_prefix(src).expect("below src/");
            (relative.to_string_lossy().replace('\\', "/"), read(path))
        })
        .collect()
}

/// `file:line: text` for each line (outside comments) of `src/<folder>/**.rs` that mentions a
/// forbidden string, directly or through a grouped `use`. Nothing if the folder is missing.
fn mentions_under(folder: &str, forbidden: &[&str]) -> Vec<String> {
    let dir = src_dir().join(folder);
    if !dir.is_dir() {
        eprintln!("src/{folder}/ does not exist yet: nothing to check");
        return Vec::new();
    }
    rust_files(&dir)
        .iter()
        .flat_map(|path| mentions_in(path, forbidden))
        .collect()
}

fn mentions_in(path: &Path, forbidden: &[&str]) -> Vec<String> {
    let mentions = |text: &str| forbidden.iter().any(|word| text.contains(word));
    let lexed = lex(&read(path));
    let mut found: Vec<String> = (lexed.without_comments.lines().enumerate())
        .filter(|(_, line)| mentions(line))
        .map(|(number, line)| format!("{}:{}: {}", shown(path), number + 1, line.trim()))
        .collect();
    if found.is_empty() {
        // A grouped import (`use supervisors::{process::X}`) names the path only in pieces.
        let imports = use_paths(&tokenize(&lexed.code))
            .into_iter()
            .map(|path| path.join("::"));
        found.extend(
            imports
                .filter(|import| mentions(import))
                .map(|import| format!("{}: use {import}", shown(path))),
        );
    }
    found
}

// ---------------------------------------------------------------------------------------
// SQL detection
// ---------------------------------------------------------------------------------------

/// `(line, what)` for each use of rusqlite other than naming `rusqlite::Connection`, and each
/// call of a connection method that runs SQL.
fn sql_in_code(code: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (number, line) in code.lines().enumerate() {
        let named_other = word_positions(line, "rusqlite")
            .into_iter()
            .any(|at| !is_word_at(line, at + "rusqlite".len(), "::Connection"));
        if named_other {
            found.push((
                number + 1,
                format!("rusqlite used beyond `rusqlite::Connection`: {}", line.trim()),
            ));
        }
        if let Some(method) = SQL_METHODS.iter().find(|method| line.contains(*method)) {
            found.push((number + 1, format!("`{method}` runs SQL: {}", line.trim())));
        }
    }
    found
}

/// `(line, what)` for each string literal that looks like an SQL statement.
fn sql_in_strings(strings: &[StringLiteral]) -> Vec<(usize, String)> {
    strings
        .iter()
        .filter(|literal| is_sql(&literal.text))
        .map(|literal| (literal.line, format!("SQL in a string literal: {:?}", literal.text)))
        .collect()
}

fn is_sql(text: &str) -> bool {
    SQL_MARKERS.iter().any(|marker| text.contains(marker)) || (text.contains("UPDATE ") && text.contains(" SET "))
}

/// Byte offsets where `word` starts as a whole identifier in `line`.
fn word_positions(line: &str, word: &str) -> Vec<usize> {
    line.match_indices(word)
        .map(|(at, _)| at)
        .filter(|&at| !line[..at].chars().next_back().is_some_and(is_ident_char))
        .filter(|&at| !line[at + word.len()..].chars().next().is_some_and(is_ident_char))
        .collect()
}

/// `line[at..]` starts with `text` and the identifier ends there.
fn is_word_at(line: &str, at: usize, text: &str) -> bool {
    let rest = &line[at..];
    rest.starts_with(text) && !rest[text.len()..].chars().next().is_some_and(is_ident_char)
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

// ---------------------------------------------------------------------------------------
// Lexing: comments, strings and chars
// ---------------------------------------------------------------------------------------

/// A source file three ways; every view keeps the line structure of the original.
#[derive(Debug, Default)]
struct Lexed {
    /// Comments blanked; string and char literals kept.
    without_comments: String,
    /// Comments, string literals and char literals blanked.
    code: String,
    /// The contents of each string literal, with the line it starts on.
    strings: Vec<StringLiteral>,
}

#[derive(Debug)]
struct StringLiteral {
    line: usize,
    text: String,
}

fn lex(source: &str) -> Lexed {
    let mut lexer = Lexer {
        chars: source.chars().collect(),
        at: 0,
        line: 1,
        out: Lexed::default(),
    };
    while lexer.at < lexer.chars.len() {
        lexer.step();
    }
    lexer.out
}

struct Lexer {
    chars: Vec<char>,
    at: usize,
    line: usize,
    out: Lexed,
}

impl Lexer {
    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.at + ahead).copied()
    }

    fn step(&mut self) {
        match (self.peek(0), self.peek(1)) {
            (Some('/'), Some('/')) => self.line_comment(),
            (Some('/'), Some('*')) => self.block_comment(),
            (Some('"'), _) => self.quoted_string(),
            (Some('\''), _) => self.char_or_lifetime(),
            (Some('r'), _) if self.raw_string_hashes().is_some() => self.raw_string(),
            _ => self.code_char(),
        }
    }

    /// Take one character into every view as code.
    fn code_char(&mut self) {
        let c = self.take();
        self.out.without_comments.push(c);
        self.out.code.push(c);
    }

    /// Take one character inside a comment: blank in every view.
    fn comment_char(&mut self) {
        let c = self.take();
        let blank = if c == '\n' { '\n' } else { ' ' };
        self.out.without_comments.push(blank);
        self.out.code.push(blank);
    }

    /// Take one character of a string or char literal: kept without comments, blank in code.
    fn literal_char(&mut self) -> char {
        let c = self.take();
        self.out.without_comments.push(c);
        self.out.code.push(if c == '\n' { '\n' } else { ' ' });
        c
    }

    fn take(&mut self) -> char {
        let c = self.chars[self.at];
        self.at += 1;
        if c == '\n' {
            self.line += 1;
        }
        c
    }

    fn line_comment(&mut self) {
        while self.peek(0).is_some_and(|c| c != '\n') {
            self.comment_char();
        }
    }

    /// Block comments nest in Rust.
    fn block_comment(&mut self) {
        let mut depth = 0;
        while self.peek(0).is_some() {
            match (self.peek(0), self.peek(1)) {
                (Some('/'), Some('*')) => depth += 1,
                (Some('*'), Some('/')) => depth -= 1,
                _ => {
                    self.comment_char();
                    continue;
                }
            }
            self.comment_char();
            self.comment_char();
            if depth == 0 {
                return;
            }
        }
    }

    /// `"..."` with escapes (a `b` or `c` prefix was already taken as code).
    fn quoted_string(&mut self) {
        let line = self.line;
        let mut text = String::new();
        self.literal_char();
        while let Some(c) = self.peek(0) {
            if c == '"' {
                break;
            }
            text.push(self.literal_char());
            if c == '\\' && self.peek(0).is_some() {
                text.push(self.literal_char());
            }
        }
        if self.peek(0).is_some() {
            self.literal_char();
        }
        self.out.strings.push(StringLiteral { line, text });
    }

    /// The number of `#` of a raw string starting here (`r"`, `r#"`, `br"`), if one does.
    fn raw_string_hashes(&self) -> Option<usize> {
        let before = |back: usize| self.at.checked_sub(back).map(|at| self.chars[at]);
        let starts_word = match before(1) {
            Some('b') => !before(2).is_some_and(is_ident_char),
            other => !other.is_some_and(is_ident_char),
        };
        let hashes = (1..).take_while(|&ahead| self.peek(ahead) == Some('#')).count();
        (starts_word && self.peek(1 + hashes) == Some('"')).then_some(hashes)
    }

    fn raw_string(&mut self) {
        let hashes = self.raw_string_hashes().expect("a raw string starts here");
        let line = self.line;
        for _ in 0..hashes + 2 {
            self.literal_char();
        }
        let mut text = String::new();
        while self.peek(0).is_some() && !self.raw_string_ends(hashes) {
            text.push(self.literal_char());
        }
        for _ in 0..hashes + 1 {
            if self.peek(0).is_some() {
                self.literal_char();
            }
        }
        self.out.strings.push(StringLiteral { line, text });
    }

    fn raw_string_ends(&self, hashes: usize) -> bool {
        self.peek(0) == Some('"') && (1..=hashes).all(|ahead| self.peek(ahead) == Some('#'))
    }

    /// `'x'`, `'\n'`, `'\''`, `'"'` are char literals; `'a` and `'outer:` are lifetimes/labels.
    fn char_or_lifetime(&mut self) {
        let is_char = self.peek(1) == Some('\\') || self.peek(2) == Some('\'');
        if !is_char {
            self.code_char();
            return;
        }
        self.literal_char();
        if self.literal_char() == '\\' {
            self.literal_char();
        }
        while self.peek(0).is_some_and(|c| c != '\'') {
            self.literal_char();
        }
        if self.peek(0).is_some() {
            self.literal_char();
        }
    }
}

// ---------------------------------------------------------------------------------------
// Tokens and paths
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    /// `::`
    PathSep,
    Punct(char),
}

impl Token {
    fn is_ident(&self, name: &str) -> bool {
        matches!(self, Token::Ident(ident) if ident == name)
    }
}

/// Identifiers (numbers too) and punctuation of code whose comments and literals are blank.
fn tokenize(code: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut chars = code.chars().peekable();
    while let Some(c) = chars.next() {
        if is_ident_char(c) {
            let mut ident = c.to_string();
            while let Some(next) = chars.next_if(|&next| is_ident_char(next)) {
                ident.push(next);
            }
            tokens.push(Token::Ident(ident));
        } else if c == ':' && chars.next_if_eq(&':').is_some() {
            tokens.push(Token::PathSep);
        } else if !c.is_whitespace() {
            tokens.push(Token::Punct(c));
        }
    }
    tokens
}

/// The tokens with every `#[cfg(test)] mod name { ... }` block left out.
fn without_test_modules(tokens: &[Token]) -> Vec<Token> {
    let mut kept = Vec::new();
    let mut at = 0;
    while at < tokens.len() {
        match test_module_end(tokens, at) {
            Some(end) => at = end,
            None => {
                kept.push(tokens[at].clone());
                at += 1;
            }
        }
    }
    kept
}

/// If `#[cfg(test)] mod name { ... }` starts at `at` (other attributes and `pub` allowed
/// between), the index just after its closing brace.
fn test_module_end(tokens: &[Token], at: usize) -> Option<usize> {
    if tokens[at] != Token::Punct('#') {
        return None;
    }
    let cfg_test = tokenize("#[cfg(test)]");
    if !tokens[at..].starts_with(&cfg_test) {
        return None;
    }
    let mut at = at + cfg_test.len();
    while tokens.get(at) == Some(&Token::Punct('#')) {
        at = after_group(tokens, at + 1, '[', ']')?;
    }
    if tokens.get(at).is_some_and(|token| token.is_ident("pub")) {
        at += 1;
        if tokens.get(at) == Some(&Token::Punct('(')) {
            at = after_group(tokens, at, '(', ')')?;
        }
    }
    if !tokens.get(at).is_some_and(|token| token.is_ident("mod")) {
        return None;
    }
    after_group(tokens, at + 2, '{', '}')
}

/// The index after the group opened by `open` at `at`, counting nested groups.
fn after_group(tokens: &[Token], at: usize, open: char, close: char) -> Option<usize> {
    if tokens.get(at) != Some(&Token::Punct(open)) {
        return None;
    }
    let mut depth = 0;
    for (index, token) in tokens.iter().enumerate().skip(at) {
        if *token == Token::Punct(open) {
            depth += 1;
        } else if *token == Token::Punct(close) {
            depth -= 1;
            if depth == 0 {
                return Some(index + 1);
            }
        }
    }
    None
}

/// Every path a `use` declaration names, groups expanded:
/// `use super::{a, b::{C, D as E}};` gives `super::a`, `super::b::C`, `super::b::D`.
fn use_paths(tokens: &[Token]) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    for at in (0..tokens.len()).filter(|&at| tokens[at].is_ident("use")) {
        let mut cursor = at + 1;
        use_tree(tokens, &mut cursor, Vec::new(), &mut paths);
    }
    paths
}

/// One use tree at `cursor`, below `prefix`; leaves `cursor` after it.
fn use_tree(tokens: &[Token], cursor: &mut usize, prefix: Vec<String>, paths: &mut Vec<Vec<String>>) {
    let mut path = prefix;
    while let Some(token) = tokens.get(*cursor) {
        match token {
            Token::PathSep => *cursor += 1,
            Token::Ident(ident) if ident == "as" => {
                *cursor += 2;
                break;
            }
            Token::Ident(ident) => {
                path.push(ident.clone());
                *cursor += 1;
            }
            Token::Punct('*') => {
                *cursor += 1;
                break;
            }
            Token::Punct('{') => return use_group(tokens, cursor, path, paths),
            Token::Punct(_) => break,
        }
    }
    paths.push(path);
}

/// `{ tree, tree, ... }` at `cursor`, each tree below `prefix`.
fn use_group(tokens: &[Token], cursor: &mut usize, prefix: Vec<String>, paths: &mut Vec<Vec<String>>) {
    *cursor += 1;
    while let Some(token) = tokens.get(*cursor) {
        match token {
            Token::Punct('}') => {
                *cursor += 1;
                return;
            }
            Token::Punct(',') => *cursor += 1,
            _ => {
                let before = *cursor;
                use_tree(tokens, cursor, prefix.clone(), paths);
                if *cursor == before {
                    return;
                }
            }
        }
    }
}

/// Every path written in code outside `use` declarations: `a::b::c` with at least one `::`,
/// not itself the tail of a longer path or a method name (`x.f::<T>()`).
fn inline_paths(tokens: &[Token]) -> Vec<Vec<String>> {
    let code = without_use_declarations(tokens);
    let mut paths = Vec::new();
    for at in 0..code.len() {
        let starts_path = matches!(code[at], Token::Ident(_))
            && code.get(at + 1) == Some(&Token::PathSep)
            && (at == 0 || !matches!(code[at - 1], Token::PathSep | Token::Punct('.')));
        if starts_path {
            paths.push(path_at(&code, at));
        }
    }
    paths
}

/// The segments of the path starting at `at`: identifiers joined by `::`.
fn path_at(tokens: &[Token], at: usize) -> Vec<String> {
    let mut path = Vec::new();
    let mut at = at;
    while let Some(Token::Ident(ident)) = tokens.get(at) {
        path.push(ident.clone());
        if tokens.get(at + 1) != Some(&Token::PathSep) {
            break;
        }
        at += 2;
    }
    path
}

fn without_use_declarations(tokens: &[Token]) -> Vec<Token> {
    let mut kept = Vec::new();
    let mut in_use = false;
    for token in tokens {
        if token.is_ident("use") {
            in_use = true;
        } else if in_use && *token == Token::Punct(';') {
            in_use = false;
        } else if !in_use {
            kept.push(token.clone());
        }
    }
    kept
}

// ---------------------------------------------------------------------------------------
// Modules, resolution and the import graph
// ---------------------------------------------------------------------------------------

/// A module path below the crate root: `crate::server::d::y` is `["server", "d", "y"]`.
type ModulePath = Vec<String>;

/// The module of a file, from its path relative to `src/`: `server/mod.rs` is
/// `crate::server`, `server/x.rs` is `crate::server::x`, `server/d/mod.rs` is
/// `crate::server::d`.
fn module_of(relative: &str) -> ModulePath {
    let mut segments: ModulePath = relative.trim_end_matches(".rs").split('/').map(String::from).collect();
    if segments.last().is_some_and(|last| last == "mod") {
        segments.pop();
    }
    segments
}

struct ModuleFile {
    /// Relative to `src/`, e.g. `server/ops/mod.rs`.
    relative: String,
    module: ModulePath,
    source: String,
}

struct ModuleTree {
    files: Vec<ModuleFile>,
    by_module: BTreeMap<ModulePath, usize>,
}

/// File index → the file indices it references.
type Graph = BTreeMap<usize, BTreeSet<usize>>;

impl ModuleTree {
    fn from_sources(sources: Vec<(String, String)>) -> Self {
        let files: Vec<ModuleFile> = sources
            .into_iter()
            .map(|(relative, source)| ModuleFile {
                module: module_of(&relative),
                relative,
                source,
            })
            .collect();
        let by_module = files
            .iter()
            .enumerate()
            .map(|(index, file)| (file.module.clone(), index))
            .collect();
        Self { files, by_module }
    }

    fn import_graph(&self) -> Graph {
        (0..self.files.len())
            .map(|index| (index, self.references(index)))
            .collect()
    }

    /// The other files that file `index` names in `use` declarations and inline paths,
    /// outside comments, literals and `#[cfg(test)]` modules.
    fn references(&self, index: usize) -> BTreeSet<usize> {
        let file = &self.files[index];
        let tokens = without_test_modules(&tokenize(&lex(&file.source).code));
        use_paths(&tokens)
            .iter()
            .chain(inline_paths(&tokens).iter())
            .filter_map(|path| self.resolve(&file.module, path))
            .filter(|&target| target != index)
            .collect()
    }

    /// The file a path written in module `from` points into: the longest prefix of the
    /// absolute path that is a module file. `None` for paths outside the tree (`std::`,
    /// `crate::store::`, local names).
    fn resolve(&self, from: &ModulePath, path: &[String]) -> Option<usize> {
        let absolute = self.absolute(from, path)?;
        (1..=absolute.len())
            .rev()
            .find_map(|length| self.by_module.get(&absolute[..length]).copied())
    }

    /// `path` as seen from the crate root, if it is a path into a module at all.
    fn absolute(&self, from: &ModulePath, path: &[String]) -> Option<ModulePath> {
        let (first, rest) = path.split_first()?;
        // `self` inside a group (`use a::{self, B}`) names the group's own prefix.
        let rest = rest.iter().filter(|segment| *segment != "self");
        match first.as_str() {
            "crate" => Some(rest.cloned().collect()),
            "self" | "super" => {
                let mut base = from.clone();
                let mut rest = rest.peekable();
                if first == "super" {
                    base.pop()?;
                }
                while rest.next_if(|segment| *segment == "super").is_some() {
                    base.pop()?;
                }
                Some(base.into_iter().chain(rest.cloned()).collect())
            }
            child => {
                let mut base = from.clone();
                base.push(child.to_string());
                self.by_module
                    .contains_key(&base)
                    .then(|| base.into_iter().chain(rest.cloned()).collect())
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Cycles
// ---------------------------------------------------------------------------------------

/// One report block per strongly connected component of more than one file: its files,
/// then for each import inside it, the shortest cycle that import is part of.
fn describe_cycles(tree: &ModuleTree, graph: &Graph) -> Vec<String> {
    let name = |index: &usize| tree.files[*index].relative.clone();
    let mut blocks = Vec::new();
    for component in strongly_connected(graph)
        .into_iter()
        .filter(|component| component.len() > 1)
    {
        let files: Vec<String> = component.iter().map(name).collect();
        let mut block = format!("{} files import each other: {}", files.len(), files.join(", "));
        for cycle in cycles_through_each_import(graph, &component) {
            let steps: Vec<String> = cycle.iter().chain(cycle.first()).map(name).collect();
            block.push_str(&format!("\n  import cycle: {}", steps.join(" -> ")));
        }
        blocks.push(block);
    }
    blocks
}

/// Tarjan's algorithm; each component sorted, components in discovery order.
fn strongly_connected(graph: &Graph) -> Vec<Vec<usize>> {
    let mut search = Tarjan {
        graph,
        next: 0,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for &node in graph.keys() {
        if !search.index.contains_key(&node) {
            search.visit(node);
        }
    }
    search.found
}

struct Tarjan<'a> {
    graph: &'a Graph,
    next: usize,
    index: BTreeMap<usize, usize>,
    low: BTreeMap<usize, usize>,
    stack: Vec<usize>,
    found: Vec<Vec<usize>>,
}

impl Tarjan<'_> {
    fn visit(&mut self, node: usize) {
        self.index.insert(node, self.next);
        self.low.insert(node, self.next);
        self.next += 1;
        self.stack.push(node);
        for &target in self.graph.get(&node).into_iter().flatten() {
            if !self.index.contains_key(&target) {
                self.visit(target);
                self.lower(node, self.low[&target]);
            } else if self.stack.contains(&target) {
                self.lower(node, self.index[&target]);
            }
        }
        if self.low[&node] == self.index[&node] {
            self.pop_component(node);
        }
    }

    fn lower(&mut self, node: usize, value: usize) {
        let low = self.low.get_mut(&node).expect("visited");
        *low = (*low).min(value);
    }

    fn pop_component(&mut self, root: usize) {
        let mut component = Vec::new();
        while let Some(node) = self.stack.pop() {
            component.push(node);
            if node == root {
                break;
            }
        }
        component.sort_unstable();
        self.found.push(component);
    }
}

/// For each import `a -> b` inside `component`: `a`, then the shortest path from `b` back to
/// `a`. Each cycle listed once, rotated to start at its smallest file index.
fn cycles_through_each_import(graph: &Graph, component: &[usize]) -> BTreeSet<Vec<usize>> {
    let inside: BTreeSet<usize> = component.iter().copied().collect();
    let mut cycles = BTreeSet::new();
    for &from in component {
        for &to in graph[&from].iter().filter(|target| inside.contains(target)) {
            if let Some(back) = shortest_path(graph, &inside, to, from) {
                let mut cycle = vec![from];
                cycle.extend(&back[..back.len() - 1]);
                cycles.insert(rotated_to_smallest(cycle));
            }
        }
    }
    cycles
}

/// Breadth-first path `start ..= goal` through `inside` only.
fn shortest_path(graph: &Graph, inside: &BTreeSet<usize>, start: usize, goal: usize) -> Option<Vec<usize>> {
    let mut came_from = BTreeMap::from([(start, start)]);
    let mut queue = VecDeque::from([start]);
    while let Some(node) = queue.pop_front() {
        if node == goal {
            return Some(walk_back(&came_from, start, goal));
        }
        for &next in graph[&node].iter().filter(|next| inside.contains(next)) {
            if let Entry::Vacant(entry) = came_from.entry(next) {
                entry.insert(node);
                queue.push_back(next);
            }
        }
    }
    None
}

/// The path `start ..= goal` from the breadth-first search's `came_from` links.
fn walk_back(came_from: &BTreeMap<usize, usize>, start: usize, goal: usize) -> Vec<usize> {
    let mut path = vec![goal];
    let mut node = goal;
    while node != start {
        node = came_from[&node];
        path.push(node);
    }
    path.reverse();
    path
}

fn rotated_to_smallest(mut cycle: Vec<usize>) -> Vec<usize> {
    let smallest = (0..cycle.len()).min_by_key(|&at| cycle[at]).unwrap_or(0);
    cycle.rotate_left(smallest);
    cycle
}

// ---------------------------------------------------------------------------------------
// Tests of the scanner itself, on synthetic sources
// ---------------------------------------------------------------------------------------

fn owned_paths(paths: &[&[&str]]) -> Vec<Vec<String>> {
    paths
        .iter()
        .map(|path| path.iter().map(|segment| segment.to_string()).collect())
        .collect()
}

fn synthetic_tree(files: &[(&str, &str)]) -> ModuleTree {
    ModuleTree::from_sources(
        files
            .iter()
            .map(|(path, text)| (path.to_string(), text.to_string()))
            .collect(),
    )
}

/// The graph of a synthetic tree, as `from -> to` names relative to `src/`.
fn edges(tree: &ModuleTree) -> Vec<String> {
    let name = |index: usize| tree.files[index].relative.clone();
    let graph = tree.import_graph();
    graph
        .iter()
        .flat_map(|(&from, targets)| targets.iter().map(move |&to| format!("{} -> {}", name(from), name(to))))
        .collect()
}

#[test]
fn lexing_blanks_comments_but_not_strings_that_look_like_comments() {
    let lexed = lex("let a = \"// not a comment\"; // super::x\n\
         /* outer /* inner */ super::y */ let c = '\"'; b\"x\";\n\
         r#\"a \"quoted\" // b\"#;");
    assert!(
        !lexed.without_comments.contains("super::"),
        "{:?}",
        lexed.without_comments
    );
    assert!(lexed.without_comments.contains("\"// not a comment\""));
    assert!(lexed.code.contains("let c ="), "{:?}", lexed.code);
    assert!(
        !lexed.code.contains("not a comment") && !lexed.code.contains('"'),
        "{:?}",
        lexed.code
    );
    let texts: Vec<&str> = lexed.strings.iter().map(|literal| literal.text.as_str()).collect();
    assert_eq!(texts, ["// not a comment", "x", "a \"quoted\" // b"]);
    assert_eq!(lexed.code.lines().count(), 3, "line structure is kept");
}

#[test]
fn lifetimes_do_not_start_char_literals() {
    let lexed = lex("fn f<'a>(x: &'a str) -> char { '\\'' } // super::x");
    assert!(lexed.code.contains("fn f<'a>(x: &'a str)"), "{:?}", lexed.code);
    assert!(!lexed.code.contains("super"), "{:?}", lexed.code);
}

#[test]
fn use_trees_expand_groups_over_several_lines() {
    let code = "pub use child::Thing;\nuse super::{\n    a,\n    b::{self, C, D as E},\n    f::*,\n};";
    let expected: &[&[&str]] = &[
        &["child", "Thing"],
        &["super", "a"],
        &["super", "b", "self"],
        &["super", "b", "C"],
        &["super", "b", "D"],
        &["super", "f"],
    ];
    assert_eq!(use_paths(&tokenize(code)), owned_paths(expected));
}

#[test]
fn inline_paths_skip_tails_methods_and_use_declarations() {
    let code = "use super::x::Y; fn f() { super::runner::spawn(a::b); v.iter::<u8>(); crate::server::ops::x(); }";
    let expected: &[&[&str]] = &[
        &["super", "runner", "spawn"],
        &["a", "b"],
        &["crate", "server", "ops", "x"],
    ];
    assert_eq!(inline_paths(&tokenize(code)), owned_paths(expected));
}

#[test]
fn test_modules_are_left_out() {
    let code = "use super::a;\n\
                #[cfg(test)]\n\
                #[allow(dead_code)]\n\
                mod tests { use super::b; fn t() { if x { super::c(); } } }\n\
                fn g() { super::d(); }";
    let paths = use_paths(&without_test_modules(&tokenize(code)));
    assert_eq!(paths, owned_paths(&[&["super", "a"]]));
    assert_eq!(
        inline_paths(&without_test_modules(&tokenize(code))),
        owned_paths(&[&["super", "d"]])
    );
}

#[test]
fn paths_resolve_to_the_longest_existing_module() {
    let tree = synthetic_tree(&[
        ("server/mod.rs", ""),
        ("server/scheduler.rs", ""),
        ("server/runners/mod.rs", ""),
        ("server/runners/runner.rs", ""),
        ("server/d/mod.rs", ""),
        ("server/d/y.rs", ""),
    ]);
    let resolve = |from: &str, path: &str| {
        let segments: Vec<String> = path.split("::").map(String::from).collect();
        tree.resolve(&module_of(from), &segments)
            .map(|index| tree.files[index].relative.clone())
    };
    let from_scheduler = "server/scheduler.rs";
    assert_eq!(
        resolve(from_scheduler, "super::runners::runner::RunnerMsg").as_deref(),
        Some("server/runners/runner.rs")
    );
    assert_eq!(
        resolve(from_scheduler, "super::runners::Pool").as_deref(),
        Some("server/runners/mod.rs")
    );
    assert_eq!(
        resolve(from_scheduler, "crate::server::d::y::f").as_deref(),
        Some("server/d/y.rs")
    );
    assert_eq!(
        resolve("server/d/y.rs", "super::Shared").as_deref(),
        Some("server/d/mod.rs")
    );
    assert_eq!(
        resolve("server/d/y.rs", "super::super::scheduler::tick").as_deref(),
        Some("server/scheduler.rs")
    );
    assert_eq!(
        resolve("server/d/mod.rs", "super::Shared").as_deref(),
        Some("server/mod.rs")
    );
    assert_eq!(
        resolve("server/d/mod.rs", "self::y::f").as_deref(),
        Some("server/d/y.rs")
    );
    assert_eq!(resolve("server/d/mod.rs", "y::f").as_deref(), Some("server/d/y.rs"));
    assert_eq!(resolve("server/d/y.rs", "y::f"), None, "a leaf has no child y");
    assert_eq!(resolve("server/mod.rs", "super::store::Store"), None);
    assert_eq!(resolve(from_scheduler, "crate::store::Store"), None);
    assert_eq!(resolve(from_scheduler, "tokio::spawn"), None);
}

#[test]
fn a_child_importing_from_its_reexporting_mod_rs_is_a_cycle() {
    let tree = synthetic_tree(&[
        ("server/mod.rs", "pub mod ops;\n"),
        (
            "server/ops/mod.rs",
            "mod status;\npub use status::Status;\npub struct Shared;\n",
        ),
        (
            "server/ops/status.rs",
            "use super::Shared; // super::super::mod_rs\npub struct Status;\n",
        ),
    ]);
    assert_eq!(
        edges(&tree),
        [
            "server/ops/mod.rs -> server/ops/status.rs",
            "server/ops/status.rs -> server/ops/mod.rs"
        ]
    );
    let cycles = describe_cycles(&tree, &tree.import_graph());
    assert_eq!(cycles.len(), 1);
    assert!(
        cycles[0].ends_with("import cycle: server/ops/mod.rs -> server/ops/status.rs -> server/ops/mod.rs"),
        "{}",
        cycles[0]
    );
}

#[test]
fn a_layered_tree_has_no_cycle() {
    let tree = synthetic_tree(&[
        (
            "server/mod.rs",
            "pub mod ops;\npub mod shared;\nfn run() { ops::start(); }\n",
        ),
        ("server/shared.rs", "pub struct Shared;\n"),
        ("server/ops/mod.rs", "mod status;\npub use status::Status;\n"),
        (
            "server/ops/status.rs",
            "use super::super::shared::Shared;\n#[cfg(test)]\nmod tests { use super::super::Status; }\n",
        ),
    ]);
    assert_eq!(
        edges(&tree),
        [
            "server/mod.rs -> server/ops/mod.rs",
            "server/ops/mod.rs -> server/ops/status.rs",
            "server/ops/status.rs -> server/shared.rs"
        ]
    );
    assert!(describe_cycles(&tree, &tree.import_graph()).is_empty());
}

#[test]
fn sql_is_found_in_code_and_strings() {
    let lexed = lex("fn f(conn: &rusqlite::Connection) {}\n\
         use rusqlite::params;\n\
         conn.prepare(\"SELECT x FROM t\");\n\
         let s = \"UPDATE t SET a = 1\"; // INSERT INTO\n");
    let code: Vec<usize> = sql_in_code(&lexed.code).into_iter().map(|(line, _)| line).collect();
    assert_eq!(code, [2, 3]);
    let strings: Vec<usize> = sql_in_strings(&lexed.strings)
        .into_iter()
        .map(|(line, _)| line)
        .collect();
    assert_eq!(strings, [3, 4]);
}
