//! Splicing tuned kernels into the PTX clang wrote for a translation unit.
//!
//! When r3 applies its results, it stands between clang and `ptxas`: clang's PTX holds every
//! kernel of the unit as -O3 made it, and r3 holds, for some kernels, a complete PTX module of
//! its own lowering of that one kernel. [`splice`] swaps each such kernel's `.entry` for the tuned
//! one and brings along what the tuned entry uses, so that everything else stays byte for byte
//! as clang wrote it.
//!
//! The PTX is cut into module-scope items (directives, declarations, definitions) by
//! `r3_ptx::module` and never parsed further: the splicer must accept whatever instructions the
//! backend emits, and only names, braces and semicolons matter for moving items between modules. Tuned functions are
//! renamed with the tuned kernel's tag, because the host has functions of the same names that
//! its other kernels still call, compiled differently.
//!
//! Module variables are where the two modules must agree. A variable the host declares the same
//! way is the host's (a `__device__` variable is one object for the whole program, registered by
//! name), also when only the tuned `.align` is larger (the host's is raised), the tuned one is
//! an `.extern` declaration, or one of the two is `.visible` and the other not. One the host lacks comes
//! along unchanged. One that differs is renamed
//! when it is the compiler's (`$str`, `__const_$_…`, `__cudart_…`, `.shared` arrays) and refused
//! otherwise: it is the program's (a `__constant__` or `__device__` variable, a C++ `static`),
//! and a renamed copy would split state the host shares.

use r3_ptx::lex::TokKind;
use r3_ptx::module::{Header, ItemKind, Linkage, Module, ParseError};
use std::collections::{HashMap, HashSet};
use std::ops::Range;

/// One kernel to replace.
#[derive(Debug, Clone, Copy)]
pub struct Tuned<'a> {
    /// Mangled name of the kernel (the `.entry` name) to replace.
    pub kernel: &'a str,
    /// The whole tuned PTX module.
    pub ptx: &'a str,
    /// A short tag unique per tuned kernel (e.g. 8 hex digits of its content hash), used to
    /// rename the tuned module's private functions and colliding variables.
    pub tag: &'a str,
    /// None: the tuned entry replaces the host's. Some(name): it is added under that name just
    /// before the host's entry, which stays (a variant that r3's runtime chooses at launch).
    pub variant: Option<&'a str>,
}

#[derive(Debug, thiserror::Error)]
pub enum SpliceError {
    #[error("host PTX, line {line}: malformed PTX: {problem}")]
    MalformedHost { line: usize, problem: String },
    #[error("kernel `{kernel}`: its tuned PTX, line {line}: malformed PTX: {problem}")]
    MalformedTuned {
        kernel: String,
        line: usize,
        problem: String,
    },
    #[error("kernel `{kernel}`: the host PTX has no `.entry {kernel}`")]
    HostEntryMissing { kernel: String },
    #[error("kernel `{kernel}`: its tuned PTX has no `.entry {kernel}`")]
    TunedEntryMissing { kernel: String },
    #[error("kernel `{kernel}` is given more than once")]
    DuplicateKernel { kernel: String },
    #[error(
        "kernel `{kernel}`: tag `{tag}` cannot be part of a PTX name (use letters, digits, `_`, \
         `$`)"
    )]
    BadTag { kernel: String, tag: String },
    #[error(
        "kernel `{kernel}`: the tuned PTX has `.target {tuned}` but the host PTX has \
         `.target {host}`"
    )]
    TargetMismatch {
        kernel: String,
        host: String,
        tuned: String,
    },
    #[error(
        "kernel `{kernel}`: the tuned PTX has `.address_size {tuned}` but the host PTX has \
         `.address_size {host}`"
    )]
    AddressSizeMismatch {
        kernel: String,
        host: String,
        tuned: String,
    },
    #[error(
        "kernel `{kernel}`: module variable `{name}` is `{tuned}` in the tuned PTX but `{host}` in \
         the host PTX; it is the program's (visible outside the module, or a C++ variable), so it \
         can be neither shared nor renamed"
    )]
    VariableConflict {
        kernel: String,
        name: String,
        host: String,
        tuned: String,
    },
    #[error("kernel `{kernel}`: {problem}")]
    Unsupported { kernel: String, problem: String },
}

impl SpliceError {
    /// The kernel the error is about, if it is about one: the caller may splice the others
    /// without it.
    pub fn kernel(&self) -> Option<&str> {
        match self {
            SpliceError::MalformedHost { .. } => None,
            SpliceError::MalformedTuned { kernel, .. }
            | SpliceError::HostEntryMissing { kernel }
            | SpliceError::TunedEntryMissing { kernel }
            | SpliceError::DuplicateKernel { kernel }
            | SpliceError::BadTag { kernel, .. }
            | SpliceError::TargetMismatch { kernel, .. }
            | SpliceError::AddressSizeMismatch { kernel, .. }
            | SpliceError::VariableConflict { kernel, .. }
            | SpliceError::Unsupported { kernel, .. } => Some(kernel),
        }
    }
}

/// Replaces each tuned kernel's `.entry` in `host` with the tuned one, preceded by the functions
/// and variables it needs from its own module.
pub fn splice(host: &str, tuned: &[Tuned]) -> Result<String, SpliceError> {
    let h = parse(host, None)?;
    let mut order = Vec::with_capacity(tuned.len());
    for (i, t) in tuned.iter().enumerate() {
        if t.tag.is_empty() || !t.tag.bytes().all(r3_ptx::lex::is_ident_char) {
            return Err(SpliceError::BadTag {
                kernel: t.kernel.to_string(),
                tag: t.tag.to_string(),
            });
        }
        if tuned[..i]
            .iter()
            .any(|o| o.kernel == t.kernel && o.variant == t.variant)
        {
            return Err(SpliceError::DuplicateKernel {
                kernel: t.kernel.to_string(),
            });
        }
        let entry = entry(&h, t.kernel).ok_or_else(|| SpliceError::HostEntryMissing {
            kernel: t.kernel.to_string(),
        })?;
        check_labels_unreferenced(&h, entry.0, t.kernel)?;
        order.push((entry, t));
    }
    // In the host's order, so that a variable one tuned module adds precedes every later kernel
    // that shares it.
    order.sort_by_key(|&((entry, _), _)| entry);

    let mut s = Splicer::new(&h)?;
    for ((entry, keyword), t) in order {
        let text = s.kernel(entry, keyword, t)?;
        let span = h.span(entry);
        match t.variant {
            // Inserted before the host's entry, which stays as it is.
            Some(_) => s.edits.push((span.start..span.start, text + "\n\n")),
            None => s.edits.push((span, text)),
        }
    }
    Ok(s.finish())
}

/// The state of one [`splice`]: what it has added to the host so far, and the edits to make.
struct Splicer<'h, 't> {
    host: &'h Module<'t>,
    header: Header,
    scope: Scope,
    /// `.file` names (quoted, as written) and their indices in the result.
    files: HashMap<String, u64>,
    next_file: u64,
    version: ((u32, u32), String),
    /// Declarations for the top of the module, after the header directives.
    top: String,
    /// Host variables whose `.align` a tuned kernel needs larger.
    align_upgrades: HashMap<usize, u64>,
    /// Byte ranges of the host and their replacements.
    edits: Vec<(Range<usize>, String)>,
}

impl<'h, 't> Splicer<'h, 't> {
    fn new(host: &'h Module<'t>) -> Result<Self, SpliceError> {
        let header = header(host, None)?;
        let files = host.files();
        Ok(Splicer {
            host,
            scope: Scope::of_host(host),
            next_file: files.values().max().map_or(1, |m| m + 1),
            files,
            version: (header.version, header.version_text.clone()),
            header,
            top: String::new(),
            align_upgrades: HashMap::new(),
            edits: Vec::new(),
        })
    }

    /// The text that replaces the host's `.entry` (item `host_entry`) for the tuned kernel `t`.
    fn kernel(
        &mut self,
        host_entry: usize,
        host_keyword: usize,
        t: &Tuned,
    ) -> Result<String, SpliceError> {
        let kernel = t.kernel;
        let m = parse(t.ptx, Some(kernel))?;
        let mh = header(&m, Some(kernel))?;
        if mh.target != self.header.target {
            return Err(SpliceError::TargetMismatch {
                kernel: kernel.to_string(),
                host: self.header.target.clone(),
                tuned: mh.target,
            });
        }
        if mh.address_size != self.header.address_size {
            return Err(SpliceError::AddressSizeMismatch {
                kernel: kernel.to_string(),
                host: self.header.address_size.clone(),
                tuned: mh.address_size,
            });
        }
        if mh.version > self.version.0 {
            self.version = (mh.version, mh.version_text);
        }
        let (entry, keyword) = entry(&m, kernel).ok_or_else(|| SpliceError::TunedEntryMissing {
            kernel: kernel.to_string(),
        })?;
        let need = m.closure(entry);
        if let Some(label) = debug_label_used(&m, &need, entry) {
            return Err(unsupported(
                kernel,
                format!(
                    "its tuned PTX refers to `{label}` in its debug sections, which cannot be \
                     carried over"
                ),
            ));
        }
        let here = self.host.span(host_entry).start;

        let mut funcs: HashMap<&str, String> = HashMap::new();
        for item in m.items() {
            if let ItemKind::Func {
                name, entry: false, ..
            } = item.kind
            {
                if item.linkage == Linkage::Extern {
                    continue;
                }
                funcs.insert(m.text(name), format!("{}_r3_{}", m.text(name), t.tag));
            }
        }
        for new in funcs.values() {
            self.scope.claim(new, here, None, kernel)?;
        }

        let mut vars: HashMap<&str, String> = HashMap::new();
        let mut keep = Vec::new();
        for &k in &need {
            let item = &m.items()[k];
            match item.kind {
                ItemKind::Func { name, .. } if item.linkage == Linkage::Extern => {
                    let name = m.text(name);
                    if !self.scope.names.contains_key(name) {
                        self.top.push('\n');
                        self.top.push_str(&m.source()[m.span(k)]);
                        self.scope.claim(name, 0, None, kernel)?;
                    }
                }
                ItemKind::Func { .. } => keep.push(k),
                // Shared variables are the host's, not repeated.
                ItemKind::Var { .. } if self.variable(&m, k, &mut vars, here, t)? => keep.push(k),
                _ => {}
            }
        }

        let mut map = funcs;
        map.extend(vars);
        if let Some(name) = t.variant {
            if name.is_empty() || !name.bytes().all(r3_ptx::lex::is_ident_char) {
                return Err(SpliceError::BadTag {
                    kernel: kernel.to_string(),
                    tag: name.to_string(),
                });
            }
            self.scope.claim(name, here, None, kernel)?;
            map.insert(kernel, name.to_string());
        }
        let files = self.files(&m, keep.iter().copied().chain([entry]));
        let mut out = match t.variant {
            Some(v) => format!("// r3: variant `{v}` of `{kernel}` (tag {})\n", t.tag),
            None => format!("// r3: tuned `{kernel}` (tag {})\n", t.tag),
        };
        for &k in &keep {
            out.push_str(&render(&m, k, None, &map, &files));
            out.push('\n');
        }
        // The linkage is the unit's business (how other units link to the kernel), not the
        // tuning's.
        out.push_str(&self.host.source()[here..self.host.tok(host_keyword).start]);
        out.push_str(&render(&m, entry, Some(keyword), &map, &files));
        Ok(out)
    }

    /// Decides about variable item `k` of tuned module `m`: shared with the host's (false),
    /// kept as it is or kept renamed in `vars` (true).
    ///
    /// Declarations are compared with the variables renamed so far but not the functions: a
    /// table of function addresses points to the same source functions either way, while one
    /// that points to a renamed variable points to different data.
    fn variable<'m>(
        &mut self,
        m: &Module<'m>,
        k: usize,
        vars: &mut HashMap<&'m str, String>,
        here: usize,
        t: &Tuned,
    ) -> Result<bool, SpliceError> {
        let item = &m.items()[k];
        let ItemKind::Var { name } = item.kind else {
            return Ok(false);
        };
        let external = item.linkage.is_external();
        let declaration = item.linkage == Linkage::Extern;
        let name = m.text(name);
        let shape = shape_of(m, k, vars);
        let Some(known) = self.scope.names.get(name) else {
            self.scope.claim(name, here, Some(shape), t.kernel)?;
            return Ok(true);
        };
        // `Some(upgrade)`: shared, raising the host's alignment if `upgrade` names its item.
        // Two that differ only in `.visible` are one: a module that holds one kernel may make
        // the unit's internal variables visible so that its optimizer cannot take them for the
        // kernel's own, and nvcc leaves a unit's `__constant__` variables unlinked where clang
        // makes them visible. Replay restores a module's variables by name, so it measured the
        // tuned code on the host's data: a renamed copy, never written by the program, made
        // nvcc's conv2d kernel read a zero filter (H200, 2026-11-30).
        let shared = match &known.var {
            Some(v) if declaration || unlinked(&v.shape.norm) == unlinked(&shape.norm) => {
                Some(None)
            }
            Some(v)
                if v.host_item.is_some() && unlinked(&v.shape.bare) == unlinked(&shape.bare) =>
            {
                match (v.shape.align, shape.align) {
                    (Some(a), Some(b)) => Some(v.host_item.filter(|_| b > a)),
                    _ => None,
                }
            }
            _ => None,
        };
        if let Some(upgrade) = shared {
            if known.pos >= here {
                return Err(unsupported(
                    t.kernel,
                    format!("the host PTX declares `{name}` only after the kernel"),
                ));
            }
            if let (Some(item), Some(align)) = (upgrade, shape.align) {
                let a = self.align_upgrades.entry(item).or_default();
                *a = (*a).max(align);
            }
            return Ok(false);
        }
        // Only the compiler's own constants (`$str`, `__const_$_…`, libdevice's `__cudart_…`
        // tables: names no program may spell) and `.shared` memory, each kernel's own, may be
        // renamed. Any other is the program's state, which kernels share and the host may
        // address by name (a `__constant__` it fills with cudaMemcpyToSymbol, a C++ `static`):
        // a renamed copy would split it, and replay, which restores variables by name, would not
        // have seen that.
        let shared_memory = item.toks.clone().any(|t| m.text(t) == ".shared");
        let program_state = !shared_memory && !compilers_own(name);
        if external || program_state {
            return Err(SpliceError::VariableConflict {
                kernel: t.kernel.to_string(),
                name: name.to_string(),
                host: known
                    .var
                    .as_ref()
                    .map_or_else(|| "a function".to_string(), |v| v.shape.display.clone()),
                tuned: shape.display,
            });
        }
        let new = format!("{name}_r3_{}", t.tag);
        vars.insert(name, new.clone());
        self.scope
            .claim(&new, here, Some(shape_of(m, k, vars)), t.kernel)?;
        Ok(true)
    }

    /// `.loc` names its file by the module's own `.file` index: the tuned module's indices
    /// (those `items` use) mapped to the result's, adding the files the host lacks.
    fn files<'m>(
        &mut self,
        m: &Module<'m>,
        items: impl Iterator<Item = usize>,
    ) -> HashMap<&'m str, String> {
        let mut map = HashMap::new();
        for index in m.loc_files(items) {
            let Some(file) = m.file(index) else { continue };
            let name = m.text(file.name);
            let new = match self.files.get(name) {
                Some(&known) => known,
                None => {
                    let new = self.next_file;
                    self.next_file += 1;
                    self.files.insert(name.to_string(), new);
                    let rest = &m.source()[m.tok(file.name).start..m.span(file.item).end];
                    self.top.push_str(&format!("\n.file\t{new} {rest}"));
                    new
                }
            };
            map.insert(index, new.to_string());
        }
        map
    }

    fn finish(mut self) -> String {
        let h = self.host;
        if self.version.0 != self.header.version {
            let range = h.tok(self.header.version_tok).range();
            self.edits.push((range, self.version.1));
        }
        if !self.top.is_empty() {
            let end = self.header.end;
            self.edits.push((end..end, self.top));
        }
        for (item, align) in self.align_upgrades {
            if let Some(tok) = align_tok(h, item) {
                self.edits.push((h.tok(tok).range(), align.to_string()));
            }
        }
        self.edits.sort_by_key(|(r, _)| (r.start, r.end));

        let added: usize = self.edits.iter().map(|e| e.1.len()).sum();
        let mut out = String::with_capacity(h.source().len() + added);
        let mut pos = 0;
        for (range, text) in self.edits {
            // Edits are disjoint by construction (header, variable declarations and entries are
            // different items); an overlap would be a bug here, not in the input.
            debug_assert!(range.start >= pos, "overlapping splice edits");
            if range.start < pos {
                continue;
            }
            out.push_str(&h.source()[pos..range.start]);
            out.push_str(&text);
            pos = range.end;
        }
        out.push_str(&h.source()[pos..]);
        out
    }
}

fn unsupported(kernel: &str, problem: String) -> SpliceError {
    SpliceError::Unsupported {
        kernel: kernel.to_string(),
        problem,
    }
}

/// The text of one `.entry` (from its linkage/`.entry` keyword to its closing brace), for tests
/// and checks.
pub fn entry_text<'a>(ptx: &'a str, kernel: &str) -> Option<&'a str> {
    let m = Module::parse(ptx).ok()?;
    Some(&ptx[m.span(m.entry(kernel)?)])
}

fn malformed(kernel: Option<&str>, e: ParseError) -> SpliceError {
    let ParseError { line, problem } = e;
    match kernel {
        None => SpliceError::MalformedHost { line, problem },
        Some(kernel) => SpliceError::MalformedTuned {
            kernel: kernel.to_string(),
            line,
            problem,
        },
    }
}

/// `kernel`: whose tuned PTX `text` is; `None` for the host's.
fn parse<'t>(text: &'t str, kernel: Option<&str>) -> Result<Module<'t>, SpliceError> {
    Module::parse(text).map_err(|e| malformed(kernel, e))
}

/// `kernel`: whose tuned PTX `m` is; `None` for the host's.
fn header(m: &Module, kernel: Option<&str>) -> Result<Header, SpliceError> {
    m.header().map_err(|e| malformed(kernel, e))
}

/// The item defining kernel `name`, and its `.entry` token.
fn entry(m: &Module, name: &str) -> Option<(usize, usize)> {
    let k = m.entry(name)?;
    match m.items()[k].kind {
        ItemKind::Func { keyword, .. } => Some((k, keyword)),
        _ => None,
    }
}

/// A variable's declaration as compared between modules: its tokens joined by single spaces,
/// and the same without `.align N`.
#[derive(Clone, Debug)]
struct Shape {
    /// The text as written, whitespace collapsed, for messages.
    display: String,
    norm: String,
    bare: String,
    align: Option<u64>,
}

/// Full debug info (`-G`) has DWARF sections that point at labels inside the functions;
/// removing an entry would leave them dangling.
fn check_labels_unreferenced(m: &Module, entry: usize, kernel: &str) -> Result<(), SpliceError> {
    let labels: HashSet<&str> = m.labels(entry).collect();
    if labels.is_empty() {
        return Ok(());
    }
    for (k, item) in m.items().iter().enumerate() {
        if item.kind != ItemKind::Section {
            continue;
        }
        if let Some(label) = m.idents(k).find(|i| labels.contains(i)) {
            return Err(SpliceError::Unsupported {
                kernel: kernel.to_string(),
                problem: format!(
                    "the host PTX's debug sections refer to `{label}` inside the kernel \
                     (full device debug info cannot be spliced)"
                ),
            });
        }
    }
    Ok(())
}

/// A label of `m`'s debug sections that the items `need` or `entry` use.
fn debug_label_used<'t>(m: &Module<'t>, need: &[usize], entry: usize) -> Option<&'t str> {
    let labels: HashSet<&str> = (0..m.items().len())
        .filter(|&k| m.items()[k].kind == ItemKind::Section)
        .flat_map(|k| m.labels(k))
        .collect();
    if labels.is_empty() {
        return None;
    }
    need.iter()
        .chain([&entry])
        .flat_map(|&k| m.idents(k))
        .find(|i| labels.contains(i))
}

/// The shape of variable `item` of `m`, with the names in `map` renamed.
fn shape_of(m: &Module, item: usize, map: &HashMap<&str, String>) -> Shape {
    let mut norm = Vec::new();
    let mut bare = Vec::new();
    let mut align = None;
    let mut toks = m.items()[item].toks.clone().peekable();
    while let Some(k) = toks.next() {
        let text = map.get(m.text(k)).map_or(m.text(k), String::as_str);
        norm.push(text);
        if text == ".align" {
            if let Some(&n) = toks.peek() {
                align = m.text(n).parse().ok();
                norm.push(m.text(n));
                toks.next();
                continue;
            }
        }
        bare.push(text);
    }
    let span = m.span(item);
    Shape {
        display: m.source()[span]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
        norm: norm.join(" "),
        bare: bare.join(" "),
        align,
    }
}

/// Whether a module variable's name is one only a compiler makes: with a `$` (clang's `$str`,
/// `__const_$_f_$_v`) or in the implementation's reserved `__` prefix (libdevice's
/// `__cudart_i2opi_f`, `__unnamed_1`).
fn compilers_own(name: &str) -> bool {
    name.contains('$') || name.starts_with("__")
}

/// A variable's shape without its `.visible`.
fn unlinked(shape: &str) -> &str {
    shape.strip_prefix(".visible ").unwrap_or(shape)
}

/// The token of the `N` of item's `.align N`.
fn align_tok(m: &Module, item: usize) -> Option<usize> {
    let toks = m.items()[item].toks.clone();
    toks.clone()
        .find(|&k| m.text(k) == ".align" && toks.contains(&(k + 1)))
        .map(|k| k + 1)
}

/// The item's text from token `from` (default: its first), with names renamed, `.loc` file
/// indices renumbered and, for functions, `.visible`/`.weak` dropped.
fn render(
    m: &Module,
    item: usize,
    from: Option<usize>,
    map: &HashMap<&str, String>,
    files: &HashMap<&str, String>,
) -> String {
    let it = &m.items()[item];
    let keyword = match it.kind {
        ItemKind::Func { keyword, .. } => keyword,
        _ => 0,
    };
    let text = m.source();
    let from = from.unwrap_or(it.toks.start);
    let mut out = String::new();
    let mut pos = m.tok(from).start;
    for k in from..it.toks.end {
        let t = m.tok(k);
        let word = m.text(k);
        let replacement = match t.kind {
            TokKind::Ident => map.get(word).map(String::as_str),
            TokKind::Directive if k < keyword && matches!(word, ".visible" | ".weak") => Some(""),
            TokKind::Number if k > 0 && m.text(k - 1) == ".loc" => {
                files.get(word).map(String::as_str)
            }
            _ => None,
        };
        let Some(replacement) = replacement else {
            continue;
        };
        out.push_str(&text[pos..t.start]);
        out.push_str(replacement);
        pos = t.end;
        if replacement.is_empty() {
            while matches!(text.as_bytes().get(pos), Some(b' ' | b'\t')) {
                pos += 1;
            }
        }
    }
    out.push_str(&text[pos..m.span(item).end]);
    out
}

/// The module-scope names of the host, and of what splicing has added to it so far.
struct Scope {
    names: HashMap<String, Known>,
}

struct Known {
    /// Where in the host the name is declared (a byte offset): only kernels after it may share
    /// it.
    pos: usize,
    var: Option<KnownVar>,
}

struct KnownVar {
    shape: Shape,
    /// The host's own declaration, whose alignment may be raised.
    host_item: Option<usize>,
}

impl Scope {
    fn of_host(h: &Module) -> Self {
        let mut scope = Scope {
            names: HashMap::new(),
        };
        let none = HashMap::new();
        for (k, item) in h.items().iter().enumerate() {
            let (name, var) = match item.kind {
                ItemKind::Func { name, .. } => (name, None),
                ItemKind::Var { name } => {
                    let shape = shape_of(h, k, &none);
                    let host_item = Some(k);
                    (name, Some(KnownVar { shape, host_item }))
                }
                _ => continue,
            };
            scope
                .names
                .entry(h.text(name).to_string())
                .or_insert(Known {
                    pos: h.span(k).start,
                    var,
                });
        }
        scope
    }

    /// Adds `name`, which must be new: a clash means the host was spliced before with the same
    /// tag, or holds a name of the form r3 gives.
    fn claim(
        &mut self,
        name: &str,
        pos: usize,
        shape: Option<Shape>,
        kernel: &str,
    ) -> Result<(), SpliceError> {
        if self.names.contains_key(name) {
            return Err(unsupported(
                kernel,
                format!("`{name}` already exists in the host PTX (was it spliced before?)"),
            ));
        }
        let var = shape.map(|shape| KnownVar {
            shape,
            host_item: None,
        });
        self.names.insert(name.to_string(), Known { pos, var });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `str::replace` that fails when there is nothing to replace, so that no test silently
    /// checks the unedited text.
    trait Edit {
        fn edit(&self, from: &str, to: &str) -> String;
        fn edit_n(&self, from: &str, to: &str, n: usize) -> String;
    }

    impl Edit for str {
        fn edit(&self, from: &str, to: &str) -> String {
            assert!(self.contains(from), "no {from:?} to replace");
            self.replace(from, to)
        }
        fn edit_n(&self, from: &str, to: &str, n: usize) -> String {
            assert!(self.contains(from), "no {from:?} to replace");
            self.replacen(from, to, n)
        }
    }

    /// The declaration of `vprintf`, as the fixtures hold it.
    const VPRINTF: &str = "\
.extern .func  (.param .b32 func_retval0) vprintf
(
\t.param .b64 vprintf_param_0,
\t.param .b64 vprintf_param_1
)
;
";

    /// Kernel `_Z1aPi` calls `_Z3fooi` and reads `counter`; `_Z1bv` prints `$str`.
    fn host() -> String {
        include_str!("../tests/fixtures/splice/hand/host.ptx").to_owned()
    }

    /// A tuned `_Z1aPi`: `counter` as in the host but spaced differently, a `$str` of its own,
    /// `_Z3fooi` forward-declared and defined after the entry (and `.weak`), a `vprintf` call.
    fn tuned_a(version: &str) -> String {
        include_str!("../tests/fixtures/splice/hand/tuned_a.ptx").edit("@VERSION@", version)
    }

    /// A tuned `_Z1bv` that also has a `_Z3fooi` of its own, and a `$str` like the host's.
    fn tuned_b() -> String {
        include_str!("../tests/fixtures/splice/hand/tuned_b.ptx").to_owned()
    }

    fn one<'a>(kernel: &'a str, ptx: &'a str, tag: &'a str) -> [Tuned<'a>; 1] {
        [Tuned {
            kernel,
            ptx,
            tag,
            variant: None,
        }]
    }

    /// The tuned entry as the splice should write it: `map`'s names replaced, token-exact.
    fn renamed(text: &str, map: &[(&str, &str)]) -> String {
        let mut out = String::new();
        let mut word = String::new();
        for c in text.chars().chain(['\n']) {
            if c.is_ascii_alphanumeric() || c == '_' || c == '$' || c == '%' {
                word.push(c);
                continue;
            }
            let name = map.iter().find(|(from, _)| *from == word);
            out.push_str(name.map_or(word.as_str(), |(_, to)| to));
            word.clear();
            out.push(c);
        }
        out.pop();
        out
    }

    fn count(haystack: &str, needle: &str) -> usize {
        haystack.matches(needle).count()
    }

    #[test]
    fn replaces_the_entry_and_keeps_the_rest_byte_for_byte() {
        let (host, tuned) = (host(), tuned_a("8.7"));
        let out = splice(&host, &one("_Z1aPi", &tuned, "t1")).unwrap();
        assert_eq!(entry_text(&out, "_Z1bv"), entry_text(&host, "_Z1bv"));
        assert_eq!(
            entry_text(&out, "_Z1aPi").unwrap(),
            renamed(
                entry_text(&tuned, "_Z1aPi").unwrap(),
                &[("_Z3fooi", "_Z3fooi_r3_t1"), ("$str", "$str_r3_t1")]
            )
        );
        // Everything before the replaced entry is the host's, except what the splice added.
        let before = &host[..host.find(".visible .entry _Z1aPi").unwrap()];
        assert!(out.starts_with(before));
        let after =
            &host[host.find(".visible .entry _Z1bv").unwrap() - "\t// .globl\t_Z1bv\n".len()..];
        assert!(out.ends_with(after));
    }

    #[test]
    fn renames_functions_token_exact_and_drops_their_linkage() {
        let (host, tuned) = (host(), tuned_a("8.7"));
        let out = splice(&host, &one("_Z1aPi", &tuned, "t1")).unwrap();
        // Forward declaration, definition and call.
        assert_eq!(count(&out, "_Z3fooi_r3_t1"), 3, "{out}");
        let decl =
            ".func  (.param .b32 func_retval0) _Z3fooi_r3_t1\n(\n\t.param .b32 _Z3fooi_param_0";
        assert!(out.contains(decl));
        assert!(out.contains(
            ".func  (.param .b32 func_retval0) _Z3fooi_r3_t1(\n\t.param .b32 _Z3fooi_param_0\n)\n{"
        ));
        assert!(!out.contains(".weak"));
        assert!(!out.contains("_Z3fooi_r3_t1_param"));
        // The host's own function is untouched and still the one its kernels call.
        let host_def = ".visible .func  (.param .b32 func_retval0) _Z3fooi(\n\t.param .b32 \
                        _Z3fooi_param_0\n)\n{\n\t.reg .b32 \t%r<3>;\n\n\tld.param.b32 \t%r1, \
                        [_Z3fooi_param_0];\n\tadd.s32";
        assert!(out.contains(host_def));
    }

    #[test]
    fn forward_declared_function_is_placed_before_the_entry() {
        let (host, tuned) = (host(), tuned_a("8.7"));
        let out = splice(&host, &one("_Z1aPi", &tuned, "t1")).unwrap();
        let decl = out.find("_Z3fooi_r3_t1\n(").unwrap();
        let def = out.find("_Z3fooi_r3_t1(").unwrap();
        let entry = out.find(".entry _Z1aPi").unwrap();
        assert!(decl < def && def < entry);
    }

    #[test]
    fn colliding_compiler_constant_is_renamed() {
        let (host, tuned) = (host(), tuned_a("8.7"));
        let out = splice(&host, &one("_Z1aPi", &tuned, "t1")).unwrap();
        assert!(out.contains(".global .align 1 .b8 $str_r3_t1[4] = {121, 111, 10, 0};"));
        assert!(out.contains(".global .align 1 .b8 $str[3] = {104, 105, 0};"));
        assert!(entry_text(&out, "_Z1aPi")
            .unwrap()
            .contains("mov.b64 \t%rd3, $str_r3_t1;"));
        assert!(entry_text(&out, "_Z1bv")
            .unwrap()
            .contains("mov.b64 \t%rd1, $str;"));
    }

    #[test]
    fn same_user_variable_is_shared() {
        let (host, tuned) = (host(), tuned_a("8.7"));
        let out = splice(&host, &one("_Z1aPi", &tuned, "t1")).unwrap();
        assert_eq!(count(&out, ".u32 counter;"), 1);
        assert!(!out.contains("counter_r3"));
        assert!(entry_text(&out, "_Z1aPi").unwrap().contains("[counter]"));
    }

    #[test]
    fn identical_constant_is_shared() {
        let (host, tuned) = (host(), tuned_b());
        let out = splice(&host, &one("_Z1bv", &tuned, "t2")).unwrap();
        assert_eq!(count(&out, "$str["), 1);
        assert!(entry_text(&out, "_Z1bv")
            .unwrap()
            .contains("mov.b64 \t%rd1, $str;"));
    }

    #[test]
    fn visible_variable_that_differs_is_an_error() {
        let host = host();
        let tuned = tuned_a("8.7").edit(".u32 counter;", ".u64 counter;");
        let err = splice(&host, &one("_Z1aPi", &tuned, "t1")).unwrap_err();
        assert!(matches!(&err, SpliceError::VariableConflict { name, .. } if name == "counter"));
        assert!(err.to_string().contains("_Z1aPi"), "{err}");
    }

    #[test]
    fn cpp_static_that_differs_is_an_error_but_shared_memory_is_renamed() {
        let host = host().edit(
            ".visible .global .align 4 .u32 counter;",
            ".visible .global .align 4 .u32 counter;\n.global .align 4 .u32 _ZL5state;\n\
             .shared .align 4 .b8 _ZZ1aE3buf[64];",
        );
        let with = |decls: &str| {
            tuned_a("8.7")
                .edit(
                    ".global .align 1 .b8 $str",
                    &format!("{decls}\n.global .align 1 .b8 $str"),
                )
                .edit(
                    "\tst.global.b32 \t[%rd2], %r2;",
                    "\tst.global.b32 \t[%rd2], %r2;\n\tst.global.b32 \t[_ZL5state], %r2;\n\
                     \tst.shared.b32 \t[_ZZ1aE3buf], %r2;",
                )
        };
        // Made visible for the tuned module's own sake, it is still the host's.
        let tuned = with(".visible .global .align 4 .u32 _ZL5state;");
        let out = splice(&host, &one("_Z1aPi", &tuned, "t1")).unwrap();
        assert_eq!(count(&out, "_ZL5state;"), 1);
        let tuned = with(".global .align 4 .u8 _ZL5state;\n.shared .align 4 .b8 _ZZ1aE3buf[64];");
        let err = splice(&host, &one("_Z1aPi", &tuned, "t1")).unwrap_err();
        assert!(matches!(&err, SpliceError::VariableConflict { name, .. } if name == "_ZL5state"));
        let tuned =
            with(".global .align 4 .u32 _ZL5state;\n.shared .align 16 .b8 _ZZ1aE3buf[128];");
        let out = splice(&host, &one("_Z1aPi", &tuned, "t1")).unwrap();
        assert!(out.contains(".shared .align 16 .b8 _ZZ1aE3buf_r3_t1[128];"));
        assert!(entry_text(&out, "_Z1aPi")
            .unwrap()
            .contains("[_ZZ1aE3buf_r3_t1]"));
        assert!(entry_text(&out, "_Z1aPi").unwrap().contains("[_ZL5state]"));
    }

    #[test]
    fn larger_alignment_is_shared_by_raising_the_hosts() {
        let host = host();
        let tuned = tuned_a("8.7").edit(".align 4   .u32 counter", ".align 16 .u32 counter");
        let out = splice(&host, &one("_Z1aPi", &tuned, "t1")).unwrap();
        assert!(out.contains(".visible .global .align 16 .u32 counter;"));
        assert_eq!(count(&out, "counter;"), 1);
        // A smaller one leaves the host's as it is.
        let tuned = tuned_a("8.7").edit(".align 4   .u32 counter", ".align 2 .u32 counter");
        let out = splice(&host, &one("_Z1aPi", &tuned, "t1")).unwrap();
        assert!(out.contains(".visible .global .align 4 .u32 counter;"));
    }

    /// nvcc leaves a unit's `__constant__` variable unlinked where clang makes it `.visible`:
    /// it is still the variable the program writes by name (`cudaMemcpyToSymbol`), so the tuned
    /// kernel reads the host's, also where its alignment is larger. A renamed copy made nvcc's
    /// conv2d code read a zero filter and fail its program's check.
    #[test]
    fn a_variable_visible_in_the_host_and_unlinked_in_the_tuned_module_is_the_hosts() {
        let host = host();
        for (decl, align) in [
            (".global .align 4 .u32 counter;", "4"),
            (".global .align 16 .u32 counter;", "16"),
        ] {
            let tuned = tuned_a("8.7").edit(".visible .global .align 4   .u32 counter;", decl);
            let out = splice(&host, &one("_Z1aPi", &tuned, "t1")).unwrap();
            assert_eq!(count(&out, ".u32 counter;"), 1, "{decl}");
            assert!(out.contains(&format!(".visible .global .align {align} .u32 counter;")));
            assert!(!out.contains("counter_r3"), "{decl}");
            assert!(entry_text(&out, "_Z1aPi").unwrap().contains("[counter]"));
        }
    }

    /// A variable of the program's that the tuned module declares otherwise (nvcc writes a
    /// `__constant__` table's initializer in words where clang writes bytes) is refused, not
    /// renamed: the copy would hold the initializer, never what the program writes to it. The
    /// compiler's own constants are still renamed.
    #[test]
    fn a_program_variable_declared_otherwise_is_refused_and_a_compilers_is_renamed() {
        let host = host().edit(
            ".visible .global .align 4 .u32 counter;",
            ".visible .global .align 4 .u32 counter;\n.visible .const .align 4 .b8 table[8] = {0, 0, 128, 63, 0, 0, 0, 64};",
        );
        let with = |decl: &str| {
            tuned_a("8.7")
                .edit(
                    ".global .align 1 .b8 $str",
                    &format!("{decl}\n.global .align 1 .b8 $str"),
                )
                .edit(
                    "\tst.global.b32 \t[%rd2], %r2;",
                    "\tst.global.b32 \t[%rd2], %r2;\n\tld.const.b32 \t%r2, [table+4];",
                )
        };
        let tuned = with(".const .align 4 .b32 table[2] = {1065353216, 1073741824};");
        let err = splice(&host, &one("_Z1aPi", &tuned, "t1")).unwrap_err();
        assert!(matches!(&err, SpliceError::VariableConflict { name, .. } if name == "table"));
        // Declared as the host does, it is the host's.
        let tuned = with(".const .align 4 .b8 table[8] = {0, 0, 128, 63, 0, 0, 0, 64};");
        let out = splice(&host, &one("_Z1aPi", &tuned, "t1")).unwrap();
        assert_eq!(count(&out, "table["), 1);
        assert!(entry_text(&out, "_Z1aPi").unwrap().contains("[table+4]"));
        for own in ["__cudart_i2opi_f", "__const_$_k_$_lut"] {
            assert!(compilers_own(own), "{own}");
        }
        assert!(!compilers_own("table") && !compilers_own("_ZL5state"));
    }

    #[test]
    fn extern_declaration_shares_the_hosts_definition() {
        let host = host();
        let tuned = tuned_a("8.7").edit(
            ".visible .global .align 4   .u32 counter;",
            ".extern .global .align 4 .u32 counter;",
        );
        let out = splice(&host, &one("_Z1aPi", &tuned, "t1")).unwrap();
        assert!(!out.contains(".extern .global"));
    }

    #[test]
    fn variable_absent_in_host_is_kept_unchanged() {
        let host = host();
        let tuned = tuned_a("8.7").edit(
            ".visible .global .align 4   .u32 counter;",
            ".visible .global .align 4   .u32 counter;\n.visible .const .align 8 .b8 coef[16];",
        );
        let tuned = tuned.edit(
            "ld.global.b32 \t%r1, [counter];",
            "ld.const.b32 \t%r1, [coef+4];",
        );
        let out = splice(&host, &one("_Z1aPi", &tuned, "t1")).unwrap();
        assert!(out.contains(".visible .const .align 8 .b8 coef[16];"));
        assert!(out.find("coef[16]").unwrap() < out.find(".entry _Z1aPi").unwrap());
    }

    #[test]
    fn extern_function_is_added_at_the_top_when_missing() {
        let host = host().edit(VPRINTF, "");
        let host = host.edit("call.uni (retval0), vprintf, (param0, param1);", "");
        let tuned = tuned_a("8.7");
        let out = splice(&host, &one("_Z1aPi", &tuned, "t1")).unwrap();
        assert_eq!(count(&out, "vprintf\n("), 1);
        assert!(out.find("vprintf\n(").unwrap() < out.find(".global").unwrap());
        assert!(out.contains(".address_size 64\n.extern .func"));
        // Where the host has it, it is not repeated.
        let out = splice(&self::host(), &one("_Z1aPi", &tuned, "t1")).unwrap();
        assert_eq!(count(&out, "vprintf\n("), 1);
    }

    #[test]
    fn unused_items_of_the_tuned_module_stay_out() {
        let host = host();
        let tuned = tuned_a("8.7").edit(
            ".visible .entry _Z1aPi(",
            ".global .align 4 .u32 unused;\n.func unused_f()\n{\n\tret;\n}\n\
             .visible .entry _Z1aPi(",
        );
        let out = splice(&host, &one("_Z1aPi", &tuned, "t1")).unwrap();
        assert!(!out.contains("unused"));
    }

    #[test]
    fn version_is_the_newer_of_the_two() {
        let (host, tuned) = (host(), tuned_a("9.0"));
        let out = splice(&host, &one("_Z1aPi", &tuned, "t1")).unwrap();
        assert!(out.contains("\n.version 9.0\n"));
        let (host, tuned) = (host.edit(".version 8.7", ".version 9.0"), tuned_a("8.7"));
        let out = splice(&host, &one("_Z1aPi", &tuned, "t1")).unwrap();
        assert!(out.contains("\n.version 9.0\n"));
        // Minor versions compare as numbers.
        let (host, tuned) = (host.edit(".version 9.0", ".version 8.9"), tuned_a("8.10"));
        let out = splice(&host, &one("_Z1aPi", &tuned, "t1")).unwrap();
        assert!(out.contains("\n.version 8.10\n"));
    }

    #[test]
    fn target_and_address_size_must_agree() {
        let host = host();
        let tuned = tuned_a("8.7").edit(".target sm_90", ".target sm_80");
        let err = splice(&host, &one("_Z1aPi", &tuned, "t1")).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, SpliceError::TargetMismatch { .. }));
        assert!(
            msg.contains("sm_80") && msg.contains("sm_90") && msg.contains("_Z1aPi"),
            "{msg}"
        );

        let tuned = tuned_a("8.7").edit(".address_size 64\n", "");
        let err = splice(&host, &one("_Z1aPi", &tuned, "t1")).unwrap_err();
        assert!(matches!(err, SpliceError::AddressSizeMismatch { ref tuned, .. } if tuned == "32"));

        // Spacing is not a difference.
        let tuned = tuned_a("8.7").edit(".target sm_90", ".target    sm_90 ");
        splice(&host, &one("_Z1aPi", &tuned, "t1")).unwrap();
    }

    #[test]
    fn missing_entries_are_errors() {
        let (host, tuned) = (host(), tuned_a("8.7"));
        let err = splice(&host, &one("_Z1cv", &tuned, "t1")).unwrap_err();
        assert!(matches!(err, SpliceError::HostEntryMissing { ref kernel } if kernel == "_Z1cv"));
        assert!(err.to_string().contains("_Z1cv"));
        let err = splice(&host, &one("_Z1bv", &tuned, "t1")).unwrap_err();
        assert!(matches!(err, SpliceError::TunedEntryMissing { ref kernel } if kernel == "_Z1bv"));
        // A forward declaration of a name is not its entry.
        let host = host.edit(
            ".visible .entry _Z1bv()\n{",
            ".visible .entry _Z1cv();\n.visible .entry _Z1bv()\n{",
        );
        let err = splice(&host, &one("_Z1cv", &tuned, "t1")).unwrap_err();
        assert!(matches!(err, SpliceError::HostEntryMissing { .. }));
    }

    #[test]
    fn several_kernels_with_the_same_function_names() {
        let (host, a, b) = (host(), tuned_a("8.7"), tuned_b());
        // Given in the opposite order to the host's.
        let tuned = [
            Tuned {
                kernel: "_Z1bv",
                ptx: &b,
                tag: "bbbb0002",
                variant: None,
            },
            Tuned {
                kernel: "_Z1aPi",
                ptx: &a,
                tag: "aaaa0001",
                variant: None,
            },
        ];
        let out = splice(&host, &tuned).unwrap();
        assert_eq!(count(&out, "_Z3fooi_r3_aaaa0001"), 3);
        assert_eq!(count(&out, "_Z3fooi_r3_bbbb0002"), 2);
        assert!(out.find(".entry _Z1aPi").unwrap() < out.find(".entry _Z1bv").unwrap());
        assert_eq!(count(&out, ".entry"), 2);
        assert_eq!(count(&out, "vprintf\n("), 1);
        assert!(entry_text(&out, "_Z1bv")
            .unwrap()
            .contains("_Z3fooi_r3_bbbb0002, (param0)"));
        // The host's function stays, though no kernel calls it now.
        assert!(out.contains(") _Z3fooi(\n"));
    }

    #[test]
    fn variable_added_by_one_kernel_is_shared_by_the_next() {
        let host = host();
        let add = |ptx: String, reg: &str| {
            ptx.edit(
                ".global .align 1 .b8 $str",
                ".visible .global .align 8 .u64 fresh;\n.global .align 1 .b8 $str",
            )
            .edit(
                "\tret;\n}\n",
                &format!("\tst.global.b64 \t[fresh], {reg};\n\tret;\n}}\n"),
            )
        };
        let (a, b) = (add(tuned_a("8.7"), "%rd1"), add(tuned_b(), "%rd1"));
        let tuned = [
            Tuned {
                kernel: "_Z1aPi",
                ptx: &a,
                tag: "a",
                variant: None,
            },
            Tuned {
                kernel: "_Z1bv",
                ptx: &b,
                tag: "b",
                variant: None,
            },
        ];
        let out = splice(&host, &tuned).unwrap();
        assert_eq!(count(&out, ".u64 fresh;"), 1, "{out}");
        assert!(entry_text(&out, "_Z1bv").unwrap().contains("[fresh]"));
    }

    #[test]
    fn braces_and_semicolons_in_comments_and_strings() {
        let host = host().edit(
            "\t// .globl\t_Z1bv\n",
            "\t// .globl\t_Z1bv  { ; }\n/* a } block; comment { */\n",
        );
        let tuned = tuned_a("8.7").edit(
            "\tret;\n}\n.weak",
            "\t// } ; {\n\t/* { */\n\t.pragma \"} ; { // /*\";\n\tret;\n}\n.weak",
        );
        let out = splice(&host, &one("_Z1aPi", &tuned, "t1")).unwrap();
        assert_eq!(entry_text(&out, "_Z1bv"), entry_text(&host, "_Z1bv"));
        assert!(entry_text(&out, "_Z1aPi")
            .unwrap()
            .ends_with("/* { */\n\t.pragma \"} ; { // /*\";\n\tret;\n}"));
        assert!(out.contains("/* a } block; comment { */"));
    }

    #[test]
    fn nested_braces_and_initializers() {
        let host = host().edit(
            ".global .align 1 .b8 $str",
            ".global .align 8 .u64 table[2] = {\n\t1,\n\t2\n};\n.global .align 1 .b8 $str",
        );
        let tuned = tuned_a("8.7").edit(
            "\tret;\n}\n.weak",
            "\t{\n\t{\n\t.reg .b32 %inner;\n\t}\n\t}\n\tret;\n}\n.weak",
        );
        let out = splice(&host, &one("_Z1aPi", &tuned, "t1")).unwrap();
        assert!(entry_text(&out, "_Z1aPi")
            .unwrap()
            .ends_with("\t}\n\t}\n\tret;\n}"));
        assert!(out.contains("table[2] = {\n\t1,\n\t2\n};"));
    }

    #[test]
    fn kernel_keeps_the_hosts_linkage() {
        let host = host().edit(".visible .entry _Z1aPi(", ".weak .entry _Z1aPi(");
        let tuned = tuned_a("8.7");
        let out = splice(&host, &one("_Z1aPi", &tuned, "t1")).unwrap();
        assert!(entry_text(&out, "_Z1aPi")
            .unwrap()
            .starts_with(".weak .entry _Z1aPi("));
    }

    /// Line info (`-lineinfo`): `.file` directives at the end, as clang writes them, with
    /// indices that differ between the modules.
    fn line_info_pair() -> (String, String) {
        let host = format!(
            "{}.file\t1 \"/src/a.cu\"\n.file\t2 \"/inc/b.h\"\n",
            host().edit(
                "\tld.global.b32 \t%r1, [counter];\n\t{",
                "\t.loc\t1 5 3\n\tld.global.b32 \t%r1, [counter];\n\t{"
            )
        );
        let tuned = format!(
            "{}.file\t1 \"/inc/c.h\", 1700000000, 42\n.file\t2 \"/src/a.cu\"\n",
            tuned_a("8.7").edit(
                "\tld.global.b32 \t%r1, [counter];",
                "\t.loc\t1 9 1\n\tld.global.b32 \t%r1, [counter];\n\t.loc\t2 6 2"
            )
        );
        (host, tuned)
    }

    #[test]
    fn line_info_files_are_merged() {
        let (host, tuned) = line_info_pair();
        let out = splice(&host, &one("_Z1aPi", &tuned, "t1")).unwrap();
        let entry = entry_text(&out, "_Z1aPi").unwrap();
        assert!(
            entry.contains(".loc\t3 9 1") && entry.contains(".loc\t1 6 2"),
            "{entry}"
        );
        assert!(out.contains(".address_size 64\n.file\t3 \"/inc/c.h\", 1700000000, 42\n"));
        assert_eq!(count(&out, ".file"), 3);
    }

    #[test]
    fn full_debug_info_is_refused() {
        let host = format!(
            "{}\t.section\t.debug_info\n\t{{\n.b64 $L__func_begin1\n\t}}\n",
            host().edit(
                "\tld.param.b64 \t%rd1, [_Z1aPi_param_0];",
                "$L__func_begin1:\n\tld.param.b64 \t%rd1, [_Z1aPi_param_0];"
            )
        );
        let tuned = tuned_a("8.7");
        let err = splice(&host, &one("_Z1aPi", &tuned, "t1")).unwrap_err();
        assert!(err.to_string().contains("$L__func_begin1"), "{err}");
        // Other kernels can still be replaced; the section stays.
        let b = tuned_b();
        let out = splice(&host, &one("_Z1bv", &b, "t2")).unwrap();
        assert!(out.contains(".section\t.debug_info"));
    }

    #[test]
    fn tags_and_duplicates_are_checked() {
        let (host, tuned) = (host(), tuned_a("8.7"));
        for tag in ["", "a-b", "é"] {
            let err = splice(&host, &one("_Z1aPi", &tuned, tag)).unwrap_err();
            assert!(matches!(err, SpliceError::BadTag { .. }), "{tag}");
        }
        let t = Tuned {
            kernel: "_Z1aPi",
            ptx: &tuned,
            tag: "x",
            variant: None,
        };
        let err = splice(&host, &[t, t]).unwrap_err();
        assert!(matches!(err, SpliceError::DuplicateKernel { .. }));
    }

    #[test]
    fn splicing_twice_with_one_tag_is_refused() {
        let (host, tuned) = (host(), tuned_a("8.7"));
        let once = splice(&host, &one("_Z1aPi", &tuned, "t1")).unwrap();
        let err = splice(&once, &one("_Z1aPi", &tuned, "t1")).unwrap_err();
        assert!(matches!(err, SpliceError::Unsupported { .. }), "{err}");
        splice(&once, &one("_Z1aPi", &tuned, "t2")).unwrap();
    }

    #[test]
    fn malformed_ptx_is_an_error_naming_the_problem() {
        let host = host();
        let cases: [(&str, &str, &str); 9] = [
            ("\tret;\n}\n.weak", "\tret;\n\n.weak", "never ends"),
            ("\tret;\n}\n.weak", "\tret;\n}\n}\n.weak", "unbalanced `}`"),
            (
                "\tret;\n}\n.weak",
                "\tret;\n}\n/* open\n.weak",
                "unterminated `/*`",
            ),
            (
                "\tret;\n}\n.weak",
                "\t.pragma \"x;\n\tret;\n}\n.weak",
                "unterminated string",
            ),
            (".version 8.7", ".version eight", "MAJOR.MINOR"),
            (".version 8.7\n", "", "no `.version`"),
            ("$str[4]", "$str[4)", "unbalanced `)`"),
            ("counter;", "counter", "is a `;` missing?"),
            (
                "\tret;\n}\n.weak",
                "\tret; // é\n}\n{ ret; }\n.weak",
                "not a `.entry`",
            ),
        ];
        for (from, to, problem) in cases {
            let tuned = tuned_a("8.7").edit_n(from, to, 1);
            let err = splice(&host, &one("_Z1aPi", &tuned, "t1")).unwrap_err();
            let msg = err.to_string();
            assert!(matches!(err, SpliceError::MalformedTuned { .. }), "{msg}");
            assert_eq!(err.kernel(), Some("_Z1aPi"));
            assert!(msg.contains(problem) && msg.contains("_Z1aPi"), "{msg}");
        }
        let err = splice("\u{e9}", &[]).unwrap_err();
        assert!(err.to_string().contains("non-ASCII"), "{err}");
        let err = splice(&host.edit("counter;", "counter"), &[]).unwrap_err();
        assert!(err.to_string().contains("host PTX"), "{err}");
        assert_eq!(err.kernel(), None);
        let err = splice(
            &host.edit("vprintf_param_1\n)\n;", "vprintf_param_1\n)"),
            &[],
        );
        assert!(err
            .unwrap_err()
            .to_string()
            .contains("`counter` follows `vprintf`"));
    }

    #[test]
    fn no_panic_on_truncated_or_mangled_input() {
        let (host, tuned) = (host(), tuned_a("8.7"));
        for cut in (0..tuned.len()).filter(|&i| tuned.is_char_boundary(i)) {
            let _ = splice(&host, &one("_Z1aPi", &tuned[..cut], "t"));
            let _ = splice(&host[..cut.min(host.len())], &one("_Z1aPi", &tuned, "t"));
            let _ = entry_text(&tuned[..cut], "_Z1aPi");
        }
        for drop in (0..tuned.len()).step_by(7) {
            let mut mangled = tuned.clone();
            if mangled.is_char_boundary(drop) && mangled.is_char_boundary(drop + 1) {
                mangled.remove(drop);
            }
            let _ = splice(&host, &one("_Z1aPi", &mangled, "t"));
        }
    }

    #[test]
    fn entry_text_spans_linkage_to_closing_brace() {
        let host = host();
        let text = entry_text(&host, "_Z1bv").unwrap();
        assert!(text.starts_with(".visible .entry _Z1bv()\n{"));
        assert!(text.ends_with("\tret;\n}"));
        assert_eq!(entry_text(&host, "_Z3fooi"), None);
        assert_eq!(entry_text(&host, "_Z1"), None);
        assert_eq!(entry_text("not ptx {", "_Z1bv"), None);
    }

    // Real PTX: clang's for a unit (`<unit>.host.ptx`, from the `.cu` files next to them) and
    // r3's for one kernel of it (`<unit>.<kernel>.tuned.ptx`, `r3 ptx --pipeline 'default<O2>'`).

    fn fixtures() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/splice")
    }

    fn read(name: &str) -> String {
        std::fs::read_to_string(fixtures().join(name)).unwrap()
    }

    /// `(host file, [(kernel, tuned ptx)])` for every host fixture.
    fn real_units() -> Vec<(String, Vec<(String, String)>)> {
        let mut names: Vec<String> = std::fs::read_dir(fixtures())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        let hosts = names.iter().filter(|n| n.ends_with(".host.ptx"));
        hosts
            .map(|host| {
                let unit = host.split('.').next().unwrap();
                let tuned = names
                    .iter()
                    .filter_map(|n| {
                        let kernel = n
                            .strip_prefix(&format!("{unit}."))?
                            .strip_suffix(".tuned.ptx")?;
                        Some((kernel.to_string(), read(n)))
                    })
                    .collect();
                (host.clone(), tuned)
            })
            .collect()
    }

    fn tag(i: usize) -> String {
        format!("{:08x}", 0x5eed_0000 + i)
    }

    /// Checks what the splice promises: replaced entries are the tuned text with only the tuned
    /// module's function names (and renamed variables) changed, other entries are the host's.
    fn check_real(host: &str, out: &str, tuned: &[(String, String)], replaced: &[usize]) {
        let m = Module::parse(host).unwrap();
        for item in m.items() {
            let ItemKind::Func {
                name, entry: true, ..
            } = item.kind
            else {
                continue;
            };
            let kernel = m.text(name);
            match tuned.iter().position(|(k, _)| k == kernel) {
                Some(i) if replaced.contains(&i) => {
                    let text = entry_text(out, kernel).unwrap();
                    let want = entry_text(&tuned[i].1, kernel).unwrap();
                    let unrenamed = text.replace(&format!("_r3_{}", tag(i)), "");
                    let (_, want_body) = want.split_once(".entry").unwrap();
                    assert!(
                        unrenamed.ends_with(want_body),
                        "{kernel}:\n{text}\n---\n{want}"
                    );
                }
                _ => assert_eq!(
                    entry_text(out, kernel),
                    entry_text(host, kernel),
                    "{kernel}"
                ),
            }
        }
    }

    #[test]
    fn real_ptx_splices_keep_contracts() {
        let units = real_units();
        assert!(units.len() >= 3, "fixtures missing");
        for (host_file, tuned) in &units {
            let host = read(host_file);
            assert!(!tuned.is_empty(), "{host_file}");
            for (i, (kernel, ptx)) in tuned.iter().enumerate() {
                let t = tag(i);
                let out = splice(&host, &one(kernel, ptx, &t)).unwrap();
                check_real(&host, &out, tuned, &[i]);
                // clang writes `.version 8.8`, r3's lowering `.version 7.8`: clang's stays.
                assert!(out.contains("\n.version 8.8\n"));
            }
            let tags: Vec<String> = (0..tuned.len()).map(tag).collect();
            let list: Vec<Tuned> = tuned
                .iter()
                .zip(&tags)
                .map(|((kernel, ptx), tag)| Tuned {
                    kernel,
                    ptx,
                    tag,
                    variant: None,
                })
                .collect();
            let out = splice(&host, &list).unwrap();
            check_real(&host, &out, tuned, &(0..tuned.len()).collect::<Vec<_>>());
        }
    }

    #[test]
    fn real_ptx_shares_what_the_program_shares() {
        let (host, tuned) = (read("b.host.ptx"), read("b._Z6reducePKii.tuned.ptx"));
        let out = splice(&host, &one("_Z6reducePKii", &tuned, "1")).unwrap();
        // A `__device__` variable and a `__shared__` array, declared once.
        assert_eq!(count(&out, ".visible .global .align 8 .u64 total;"), 1);
        assert_eq!(count(&out, "_ZZ6reducePKiiE3buf[1024];"), 1);
        // clang's `printf` strings are the unit's, so r3's module has them under the same
        // names and contents.
        let (host, tuned) = (read("b.host.ptx"), read("b._Z2cbPii.tuned.ptx"));
        let out = splice(&host, &one("_Z2cbPii", &tuned, "1")).unwrap();
        assert_eq!(count(&out, "_$_str1["), 1);
        assert!(!out.contains("_$_str1_r3"));
        // A table of device function addresses is the program's; the tuned kernel calls
        // through the host's, which holds the host's copies of the same functions.
        let (host, tuned) = (read("e.host.ptx"), read("e._Z8apply_opPfi.tuned.ptx"));
        let out = splice(&host, &one("_Z8apply_opPfi", &tuned, "1")).unwrap();
        assert_eq!(count(&out, "ops[2] = {_Z5twicef, _Z5halvef};"), 1);
        assert!(entry_text(&out, "_Z8apply_opPfi")
            .unwrap()
            .contains("mov.b64 \t%rd4, ops;"));
    }

    /// The ptxas of the SDK r3 itself uses. The tests always have one (scripts/test sets it
    /// up; `.ci/run` says why): without it they fail, rather than pass with nothing checked.
    fn ptxas() -> std::path::PathBuf {
        let sdk = crate::ir::toolchain::find_cuda(None)
            .unwrap_or_else(|e| panic!("the tests need the CUDA SDK: {e}"));
        let ptxas = sdk.path.join("bin/ptxas");
        assert!(ptxas.is_file(), "no ptxas at {}", ptxas.display());
        ptxas
    }

    /// Assembles `ptx` with the real ptxas; the error is ptxas's own message.
    fn assemble(ptxas: &std::path::Path, ptx: &str, name: &str) -> Result<(), String> {
        let file =
            std::env::temp_dir().join(format!("r3-splice-{}-{name}.ptx", std::process::id()));
        std::fs::write(&file, ptx).unwrap();
        let out = std::process::Command::new(ptxas)
            .args(["--gpu-name", "sm_90", "-o", "/dev/null"])
            .arg(&file)
            .output()
            .unwrap();
        std::fs::remove_file(&file).ok();
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    #[test]
    fn spliced_ptx_assembles_with_ptxas() {
        let ptxas = ptxas();
        let mut cases: Vec<(String, String)> = Vec::new();
        for (host_file, tuned) in real_units() {
            let host = read(&host_file);
            assemble(&ptxas, &host, "host").unwrap();
            let tags: Vec<String> = (0..tuned.len()).map(tag).collect();
            for (i, (kernel, ptx)) in tuned.iter().enumerate() {
                cases.push((
                    format!("{host_file}+{kernel}"),
                    splice(&host, &one(kernel, ptx, &tags[i])).unwrap(),
                ));
            }
            let list: Vec<Tuned> = tuned
                .iter()
                .zip(&tags)
                .map(|((kernel, ptx), tag)| Tuned {
                    kernel,
                    ptx,
                    tag,
                    variant: None,
                })
                .collect();
            cases.push((format!("{host_file}+all"), splice(&host, &list).unwrap()));
        }
        // A real string constant that collides: hello's format string, changed.
        let a_host = read("a.host.ptx");
        let hello = read("a._Z5helloi.tuned.ptx").edit("= {104, 101, 108", "= {72, 69, 108");
        let out = splice(&a_host, &one("_Z5helloi", &hello, "c011")).unwrap();
        assert!(out.contains("_$_str_r3_c011[24] = {72, 69, 108"));
        cases.push(("collision".into(), out));
        // A real user variable the tuned code wants more aligned.
        let scale =
            read("a._Z5scalePfPKfi.tuned.ptx").edit(".align 4 .b8 table", ".align 16 .b8 table");
        let out = splice(&a_host, &one("_Z5scalePfPKfi", &scale, "a11")).unwrap();
        assert!(out.contains(".visible .global .align 16 .b8 table[16]"));
        cases.push(("alignment".into(), out));
        // The hand-written modules above.
        let (h, a, b) = (host(), tuned_a("8.7"), tuned_b());
        assemble(&ptxas, &h, "hand-host").unwrap();
        let list = [
            Tuned {
                kernel: "_Z1aPi",
                ptx: &a,
                tag: "a",
                variant: None,
            },
            Tuned {
                kernel: "_Z1bv",
                ptx: &b,
                tag: "b",
                variant: None,
            },
        ];
        cases.push(("hand-written".into(), splice(&h, &list).unwrap()));
        let (h, t) = line_info_pair();
        let out = splice(&h, &one("_Z1aPi", &t, "t1")).unwrap();
        cases.push(("line info".into(), out));

        let failures: Vec<String> = cases
            .iter()
            .enumerate()
            .filter_map(|(i, (name, ptx))| {
                assemble(&ptxas, ptx, &i.to_string())
                    .err()
                    .map(|e| format!("{name}: {e}"))
            })
            .collect();
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }
}
