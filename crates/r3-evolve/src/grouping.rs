//! The block-grouping rule: a kernel that stages data in shared memory has one block do the
//! work of `R3_GX` x `R3_GY` neighbouring blocks (the knobs), so that what the group's blocks
//! would each load alike is loaded once and each loaded value feeds several outputs.
//!
//! It applies to kernels with `__shared__` arrays and barriers where some shared array does not
//! depend on `blockIdx` along a grouped axis (a tiled matrix product's A tile along x, its B
//! tile along y). The body is read as a tree of statements; a fixpoint finds, for every local
//! and shared array, the axes whose block index it depends on (through `blockIdx` and through
//! the statements that write it). The grouped path keeps the statements that depend on no
//! grouped axis as they are, and runs each other statement once for every block of the group
//! along its axes (`for r3_gx`, unrolled), with the locals and shared arrays it writes given
//! one copy per block (`acc` becomes `acc[r3_gy][r3_gx]`). Barriers and the loops around them
//! stay where they are, so each block of the group still sees its barriers in its order.
//!
//! Each output is computed by the same operations in the same order as the thread of its own
//! block computes it in the original: results are bit-identical. The group's first block takes
//! the grouped path where the whole group exists (`gridDim`); the others return, and blocks of
//! an incomplete group at the edge run the original code. The launch is unchanged.
//!
//! A `for` loop around barriers whose init or step depends on the group but whose condition
//! does not (a tile loop walking a row offset and a column offset, bounded by the row) stays
//! one loop, its dependent offsets kept per block. Axes are tried both, then x, then y: what
//! depends only on an axis not grouped is the same for the whole group, so a `return` or
//! `break` on it is taken by every block of the group alike.
//!
//! Refused, where it depends on a grouped axis: `return` anywhere but after the last barrier
//! in the form `if (c) return;` at the top of the body (it becomes a per-block flag that
//! guards what follows); `break`/`continue` in a statement that would be repeated outside its
//! loop. Refused always: `goto`, `switch`, `do`, labels,
//! `asm`, address-of a local, writes to parameters, `auto` or reference locals that depend on
//! the group; `blockIdx` read outside the body.

use super::kernel_text::{self as text, Facts, Parsed, BLOCK_BARRIERS as BARRIERS};
use super::source::{self, Kind};
use std::collections::{HashMap, HashSet};
use std::ops::Range;

/// The knobs (blocks grouped along x and y) and their values.
const KNOBS: [&str; 2] = ["R3_GX", "R3_GY"];
const FACTORS: &str = "1, 2, 4";
/// The loop variables of the repeated statements, by axis.
const LOOP_VARS: [&str; 2] = ["r3_gx", "r3_gy"];

/// Calls beside the math ([`text::PURE_MATH`]) that read and write nothing but their arguments
/// and result (`__ldg` reads memory no kernel writes): a statement calling only these may run
/// once for a group where its inputs are the same for every block.
const PURE: &[&str] = &[
    "__ldg",
    "static_cast",
    "reinterpret_cast",
    "make_float2",
    "make_float4",
    "make_int2",
    "make_int4",
    "sizeof",
];

/// Words followed by `(` that call nothing with effects: the pure calls, keywords, casts and
/// barriers (which stay where they are, see `has_barrier`).
fn is_pure_or_keyword(w: &str) -> bool {
    PURE.contains(&w)
        || text::PURE_MATH.contains(&w)
        || is_decl_word(w)
        || BARRIERS.contains(&w)
        || matches!(w, "for" | "if" | "while" | "switch" | "return")
}

/// Words that open a declaration besides the tiling module's type words.
const DECL_WORDS: &[&str] = &[
    "__shared__",
    "static",
    "volatile",
    "signed",
    "register",
    "constexpr",
    "float2",
    "float3",
    "float4",
    "double2",
    "int2",
    "int3",
    "int4",
    "uint2",
    "uint3",
    "uint4",
    "half",
    "__half",
    "uint32_t",
    "int32_t",
    "uint8_t",
    "int8_t",
    "uint16_t",
    "int16_t",
];

/// The axes a value depends on: bit 0 x, bit 1 y.
type Axes = u8;
const ALL: Axes = 0b11;

/// A statement of the kernel's body, by token ranges (`span` from a leading `#pragma` on).
#[derive(Debug)]
enum Node {
    Simple(Range<usize>),
    Block {
        span: Range<usize>,
        items: Vec<Node>,
    },
    /// `for (…) body` or `while (…) body`; `head` ends at the closing parenthesis.
    Loop {
        span: Range<usize>,
        head: Range<usize>,
        body: Box<Node>,
    },
    If {
        span: Range<usize>,
        head: Range<usize>,
        then: Box<Node>,
        other: Option<Box<Node>>,
    },
}

impl Node {
    fn span(&self) -> Range<usize> {
        match self {
            Node::Simple(s) => s.clone(),
            Node::Block { span, .. } | Node::Loop { span, .. } | Node::If { span, .. } => {
                span.clone()
            }
        }
    }
}

fn parse_list(p: &Parsed, mut at: usize, end: usize) -> Option<Vec<Node>> {
    let mut out = Vec::new();
    while at < end {
        let (node, next) = parse_stmt(p, at, end)?;
        out.push(node);
        at = next;
    }
    Some(out)
}

fn parse_stmt(p: &Parsed, start: usize, end: usize) -> Option<(Node, usize)> {
    let mut j = start;
    while j < end && p.toks[j].kind == Kind::Directive {
        let d = p.w(j).trim_start_matches('#').trim_start();
        if !d.starts_with("pragma") {
            return None;
        }
        j += 1;
    }
    if j >= end {
        return None;
    }
    let matching = |i: usize| source::matching(p.src, &p.toks, i).filter(|&c| c < end);
    match p.w(j) {
        "{" => {
            let close = matching(j)?;
            let items = parse_list(p, j + 1, close)?;
            Some((
                Node::Block {
                    span: start..close + 1,
                    items,
                },
                close + 1,
            ))
        }
        "for" | "while" if p.w(j + 1) == "(" => {
            let c = matching(j + 1)?;
            let (body, next) = parse_stmt(p, c + 1, end)?;
            let node = Node::Loop {
                span: start..next,
                head: start..c + 1,
                body: Box::new(body),
            };
            Some((node, next))
        }
        "if" if p.w(j + 1) == "(" => {
            let c = matching(j + 1)?;
            let (then, mut next) = parse_stmt(p, c + 1, end)?;
            let mut other = None;
            if next < end && p.w(next) == "else" {
                let (o, n) = parse_stmt(p, next + 1, end)?;
                other = Some(Box::new(o));
                next = n;
            }
            let node = Node::If {
                span: start..next,
                head: start..c + 1,
                then: Box::new(then),
                other,
            };
            Some((node, next))
        }
        "do" | "switch" | "goto" | "case" | "default" | "else" | "asm" | "for" | "while" | "if"
        | "}" => None,
        _ if p.w(j + 1) == ":" && p.toks[j].kind == Kind::Ident => None,
        _ => {
            let mut k = j;
            while k < end && p.w(k) != ";" {
                if matches!(p.w(k), "(" | "[" | "{") {
                    k = matching(k)?;
                }
                k += 1;
            }
            (k < end).then(|| (Node::Simple(start..k + 1), k + 1))
        }
    }
}

/// One declarator of a declaration: its name token, the tokens of its array extents (`[4]`)
/// and of its initializer (after `=`), and its whole token range (stars included).
#[derive(Debug, Clone)]
struct Declarator {
    name: usize,
    dims: Range<usize>,
    init: Option<Range<usize>>,
    range: Range<usize>,
}

/// A declaration statement: the type's tokens and each declarator.
#[derive(Debug, Clone)]
struct Declaration {
    prefix: Range<usize>,
    declarators: Vec<Declarator>,
}

fn is_decl_word(w: &str) -> bool {
    super::tiling::TYPE_WORDS.contains(&w) || DECL_WORDS.contains(&w)
}

/// `r` (a statement without its `;`, or a `for`'s init) as a declaration, where it is one.
fn declaration(p: &Parsed, r: Range<usize>) -> Option<Declaration> {
    let first = (r.start..r.end).find(|&i| p.toks[i].kind != Kind::Directive)?;
    let typed = is_decl_word(p.w(first))
        || (p.toks[first].kind == Kind::Ident
            && p.toks.get(first + 1).is_some_and(|t| t.kind == Kind::Ident)
            && !matches!(p.w(first), "return" | "else"));
    if !typed {
        return None;
    }
    let ends = |i: usize| matches!(p.w(i + 1), "=" | "[" | "," | ";") || i + 1 == r.end;
    let name0 = (first..r.end).find(|&i| {
        p.toks[i].kind == Kind::Ident && !is_decl_word(p.w(i)) && ends(i) && i > first
    })?;
    let mut prefix_end = name0;
    while prefix_end > first && matches!(p.w(prefix_end - 1), "*" | "&") {
        prefix_end -= 1;
    }
    let mut declarators = Vec::new();
    let mut at = prefix_end;
    while at < r.end {
        let mut k = at;
        while k < r.end && p.w(k) != "," {
            if matches!(p.w(k), "(" | "[" | "{") {
                k = source::matching(p.src, &p.toks, k)?;
            }
            k += 1;
        }
        let name = (at..k).find(|&i| p.toks[i].kind == Kind::Ident && !is_decl_word(p.w(i)))?;
        let eq = (name..k).find(|&i| p.w(i) == "=");
        let dims = name + 1..eq.unwrap_or(k);
        if !dims.is_empty() && p.w(dims.start) != "[" {
            return None;
        }
        declarators.push(Declarator {
            name,
            dims,
            init: eq.map(|e| e + 1..k),
            range: at..k,
        });
        at = k + 1;
    }
    Some(Declaration {
        prefix: first..prefix_end,
        declarators,
    })
}

/// What the analysis knows of the body's names.
struct Analysis<'a> {
    p: &'a Parsed<'a>,
    /// Locals and shared arrays declared in the body.
    locals: HashSet<String>,
    shared: HashSet<String>,
    /// Locals and shared names declared with extents (`float acc[4]`), which calls would see
    /// as pointers.
    arrays: HashSet<String>,
    params: HashSet<String>,
    deps: HashMap<String, Axes>,
    /// Axes the flags of returns taken so far depend on (top level, after the last barrier).
    live: Axes,
    /// The axes grouped: a block index along another is the same for the whole group.
    mask: Axes,
}

impl Analysis<'_> {
    fn word(&self, i: usize) -> &str {
        self.p.w(i)
    }

    fn is_member(&self, i: usize) -> bool {
        i > 0 && matches!(self.word(i - 1), "." | "->")
    }

    /// The axes tokens `r` depend on: names, `blockIdx.x`/`.y`, calls that may have effects.
    fn axes_of(&self, r: Range<usize>) -> Axes {
        let mut a = 0;
        for i in r {
            if self.p.toks[i].kind != Kind::Ident || self.is_member(i) {
                continue;
            }
            let w = self.word(i);
            if w == "blockIdx" && self.word(i + 1) == "." {
                a |= self.mask
                    & match self.word(i + 2) {
                        "x" => 1,
                        "y" => 2,
                        _ => 0,
                    };
            } else if let Some(d) = self.deps.get(w) {
                a |= d;
            } else if self.word(i + 1) == "(" && !is_pure_or_keyword(w) {
                a |= self.mask;
            }
        }
        a
    }

    /// The local and shared names tokens `r` assign, increment or declare (roots of
    /// `a[i][j] = …`, `s.x += …`, `++n`).
    fn written(&self, r: Range<usize>) -> HashSet<String> {
        let mut out = HashSet::new();
        for i in r.clone() {
            let w = self.word(i);
            let root = if text::ASSIGN.contains(&w) {
                self.root_before(i, r.start)
            } else if matches!(w, "++" | "--") {
                self.root_before(i, r.start)
                    .or_else(|| self.root_after(i + 1, r.end))
            } else {
                None
            };
            // A parameter is written only by name (`n -= 1`), not through it (`C[i] = v`).
            if let Some((n, direct)) = root {
                if self.locals.contains(&n) || (direct && self.params.contains(&n)) {
                    out.insert(n);
                }
            }
        }
        out
    }

    /// The name an assignment at `op` writes, and whether it writes the name itself (not an
    /// element, a member, or memory it points to).
    fn root_before(&self, op: usize, start: usize) -> Option<(String, bool)> {
        let mut i = op.checked_sub(1)?;
        let mut direct = true;
        loop {
            if i < start {
                return None;
            }
            match self.word(i) {
                "]" => {
                    i = self.open_of(i, start)?.checked_sub(1)?;
                    direct = false;
                }
                _ if self.p.toks[i].kind == Kind::Ident => {
                    if i > start && matches!(self.word(i - 1), "." | "->") {
                        i = i.checked_sub(2)?;
                        direct = false;
                    } else {
                        let deref = i > start && self.word(i - 1) == "*";
                        return Some((self.word(i).to_owned(), direct && !deref));
                    }
                }
                _ => return None,
            }
        }
    }

    fn root_after(&self, i: usize, end: usize) -> Option<(String, bool)> {
        (i < end && self.p.toks[i].kind == Kind::Ident).then(|| (self.word(i).to_owned(), true))
    }

    /// The `[` matching the `]` at `close`, scanning back.
    fn open_of(&self, close: usize, start: usize) -> Option<usize> {
        let mut depth = 0;
        for i in (start..=close).rev() {
            match self.word(i) {
                "]" => depth += 1,
                "[" => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(i);
                    }
                }
                _ => {}
            }
        }
        None
    }

    /// Adds `axes` to each of `names`; whether anything changed.
    fn widen(&mut self, names: impl IntoIterator<Item = String>, axes: Axes) -> bool {
        let mut changed = false;
        for n in names {
            let d = self.deps.entry(n).or_insert(0);
            if *d | axes != *d {
                *d |= axes;
                changed = true;
            }
        }
        changed
    }

    /// Names declared inside `r` (declarations and `for` inits).
    fn declared_in(&self, r: Range<usize>) -> HashSet<String> {
        let names = self
            .declarators_in(r)
            .into_iter()
            .map(|x| self.word(x.name).to_owned());
        names.collect()
    }

    /// The declarators of the declarations in `r`, `for` inits included.
    fn declarators_in(&self, r: Range<usize>) -> Vec<Declarator> {
        let mut out = Vec::new();
        for i in r.clone() {
            let starts = i == r.start || matches!(self.word(i - 1), ";" | "{" | "}" | "(" | ")");
            if !starts
                || (i > 0 && self.word(i - 1) == "(" && self.word(i.wrapping_sub(2)) != "for")
            {
                continue;
            }
            let end = (i..r.end).find(|&k| self.word(k) == ";").unwrap_or(r.end);
            if let Some(d) = declaration(self.p, i..end) {
                out.extend(d.declarators);
            }
        }
        out
    }
}

/// One pass of the fixpoint over `nodes` (`top`: the body's own list); whether any name's
/// axes grew. None where the kernel is refused.
fn pass(a: &mut Analysis, nodes: &[Node], top: bool, last_barrier: usize) -> Option<bool> {
    let mut changed = false;
    a.live = 0;
    for n in nodes {
        if top {
            if let Some(cond) = guard_return(a.p, n) {
                let axes = a.axes_of(cond);
                if axes != 0 && n.span().start < last_barrier {
                    return None;
                }
                a.live |= axes;
                continue;
            }
        }
        changed |= visit(a, n, if top { a.live } else { 0 })?;
    }
    Some(changed)
}

fn visit(a: &mut Analysis, n: &Node, live: Axes) -> Option<bool> {
    match n {
        Node::Simple(r) => {
            let body = r.start..r.end - 1;
            if let Some(d) = declaration(a.p, body.clone()) {
                let mut changed = false;
                for x in &d.declarators {
                    let name = a.word(x.name).to_owned();
                    let axes = a.axes_of(x.range.clone()) | live;
                    changed |= a.widen([name], axes);
                }
                return Some(changed);
            }
            let axes = a.axes_of(r.clone()) | live;
            if axes == 0 {
                return Some(false);
            }
            let w = a.written(r.clone());
            Some(a.widen(w, axes))
        }
        Node::Block { items, .. } => {
            let mut changed = false;
            for i in items {
                changed |= visit(a, i, live)?;
            }
            Some(changed)
        }
        Node::Loop { span, head, body }
        | Node::If {
            span,
            head,
            then: body,
            ..
        } => {
            let axes = a.axes_of(head.clone()) | live;
            if let Some(parts) = hoisted(a, n, live) {
                let mut changed = false;
                for part in parts.init.iter().chain(&parts.step) {
                    let axes = a.axes_of(part.clone());
                    let w = a.written(part.clone());
                    changed |= a.widen(w, axes);
                }
                return Some(changed | visit(a, body, 0)?);
            }
            if axes == 0 {
                let mut changed = visit(a, body, 0)?;
                if let Node::If { other: Some(o), .. } = n {
                    changed |= visit(a, o, 0)?;
                }
                return Some(changed);
            }
            let axes = a.axes_of(span.clone()) | live;
            let inner = a.declared_in(span.clone());
            let w: Vec<String> = a
                .written(span.clone())
                .into_iter()
                .filter(|n| !inner.contains(n))
                .collect();
            Some(a.widen(w, axes))
        }
    }
}

/// A `for` loop's init, condition and step, the init and step split at their top-level
/// commas (each declarator of an init declaration apart).
struct ForParts {
    init: Vec<Range<usize>>,
    init_decl: Option<Declaration>,
    cond: Range<usize>,
    step: Vec<Range<usize>>,
}

fn for_parts(p: &Parsed, head: Range<usize>) -> Option<ForParts> {
    let f = (head.start..head.end).find(|&i| p.w(i) == "for")?;
    let (open, close) = (f + 1, head.end - 1);
    let mut semis = Vec::new();
    let mut i = open + 1;
    while i < close {
        match p.w(i) {
            "(" | "[" | "{" => i = source::matching(p.src, &p.toks, i)?,
            ";" => semis.push(i),
            _ => {}
        }
        i += 1;
    }
    let [s1, s2] = semis[..] else { return None };
    let init = open + 1..s1;
    let init_decl = declaration(p, init.clone());
    let init_parts = match &init_decl {
        Some(d) => d.declarators.iter().map(|x| x.range.clone()).collect(),
        None => comma_parts(p, init.clone())?,
    };
    Some(ForParts {
        init: init_parts,
        init_decl,
        cond: s1 + 1..s2,
        step: comma_parts(p, s2 + 1..close)?,
    })
}

/// `r` split at its top-level commas (empty parts dropped).
fn comma_parts(p: &Parsed, r: Range<usize>) -> Option<Vec<Range<usize>>> {
    let mut out = Vec::new();
    let (mut start, mut i) = (r.start, r.start);
    while i < r.end {
        match p.w(i) {
            "(" | "[" | "{" => i = source::matching(p.src, &p.toks, i)?,
            "," => {
                out.push(start..i);
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    out.push(start..r.end);
    out.retain(|x| !x.is_empty());
    Some(out)
}

/// A `for` loop around barriers whose init or step depends on the group but whose condition
/// does not: its trip count is the same for every block of the group, so it stays one loop,
/// with the init and the step's parts that depend on the group run once per block, before it
/// and at the end of each turn (the tile loop `for (a = a0, b = b0; a <= a1; a += da, b +=
/// db)` of a matrix product over x). None for any other node, and where the body has a
/// `continue`, which would skip the step.
fn hoisted(a: &Analysis, n: &Node, live: Axes) -> Option<ForParts> {
    let Node::Loop { span, head, body } = n else {
        return None;
    };
    let parts = for_parts(a.p, head.clone())?;
    let dependent = parts
        .init
        .iter()
        .chain(&parts.step)
        .any(|r| a.axes_of(r.clone()) != 0);
    let ok = live == 0
        && dependent
        && has_barrier(a.p, span.clone())
        && a.axes_of(parts.cond.clone()) == 0
        && !body.span().any(|i| a.p.w(i) == "continue");
    ok.then_some(parts)
}

/// The condition of `if (c) return;` (or `{ return; }`) at `n`.
fn guard_return(p: &Parsed, n: &Node) -> Option<Range<usize>> {
    let Node::If {
        head,
        then,
        other: None,
        ..
    } = n
    else {
        return None;
    };
    let returns = match then.as_ref() {
        Node::Simple(r) => r.len() == 2 && p.w(r.start) == "return",
        Node::Block { items, .. } => {
            matches!(items.as_slice(), [Node::Simple(r)] if r.len() == 2 && p.w(r.start) == "return")
        }
        _ => false,
    };
    let open = (head.start..head.end).find(|&i| p.w(i) == "(")?;
    returns.then(|| open + 1..head.end - 1)
}

/// How the rewrite writes the grouped body: edits by byte range of the source.
struct Writer<'a, 'b> {
    a: &'b Analysis<'a>,
    /// Axes the grouped path offers (bit per axis with its knob).
    grouped: Axes,
    edits: Vec<(usize, usize, String)>,
}

impl Writer<'_, '_> {
    fn src(&self, i: usize) -> (usize, usize) {
        self.a.p.toks[i].span
    }

    /// The text of tokens `r` with each name that has a copy per block subscripted, and
    /// `blockIdx.x`/`.y` moved to the block of the group (names in `inner` excepted).
    fn renamed(&self, r: Range<usize>, inner: &HashSet<String>) -> String {
        let p = self.a.p;
        let base = self.src(r.start).0;
        let mut edits = Vec::new();
        let mut i = r.start;
        while i < r.end {
            let w = p.w(i);
            if p.toks[i].kind == Kind::Ident && !self.a.is_member(i) {
                if w == "blockIdx" && p.w(i + 1) == "." && matches!(p.w(i + 2), "x" | "y") {
                    let axis = usize::from(p.w(i + 2) == "y");
                    if self.grouped & (1 << axis) != 0 {
                        let (s, e) = (self.src(i).0, self.src(i + 2).1);
                        let what = format!("(blockIdx.{} + {})", p.w(i + 2), LOOP_VARS[axis]);
                        edits.push((s - base, e - base, what));
                    }
                    i += 3;
                    continue;
                }
                if let Some(&d) = self.a.deps.get(w).filter(|_| !inner.contains(w)) {
                    if d != 0 {
                        let (_, e) = self.src(i);
                        edits.push((e - base, e - base, subscripts(d)));
                    }
                }
            }
            i += 1;
        }
        let whole = &p.src[base..self.src(r.end - 1).1];
        text::edit(whole, edits)
    }

    fn node(&mut self, n: &Node, live: Option<Axes>) -> Option<()> {
        match n {
            Node::Simple(r) => {
                let body = r.start..r.end - 1;
                if let Some(d) = declaration(self.a.p, body) {
                    return self.declaration(r, &d, live);
                }
                let axes = self.a.axes_of(r.clone()) | live.unwrap_or(0);
                if axes != 0 {
                    let p = self.a.p;
                    if has_barrier(p, r.clone())
                        || loose_jump(p, r.clone())
                        || r.clone().any(|i| p.w(i) == "return")
                    {
                        return None;
                    }
                    let t = self.renamed(r.clone(), &HashSet::new());
                    let ind = self.indent(r.start);
                    self.replace(r.clone(), repeated(axes, live, &t, &ind));
                }
                Some(())
            }
            Node::Block { items, .. } => {
                for i in items {
                    self.node(i, live)?;
                }
                Some(())
            }
            Node::Loop { span, head, body }
            | Node::If {
                span,
                head,
                then: body,
                ..
            } => {
                let axes = self.a.axes_of(head.clone()) | live.unwrap_or(0);
                if let Some(parts) = hoisted(self.a, n, live.unwrap_or(0)) {
                    return self.hoisted_loop(span, head, body, &parts);
                }
                if axes == 0 {
                    self.node(body, None)?;
                    if let Node::If { other: Some(o), .. } = n {
                        self.node(o, None)?;
                    }
                    return Some(());
                }
                let p = self.a.p;
                let is_loop = matches!(n, Node::Loop { .. });
                if has_barrier(p, span.clone())
                    || span.clone().any(|i| p.w(i) == "return")
                    || (!is_loop && loose_jump(p, span.clone()))
                {
                    return None;
                }
                let axes = self.a.axes_of(span.clone()) | live.unwrap_or(0);
                let inner = self.a.declared_in(span.clone());
                let t = self.renamed(span.clone(), &inner);
                let ind = self.indent(span.start);
                self.replace(span.clone(), repeated(axes, live, &t, &ind));
                Some(())
            }
        }
    }

    /// A declaration: unchanged where no declarator depends on a grouped axis; else each
    /// declarator on its own, those that do as arrays of one copy per block, set in a loop.
    fn declaration(&mut self, r: &Range<usize>, d: &Declaration, live: Option<Axes>) -> Option<()> {
        if let Some(t) = self.declaration_text(r.start, d, live)? {
            self.replace(r.clone(), t);
        }
        Some(())
    }

    /// A `for` loop kept whole around its barriers, with what depends on the group in its
    /// init and step taken out of its head ([`hoisted`]): `{ init; for (; cond; step) { body
    /// step' } }`.
    fn hoisted_loop(
        &mut self,
        span: &Range<usize>,
        head: &Range<usize>,
        body: &Node,
        parts: &ForParts,
    ) -> Option<()> {
        let p = self.a.p;
        let ind = self.indent(span.start);
        let f = (head.start..head.end).find(|&i| p.w(i) == "for")?;
        let pragmas = (f > head.start).then(|| text::span_text(p, head.start..f));
        let init = match &parts.init_decl {
            Some(d) => match self.declaration_text(head.start, d, None)? {
                Some(t) => t,
                None => format!(
                    "{};",
                    text::span_text(p, parts.init[0].start..parts.init.last()?.end)
                ),
            },
            None => {
                let mut out = Vec::new();
                for part in &parts.init {
                    out.push(self.statement(part.clone(), &ind));
                }
                out.join(&format!("\n{ind}"))
            }
        };
        let (mut kept, mut moved) = (Vec::new(), Vec::new());
        for part in &parts.step {
            if self.a.axes_of(part.clone()) == 0 {
                kept.push(text::span_text(p, part.clone()));
            } else {
                moved.push(self.statement(part.clone(), &format!("{ind}  ")));
            }
        }
        let cond = text::span_text(p, parts.cond.clone());
        let pragmas = pragmas.map_or(String::new(), |t| format!("\n{ind}{t}"));
        let new_head = format!(
            "{{\n{ind}{init}{pragmas}\n{ind}for (; {cond}; {})",
            kept.join(", ")
        );
        self.replace(head.clone(), new_head);
        self.node(body, None)?;
        let b = body.span();
        let steps = moved.join(&format!("\n{ind}  "));
        let (s, e) = (self.src(b.start).0, self.src(b.end - 1).1);
        if matches!(body, Node::Block { .. }) {
            let close = self.src(b.end - 1).0;
            self.edits.push((close, close, format!("  {steps}\n{ind}")));
        } else {
            self.edits.push((s, s, "{\n".to_owned()));
            self.edits
                .push((e, e, format!("\n{ind}  {steps}\n{ind}}}")));
        }
        self.edits.push((
            self.src(span.end - 1).1,
            self.src(span.end - 1).1,
            format!("\n{ind}}}"),
        ));
        Some(())
    }

    /// An expression `r` (no `;`) as a statement run once per block of the group where it
    /// depends on it, else as it is.
    fn statement(&self, r: Range<usize>, ind: &str) -> String {
        let axes = self.a.axes_of(r.clone());
        let t = self.renamed(r, &HashSet::new()) + ";";
        if axes == 0 {
            t
        } else {
            repeated(axes, None, &t, ind)
        }
    }

    /// [`Writer::declaration`]'s text, or None inside where the declaration is unchanged.
    fn declaration_text(
        &self,
        at: usize,
        d: &Declaration,
        live: Option<Axes>,
    ) -> Option<Option<String>> {
        let p = self.a.p;
        let axes_of = |x: &Declarator| self.a.deps.get(p.w(x.name)).copied().unwrap_or(0);
        if d.declarators.iter().all(|x| axes_of(x) == 0) {
            return Some(None);
        }
        // `int *a, b`: the star is a declarator's, so declarators written apart need their own.
        let starred = d.prefix.clone().any(|i| matches!(p.w(i), "*" | "&"));
        if d.prefix.is_empty() || (starred && d.declarators.len() > 1) {
            return None;
        }
        let prefix = text::span_text(p, d.prefix.clone());
        let ind = self.indent(at);
        let mut out = Vec::new();
        for x in &d.declarators {
            let axes = axes_of(x);
            let plain = text::span_text(p, x.range.clone());
            if axes == 0 {
                out.push(format!("{prefix} {plain};"));
                continue;
            }
            let words: Vec<&str> = d.prefix.clone().map(|i| p.w(i)).collect();
            if words.contains(&"auto") || x.range.clone().any(|i| p.w(i) == "&") {
                return None;
            }
            let stars: String = (x.range.start..x.name).map(|i| p.w(i)).collect();
            let dims = if x.dims.is_empty() {
                String::new()
            } else {
                text::span_text(p, x.dims.clone())
            };
            let kept: Vec<&str> = words
                .iter()
                .copied()
                .filter(|w| !matches!(*w, "const" | "constexpr"))
                .collect();
            let name = p.w(x.name);
            let decl = format!("{} {stars}{name}{}{dims}", kept.join(" "), extents(axes));
            match &x.init {
                None => out.push(format!("{decl};")),
                Some(init) if !x.dims.is_empty() => {
                    let zero: String = init.clone().map(|i| p.w(i)).collect();
                    if !matches!(zero.as_str(), "{}" | "{0}" | "{0.0f}" | "{0.f}" | "{0.0}") {
                        return None;
                    }
                    out.push(format!("{decl} = {{}};"));
                }
                Some(init) => {
                    let value = self.renamed(init.clone(), &HashSet::new());
                    let set = format!("{name}{} = {value};", subscripts(axes));
                    out.push(format!(
                        "{decl};\n{ind}{}",
                        repeated(axes, live, &set, &ind)
                    ));
                }
            }
        }
        Some(Some(out.join(&format!("\n{ind}"))))
    }

    /// The indentation of the line token `i` is on.
    fn indent(&self, i: usize) -> String {
        text::indent_at(self.a.p.src, self.src(i).0).0.to_owned()
    }

    fn replace(&mut self, r: Range<usize>, with: String) {
        let (s, e) = (self.src(r.start).0, self.src(r.end - 1).1);
        self.edits.push((s, e, with));
    }
}

/// `[r3_gy][r3_gx]`, for the axes given.
fn subscripts(axes: Axes) -> String {
    let mut s = String::new();
    if axes & 2 != 0 {
        s += &format!("[{}]", LOOP_VARS[1]);
    }
    if axes & 1 != 0 {
        s += &format!("[{}]", LOOP_VARS[0]);
    }
    s
}

/// `[R3_GY][R3_GX]`, for the axes given.
fn extents(axes: Axes) -> String {
    let mut s = String::new();
    if axes & 2 != 0 {
        s += &format!("[{}]", KNOBS[1]);
    }
    if axes & 1 != 0 {
        s += &format!("[{}]", KNOBS[0]);
    }
    s
}

/// `text` (a statement that began at indentation `ind`) run once for each block of the group
/// along `axes`, under the live flag where the top level has one.
fn repeated(axes: Axes, live: Option<Axes>, text: &str, ind: &str) -> String {
    let mut s = String::from("{\n");
    for (bit, (var, knob)) in [(2, (LOOP_VARS[1], KNOBS[1])), (1, (LOOP_VARS[0], KNOBS[0]))] {
        if axes & bit != 0 {
            s += &format!(
                "{ind}  #pragma unroll\n{ind}  for (int {var} = 0; {var} < {knob}; ++{var})\n"
            );
        }
    }
    let guard = match live {
        Some(l) if l != 0 => format!("if (r3_live{}) ", subscripts(l)),
        _ => String::new(),
    };
    // The text on a line of its own: it may open with a `#pragma`.
    let body = text.replace('\n', "\n  ");
    s + &format!("{ind}  {guard}{{\n{ind}    {body}\n{ind}  }}\n{ind}}}")
}

fn has_barrier(p: &Parsed, r: Range<usize>) -> bool {
    r.into_iter().any(|i| BARRIERS.contains(&p.w(i)))
}

/// `break` or `continue` in `r` (which, repeated in a loop of its own, would leave that loop).
fn loose_jump(p: &Parsed, r: Range<usize>) -> bool {
    r.into_iter()
        .any(|i| matches!(p.w(i), "break" | "continue"))
}

/// The rule: the kernel with the grouped path in front of its body, or None where it does not
/// apply (see the module's comment).
pub fn block_grouping(src: &str, _facts: &Facts) -> Option<String> {
    let p = text::parse(src)?;
    let body = p.kernel.body.clone();
    let words: Vec<&str> = body.clone().map(|i| p.w(i)).collect();
    if !words.contains(&"__shared__")
        || !body.clone().any(|i| BARRIERS.contains(&p.w(i)))
        || words
            .iter()
            .any(|w| matches!(*w, "goto" | "asm" | "extern" | "sync"))
        || p.toks
            .iter()
            .enumerate()
            .any(|(i, t)| t.text(src) == "blockIdx" && !body.contains(&i))
    {
        return None;
    }
    let nodes = parse_list(&p, body.start, body.end)?;
    // Both axes where both can be grouped, else the one that can: a tile loop's bound that
    // depends on the rows (`a <= a_end`) still lets the columns be grouped.
    [ALL, 1, 2]
        .into_iter()
        .find_map(|mask| grouped_along(&p, &nodes, mask))
}

/// The rewrite grouping blocks along the axes of `mask` exactly, or None.
fn grouped_along(p: &Parsed, nodes: &[Node], mask: Axes) -> Option<String> {
    let body = p.kernel.body.clone();
    let mut a = analysis(p, nodes, mask)?;
    let last_barrier = body.clone().rev().find(|&i| BARRIERS.contains(&p.w(i)))?;
    let mut rounds = 0;
    while pass(&mut a, nodes, true, last_barrier)? {
        rounds += 1;
        if rounds > 64 {
            return None;
        }
    }
    if a.params
        .iter()
        .any(|n| a.deps.get(n).is_some_and(|&d| d != 0))
    {
        return None;
    }
    // Only the axes of the mask are followed, so only they can be judged here.
    if offered(p, &a) & mask != mask {
        return None;
    }
    grouped_kernel(p, &a, nodes, mask, last_barrier)
}

fn analysis<'a>(p: &'a Parsed<'a>, nodes: &[Node], mask: Axes) -> Option<Analysis<'a>> {
    let body = p.kernel.body.clone();
    let mut a = Analysis {
        p,
        locals: HashSet::new(),
        shared: HashSet::new(),
        arrays: HashSet::new(),
        params: HashSet::new(),
        deps: HashMap::new(),
        live: 0,
        mask,
    };
    let declared = a.declarators_in(body.clone());
    let name = |x: &Declarator| p.w(x.name).to_owned();
    a.locals = declared.iter().map(name).collect();
    a.arrays = declared
        .iter()
        .filter(|x| !x.dims.is_empty())
        .map(name)
        .collect();
    for n in nodes {
        collect_shared(&mut a, n);
    }
    for i in p.kernel.params.clone() {
        let next = p.w(i + 1);
        if p.toks[i].kind == Kind::Ident && (next == "," || i + 1 == p.kernel.params.end) {
            a.params.insert(p.w(i).to_owned());
        }
    }
    // A local whose address is taken could be written through it, unseen.
    let address_taken = body.clone().any(|i| {
        p.w(i) == "&"
            && i > 0
            && !matches!(p.toks[i - 1].kind, Kind::Ident | Kind::Number)
            && !matches!(p.w(i - 1), ")" | "]")
            && a.locals.contains(p.w(i + 1))
    });
    let writes_param = !a.written(body.clone()).is_disjoint(&a.params);
    (!address_taken && !writes_param && !hidden_effects(&a, body)).then_some(a)
}

/// Whether `r` calls what the analysis cannot see into: a function of the program (it may
/// hold a barrier, which repeated per block of the group would no longer be reached alike, or
/// write through a pointer), or an intrinsic handed a local or shared array or an address
/// (`atomicAdd(&s[i], 1)`, `atomicAdd(s + i, 1)`: a write the fixpoint does not see). A
/// templated call (`scan<256>(v, sums)`) counts, as does a name a comparison follows that is
/// no local: refusing too much is safe.
fn hidden_effects(a: &Analysis, r: Range<usize>) -> bool {
    let p = a.p;
    let known = |w: &str| a.locals.contains(w) || a.params.contains(w) || a.shared.contains(w);
    r.clone().any(|i| {
        let w = p.w(i);
        let called = p.toks[i].kind == Kind::Ident
            && !a.is_member(i)
            && matches!(p.w(i + 1), "(" | "<")
            && !known(w)
            && !is_pure_or_keyword(w);
        if !called {
            return false;
        }
        if !(w.starts_with("__") || w.starts_with("atomic")) {
            return true;
        }
        let Some(close) = (p.w(i + 1) == "(")
            .then(|| source::matching(p.src, &p.toks, i + 1))
            .flatten()
        else {
            return true;
        };
        // Shuffles take values; any other intrinsic may take an array's element or row as a
        // pointer (`atomicAdd(s[0] + i, 1)`), so none is handed an array at all.
        let by_value = w.starts_with("__shfl");
        (i + 2..close).any(|k| {
            let n = p.w(k);
            let addressed = p.w(k - 1) == "&" && (a.locals.contains(n) || a.shared.contains(n));
            let array = a.arrays.contains(n) || a.shared.contains(n);
            let as_pointer = array && (!by_value || p.w(k + 1) != "[");
            p.toks[k].kind == Kind::Ident && !a.is_member(k) && (addressed || as_pointer)
        })
    })
}

fn collect_shared(a: &mut Analysis, n: &Node) {
    match n {
        Node::Simple(r) => {
            if a.p.w(r.start) == "__shared__" || (r.start..r.end).any(|i| a.p.w(i) == "__shared__")
            {
                if let Some(d) = declaration(a.p, r.start..r.end - 1) {
                    for x in d.declarators {
                        a.shared.insert(a.p.w(x.name).to_owned());
                    }
                }
            }
        }
        Node::Block { items, .. } => items.iter().for_each(|i| collect_shared(a, i)),
        Node::Loop { body, .. } => collect_shared(a, body),
        Node::If { then, other, .. } => {
            collect_shared(a, then);
            if let Some(o) = other {
                collect_shared(a, o);
            }
        }
    }
}

/// The axes worth grouping: those `blockIdx` reads along which some shared array does not
/// depend (its loads are then shared by the group).
fn offered(p: &Parsed, a: &Analysis) -> Axes {
    let body = p.kernel.body.clone();
    let mut out = 0;
    for (bit, axis) in [(1u8, "x"), (2u8, "y")] {
        let used = body
            .clone()
            .any(|i| p.w(i) == "blockIdx" && p.w(i + 1) == "." && p.w(i + 2) == axis);
        let reused = a
            .shared
            .iter()
            .any(|s| a.deps.get(s).copied().unwrap_or(0) & bit == 0);
        if used && reused {
            out |= bit;
        }
    }
    out
}

fn grouped_kernel(
    p: &Parsed,
    a: &Analysis,
    nodes: &[Node],
    grouped: Axes,
    _last_barrier: usize,
) -> Option<String> {
    let mut w = Writer {
        a,
        grouped,
        edits: Vec::new(),
    };
    let mut live: Axes = 0;
    for n in nodes {
        if let Some(cond) = guard_return(p, n) {
            let axes = a.axes_of(cond.clone());
            if axes != 0 {
                let c = w.renamed(cond, &HashSet::new());
                let first = live == 0;
                let set = if first {
                    format!("r3_live{} = !({c});", subscripts(axes | live))
                } else {
                    let s = subscripts(axes | live);
                    format!("r3_live{s} = r3_live{s} && !({c});")
                };
                if !first && axes | live != live {
                    return None;
                }
                let ind = w.indent(n.span().start);
                let decl = if first {
                    format!("bool r3_live{};\n{ind}", extents(axes))
                } else {
                    String::new()
                };
                let set = repeated(axes | live, None, &set, &ind);
                w.replace(n.span(), format!("{decl}{set}"));
                live |= axes;
                continue;
            }
        }
        w.node(n, (live != 0).then_some(live))?;
    }
    let body = p.kernel.body.clone();
    let (open_end, close) = (p.toks[body.start - 1].span.1, p.toks[body.end].span.0);
    let base = open_end;
    let edits: Vec<_> = w
        .edits
        .into_iter()
        .map(|(s, e, t)| (s - base, e - base, t))
        .collect();
    let inner = text::edit(&p.src[open_end..close], edits);
    let inner = inner.trim_end().replace('\n', "\n    ");
    let mut cond = Vec::new();
    let mut first = Vec::new();
    let mut knobs = String::new();
    for (bit, axis, knob) in [(1u8, "x", KNOBS[0]), (2u8, "y", KNOBS[1])] {
        if grouped & bit != 0 {
            cond.push(format!(
                "blockIdx.{axis} - blockIdx.{axis} % {knob} + {knob} <= gridDim.{axis}"
            ));
            first.push(format!("blockIdx.{axis} % {knob} != 0"));
            knobs += &format!("R3_PARAM({knob}, {FACTORS})\n");
        }
    }
    let product: Vec<&str> = [(1u8, KNOBS[0]), (2u8, KNOBS[1])]
        .iter()
        .filter(|(b, _)| grouped & b != 0)
        .map(|(_, k)| *k)
        .collect();
    knobs += &format!("R3_REQUIRE({} > 1)\n", product.join(" * "));
    let first_tok = p.toks[body.start].span.0;
    let (ind, _) = text::indent_at(p.src, first_tok);
    let path = format!(
        "// r3: the first block of each group of {} blocks does the work of the group, loading what they share once; the others return. Blocks of an incomplete group run the code below.\n\
{ind}if ({}) {{\n\
{ind}  if ({}) return;\n\
{ind}  {{{inner}\n\
{ind}  }}\n\
{ind}  return;\n\
{ind}}}\n{ind}",
        product.join(" x "),
        cond.join(" && "),
        first.join(" || "),
    );
    let out = text::edit(p.src, vec![(first_tok, first_tok, path)]);
    let at = p.kernel.span.start;
    Some(format!("{}{knobs}{}", &out[..at], &out[at..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TILED: &str = "__global__ void gemm_tiled(int n, const float *A, const float *B, float *C) {\n  __shared__ float As[16][16];\n  __shared__ float Bs[16][16];\n  int tx = threadIdx.x, ty = threadIdx.y;\n  int col = blockIdx.x * 16 + tx, row = blockIdx.y * 16 + ty;\n  float acc = 0.0f;\n  for (int t = 0; t < n; t += 16) {\n    As[ty][tx] = (row < n && t + tx < n) ? A[row * n + t + tx] : 0.0f;\n    Bs[ty][tx] = (col < n && t + ty < n) ? B[(t + ty) * n + col] : 0.0f;\n    __syncthreads();\n    for (int k = 0; k < 16; k++) acc += As[ty][k] * Bs[k][tx];\n    __syncthreads();\n  }\n  if (row >= n || col >= n) return;\n  C[row * n + col] = acc;\n}";

    fn grouped(src: &str) -> Option<String> {
        block_grouping(src, &Facts::default())
    }

    /// Each of `parts` in `out`, or a failure naming the one missing.
    fn has(out: &str, parts: &[&str]) {
        for part in parts {
            assert!(out.contains(part), "no {part:?} in {out}");
        }
    }

    /// `s` with each run of whitespace one space, so that tests read the code, not its layout.
    fn flat(s: &str) -> String {
        s.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn a_tiled_product_shares_each_tile_along_the_other_axis() {
        let out = flat(&grouped(TILED).expect("applies"));
        assert!(out.starts_with("R3_PARAM(R3_GX, 1, 2, 4) R3_PARAM(R3_GY, 1, 2, 4) R3_REQUIRE(R3_GX * R3_GY > 1) __global__"), "{out}");
        has(&out, &[
            "__shared__ float As[R3_GY][16][16];",
            "__shared__ float Bs[R3_GX][16][16];",
            "int col[R3_GX];",
            "col[r3_gx] = (blockIdx.x + r3_gx) * 16 + tx;",
            "int row[R3_GY];",
            "acc[r3_gy][r3_gx] += As[r3_gy][ty][k] * Bs[r3_gx][k][tx];",
            "bool r3_live[R3_GY][R3_GX];",
            "if (r3_live[r3_gy][r3_gx]) { C[row[r3_gy] * n + col[r3_gx]] = acc[r3_gy][r3_gx]; }",
            // What does not depend on an axis stays single along it.
            "int tx = threadIdx.x, ty = threadIdx.y;",
        ]);
        // Barriers in place.
        assert_eq!(out.matches("__syncthreads();").count(), 4, "{out}");
    }

    /// A textbook tile loop: two running offsets, the bound set by the row alone.
    const TILE_WALK: &str = "__global__ void walk(float *C, const float *A, const float *B, int wa, int wb) {\n  int bx = blockIdx.x;\n  int by = blockIdx.y;\n  int tx = threadIdx.x, ty = threadIdx.y;\n  int first_a = wa * 16 * by;\n  int last_a = first_a + wa - 1;\n  float sum = 0.0f;\n  for (int a = first_a, b = 16 * bx; a <= last_a; a += 16, b += 16 * wb) {\n    __shared__ float At[16][16];\n    __shared__ float Bt[16][16];\n    At[ty][tx] = A[a + wa * ty + tx];\n    Bt[ty][tx] = B[b + wb * ty + tx];\n    __syncthreads();\n    for (int k = 0; k < 16; ++k) sum += At[ty][k] * Bt[k][tx];\n    __syncthreads();\n  }\n  C[wb * 16 * by + 16 * bx + wb * ty + tx] = sum;\n}";

    #[test]
    fn a_tile_loop_walking_two_offsets_stays_one_loop_grouped_along_x() {
        let out = flat(&grouped(TILE_WALK).expect("applies"));
        assert!(
            out.starts_with("R3_PARAM(R3_GX, 1, 2, 4) R3_REQUIRE(R3_GX > 1) __global__"),
            "{out}"
        );
        assert!(
            !out.contains("R3_GY"),
            "the loop's bound depends on y: {out}"
        );
        has(
            &out,
            &[
                "{ int a = first_a; int b[R3_GX];",
                "for (; a <= last_a; a += 16) {",
                "__shared__ float At[16][16]; __shared__ float Bt[R3_GX][16][16];",
            ],
        );
        assert!(
            out.contains("b[r3_gx] += 16 * wb; } } }"),
            "the step at the end of each turn: {out}"
        );
        let with_continue = TILE_WALK.replace(
            "sum += At[ty][k] * Bt[k][tx];",
            "{ if (k == 99) continue; sum += At[ty][k] * Bt[k][tx]; }",
        );
        let outer_continue = with_continue.replace(
            "__syncthreads();\n  }",
            "if (wa < 0) continue;\n    __syncthreads();\n  }",
        );
        assert!(
            grouped(&outer_continue).is_none(),
            "a continue would skip the step moved out of the head"
        );
    }

    #[test]
    fn the_grouped_product_reads_as_code_a_person_could_adopt() {
        insta::assert_snapshot!("grouped_tiled_product", grouped(TILED).unwrap());
    }

    #[test]
    fn kernels_it_cannot_group_are_left_alone() {
        let no_shared = "__global__ void k(int n, float *x) { int i = blockIdx.x * 32 + threadIdx.x; if (i < n) x[i] = 1.0f; }";
        assert!(grouped(no_shared).is_none());
        let all_dep = "__global__ void k(float *x) { __shared__ float s[32]; s[threadIdx.x] = x[blockIdx.x * 32 + threadIdx.x]; __syncthreads(); x[blockIdx.x * 32 + threadIdx.x] = s[31 - threadIdx.x]; }";
        assert!(
            grouped(all_dep).is_none(),
            "every shared array depends on the block: nothing to share"
        );
        const ACC: &str = "  float acc = 0.0f;\n";
        const SUM: &str = "acc += As[ty][k] * Bs[k][tx];";
        // (the text of TILED replaced, its replacement, the axes left: "" for none, and why)
        let cases: &[(&str, &str, &str, &str)] = &[
            (
                ACC,
                "  if (row >= n) return;\n  float acc = 0.0f;\n",
                "R3_GX",
                "a return before a barrier on the rows: blocks along x return together",
            ),
            (
                SUM,
                "{ if (col > 3) break; acc += As[ty][k] * Bs[k][tx]; }",
                "R3_GY",
                "a break on the column: blocks along y break together",
            ),
            (
                ACC,
                "  float acc = scan<16>(tx, &As[0][0]);\n",
                "",
                "a function of the program: barriers and writes unseen",
            ),
            (
                ACC,
                "  float acc = 0.0f;\n  atomicAdd(&Bs[0][tx], 1.0f);\n",
                "",
                "an atomic write into a shared array, unseen",
            ),
            (
                ACC,
                "  float acc = 0.0f;\n  atomicAdd(As[0] + tx, 1.0f);\n",
                "",
                "an atomic write through a row of a shared array",
            ),
            (
                SUM,
                "acc += __shfl_sync(0xffffffffu, As[ty][k], 0) * Bs[k][tx];",
                "R3_GX R3_GY",
                "a shuffle of a value read from shared memory",
            ),
            (
                ACC,
                "  float acc = 0.0f;\n  n += 0;\n",
                "",
                "a parameter written",
            ),
        ];
        for (from, to, left, why) in cases {
            assert!(TILED.contains(from), "{from}");
            let out = grouped(&TILED.replace(from, to));
            let knobs: Vec<&str> = KNOBS
                .into_iter()
                .filter(|k| out.as_ref().is_some_and(|o| o.contains(k)))
                .collect();
            assert_eq!(knobs.join(" "), *left, "{why}: {out:?}");
        }
    }
}
