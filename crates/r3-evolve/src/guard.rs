//! What a proposed rewrite may be, checked before anything compiles it: device functions
//! only, the kernel under its own name and signature, no preprocessor but `#pragma unroll`, no
//! inline assembly, no host code. A refusal names the reason, which the attempt records.

use super::source::{self, Function, Kind, Region};

/// The longest rewrite accepted.
pub const MAX_BYTES: usize = 64 * 1024;

/// A rewrite that passed: its text and its functions (spans into `text`).
#[derive(Debug, Clone)]
pub struct Checked {
    pub text: String,
    pub functions: Vec<Function>,
}

/// The code of a model's answer: the first fenced block if there is one, else all of it.
pub fn code_of(answer: &str) -> &str {
    let Some(open) = answer.find("```") else {
        return answer.trim();
    };
    let after = &answer[open + 3..];
    let body = after.find('\n').map_or(after, |nl| &after[nl + 1..]);
    body.find("```").map_or(body, |close| &body[..close]).trim()
}

/// Checks `rewrite` as a replacement of `region` (of `original`, the file's text).
pub fn check(original: &str, region: &Region, rewrite: &str) -> Result<Checked, String> {
    if rewrite.trim().is_empty() {
        return Err("the answer holds no code".into());
    }
    if rewrite.len() > MAX_BYTES {
        return Err(format!(
            "the rewrite is {} bytes, more than the {MAX_BYTES} allowed",
            rewrite.len()
        ));
    }
    let toks = source::lex(rewrite).map_err(|e| format!("the rewrite does not lex: {e}"))?;
    for t in &toks {
        let w = t.text(rewrite);
        if t.kind == Kind::Directive && !is_unroll_pragma(w) {
            return Err(format!(
                "preprocessor directive `{}` (only `#pragma unroll` is allowed)",
                w.trim()
            ));
        }
        if t.kind == Kind::Ident && matches!(w, "asm" | "__asm__" | "__asm" | "_Pragma") {
            return Err(format!("inline assembly or pragma operator `{w}`"));
        }
        if t.kind == Kind::Ident && w == "__host__" {
            return Err("host code (`__host__`)".into());
        }
    }
    let o = source::outline(rewrite, &toks);
    if let Some(t) = o.stray {
        return Err(format!(
            "code outside device functions, from `{}` on line {}",
            t.text(rewrite),
            t.line
        ));
    }
    check_functions(original, region, rewrite, &toks, &o.functions)?;
    Ok(Checked {
        text: rewrite.to_owned(),
        functions: o.functions,
    })
}

fn is_unroll_pragma(line: &str) -> bool {
    let words: Vec<&str> = line.trim_start_matches('#').split_whitespace().collect();
    match words.as_slice() {
        ["pragma", "unroll"] | ["pragma", "nounroll"] => true,
        ["pragma", "unroll", n] => n.chars().all(|c| c.is_ascii_digit()),
        _ => false,
    }
}

fn check_functions(
    original: &str,
    region: &Region,
    rewrite: &str,
    toks: &[source::Token],
    functions: &[Function],
) -> Result<(), String> {
    let kernel = &region.kernel.name;
    let kernels: Vec<&Function> = functions.iter().filter(|f| f.global).collect();
    let [k] = kernels.as_slice() else {
        return Err(format!(
            "the rewrite must define exactly one kernel (`__global__ {kernel}`), it defines {}",
            kernels.len()
        ));
    };
    if k.name != *kernel {
        return Err(format!(
            "the kernel is renamed (`{kernel}` to `{}`)",
            k.name
        ));
    }
    let orig_toks = source::lex(original).map_err(|e| e.to_string())?;
    let was = source::param_types(original, &orig_toks, region.kernel.params.clone());
    let now = source::param_types(rewrite, toks, k.params.clone());
    if was != now {
        return Err(format!(
            "the kernel's signature changed (was ({}), now ({}))",
            was.join(", "),
            now.join(", ")
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for f in functions {
        if f.template {
            return Err(format!("template function `{}`", f.name));
        }
        if !seen.insert(&f.name) {
            return Err(format!("`{}` is defined twice", f.name));
        }
        let replaces = f.global || region.callees.iter().any(|c| c.name == f.name);
        if !replaces && region.defined.contains(&f.name) {
            return Err(format!(
                "`{}` is already defined in the file and is not part of the kernel's code",
                f.name
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "__device__ float sq(float x) { return x * x; }\n\
        __device__ float other(float x) { return x; }\n\
        __global__ void k(int n, float *y) { if (threadIdx.x < n) y[threadIdx.x] = sq(y[threadIdx.x]); }\n\
        __global__ void k2(float *y) { y[0] = other(1); }\n";

    fn check_rw(rw: &str) -> Result<Checked, String> {
        let region = source::region(FILE, "f.cu", "k", 3).unwrap();
        check(FILE, &region, rw)
    }

    #[test]
    fn a_faithful_rewrite_passes() {
        let ok = check_rw(
            "__device__ float sq(float v) { return v * v; }\n\
             __device__ float helper(float v) { return v; }\n\
             __global__ void k(const int n, float * __restrict__ y) {\n#pragma unroll 4\n for (int i = 0; i < 1; ++i) y[i] = helper(sq(y[i])); }",
        )
        .unwrap();
        assert_eq!(ok.functions.len(), 3);
    }

    #[test]
    fn each_forbidden_thing_is_refused_with_its_reason() {
        let cases = [
            ("#include <cstdlib>\n__global__ void k(int n, float *y) {}", "preprocessor directive `#include <cstdlib>`"),
            ("#define X 1\n__global__ void k(int n, float *y) {}", "preprocessor directive"),
            ("__global__ void k(int n, float *y) { asm(\"trap;\"); }", "inline assembly"),
            ("__host__ __device__ float f() { return 0; }\n__global__ void k(int n, float *y) {}", "host code"),
            ("int main() { return 0; }\n__global__ void k(int n, float *y) {}", "code outside device functions, from `int`"),
            ("__global__ void k(int n, double *y) {}", "signature changed (was (int, float *), now (int, double *))"),
            ("__global__ void k(int n, const float *y) {}", "signature changed"),
            ("__global__ void k(int n, float *y, int extra) {}", "signature changed"),
            ("__global__ void k3(int n, float *y) {}", "renamed"),
            ("__global__ void k(int n, float *y) {}\n__global__ void k(int n, float *y) {}", "exactly one kernel"),
            ("__device__ float other(float x) { return 2; }\n__global__ void k(int n, float *y) {}", "`other` is already defined"),
            ("float g;\n__global__ void k(int n, float *y) {}", "code outside device functions"),
            ("__global__ void k(int n, float *y) { const char *s = \"x; }", "does not lex"),
            ("Sorry, I cannot help.", "code outside device functions"),
            ("", "no code"),
        ];
        for (rw, why) in cases {
            let err = check_rw(rw).expect_err(rw);
            assert!(err.contains(why), "{rw}\n  gave: {err}\n  want: {why}");
        }
    }

    #[test]
    fn the_code_is_taken_from_the_first_fenced_block() {
        assert_eq!(
            code_of("Here:\n```cuda\n__global__ void k() {}\n```\nDone."),
            "__global__ void k() {}"
        );
        assert_eq!(code_of("__global__ void k() {}"), "__global__ void k() {}");
    }
}
