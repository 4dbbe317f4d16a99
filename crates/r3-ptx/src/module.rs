//! A PTX module as its module-scope items: the header (`.version`, `.target`,
//! `.address_size`), debug info (`.file`, `.section`), variables (`.global`, `.const`,
//! `.shared`, …, defined or `.extern`) and functions (`.entry`, `.func`, `.alias`, defined or
//! declared). This is the one reading of a module's structure: the splice moves items between
//! modules by it, `stats` and `cfg` find function bodies and their lines by it.
//!
//! An item is a run of tokens, so it knows its exact text, its name, its linkage and the names
//! it uses. Nothing inside a function body is parsed further: any instruction the backend emits
//! is accepted, and only names, braces and semicolons decide where items begin and end.

use crate::lex::{lex, TokKind, Token};
use std::collections::{HashMap, HashSet};
use std::ops::Range;

/// Why a text is not a PTX module (`line` is 1-based).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {problem}")]
pub struct ParseError {
    pub line: usize,
    pub problem: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ItemKind {
    Version,
    Target,
    AddressSize,
    File,
    /// `.section` (DWARF).
    Section,
    /// `.entry`, `.func` or `.alias`; `name`, `keyword` and `body` (its `{`, for a definition)
    /// are token indices.
    Func {
        name: usize,
        keyword: usize,
        entry: bool,
        body: Option<usize>,
    },
    /// A module-scope variable; `name` is a token index.
    Var {
        name: usize,
    },
    /// Anything else that ends in `;` at module scope (`.pragma`).
    Other,
}

/// How a function or variable is known outside its module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Linkage {
    /// No linkage directive: the module's own.
    Local,
    Visible,
    /// Declared here, defined elsewhere.
    Extern,
    Weak,
    Common,
}

impl Linkage {
    /// Whether the program knows the item by name (any linkage directive).
    pub fn is_external(self) -> bool {
        self != Linkage::Local
    }
}

#[derive(Clone, Debug)]
pub struct Item {
    pub kind: ItemKind,
    pub linkage: Linkage,
    /// Token indices.
    pub toks: Range<usize>,
}

/// A PTX text cut into module-scope items; every token belongs to exactly one item.
pub struct Module<'t> {
    text: &'t str,
    toks: Vec<Token>,
    items: Vec<Item>,
}

/// The header directives of a module.
pub struct Header {
    pub version: (u32, u32),
    pub version_text: String,
    /// The token of the version number.
    pub version_tok: usize,
    /// The architectures, joined by `, `.
    pub target: String,
    /// `32` where the module does not say (PTX's default).
    pub address_size: String,
    /// Byte offset after the last of `.version`, `.target`, `.address_size`.
    pub end: usize,
}

/// A `.file` directive: its item, and the token of its quoted file name.
pub struct FileDirective {
    pub item: usize,
    pub name: usize,
}

impl<'t> Module<'t> {
    /// Cuts `text` into items. Err: the first reason it is not a module (a brace or `;`
    /// missing, two declarations run together, a name defined twice, …).
    pub fn parse(text: &'t str) -> Result<Self, ParseError> {
        let toks = lex(text).map_err(|e| ParseError {
            line: e.line,
            problem: e.problem.to_string(),
        })?;
        let mut m = Module {
            text,
            toks,
            items: Vec::new(),
        };
        let mut i = 0;
        while i < m.toks.len() {
            let item = match line_directive(m.text(i)) {
                // These end with their line, not with a `;`.
                Some(kind) => m.line_item(i, kind),
                None => {
                    let (last, body) = m.item_end(i)?;
                    m.classify(i, last, body)?
                }
            };
            i = item.toks.end;
            m.items.push(item);
        }
        m.check_unique()?;
        Ok(m)
    }

    /// The whole text.
    pub fn source(&self) -> &'t str {
        self.text
    }

    pub fn toks(&self) -> &[Token] {
        &self.toks
    }

    pub fn tok(&self, i: usize) -> Token {
        self.toks[i]
    }

    /// The text of token `i`.
    pub fn text(&self, i: usize) -> &'t str {
        let t = self.toks[i];
        &self.text[t.start..t.end]
    }

    pub fn items(&self) -> &[Item] {
        &self.items
    }

    /// The bytes of `item`, from its first token to its last.
    pub fn span(&self, item: usize) -> Range<usize> {
        let toks = &self.items[item].toks;
        self.toks[toks.start].start..self.toks[toks.end - 1].end
    }

    /// The bytes of `item` with the comments and blank space before it: from the end of the
    /// item before (or the start of the text) to its last token. The extents of all items,
    /// followed by [`Module::trailer`], are the whole text.
    pub fn extent(&self, item: usize) -> Range<usize> {
        let start = item
            .checked_sub(1)
            .map_or(0, |before| self.span(before).end);
        start..self.span(item).end
    }

    /// The comments and blank space after the last item.
    pub fn trailer(&self) -> Range<usize> {
        let end = self
            .items
            .len()
            .checked_sub(1)
            .map_or(0, |k| self.span(k).end);
        end..self.text.len()
    }

    /// The name of a function or variable.
    pub fn name(&self, item: usize) -> Option<&'t str> {
        match self.items[item].kind {
            ItemKind::Func { name, .. } | ItemKind::Var { name } => Some(self.text(name)),
            _ => None,
        }
    }

    /// The defined functions (`.entry` and `.func` with a body), in module order.
    pub fn functions(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.items.len())
            .filter(|&k| matches!(self.items[k].kind, ItemKind::Func { body: Some(_), .. }))
    }

    /// The defined `.entry` functions (kernels), in module order.
    pub fn entries(&self) -> impl Iterator<Item = usize> + '_ {
        self.functions()
            .filter(|&k| matches!(self.items[k].kind, ItemKind::Func { entry: true, .. }))
    }

    /// The item defining kernel `name`.
    pub fn entry(&self, name: &str) -> Option<usize> {
        self.entries().find(|&k| self.name(k) == Some(name))
    }

    /// Kernel `name` as a module of its own: the header (with `.file`, which `.loc` lines
    /// name), then what it uses (functions and variables, their declarations included) and the
    /// kernel, each as written and in this module's order; debug sections left out. None where the module has no such kernel, or
    /// where the kernel uses a label of the debug sections (its code would not stand alone).
    pub fn extract(&self, name: &str) -> Option<String> {
        let entry = self.entry(name)?;
        let mut keep = vec![false; self.items.len()];
        for k in self.closure(entry).into_iter().chain([entry]) {
            keep[k] = true;
        }
        let debug: HashSet<&str> = (0..self.items.len())
            .filter(|&k| self.items[k].kind == ItemKind::Section)
            .flat_map(|k| self.labels(k))
            .collect();
        let uses_debug = (0..self.items.len())
            .filter(|&k| keep[k])
            .any(|k| self.idents(k).any(|i| debug.contains(i)));
        if uses_debug {
            return None;
        }
        let mut out = String::new();
        for (k, item) in self.items.iter().enumerate() {
            let header = matches!(
                item.kind,
                ItemKind::Version | ItemKind::Target | ItemKind::AddressSize | ItemKind::File
            );
            if header || keep[k] {
                out.push_str(&self.text[self.span(k)]);
                out.push_str(if header { "\n" } else { "\n\n" });
            }
        }
        Some(out)
    }

    /// The lines of a function's body: those after the line of its `{` and before the line of
    /// its `}`, whole (LLVM and nvcc give each brace of a body a line of its own). None for an
    /// item that is not a defined function.
    pub fn body_lines(&self, item: usize) -> Option<std::str::Lines<'t>> {
        let ItemKind::Func {
            body: Some(open), ..
        } = self.items[item].kind
        else {
            return None;
        };
        let open = self.toks[open].end;
        let close = self.toks[self.items[item].toks.end - 1].start;
        let start = self.text[open..close]
            .find('\n')
            .map_or(close, |n| open + n + 1);
        let end = self.text[start..close]
            .rfind('\n')
            .map_or(start, |n| start + n + 1);
        Some(self.text[start..end].lines())
    }

    /// The variables and functions (not entries) that `item` names, itself aside, in module
    /// order: for a function, its callees and the variables it addresses; for a variable, what
    /// its initializer points to. A name's declaration and its definition are both named.
    pub fn references(&self, item: usize) -> Vec<usize> {
        let by_name = self.by_name();
        let mut named = vec![false; self.items.len()];
        for name in self.idents(item) {
            for &d in by_name.get(name).into_iter().flatten() {
                if d != item {
                    named[d] = true;
                }
            }
        }
        (0..self.items.len()).filter(|&k| named[k]).collect()
    }

    /// The variables and functions `root` uses, directly or not, in module order.
    pub fn closure(&self, root: usize) -> Vec<usize> {
        let by_name = self.by_name();
        let mut need = vec![false; self.items.len()];
        let mut work = vec![root];
        while let Some(k) = work.pop() {
            for name in self.idents(k) {
                for &d in by_name.get(name).into_iter().flatten() {
                    if !need[d] && d != root {
                        need[d] = true;
                        work.push(d);
                    }
                }
            }
        }
        (0..self.items.len()).filter(|&k| need[k]).collect()
    }

    /// The items that declare or define each variable and non-entry function name.
    fn by_name(&self) -> HashMap<&'t str, Vec<usize>> {
        let mut by_name: HashMap<&str, Vec<usize>> = HashMap::new();
        for (k, item) in self.items.iter().enumerate() {
            match item.kind {
                ItemKind::Func {
                    name, entry: false, ..
                }
                | ItemKind::Var { name } => by_name.entry(self.text(name)).or_default().push(k),
                _ => {}
            }
        }
        by_name
    }

    /// Labels defined in `item` (`name:`).
    pub fn labels(&self, item: usize) -> impl Iterator<Item = &'t str> + '_ {
        let toks = self.items[item].toks.clone();
        toks.filter(move |&k| {
            self.toks[k].kind == TokKind::Ident
                && self.toks.get(k + 1).map(|t| t.kind) == Some(TokKind::Punct(b':'))
        })
        .map(|k| self.text(k))
    }

    /// The identifiers of `item`: names, registers, labels, opcodes.
    pub fn idents(&self, item: usize) -> impl Iterator<Item = &'t str> + '_ {
        let toks = self.items[item].toks.clone();
        toks.filter(move |&k| self.toks[k].kind == TokKind::Ident)
            .map(|k| self.text(k))
    }

    /// The header directives; Err where one is missing, repeated or malformed.
    pub fn header(&self) -> Result<Header, ParseError> {
        let find = |kind: ItemKind, directive: &str| {
            let mut found = self.items.iter().filter(|i| i.kind == kind);
            match (found.next(), found.next()) {
                (_, Some(second)) => Err(malformed(
                    self.toks[second.toks.start].line,
                    format!("a second `{directive}`"),
                )),
                (item, None) => Ok(item),
            }
        };
        let missing = |directive: &str| malformed(1, format!("no `{directive}` directive"));
        let version = find(ItemKind::Version, ".version")?.ok_or_else(|| missing(".version"))?;
        let target = find(ItemKind::Target, ".target")?.ok_or_else(|| missing(".target"))?;
        let address_size = find(ItemKind::AddressSize, ".address_size")?;
        let args = |item: &Item| (item.toks.start + 1..item.toks.end).map(|k| self.text(k));

        let bad_version = || {
            malformed(
                self.toks[version.toks.start].line,
                "a `.version` that is not `MAJOR.MINOR`".to_string(),
            )
        };
        let [version_text] = args(version).collect::<Vec<_>>()[..] else {
            return Err(bad_version());
        };
        let (major, minor) = version_text.split_once('.').ok_or_else(bad_version)?;
        let major = major.parse().map_err(|_| bad_version())?;
        let minor = minor.parse().map_err(|_| bad_version())?;

        let target_text = args(target)
            .filter(|&a| a != ",")
            .collect::<Vec<_>>()
            .join(", ");
        if target_text.is_empty() {
            return Err(malformed(
                self.toks[target.toks.start].line,
                "a `.target` without an architecture".to_string(),
            ));
        }
        // PTX's default when `.address_size` is absent.
        let address_size = address_size.map_or_else(
            || "32".to_string(),
            |item| args(item).collect::<Vec<_>>().join(" "),
        );
        let end = self
            .items
            .iter()
            .enumerate()
            .filter(|(_, i)| {
                matches!(
                    i.kind,
                    ItemKind::Version | ItemKind::Target | ItemKind::AddressSize
                )
            })
            .map(|(k, _)| self.span(k).end)
            .max()
            .unwrap_or(0);
        Ok(Header {
            version: (major, minor),
            version_text: version_text.to_string(),
            version_tok: version.toks.start + 1,
            target: target_text,
            address_size,
            end,
        })
    }

    /// The `.file` names (quoted, as written) and their indices.
    pub fn files(&self) -> HashMap<String, u64> {
        (0..self.items.len())
            .filter_map(|k| self.file_at(k))
            .filter_map(|(index, f)| Some((self.text(f.name).to_string(), index.parse().ok()?)))
            .collect()
    }

    /// The `.file` directive with index `index`.
    pub fn file(&self, index: &str) -> Option<FileDirective> {
        (0..self.items.len())
            .filter_map(|k| self.file_at(k))
            .find(|(i, _)| *i == index)
            .map(|(_, f)| f)
    }

    /// Item `item` as a `.file` directive, with its index.
    fn file_at(&self, item: usize) -> Option<(&'t str, FileDirective)> {
        let toks = &self.items[item].toks;
        if self.items[item].kind != ItemKind::File || toks.len() < 3 {
            return None;
        }
        let (index, name) = (toks.start + 1, toks.start + 2);
        (self.toks[index].kind == TokKind::Number && self.toks[name].kind == TokKind::Str)
            .then(|| (self.text(index), FileDirective { item, name }))
    }

    /// The file indices `.loc` directives use in `items`, each once, in the order met.
    pub fn loc_files(&self, items: impl Iterator<Item = usize>) -> Vec<&'t str> {
        let mut seen = Vec::new();
        for k in items {
            for t in self.items[k].toks.clone().skip(1) {
                if self.toks[t].kind == TokKind::Number && self.text(t - 1) == ".loc" {
                    let index = self.text(t);
                    if !seen.contains(&index) {
                        seen.push(index);
                    }
                }
            }
        }
        seen
    }

    /// The item of a directive that ends with its line, starting at token `i`.
    fn line_item(&self, i: usize, kind: ItemKind) -> Item {
        let line = self.toks[i].line;
        let mut j = i + 1;
        while self
            .toks
            .get(j)
            .is_some_and(|t| t.line == line && t.kind != TokKind::Directive)
        {
            j += 1;
        }
        Item {
            kind,
            linkage: Linkage::Local,
            toks: i..j,
        }
    }

    /// The last token of the item starting at token `i`, and where its body opens if it has one.
    fn item_end(&self, i: usize) -> Result<(usize, Option<usize>), ParseError> {
        let mut open: Vec<(u8, usize)> = Vec::new();
        let mut body = None;
        for j in i..self.toks.len() {
            let t = self.toks[j];
            let TokKind::Punct(c) = t.kind else { continue };
            match c {
                b'(' | b'[' | b'{' => {
                    // A `{` after `=` opens an initializer, which the `;` ends; any other
                    // `{` at depth 0 opens a body, which its `}` ends.
                    let initializer = j > i && self.toks[j - 1].kind == TokKind::Punct(b'=');
                    if c == b'{' && open.is_empty() && !initializer {
                        body = Some(j);
                    }
                    open.push((c, t.line));
                }
                b')' | b']' | b'}' => {
                    let expected = match open.pop() {
                        Some((b'(', _)) => b')',
                        Some((b'[', _)) => b']',
                        Some(_) => b'}',
                        None => 0,
                    };
                    if c != expected {
                        return Err(malformed(t.line, format!("unbalanced `{}`", c as char)));
                    }
                    if c == b'}' && open.is_empty() && body.is_some() {
                        return Ok((j, body));
                    }
                }
                b';' if open.is_empty() => return Ok((j, body)),
                _ => {}
            }
        }
        let line = open.last().map_or(self.toks[i].line, |&(_, line)| line);
        Err(malformed(
            line,
            format!(
                "the item starting at line {} never ends (a `;` or `}}` is missing)",
                self.toks[i].line
            ),
        ))
    }

    /// The item from token `first` to `last`, whose body (if any) opens at token `body`.
    fn classify(&self, first: usize, last: usize, body: Option<usize>) -> Result<Item, ParseError> {
        let line = self.toks[first].line;
        let mut depth = 0usize;
        let mut keyword = None;
        let mut name = None;
        // Names declared by the item: one, unless a `;` is missing and two items ran together.
        let mut declared = Vec::new();
        let mut initializer = false;
        let mut linkage = Linkage::Local;
        for k in first..body.unwrap_or(last) {
            match self.toks[k].kind {
                TokKind::Punct(b'=') if depth == 0 => initializer = true,
                TokKind::Punct(b'(' | b'[' | b'{') => depth += 1,
                TokKind::Punct(b')' | b']' | b'}') => depth = depth.saturating_sub(1),
                TokKind::Directive if depth == 0 && keyword.is_none() => match self.text(k) {
                    ".entry" | ".func" | ".section" | ".alias" => keyword = Some(k),
                    // A declaration stays one whatever else it says.
                    ".extern" => linkage = Linkage::Extern,
                    ".visible" if linkage == Linkage::Local => linkage = Linkage::Visible,
                    ".weak" if linkage == Linkage::Local => linkage = Linkage::Weak,
                    ".common" if linkage == Linkage::Local => linkage = Linkage::Common,
                    _ => {}
                },
                TokKind::Ident if depth == 0 => {
                    if !initializer {
                        declared.push(k);
                    }
                    if keyword.is_some() {
                        name = name.or(Some(k));
                    }
                }
                _ => {}
            }
        }
        let is_alias = keyword.is_some_and(|k| self.text(k) == ".alias");
        if let Some(&second) = declared.get(1) {
            if !is_alias {
                return Err(malformed(
                    self.toks[second].line,
                    format!(
                        "`{}` follows `{}` in one declaration (is a `;` missing?)",
                        self.text(second),
                        self.text(declared[0])
                    ),
                ));
            }
        }
        let kind = match keyword {
            None => match (body, declared.first()) {
                _ if self.text(first) == ".pragma" => ItemKind::Other,
                (Some(_), _) => {
                    return Err(malformed(
                        line,
                        "a `{` block that is not a `.entry`, `.func` or `.section`".to_string(),
                    ))
                }
                (None, None) => {
                    return Err(malformed(
                        line,
                        "a module-scope declaration without a name".to_string(),
                    ))
                }
                (None, Some(&name)) => ItemKind::Var { name },
            },
            Some(keyword) => match self.text(keyword) {
                ".section" => ItemKind::Section,
                ".alias" if body.is_some() => {
                    return Err(malformed(line, "an `.alias` with a body".to_string()))
                }
                kw => ItemKind::Func {
                    name: name
                        .ok_or_else(|| malformed(line, format!("a `{kw}` without a name")))?,
                    keyword,
                    entry: kw == ".entry",
                    body,
                },
            },
        };
        Ok(Item {
            kind,
            linkage,
            toks: first..last + 1,
        })
    }

    fn check_unique(&self) -> Result<(), ParseError> {
        let mut defined = HashSet::new();
        for item in &self.items {
            let name = match item.kind {
                ItemKind::Func {
                    name,
                    body: Some(_),
                    ..
                } => name,
                ItemKind::Var { name } if item.linkage != Linkage::Extern => name,
                _ => continue,
            };
            if !defined.insert(self.text(name)) {
                return Err(malformed(
                    self.toks[name].line,
                    format!("`{}` is defined twice", self.text(name)),
                ));
            }
        }
        Ok(())
    }
}

/// The lines of each function body of a PTX text ([`Module::body_lines`]), in module order;
/// none for a text that is not a module.
pub fn bodies(ptx: &str) -> Vec<std::str::Lines<'_>> {
    match Module::parse(ptx) {
        Ok(m) => m.functions().filter_map(|k| m.body_lines(k)).collect(),
        Err(_) => Vec::new(),
    }
}

fn malformed(line: usize, problem: String) -> ParseError {
    ParseError { line, problem }
}

/// The kind of a directive that ends with its line.
fn line_directive(text: &str) -> Option<ItemKind> {
    match text {
        ".version" => Some(ItemKind::Version),
        ".target" => Some(ItemKind::Target),
        ".address_size" => Some(ItemKind::AddressSize),
        ".file" => Some(ItemKind::File),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// Every real PTX text the tests read, by file name: LLVM's for corpus kernels and nvcc's
    /// (`tests/fixtures/`), clang's for whole units and r3's for one kernel (r3-apply's splice
    /// fixtures), and the hand-made ones after LLVM's of the stats filetests.
    fn real_ptx() -> Vec<(String, String)> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let dirs = [
            "tests/fixtures/llvm",
            "tests/fixtures/nvcc",
            "../r3-apply/tests/fixtures/splice",
            "../../tests/filetests/stats",
        ];
        let mut out = Vec::new();
        for dir in dirs {
            let mut files: Vec<_> = std::fs::read_dir(root.join(dir))
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|e| e == "ptx"))
                .collect();
            files.sort();
            for f in files {
                let name = format!("{dir}/{}", f.file_name().unwrap().to_string_lossy());
                out.push((name, std::fs::read_to_string(f).unwrap()));
            }
        }
        assert!(out.len() >= 35, "fixtures missing: {}", out.len());
        out
    }

    fn read(path: &str) -> String {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(root.join(path)).unwrap()
    }

    fn parse<'t>(name: &str, text: &'t str) -> Module<'t> {
        Module::parse(text).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    fn names<'t>(m: &Module<'t>, items: impl IntoIterator<Item = usize>) -> Vec<&'t str> {
        let mut names: Vec<&str> = items.into_iter().filter_map(|k| m.name(k)).collect();
        names.dedup();
        names
    }

    #[test]
    fn a_kernel_extracted_stands_alone_with_everything_it_uses_and_nothing_else() {
        let mut extracted = 0;
        for (name, text) in real_ptx() {
            let m = parse(&name, &text);
            for e in m.entries().collect::<Vec<_>>() {
                let kernel = m.name(e).unwrap();
                let Some(alone) = m.extract(kernel) else {
                    // Only code that names the debug sections' labels stays where it is.
                    assert!(
                        m.items().iter().any(|i| i.kind == ItemKind::Section),
                        "{name}"
                    );
                    continue;
                };
                extracted += 1;
                let a = parse(&format!("{name}: {kernel} alone"), &alone);
                assert_eq!(a.entries().count(), 1, "{name}: {kernel}");
                assert_eq!(a.header().unwrap().target, m.header().unwrap().target);
                let want = names(&m, m.closure(e));
                let k = a.entry(kernel).unwrap();
                assert_eq!(names(&a, a.closure(k)), want, "{name}: {kernel}");
                assert_eq!(a.extract(kernel).unwrap(), alone, "{name}: {kernel}: again");
            }
        }
        assert!(extracted >= 40, "{extracted} kernels extracted");
    }

    #[test]
    fn items_give_back_the_text_and_hold_every_token() {
        for (name, text) in real_ptx() {
            let m = parse(&name, &text);
            let mut joined = String::new();
            for k in 0..m.items().len() {
                let (extent, span) = (m.extent(k), m.span(k));
                assert_eq!(extent.end, span.end, "{name}");
                // Before an item's first token: comments and blank space only.
                let lead = &text[extent.start..span.start];
                assert!(lex(lead).unwrap().is_empty(), "{name}: {lead:?}");
                joined.push_str(&text[extent]);
            }
            assert!(lex(&text[m.trailer()]).unwrap().is_empty(), "{name}");
            joined.push_str(&text[m.trailer()]);
            assert_eq!(joined, text, "{name}");
            // Items are consecutive runs of tokens, all of them.
            let mut next = 0;
            for item in m.items() {
                assert_eq!(item.toks.start, next, "{name}");
                assert!(item.toks.end > item.toks.start, "{name}");
                next = item.toks.end;
            }
            assert_eq!(next, m.toks().len(), "{name}");
        }
    }

    /// The bodies as LLVM and nvcc write them, read line by line: each body's braces are lines
    /// of their own at the start of a line; those of blocks inside it, of initializers and of
    /// DWARF sections are not.
    fn bodies_by_lines(text: &str) -> Vec<Vec<&str>> {
        let mut bodies = Vec::new();
        let mut body: Option<Vec<&str>> = None;
        for line in text.lines() {
            match (line, &mut body) {
                ("{", None) => body = Some(Vec::new()),
                ("}", Some(_)) => bodies.push(body.take().unwrap()),
                (_, Some(lines)) => lines.push(line),
                _ => {}
            }
        }
        bodies
    }

    #[test]
    fn function_bodies_are_the_lines_between_their_braces() {
        for (name, text) in real_ptx() {
            let m = parse(&name, &text);
            let bodies: Vec<Vec<&str>> = m
                .functions()
                .map(|k| m.body_lines(k).unwrap().collect())
                .collect();
            let want = bodies_by_lines(&text);
            assert_eq!(bodies, want, "{name}");
            for k in m.functions() {
                let span = &text[m.span(k)];
                assert!(span.ends_with("\n}"), "{name}: {span}");
                let kw = if matches!(m.items()[k].kind, ItemKind::Func { entry: true, .. }) {
                    ".entry "
                } else {
                    ".func "
                };
                let head = span.lines().next().unwrap();
                assert!(
                    head.contains(kw) && head.contains(m.name(k).unwrap()),
                    "{name}"
                );
            }
            // What counts as an instruction is read off these bodies.
            let lines = want.iter().flatten().map(|l| l.trim());
            let instructions =
                lines.filter(|l| l.ends_with(';') && !l.starts_with('.') && !l.starts_with("//"));
            assert_eq!(
                instructions.count(),
                crate::stats::stats(&text).instructions,
                "{name}"
            );
            assert!(m.functions().all(|k| m.body_lines(k).is_some()), "{name}");
        }
    }

    #[test]
    fn entries_and_functions_are_found_by_name() {
        // (unit, entries, defined device functions): clang's and nvcc's PTX of the same source.
        let units: [(&str, &[&str], &[&str]); 5] = [
            (
                "a",
                &["_Z5scalePfPKfi", "_Z5countPKfi", "_Z5helloi"],
                &["_Z6helperfi"],
            ),
            (
                "b",
                &["_Z2sqPii", "_Z2cbPii", "_Z6reducePKii"],
                &["_Z6squarei", "_Z4cubei"],
            ),
            (
                "c",
                &[
                    "_Z6parityPii",
                    "_Z8setstatei",
                    "_Z4axpyIfEvPT_PKS0_S0_i",
                    "_Z4axpyIdEvPT_PKS0_S0_i",
                ],
                &["_Z3oddi", "_Z4eveni"],
            ),
            (
                "d",
                &["_Z4trigPfPKf6Params", "_Z5alloci", "_Z3lutPii"],
                &["_Z5shadefi", "_Z4facti"],
            ),
            (
                "e",
                &["_Z8apply_opPfi", "_Z5otherPf"],
                &["_Z5twicef", "_Z5halvef"],
            ),
        ];
        for (unit, entries, funcs) in units {
            for file in [
                format!("../r3-apply/tests/fixtures/splice/{unit}.host.ptx"),
                format!("tests/fixtures/nvcc/{unit}.ptx"),
            ] {
                let text = read(&file);
                let m = parse(&file, &text);
                assert_eq!(names(&m, m.entries()), entries, "{file}");
                let defined = m.functions().filter(|k| !m.entries().any(|e| e == *k));
                assert_eq!(names(&m, defined), funcs, "{file}");
                assert_eq!(crate::stats::entries(&text), entries, "{file}");
                for &e in entries {
                    assert_eq!(m.entry(e).and_then(|k| m.name(k)), Some(e), "{file}");
                }
            }
        }
        // r3's lowering of one kernel holds that kernel alone.
        for (name, text) in real_ptx() {
            let Some(kernel) = name
                .strip_suffix(".tuned.ptx")
                .and_then(|n| n.rsplit('/').next()?.split_once('.'))
                .map(|(_, kernel)| kernel)
            else {
                continue;
            };
            let m = parse(&name, &text);
            assert_eq!(names(&m, m.entries()), [kernel], "{name}");
        }
        let text = read("tests/fixtures/llvm/device_calls.ptx");
        let m = parse("device_calls", &text);
        assert_eq!(
            names(&m, m.functions()),
            [
                "_Z10soft_clampff",
                "_Z6rotate6float2f",
                "_Z11split_partsfPfS_",
                "_Z7combine6float2fRK6Coeffs",
                "_Z9transformffRK6Coeffs",
                "_Z19device_calls_kerneli6CoeffsPKfS1_Pf",
            ]
        );
        assert_eq!(m.entry("_Z6rotate6float2f"), None, "a .func is no entry");
        // `-G`: a device function of the CUDA headers, with the name nvcc gives it.
        let text = read("tests/fixtures/nvcc/b.G.ptx");
        let m = parse("b.G", &text);
        let funcs: Vec<&str> = names(&m, m.functions());
        assert_eq!(funcs.len(), 7);
        assert!(funcs[0].starts_with("_ZN34_INTERNAL_") && funcs[0].ends_with("atomicAddEPyy"));
        assert_eq!(funcs[6], "__ullAtomicAdd");
    }

    #[test]
    fn references_are_callees_and_variables() {
        let text = read("tests/fixtures/llvm/device_calls.ptx");
        let m = parse("device_calls", &text);
        let kernel = m.entry("_Z19device_calls_kerneli6CoeffsPKfS1_Pf").unwrap();
        assert_eq!(
            names(&m, m.references(kernel)),
            ["_Z6rotate6float2f", "_Z7combine6float2fRK6Coeffs"]
        );
        // Through rotate (the math library's table) and combine (its two callees); transform,
        // which nothing calls, stays out.
        assert_eq!(
            names(&m, m.closure(kernel)),
            [
                "__cudart_i2opi_f",
                "_Z10soft_clampff",
                "_Z6rotate6float2f",
                "_Z11split_partsfPfS_",
                "_Z7combine6float2fRK6Coeffs",
            ]
        );

        let text = read("../r3-apply/tests/fixtures/splice/b.host.ptx");
        let m = parse("b.host", &text);
        let refs = |kernel: &str| names(&m, m.references(m.entry(kernel).unwrap()));
        assert_eq!(refs("_Z2sqPii"), ["vprintf", "_$_str", "_Z6squarei"]);
        assert_eq!(
            refs("_Z2cbPii"),
            ["vprintf", "total", "_$_str1", "_Z4cubei"]
        );
        // The `__shared__` array is the kernel's own, declared in its body.
        assert_eq!(refs("_Z6reducePKii"), ["total"]);
        let cb = m.entry("_Z2cbPii").unwrap();
        assert!(names(&m, m.closure(cb)).contains(&"_Z6squarei"));

        let text = read("tests/fixtures/nvcc/b.ptx");
        let m = parse("b.nvcc", &text);
        let sq = m.entry("_Z2sqPii").unwrap();
        assert_eq!(
            names(&m, m.references(sq)),
            ["vprintf", "$str", "_Z6squarei"]
        );

        // A variable's initializer names functions and variables too; the forward declaration
        // and the definition of a function are both referenced.
        let text = read("../r3-apply/tests/fixtures/splice/e.host.ptx");
        let m = parse("e.host", &text);
        let item = |name: &str| {
            (0..m.items().len())
                .find(|&k| m.name(k) == Some(name))
                .unwrap()
        };
        let ops = m.references(item("ops"));
        assert_eq!(ops.len(), 4);
        assert_eq!(
            names(&m, ops),
            ["_Z5twicef", "_Z5halvef", "_Z5twicef", "_Z5halvef"]
        );
        assert_eq!(
            names(&m, m.references(item("_ZL5names"))),
            ["_$_str1", "_$_str"]
        );
        let apply = m.entry("_Z8apply_opPfi").unwrap();
        assert!(names(&m, m.references(apply)).contains(&"ops"));
    }

    #[test]
    fn linkage_and_kinds_are_read() {
        let text = read("../r3-apply/tests/fixtures/splice/c.host.ptx");
        let m = parse("c.host", &text);
        let of = |name: &str| {
            let k = (0..m.items().len())
                .rfind(|&k| m.name(k) == Some(name))
                .unwrap();
            (m.items()[k].kind, m.items()[k].linkage)
        };
        assert!(matches!(
            of("vprintf"),
            (ItemKind::Func { body: None, .. }, Linkage::Extern)
        ));
        assert!(matches!(
            of("smem"),
            (ItemKind::Var { .. }, Linkage::Extern)
        ));
        assert!(matches!(
            of("coef"),
            (ItemKind::Var { .. }, Linkage::Visible)
        ));
        assert!(matches!(
            of("_ZL5state"),
            (ItemKind::Var { .. }, Linkage::Local)
        ));
        assert!(matches!(
            of("_Z3oddi"),
            (
                ItemKind::Func {
                    entry: false,
                    body: Some(_),
                    ..
                },
                Linkage::Visible
            )
        ));
        assert!(matches!(
            of("_Z6parityPii"),
            (ItemKind::Func { entry: true, .. }, Linkage::Visible)
        ));
        // nvcc gives the unit's own functions no linkage.
        let text = read("tests/fixtures/nvcc/c.ptx");
        let m = parse("c.nvcc", &text);
        let odd = (0..m.items().len())
            .find(|&k| m.name(k) == Some("_Z3oddi"))
            .unwrap();
        assert_eq!(m.items()[odd].linkage, Linkage::Local);
        assert!(!m.items()[odd].linkage.is_external());
    }

    #[test]
    fn headers_and_debug_info_are_read() {
        for (file, version, target) in [
            (
                "../r3-apply/tests/fixtures/splice/a.host.ptx",
                (8, 8),
                "sm_90",
            ),
            ("tests/fixtures/llvm/conv2d.ptx", (7, 8), "sm_90"),
            ("tests/fixtures/nvcc/a.ptx", (9, 0), "sm_90"),
            ("tests/fixtures/nvcc/b.G.ptx", (9, 0), "sm_90, debug"),
        ] {
            let text = read(file);
            let h = parse(file, &text).header().unwrap();
            assert_eq!((h.version, h.target.as_str()), (version, target), "{file}");
            assert_eq!(h.address_size, "64");
            assert!(text[..h.end].ends_with(".address_size 64"), "{file}");
        }
        let text = read("tests/fixtures/nvcc/b.G.ptx");
        let m = parse("b.G", &text);
        let sections = m.items().iter().filter(|i| i.kind == ItemKind::Section);
        assert_eq!(sections.count(), 4);
        assert_eq!(m.files().get("\"b.cu\""), Some(&1));
        let file = m.file("2").unwrap();
        assert!(m.text(file.name).ends_with("device_atomic_functions.hpp\""));
        let sq = m.entry("_Z2sqPii").unwrap();
        assert_eq!(m.loc_files([sq].into_iter()), ["1"]);
        assert!(m.labels(sq).any(|l| l == "$L__func_begin3"));
    }

    #[test]
    fn what_is_not_a_module_says_where() {
        let text = read("tests/fixtures/nvcc/b.ptx");
        let cases = [
            // The last `}` of the last function.
            (
                text.trim_end().strip_suffix('}').unwrap().to_string(),
                "never ends",
            ),
            (
                text.replacen("total;", "total", 1),
                "`$str` follows `total`",
            ),
            (text.replacen("ret;", "ret; }", 1), "unbalanced `}`"),
            (format!("{text}{{ ret; }}\n"), "not a `.entry`"),
            (
                format!("{text}.global .u32 total;\n"),
                "`total` is defined twice",
            ),
        ];
        for (bad, problem) in cases {
            let err = Module::parse(&bad).err().unwrap();
            assert!(err.problem.contains(problem), "{err}");
            assert!(err.line > 1, "{err}");
        }
    }
}
