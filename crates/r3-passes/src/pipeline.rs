//! Pipeline texts as editable sequences.
//!
//! A pipeline in `opt -passes=` syntax is a tree (`cgscc(devirt<4>(inline,function(sroa,…)))`);
//! the search edits its leaves. [`Pipeline`] flattens the tree into a sequence of [`Step`]s,
//! each carrying the adaptors around it (its scope); rendering groups consecutive steps of one
//! scope back into one adaptor, so `render(parse(t)) == t`. Inserting a pass picks a scope next
//! to its neighbour that suits the pass's level (adding `function(…)`, `loop(…)` adaptors as
//! needed); deleting, swapping and re-parameterizing keep scopes.

use super::catalog::{Level, Pass};
use std::fmt;

#[derive(Debug, thiserror::Error)]
#[error("pipeline text '{text}': {msg} at byte {at}; fix: write it as for `opt -passes=`, e.g. 'default<O3>' or 'function(sroa,instcombine)' (`r3 passes` lists the passes)")]
pub struct ParseError {
    pub text: String,
    pub msg: &'static str,
    pub at: usize,
}

/// One adaptor around a step: its header text (`function<eager-inv>`, `devirt<4>`, `loop-mssa`)
/// and an id telling two adjacent adaptors with the same header apart.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Scope {
    pub header: String,
    pub id: u32,
}

impl Scope {
    fn name(&self) -> &str {
        self.header.split('<').next().unwrap_or("")
    }

    /// The pass-manager level inside this adaptor, if it is one r3 knows.
    pub fn level(&self) -> Option<Level> {
        match self.name() {
            "module" => Some(Level::Module),
            "cgscc" | "devirt" => Some(Level::Cgscc),
            "function" => Some(Level::Function),
            "loop" | "loop-mssa" => Some(Level::Loop),
            _ => None,
        }
    }
}

/// A pass in a pipeline: name, `<…>` tokens, and the adaptors around it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Step {
    pub name: String,
    pub params: Vec<String>,
    /// `params` was written with angle brackets even if empty (`ee-instrument<>`).
    pub brackets: bool,
    pub scope: Vec<Scope>,
}

impl Step {
    pub fn text(&self) -> String {
        if self.params.is_empty() && !self.brackets {
            self.name.clone()
        } else {
            format!("{}<{}>", self.name, self.params.join(";"))
        }
    }

    pub fn level(&self) -> Level {
        self.scope
            .iter()
            .rev()
            .find_map(|s| s.level())
            .unwrap_or(Level::Module)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Pipeline {
    pub steps: Vec<Step>,
}

impl Pipeline {
    pub fn parse(text: &str) -> Result<Pipeline, ParseError> {
        let mut p = Parser {
            s: text.as_bytes(),
            text,
            i: 0,
            next_id: 0,
            steps: Vec::new(),
        };
        p.skip_ws();
        if p.i < p.s.len() {
            p.list(&mut Vec::new())?;
        }
        if p.i != p.s.len() {
            return Err(p.err("unexpected text"));
        }
        Ok(Pipeline { steps: p.steps })
    }

    fn next_id(&self) -> u32 {
        self.steps
            .iter()
            .flat_map(|s| s.scope.iter().map(|sc| sc.id + 1))
            .max()
            .unwrap_or(0)
    }

    /// The scope a pass of `pass`'s level gets when inserted next to a step in scope `near`.
    fn scope_for(&self, near: &[Scope], pass: &Pass) -> Vec<Scope> {
        let mut id = self.next_id();
        let mut fresh = |header: &str| {
            id += 1;
            Scope {
                header: header.into(),
                id: id - 1,
            }
        };
        let last = |lv: Level| near.iter().rposition(|s| s.level() == Some(lv));
        let function_scope = |fresh: &mut dyn FnMut(&str) -> Scope| match last(Level::Function) {
            Some(i) => near[..=i].to_vec(),
            None => {
                let mut v = match last(Level::Cgscc) {
                    Some(i) => near[..=i].to_vec(),
                    None => Vec::new(),
                };
                v.push(fresh("function"));
                v
            }
        };
        match pass.level {
            Level::Module => Vec::new(),
            Level::Cgscc => match last(Level::Cgscc) {
                Some(i) => near[..=i].to_vec(),
                None => vec![fresh("cgscc")],
            },
            Level::Function => function_scope(&mut fresh),
            Level::Loop => {
                let adaptor = pass.loop_adaptor().unwrap_or("loop");
                match near.last() {
                    Some(s) if s.header == adaptor => near.to_vec(),
                    _ => {
                        let mut v = function_scope(&mut fresh);
                        v.push(fresh(adaptor));
                        v
                    }
                }
            }
        }
    }

    /// Inserts `pass` with parameter tokens before position `at` (0..=len).
    pub fn insert(&mut self, at: usize, pass: &Pass, params: Vec<String>) {
        let near = if at > 0 {
            self.steps[at - 1].scope.clone()
        } else {
            self.steps
                .first()
                .map(|s| s.scope.clone())
                .unwrap_or_default()
        };
        let scope = self.scope_for(&near, pass);
        self.steps.insert(
            at,
            Step {
                name: pass.name.clone(),
                params,
                brackets: false,
                scope,
            },
        );
    }

    pub fn render(&self) -> String {
        render(&self.steps, 0)
    }
}

impl fmt::Display for Pipeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render())
    }
}

fn render(steps: &[Step], depth: usize) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < steps.len() {
        if steps[i].scope.len() <= depth {
            parts.push(steps[i].text());
            i += 1;
            continue;
        }
        let sc = &steps[i].scope[depth];
        let mut j = i + 1;
        while j < steps.len() && steps[j].scope.len() > depth && steps[j].scope[depth] == *sc {
            j += 1;
        }
        parts.push(format!(
            "{}({})",
            sc.header,
            render(&steps[i..j], depth + 1)
        ));
        i = j;
    }
    parts.join(",")
}

/// Adaptors nested deeper than this are refused: the parser recurses once per level, and a
/// text of a million `function(` must be an error, not a stack overflow. LLVM's own pipelines
/// nest five deep.
const MAX_DEPTH: usize = 64;

struct Parser<'a> {
    s: &'a [u8],
    text: &'a str,
    i: usize,
    next_id: u32,
    steps: Vec<Step>,
}

impl Parser<'_> {
    fn err(&self, msg: &'static str) -> ParseError {
        ParseError {
            text: self.text.to_owned(),
            msg,
            at: self.i,
        }
    }

    fn skip_ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }

    fn list(&mut self, scope: &mut Vec<Scope>) -> Result<(), ParseError> {
        loop {
            self.element(scope)?;
            self.skip_ws();
            if self.i < self.s.len() && self.s[self.i] == b',' {
                self.i += 1;
                self.skip_ws();
            } else {
                return Ok(());
            }
        }
    }

    fn element(&mut self, scope: &mut Vec<Scope>) -> Result<(), ParseError> {
        let start = self.i;
        while self.i < self.s.len() && !b"<(),".contains(&self.s[self.i]) {
            self.i += 1;
        }
        let name = self.text[start..self.i].trim().to_owned();
        if name.is_empty() {
            return Err(self.err("expected a pass name"));
        }
        let mut params = Vec::new();
        let mut brackets = false;
        let mut header_end = self.i;
        if self.i < self.s.len() && self.s[self.i] == b'<' {
            brackets = true;
            let mut depth = 0;
            let open = self.i;
            loop {
                if self.i >= self.s.len() {
                    return Err(self.err("unclosed '<'"));
                }
                match self.s[self.i] {
                    b'<' => depth += 1,
                    b'>' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                self.i += 1;
            }
            let inner = &self.text[open + 1..self.i];
            params = inner.split(';').map(str::to_owned).collect();
            if inner.is_empty() {
                params.clear();
            }
            self.i += 1;
            header_end = self.i;
        }
        if self.i < self.s.len() && self.s[self.i] == b'(' {
            let header = self.text[start..header_end].trim().to_owned();
            self.i += 1;
            self.skip_ws();
            if scope.len() >= MAX_DEPTH {
                return Err(self.err("adaptors nested more than 64 deep"));
            }
            scope.push(Scope {
                header,
                id: self.next_id,
            });
            self.next_id += 1;
            if self.i < self.s.len() && self.s[self.i] == b')' {
                return Err(self.err("empty adaptor"));
            }
            self.list(scope)?;
            scope.pop();
            if self.i >= self.s.len() || self.s[self.i] != b')' {
                return Err(self.err("expected ')'"));
            }
            self.i += 1;
        } else {
            self.steps.push(Step {
                name,
                params,
                brackets,
                scope: scope.clone(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;

    #[test]
    fn presets_round_trip() {
        let c = Catalog::builtin().unwrap();
        for p in &c.presets {
            let parsed = Pipeline::parse(&p.pipeline).unwrap();
            assert!(parsed.steps.len() > 50, "{}", p.name);
            assert_eq!(parsed.render(), p.pipeline, "{}", p.name);
        }
    }

    #[test]
    fn insert_wraps_by_level() {
        let c = Catalog::builtin().unwrap();
        let mut p = Pipeline::parse("globaldce").unwrap();
        p.insert(1, c.pass("licm").unwrap(), vec!["allowspeculation".into()]);
        assert_eq!(
            p.render(),
            "globaldce,function(loop-mssa(licm<allowspeculation>))"
        );
        p.insert(2, c.pass("instcombine").unwrap(), vec![]);
        assert_eq!(
            p.render(),
            "globaldce,function(loop-mssa(licm<allowspeculation>),instcombine)"
        );
        p.insert(3, c.pass("indvars").unwrap(), vec![]);
        assert_eq!(
            p.render(),
            "globaldce,function(loop-mssa(licm<allowspeculation>),instcombine,loop(indvars))"
        );
        p.insert(0, c.pass("inline").unwrap(), vec![]);
        assert!(p.render().starts_with("cgscc(inline),globaldce,"));
        p.steps.swap(1, 2);
        assert!(p.render().starts_with(
            "cgscc(inline),function(loop-mssa(licm<allowspeculation>)),globaldce,function("
        ));
        let mut empty = Pipeline::default();
        empty.insert(0, c.pass("sroa").unwrap(), vec![]);
        assert_eq!(empty.render(), "function(sroa)");
    }

    #[test]
    fn parse_errors_say_where() {
        assert!(Pipeline::parse("function(sroa").is_err());
        assert!(Pipeline::parse("loop-unroll<O3").is_err());
        assert_eq!(Pipeline::parse("").unwrap().steps.len(), 0);
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        /// Pipeline texts as written: passes with parameters, nested adaptors.
        fn text() -> impl Strategy<Value = String> {
            let pass = (
                "[a-z][a-z0-9-]{0,10}",
                proptest::option::of("[a-zA-Z0-9;=-]{0,8}"),
            )
                .prop_map(|(n, p)| match p {
                    Some(p) => format!("{n}<{p}>"),
                    None => n,
                });
            pass.prop_recursive(4, 24, 4, |inner| {
                (
                    prop_oneof![
                        Just("function"),
                        Just("cgscc"),
                        Just("loop-mssa"),
                        Just("devirt<4>"),
                        Just("function<eager-inv>")
                    ],
                    proptest::collection::vec(inner, 1..4),
                )
                    .prop_map(|(h, v)| format!("{h}({})", v.join(",")))
            })
            .boxed()
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            #[test]
            fn written_pipelines_round_trip(parts in proptest::collection::vec(text(), 1..4)) {
                let t = parts.join(",");
                let p = Pipeline::parse(&t).unwrap();
                prop_assert_eq!(p.render(), t);
            }

            #[test]
            fn any_text_parses_or_says_where(s in "\\PC{0,40}|[a-z<>(),; ]{0,60}") {
                match Pipeline::parse(&s) {
                    Ok(p) => {
                        // Whatever parsed renders to a text that parses to the same steps.
                        let again = Pipeline::parse(&p.render()).unwrap();
                        prop_assert_eq!(again, p);
                    }
                    Err(e) => {
                        prop_assert!(e.at <= s.len());
                        prop_assert!(e.to_string().contains("fix:"));
                    }
                }
            }

            #[test]
            fn damaged_presets_never_panic(cut in any::<usize>(), at in any::<usize>(), junk in "[<>(),;]{1,3}") {
                let c = crate::catalog::Catalog::builtin().unwrap();
                let t = &c.presets[0].pipeline;
                let mut b = t.as_bytes()[..cut % t.len()].to_vec();
                let at = at % (b.len() + 1);
                b.splice(at..at, junk.bytes());
                let _ = Pipeline::parse(&String::from_utf8_lossy(&b));
            }
        }

        #[test]
        fn deep_nesting_is_an_error_not_a_stack_overflow() {
            let deep = "function(".repeat(200_000) + "sroa" + &")".repeat(200_000);
            let e = Pipeline::parse(&deep).unwrap_err();
            assert!(e.to_string().contains("nested more than 64"), "{}", e.msg);
            let ok = "function(".repeat(64) + "sroa" + &")".repeat(64);
            assert_eq!(Pipeline::parse(&ok).unwrap().render(), ok);
        }
    }
}
