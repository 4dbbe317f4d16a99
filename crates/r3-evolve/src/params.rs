//! Rewrites with knobs: a rewrite may declare integer parameters that the search tunes, in
//! one small macro form at its top level (outside functions):
//!
//! ```text
//! R3_PARAM(TILE, 8, 16, 32)              a knob and the values it may take
//! R3_REQUIRE(TILE * TILE <= BLOCK_THREADS)   a constraint over knobs and the recorded launch
//! ```
//!
//! The code uses a knob's name as a constant. r3 builds one variant per value combination
//! that every constraint admits, each with `#define NAME value` lines in front of the code
//! (and `#undef` after it), so a build is plain CUDA that the user can read and `git apply`.
//! Constraints see the knobs and the recorded launch's block (`BLOCK_X`, `BLOCK_Y`,
//! `BLOCK_Z`, `BLOCK_THREADS`); each recorded launch must satisfy them.
//!
//! Anything else at the top level is refused by the guard, as before; this module only takes
//! the declarations out of the text and says what they allow.

use super::source::{self, Kind};

/// Knob values of one build, by knob name, and in words: the attempt log's (it records them).
pub use crate::store::attempts::{words, Values};

/// The most knobs a rewrite may declare.
pub const MAX_KNOBS: usize = 4;
/// The most values one knob may list.
pub const MAX_VALUES: usize = 16;
/// The most builds a template may ask for after its constraints: each is a compile here and
/// an inner search on the GPU.
pub const MAX_BUILDS: usize = 64;

/// The launch names constraints may use besides the knobs.
pub const LAUNCH_NAMES: &[&str] = &["BLOCK_X", "BLOCK_Y", "BLOCK_Z", "BLOCK_THREADS"];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Knob {
    pub name: String,
    pub values: Vec<i64>,
}

/// A rewrite with its declarations taken out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pub knobs: Vec<Knob>,
    /// Constraint expressions, as written.
    pub requires: Vec<String>,
    /// The rewrite with each declaration blanked (spaces, newlines kept), so that spans and
    /// line numbers of the code are those of the rewrite.
    pub code: String,
}

impl Template {
    pub fn has_knobs(&self) -> bool {
        !self.knobs.is_empty()
    }

    /// Every value combination, in declaration order (the first knob varies slowest).
    fn all_values(&self) -> Vec<Values> {
        let mut out = vec![Values::new()];
        for k in &self.knobs {
            out = out
                .into_iter()
                .flat_map(|v| {
                    k.values.iter().map(move |&x| {
                        let mut v = v.clone();
                        v.insert(k.name.clone(), x);
                        v
                    })
                })
                .collect();
        }
        out
    }

    /// The combinations every constraint admits for every recorded block (`blocks`; none
    /// known: constraints over the launch are not evaluated, the measurement decides).
    pub fn builds(&self, blocks: &[[u32; 3]]) -> Result<Vec<Values>, String> {
        let mut out = Vec::new();
        for v in self.all_values() {
            if self.admits(&v, blocks)? {
                out.push(v);
            }
        }
        if out.is_empty() {
            return Err(format!(
                "no combination of the knobs' values meets R3_REQUIRE({}) for the recorded launch{}",
                self.requires.join(") and R3_REQUIRE("),
                blocks_words(blocks)
            ));
        }
        if out.len() > MAX_BUILDS {
            return Err(format!(
                "the knobs allow {} builds, more than the {MAX_BUILDS} r3 compiles and searches; list fewer values or constrain them with R3_REQUIRE",
                out.len()
            ));
        }
        Ok(out)
    }

    fn admits(&self, v: &Values, blocks: &[[u32; 3]]) -> Result<bool, String> {
        for expr in &self.requires {
            if blocks.is_empty() {
                if names_launch(expr) {
                    continue;
                }
                if !eval(expr, v, None)? {
                    return Ok(false);
                }
            }
            for b in blocks {
                if !eval(expr, v, Some(*b))? {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    /// The lines that go after it: the knob names end with the rewrite's code.
    pub fn undefines(&self) -> String {
        self.knobs
            .iter()
            .map(|k| format!("#undef {}\n", k.name))
            .collect()
    }
}

/// The lines that go in front of the code of one build.
pub fn defines(v: &Values) -> String {
    let mut s =
        String::from("// r3: the knob values this code was built and measured with (R3_PARAM)\n");
    for (name, x) in v {
        s.push_str(&format!("#define {name} {x}\n"));
    }
    s
}

fn blocks_words(blocks: &[[u32; 3]]) -> String {
    let b: Vec<String> = blocks
        .iter()
        .map(|b| format!("{}x{}x{}", b[0], b[1], b[2]))
        .collect();
    if b.is_empty() {
        String::new()
    } else {
        format!(" (block {})", b.join(", "))
    }
}

fn names_launch(expr: &str) -> bool {
    LAUNCH_NAMES.iter().any(|n| expr.contains(n))
}

/// Evaluates a constraint for knob values `v` and a block; an expression that is not a
/// comparison, or names something unknown, is the rewrite's error.
fn eval(expr: &str, v: &Values, block: Option<[u32; 3]>) -> Result<bool, String> {
    use evalexpr::{ContextWithMutableVariables, DefaultNumericTypes, HashMapContext, Value};
    let mut ctx: HashMapContext<DefaultNumericTypes> = HashMapContext::new();
    let mut set = |name: &str, x: i64| {
        let _ = ctx.set_value(name.into(), Value::Int(x));
    };
    for (k, x) in v {
        set(k, *x);
    }
    if let Some(b) = block {
        set("BLOCK_X", b[0].into());
        set("BLOCK_Y", b[1].into());
        set("BLOCK_Z", b[2].into());
        set(
            "BLOCK_THREADS",
            i64::from(b[0]) * i64::from(b[1]) * i64::from(b[2]),
        );
    }
    evalexpr::eval_boolean_with_context(expr, &ctx).map_err(|e| {
        let e = match e {
            evalexpr::EvalexprError::VariableIdentifierNotFound(n) => format!(
                "it names `{n}`, which is neither a knob nor one of {}",
                LAUNCH_NAMES.join(", ")
            ),
            e => e.to_string(),
        };
        format!("R3_REQUIRE({expr}): {e}")
    })
}

/// Takes the declarations out of a rewrite. Declarations inside functions, malformed ones,
/// and knob names that `original` (the user's file) already uses are refused with the reason.
pub fn parse(rewrite: &str, original: &str) -> Result<Template, String> {
    let toks = source::lex(rewrite).map_err(|e| format!("the rewrite does not lex: {e}"))?;
    let mut code = rewrite.to_owned();
    let (mut knobs, mut requires) = (Vec::<Knob>::new(), Vec::new());
    let mut depth = 0i32;
    let mut i = 0;
    while i < toks.len() {
        let w = toks[i].text(rewrite);
        match w {
            "{" => depth += 1,
            "}" => depth -= 1,
            "R3_PARAM" | "R3_REQUIRE" if toks[i].kind == Kind::Ident => {
                if depth != 0 {
                    return Err(format!(
                        "{w} on line {} is inside a function; declare knobs at the top level, before the code",
                        toks[i].line
                    ));
                }
                let open = i + 1;
                if toks.get(open).map(|t| t.text(rewrite)) != Some("(") {
                    return Err(format!("{w} on line {} has no `(`", toks[i].line));
                }
                let close = source::matching(rewrite, &toks, open)
                    .ok_or_else(|| format!("{w} on line {} is not closed", toks[i].line))?;
                let inner = &rewrite[toks[open].span.1..toks[close].span.0];
                if w == "R3_PARAM" {
                    let k = knob(inner, toks[i].line)?;
                    if knobs.iter().any(|o| o.name == k.name) {
                        return Err(format!("R3_PARAM({}) is declared twice", k.name));
                    }
                    knobs.push(k);
                } else {
                    requires.push(inner.trim().to_owned());
                }
                let mut end = close;
                if toks.get(close + 1).map(|t| t.text(rewrite)) == Some(";") {
                    end = close + 1;
                }
                blank(&mut code, toks[i].span.0..toks[end].span.1);
                i = end + 1;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    if knobs.len() > MAX_KNOBS {
        return Err(format!(
            "{} knobs declared, at most {MAX_KNOBS} are searched",
            knobs.len()
        ));
    }
    if knobs.is_empty() && !requires.is_empty() {
        return Err("R3_REQUIRE without any R3_PARAM".into());
    }
    clashes(&knobs, original)?;
    let t = Template {
        knobs,
        requires,
        code,
    };
    // A constraint that names nothing known fails on every combination: say so now.
    if let Some(first) = t.all_values().first() {
        for expr in &t.requires {
            eval(expr, first, Some([1, 1, 1]))?;
        }
    }
    Ok(t)
}

fn knob(inner: &str, line: u32) -> Result<Knob, String> {
    let mut parts = inner.split(',').map(str::trim);
    let name = parts.next().unwrap_or_default().to_owned();
    let ok_name = name.starts_with(|c: char| c.is_ascii_uppercase())
        && name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    if !ok_name || LAUNCH_NAMES.contains(&name.as_str()) || name.starts_with("R3_PARAM") {
        return Err(format!(
            "R3_PARAM on line {line}: `{name}` is not a knob name (upper case letters, digits and `_`, starting with a letter, not one of {})",
            LAUNCH_NAMES.join(", ")
        ));
    }
    let mut values = Vec::new();
    for p in parts {
        let x: i64 = p.parse().map_err(|_| {
            format!("R3_PARAM({name}, …) on line {line}: `{p}` is not an integer literal")
        })?;
        if values.contains(&x) {
            return Err(format!("R3_PARAM({name}, …) lists {x} twice"));
        }
        values.push(x);
    }
    if values.is_empty() || values.len() > MAX_VALUES {
        return Err(format!(
            "R3_PARAM({name}, …) on line {line} lists {} values; give 1 to {MAX_VALUES}",
            values.len()
        ));
    }
    Ok(Knob { name, values })
}

/// A knob's `#define` must not change the meaning of anything else in the file.
fn clashes(knobs: &[Knob], original: &str) -> Result<(), String> {
    let Ok(toks) = source::lex(original) else {
        return Ok(());
    };
    for k in knobs {
        let used = toks.iter().any(|t| {
            let w = t.text(original);
            (t.kind == Kind::Ident && w == k.name)
                || (t.kind == Kind::Directive
                    && w.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .any(|x| x == k.name))
        });
        if used {
            return Err(format!(
                "the knob name `{}` is already used in the file; name the knob something the file does not use",
                k.name
            ));
        }
    }
    Ok(())
}

fn blank(code: &mut String, r: std::ops::Range<usize>) {
    let spaces: String = code[r.clone()]
        .chars()
        .map(|c| if c == '\n' { '\n' } else { ' ' })
        .collect();
    code.replace_range(r, &spaces);
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "R3_PARAM(TILE, 8, 16, 32)\nR3_PARAM(VEC, 1, 2, 4);\nR3_REQUIRE(TILE * VEC <= BLOCK_X * 4)\n__global__ void k(float *y) { y[0] = TILE * VEC; }\n";

    #[test]
    fn declarations_are_taken_out_and_the_code_keeps_its_lines() {
        let t = parse(T, "").unwrap();
        assert_eq!(
            t.knobs,
            vec![
                Knob {
                    name: "TILE".into(),
                    values: vec![8, 16, 32]
                },
                Knob {
                    name: "VEC".into(),
                    values: vec![1, 2, 4]
                }
            ]
        );
        assert_eq!(t.requires, vec!["TILE * VEC <= BLOCK_X * 4"]);
        assert_eq!(t.code.len(), T.len());
        assert_eq!(t.code.lines().count(), T.lines().count());
        assert!(t.code.trim_start().starts_with("__global__"), "{}", t.code);
        let plain = parse("__global__ void k(float *y) {}", "").unwrap();
        assert!(!plain.has_knobs());
    }

    #[test]
    fn constraints_cut_the_builds_for_every_recorded_block() {
        let t = parse(T, "").unwrap();
        assert_eq!(t.builds(&[]).unwrap().len(), 9, "launch unknown: all");
        // BLOCK_X 8: TILE*VEC <= 32.
        let b = t.builds(&[[8, 1, 1]]).unwrap();
        assert!(b.iter().all(|v| v["TILE"] * v["VEC"] <= 32), "{b:?}");
        assert_eq!(b.len(), 6);
        // The smaller block decides.
        assert_eq!(t.builds(&[[32, 1, 1], [8, 1, 1]]).unwrap(), b);
        let none = t.builds(&[[1, 1, 1]]).unwrap_err();
        assert!(none.contains("no combination"), "{none}");
    }

    #[test]
    fn each_malformed_declaration_is_refused_with_its_reason() {
        let cases = [
            ("R3_PARAM(tile, 8)\n__global__ void k() {}", "not a knob name"),
            ("R3_PARAM(BLOCK_X, 8)\n__global__ void k() {}", "not a knob name"),
            ("R3_PARAM(T, 8, x)\n__global__ void k() {}", "`x` is not an integer literal"),
            ("R3_PARAM(T, 8, 8)\n__global__ void k() {}", "lists 8 twice"),
            ("R3_PARAM(T)\n__global__ void k() {}", "lists 0 values"),
            ("R3_PARAM(T, 1)\nR3_PARAM(T, 2)\n__global__ void k() {}", "declared twice"),
            ("__global__ void k() { R3_PARAM(T, 1); }", "inside a function"),
            ("R3_PARAM(T, 1\n__global__ void k() {}", "not closed"),
            ("R3_REQUIRE(1 < 2)\n__global__ void k() {}", "without any R3_PARAM"),
            ("R3_PARAM(T, 1)\nR3_REQUIRE(T < FOO)\n__global__ void k() {}", "names `FOO`"),
            ("R3_PARAM(T, 1)\nR3_REQUIRE(T + 1)\n__global__ void k() {}", "R3_REQUIRE(T + 1)"),
            ("R3_PARAM(A, 1)\nR3_PARAM(B, 1)\nR3_PARAM(C, 1)\nR3_PARAM(D, 1)\nR3_PARAM(E, 1)\n__global__ void k() {}", "at most 4"),
        ];
        for (rw, why) in cases {
            let err = parse(rw, "").expect_err(rw);
            assert!(err.contains(why), "{rw}\n  gave: {err}\n  want: {why}");
        }
        let too_many = "R3_PARAM(A, 1, 2, 3, 4, 5, 6, 7, 8)\nR3_PARAM(B, 1, 2, 3, 4, 5, 6, 7, 8, 9)\n__global__ void k() {}";
        let err = parse(too_many, "").unwrap().builds(&[]).unwrap_err();
        assert!(err.contains("72 builds"), "{err}");
    }

    #[test]
    fn a_knob_name_the_file_uses_is_refused() {
        let file = "#define TILE 4\n__global__ void k(float *y) {}\n";
        let err = parse("R3_PARAM(TILE, 8)\n__global__ void k(float *y) {}", file).unwrap_err();
        assert!(err.contains("`TILE` is already used"), "{err}");
        let file = "__device__ int VEC(int x) { return x; }\n";
        assert!(parse("R3_PARAM(VEC, 8)\n__global__ void k() {}", file).is_err());
    }

    #[test]
    fn a_build_defines_its_values_and_undefines_them_after() {
        let t = parse(T, "").unwrap();
        let v: Values = [("TILE".to_string(), 16), ("VEC".to_string(), 4)].into();
        let d = defines(&v);
        assert!(d.ends_with("#define TILE 16\n#define VEC 4\n"), "{d}");
        assert_eq!(t.undefines(), "#undef TILE\n#undef VEC\n");
        assert_eq!(words(&v), "TILE=16 VEC=4");
    }
}
