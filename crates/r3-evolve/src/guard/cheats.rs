//! Rewrites that would fool the measurement rather than be faster, refused by their text:
//!
//! - work outside the timed launch: a kernel launched from device code (`<<<…>>>`, dynamic
//!   parallelism), the CUDA runtime or driver API (streams, events, graphs, launches, memory
//!   copies, synchronization), the device heap;
//! - state that outlives a launch, where a result could be cached (keyed on a pointer) instead
//!   of computed: function-scope `static` variables, variables declared `__device__`,
//!   `__constant__` or `__managed__` inside a function, the file's own `__device__` variables
//!   where the original kernel does not use them, writes to a `__constant__` variable;
//! - arithmetic in a narrower type than the original's (half, bfloat16, 8-bit floats, TF32
//!   tensor cores, float in double code), which a tolerance meant for reordered arithmetic
//!   would let through.
//!
//! What text cannot show (an input copied to the output, the recorded output baked in, output
//! left unwritten) is caught by replay's checks (`replay::outputs`, `replay::fresh`,
//! `replay::validate::narrowed`).

use super::super::source::{self, Function, Kind, Region, Token};

/// Ok, or why the rewrite is refused (names the thing and what to do instead).
pub fn check(
    original: &str,
    region: &Region,
    rewrite: &str,
    toks: &[Token],
    functions: &[Function],
) -> Result<(), String> {
    let region_text = region.text(original);
    let orig_toks = source::lex(&region_text).map_err(|e| e.to_string())?;
    let orig_words: std::collections::HashSet<&str> = orig_toks
        .iter()
        .filter(|t| t.kind == Kind::Ident)
        .map(|t| t.text(&region_text))
        .collect();
    let orig_narrow: Vec<Narrow> = (0..orig_toks.len())
        .filter_map(|i| narrow_at(&region_text, &orig_toks, i))
        .collect();
    let computes_in_double = orig_words.contains("double");
    let globals = file_variables(original);
    let in_body = |i: usize| functions.iter().any(|f| f.body.contains(&i));
    for (i, t) in toks.iter().enumerate() {
        let w = t.text(rewrite);
        if t.kind == Kind::Punct && w == "<<" {
            if let Some(n) = toks.get(i + 1).filter(|n| n.span.0 == t.span.1) {
                if n.text(rewrite) == "<" || n.text(rewrite) == "<<" {
                    return Err(format!(
                        "a kernel launch (`<<<…>>>`) in device code, on line {}: a child grid runs outside the timed launch (dynamic parallelism), so its work is not measured; fix: do the work in the kernel's own threads",
                        t.line
                    ));
                }
            }
        }
        if let Some(n) = narrow_at(rewrite, toks, i) {
            let original_has = match n {
                // Float is narrower only than the double the original computes in.
                Narrow::Float => !computes_in_double || orig_narrow.contains(&Narrow::Float),
                n => orig_narrow.contains(&n),
            };
            if !original_has {
                return Err(format!(
                    "`{w}` on line {}: {}; computing in lower precision than the original is refused even where a tolerance would let the results through; fix: keep the original's types",
                    t.line,
                    n.words()
                ));
            }
        }
        if t.kind != Kind::Ident {
            continue;
        }
        if let Some(what) = host_api(w) {
            return Err(format!(
                "`{w}` on line {}: {what} in device code moves work out of the timed launch or keeps state between launches; fix: compute in the kernel's own threads",
                t.line
            ));
        }
        if matches!(
            w,
            "malloc"
                | "free"
                | "calloc"
                | "realloc"
                | "new"
                | "delete"
                | "__nv_aligned_device_malloc"
        ) {
            return Err(format!(
                "`{w}` on line {}: device heap memory outlives the launch (a result could be kept there for the next one) and costs more than it saves; fix: registers, a local array or `__shared__` memory",
                t.line
            ));
        }
        if w == "__managed__" || (in_body(i) && matches!(w, "__device__" | "__constant__")) {
            return Err(format!(
                "a `{w}` variable on line {}: it outlives the launch, so a result could be cached in it between runs instead of computed; fix: a local or `__shared__` variable",
                t.line
            ));
        }
        if w == "static" && in_body(i) && !constant_declaration(rewrite, toks, i) {
            return Err(format!(
                "a function-scope `static` variable on line {}: it keeps its value from one launch to the next, so a result could be cached in it (keyed on a pointer) instead of computed; fix: a local, `__shared__` or `constexpr` variable",
                t.line
            ));
        }
        if let Some((_, space)) = globals.iter().find(|(name, _)| name == w) {
            if *space != Space::Constant && !orig_words.contains(w) {
                return Err(format!(
                    "`{w}` on line {} is a file-scope `{}` variable that the original kernel does not use: it outlives the launch, so a result could be cached in it between runs; fix: leave the file's variables to the code that uses them",
                    t.line,
                    space.word()
                ));
            }
            if *space == Space::Constant && writes(rewrite, toks, i) {
                return Err(format!(
                    "a write to `__constant__` variable `{w}` on line {}: constant memory is the program's to set, read-only in a kernel",
                    t.line
                ));
            }
        }
    }
    Ok(())
}

/// CUDA runtime and driver API families that have no place in a kernel (the device runtime
/// offers some of them to device code). What the family is, for the message.
fn host_api(w: &str) -> Option<&'static str> {
    const RUNTIME: &[(&str, &str)] = &[
        ("cudaStream", "a CUDA stream"),
        ("cudaEvent", "a CUDA event"),
        ("cudaLaunch", "a kernel launch through the CUDA API"),
        ("cudaGraph", "a CUDA graph"),
        ("cudaGetParameterBuffer", "a device-side launch"),
        ("cudaMalloc", "CUDA memory allocation"),
        ("cudaFree", "CUDA memory allocation"),
        ("cudaMemcpy", "a CUDA memory copy"),
        ("cudaMemset", "a CUDA memory fill"),
        ("cudaMemPrefetch", "a CUDA memory prefetch"),
        ("cudaDeviceSynchronize", "device synchronization"),
        ("cudaThreadSynchronize", "device synchronization"),
        ("cudaDeviceSet", "a device setting"),
        ("cudaSetDevice", "a device setting"),
        ("cudaCtx", "a CUDA context"),
        ("cudaHost", "host memory"),
    ];
    #[rustfmt::skip]
    const DRIVER: &[&str] = &[
        "cuLaunch", "cuStream", "cuEvent", "cuGraph", "cuMem", "cuCtx", "cuModule", "cuLibrary",
        "cuFunc", "cuInit", "cuDevice",
    ];
    if let Some((_, what)) = RUNTIME.iter().find(|(p, _)| w.starts_with(p)) {
        return Some(what);
    }
    if w.starts_with("cuMemcpy") || w.starts_with("cuMemset") {
        return Some("the CUDA driver API");
    }
    DRIVER
        .iter()
        .any(|p| {
            // `cuMemcpy…` but not a variable `cuMem` or `cuMemory`: the family's next letter is
            // a capital (or nothing).
            w.strip_prefix(p).is_some_and(|rest| {
                rest.chars()
                    .next()
                    .is_none_or(|c| c.is_ascii_uppercase() || c == '_')
            })
        })
        .then_some("the CUDA driver API")
}

/// Floating-point types narrower than f32 (or than the f64 an original computes in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Narrow {
    Half,
    Bfloat16,
    Fp8,
    Tf32,
    /// f32 in code whose original computes in f64.
    Float,
}

impl Narrow {
    fn words(self) -> &'static str {
        match self {
            Narrow::Half => "16-bit (half) floating point, which the original code does not use",
            Narrow::Bfloat16 => "bfloat16 arithmetic, which the original code does not use",
            Narrow::Fp8 => {
                "8-bit (or narrower) floating point, which the original code does not use"
            }
            Narrow::Tf32 => {
                "tensor-core (TF32/WMMA) arithmetic, which the original code does not use"
            }
            Narrow::Float => "single precision (float) in code whose original computes in double",
        }
    }
}

/// Math functions whose `f`-suffixed form is the single-precision one (`sqrtf`, `expf`, …).
#[rustfmt::skip]
const MATH: &[&str] = &[
    "sqrt", "cbrt", "rsqrt", "rcbrt", "exp", "exp2", "exp10", "expm1", "log", "log2", "log10",
    "log1p", "logb", "ilogb", "sin", "cos", "tan", "sincos", "sinpi", "cospi", "sincospi", "asin",
    "acos", "atan", "atan2", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "pow", "fabs",
    "fmin", "fmax", "fma", "fdim", "floor", "ceil", "round", "lround", "llround", "trunc",
    "rint", "lrint", "llrint", "nearbyint", "fmod", "remainder", "remquo", "hypot", "norm3d",
    "norm4d", "rhypot", "rnorm3d", "rnorm4d", "erf", "erfc", "erfinv", "erfcinv", "erfcx",
    "lgamma", "tgamma", "copysign", "ldexp", "frexp", "modf", "scalbn", "scalbln", "nextafter",
    "normcdf", "normcdfinv", "j0", "j1", "y0", "y1", "cyl_bessel_i0", "cyl_bessel_i1",
];

/// Half-precision intrinsics after `__h` (`__hadd`, `__hfma2`, …) or `h`/`h2` (`hsqrt`, `h2exp`).
const HALF_OPS: &[&str] = &[
    "add", "sub", "mul", "div", "fma", "neg", "abs", "max", "min", "eq", "ne", "lt", "le", "gt",
    "ge", "equ", "neu", "ltu", "leu", "gtu", "geu", "isnan", "isinf", "beq", "bne", "blt", "ble",
    "bgt", "bge", "cmadd",
];
const HALF_MATH: &[&str] = &[
    "exp", "exp2", "exp10", "log", "log2", "log10", "sqrt", "rsqrt", "rcp", "sin", "cos", "trunc",
    "ceil", "floor", "rint", "tanh",
];

/// The narrow type the token at `i` belongs to, if any.
fn narrow_at(src: &str, toks: &[Token], i: usize) -> Option<Narrow> {
    let t = &toks[i];
    let w = t.text(src);
    match t.kind {
        Kind::Number => {
            let lower = w.to_ascii_lowercase();
            let float_literal = !lower.starts_with("0x")
                && lower.ends_with('f')
                && (lower.contains('.') || lower.contains('e'));
            float_literal.then_some(Narrow::Float)
        }
        Kind::Ident => {
            let l = w.to_ascii_lowercase();
            if l.contains("bfloat16") || l.contains("bf16") {
                return Some(Narrow::Bfloat16);
            }
            if ["fp8", "fp6", "fp4", "e4m3", "e5m2", "e2m1", "e3m2", "e2m3"]
                .iter()
                .any(|s| l.contains(s))
            {
                return Some(Narrow::Fp8);
            }
            if l.contains("tf32") || l == "wmma" {
                return Some(Narrow::Tf32);
            }
            let half_op = |rest: &str| {
                let rest = rest.trim_end_matches('2');
                HALF_OPS.contains(&rest)
            };
            let half_math = |rest: &str| HALF_MATH.contains(&rest);
            if matches!(w, "half" | "half2") {
                // Also a common variable name (`int half = n / 2;`): the type only where it
                // is used as one.
                return names_a_type(src, toks, i).then_some(Narrow::Half);
            }
            if l.contains("half")
                || w.strip_prefix("__h").is_some_and(half_op)
                || w.strip_prefix("h2").is_some_and(half_math)
                || w.strip_prefix('h').is_some_and(half_math)
            {
                return Some(Narrow::Half);
            }
            let float_math = w
                .strip_suffix('f')
                .is_some_and(|stem| MATH.contains(&stem.trim_start_matches("__")));
            let float_intrinsic = [
                "__fadd_",
                "__fsub_",
                "__fmul_",
                "__fdiv_",
                "__fmaf_",
                "__frcp_",
                "__fsqrt_",
                "__frsqrt_",
                "__fdividef",
                "__saturatef",
                "__double2float",
            ]
            .iter()
            .any(|p| w.starts_with(p));
            (w.starts_with("float") || w.starts_with("__float") || float_math || float_intrinsic)
                .then_some(Narrow::Float)
        }
        _ => None,
    }
}

/// Whether the word at `i` is used as a type: a declaration (`half h`, `half *p`, `const half&`),
/// a cast (`(half)x`, `(half *)p`) or a template argument (`<half>`).
fn names_a_type(src: &str, toks: &[Token], i: usize) -> bool {
    let text = |j: usize| toks.get(j).map_or("", |t| t.text(src));
    let is_ident = |j: usize| toks.get(j).is_some_and(|t| t.kind == Kind::Ident);
    let is_operand = |j: usize| {
        toks.get(j)
            .is_some_and(|t| matches!(t.kind, Kind::Ident | Kind::Number) || t.text(src) == "(")
    };
    let prev = if i == 0 { "" } else { text(i - 1) };
    let next = text(i + 1);
    if is_ident(i + 1) && !matches!(next, "and" | "or") {
        return true;
    }
    if matches!(next, "*" | "&")
        && (is_ident(i + 2) || text(i + 2) == ")")
        && matches!(prev, "" | "(" | "," | "{" | "}" | ";" | "const" | "<")
    {
        return true;
    }
    (prev == "(" && next == ")" && is_operand(i + 2)) || (prev == "<" && matches!(next, ">" | ","))
}

/// Whether the `static` at token `i` declares something that cannot change: `constexpr`,
/// `__shared__` (per block, begins each launch undefined), or `const` data that is no pointer.
fn constant_declaration(src: &str, toks: &[Token], i: usize) -> bool {
    let start = toks[..i]
        .iter()
        .rposition(|t| matches!(t.text(src), ";" | "{" | "}"))
        .map_or(0, |p| p + 1);
    let end = toks[i..]
        .iter()
        .position(|t| matches!(t.text(src), ";" | "=" | "{"))
        .map_or(toks.len(), |p| i + p);
    let words: Vec<&str> = toks[start..end].iter().map(|t| t.text(src)).collect();
    words.contains(&"constexpr")
        || words.contains(&"__shared__")
        || (words.contains(&"const") && !words.contains(&"*"))
}

/// Whether the variable named at token `i` is assigned, incremented or decremented there
/// (after any subscripts and member names).
fn writes(src: &str, toks: &[Token], i: usize) -> bool {
    if i > 0 && matches!(toks[i - 1].text(src), "++" | "--") {
        return true;
    }
    let mut j = i + 1;
    while let Some(t) = toks.get(j) {
        match t.text(src) {
            "[" => match source::matching(src, toks, j) {
                Some(close) => j = close + 1,
                None => return false,
            },
            "." | "->" => j += 2,
            _ => break,
        }
    }
    toks.get(j).is_some_and(|t| {
        let w = t.text(src);
        super::super::kernel_text::ASSIGN.contains(&w) || matches!(w, "++" | "--")
    })
}

/// Where a file-scope variable lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Space {
    Device,
    Constant,
    Managed,
}

impl Space {
    fn word(self) -> &'static str {
        match self {
            Space::Device => "__device__",
            Space::Constant => "__constant__",
            Space::Managed => "__managed__",
        }
    }
}

/// The variables the file declares `__device__`, `__constant__` or `__managed__` outside
/// functions, by name.
fn file_variables(src: &str) -> Vec<(String, Space)> {
    let Ok(toks) = source::lex(src) else {
        return Vec::new();
    };
    let functions = source::outline(src, &toks).functions;
    let inside = |t: &Token| functions.iter().any(|f| f.span.contains(&t.span.0));
    let mut out = Vec::new();
    let mut stmt: Vec<&str> = Vec::new();
    let mut depth = 0i32;
    for t in toks
        .iter()
        .filter(|t| t.kind != Kind::Directive && !inside(t))
    {
        let w = t.text(src);
        match w {
            "(" | "[" => depth += 1,
            ")" | "]" => depth -= 1,
            "{" if depth == 0 && matches!(stmt.first(), Some(&"namespace") | Some(&"extern")) => {
                stmt.clear();
                continue;
            }
            "{" => depth += 1,
            "}" if depth == 0 => {
                stmt.clear();
                continue;
            }
            "}" => depth -= 1,
            ";" if depth == 0 => {
                declared(&stmt, &mut out);
                stmt.clear();
                continue;
            }
            _ => {}
        }
        stmt.push(w);
    }
    out
}

/// The names one top-level statement declares, where it is a device variable declaration.
fn declared(stmt: &[&str], out: &mut Vec<(String, Space)>) {
    let space = if stmt.contains(&"__constant__") {
        Space::Constant
    } else if stmt.contains(&"__managed__") {
        Space::Managed
    } else if stmt.contains(&"__device__") {
        Space::Device
    } else {
        return;
    };
    let mut depth = 0i32;
    let mut declarator: Vec<&str> = Vec::new();
    let name_of = |d: &[&str], out: &mut Vec<(String, Space)>| {
        // The declarator's name: the last word before an initializer or a subscript.
        let head = d
            .iter()
            .position(|w| matches!(*w, "=" | "[" | "("))
            .map_or(d, |p| &d[..p]);
        if let Some(name) = head
            .iter()
            .rev()
            .find(|w| w.starts_with(|c: char| c.is_alphabetic() || c == '_'))
        {
            out.push(((*name).to_owned(), space));
        }
    };
    for &w in stmt {
        match w {
            "(" | "[" | "{" => depth += 1,
            ")" | "]" | "}" => depth -= 1,
            "," if depth == 0 => {
                name_of(&declarator, out);
                declarator.clear();
                continue;
            }
            _ => {}
        }
        declarator.push(w);
    }
    // A function declaration (`__device__ float f(float);`) declares no variable.
    let is_function = declarator
        .iter()
        .position(|w| *w == "(")
        .is_some_and(|p| !declarator[..p].contains(&"="));
    if !is_function {
        name_of(&declarator, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_variables_are_found_with_their_space() {
        let src = "#include <x>\n__constant__ float coeffs[3] = {1, 2, 3};\n\
            namespace ns { __device__ int a, b = 2; }\n\
            __device__ __managed__ unsigned long long seen;\n\
            __device__ float f(float x);\n\
            __device__ float g(float x) { static __device__ float inner; return x; }\n\
            float host_only;\n";
        let v = file_variables(src);
        let names: Vec<(&str, Space)> = v.iter().map(|(n, s)| (n.as_str(), *s)).collect();
        assert_eq!(
            names,
            [
                ("coeffs", Space::Constant),
                ("a", Space::Device),
                ("b", Space::Device),
                ("seen", Space::Managed),
            ]
        );
    }

    fn narrow(src: &str) -> Vec<Option<Narrow>> {
        let toks = source::lex(src).unwrap();
        (0..toks.len()).map(|i| narrow_at(src, &toks, i)).collect()
    }

    #[test]
    fn narrow_types_are_told_by_their_names_and_literals() {
        use Narrow::*;
        assert_eq!(
            narrow("__half __float2half_rn __hadd __hfma2 hsqrt h2exp"),
            [Some(Half); 6]
        );
        // `half` the type, and `half` the variable.
        let typed = narrow("half h; (half *)p; (half)x; const half &r; vector<half> v;");
        assert_eq!(
            typed.iter().filter(|n| **n == Some(Half)).count(),
            5,
            "{typed:?}"
        );
        let named = narrow("int half = n / 2; if (i < half) y[i + half] = x * half; f(half);");
        assert!(named.iter().all(Option::is_none), "{named:?}");
        assert_eq!(
            narrow("__nv_bfloat16 __float2bfloat16"),
            [Some(Bfloat16); 2]
        );
        assert_eq!(
            narrow("__nv_fp8_e4m3 wmma __float_to_tf32"),
            [Some(Fp8), Some(Tf32), Some(Tf32)]
        );
        assert_eq!(
            narrow("float float4 sqrtf __expf __fmul_rn __double2float_rn 0.5f 1e-3F"),
            [Some(Float); 8]
        );
        // Doubles, integers and names that only look alike are nothing narrow.
        assert_eq!(
            narrow("double sqrt exp 0.5 0x1f 12 __hiloint2double hypot height hash ref"),
            [None; 11]
        );
    }

    #[test]
    fn host_api_families_are_named_and_lookalikes_are_not() {
        assert_eq!(host_api("cudaStreamCreateWithFlags"), Some("a CUDA stream"));
        assert_eq!(
            host_api("cudaDeviceSynchronize"),
            Some("device synchronization")
        );
        assert_eq!(host_api("cuLaunchKernel"), Some("the CUDA driver API"));
        assert_eq!(host_api("cuMemcpyDtoD"), Some("the CUDA driver API"));
        for fine in [
            "cudaTextureObject_t",
            "cuda",
            "cuMemory",
            "cumulative",
            "cuDev",
        ] {
            assert_eq!(host_api(fine), None, "{fine}");
        }
    }
}
