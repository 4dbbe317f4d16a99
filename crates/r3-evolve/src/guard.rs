//! What a proposed rewrite may be, checked before anything compiles it: device functions
//! only, the kernel under its own name and signature, no preprocessor but `#pragma unroll`, no
//! inline assembly, no host code; knobs only in the `R3_PARAM`/`R3_REQUIRE` form (`params`),
//! which is taken out before the rest is checked. A refusal names the reason, which the
//! attempt records.

use super::source::{self, Function, Kind, Region};

/// Rewrites that would fool the measurement (work outside the timed launch, state kept between
/// launches, narrower arithmetic), refused by their text.
mod cheats;

/// The longest rewrite accepted.
pub const MAX_BYTES: usize = 64 * 1024;

/// A rewrite that passed: its text and its functions (spans into `text`).
#[derive(Debug, Clone)]
pub struct Checked {
    /// The code with the knob declarations blanked out (spans are the rewrite's).
    pub text: String,
    pub functions: Vec<Function>,
    /// Its knobs (none for a plain rewrite).
    pub template: super::params::Template,
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
    let template = super::params::parse(rewrite, original)?;
    let rewrite = template.code.as_str();
    let toks = source::lex(rewrite).map_err(|e| format!("the rewrite does not lex: {e}"))?;
    for t in &toks {
        let w = t.text(rewrite);
        if t.kind == Kind::Directive && !is_unroll_pragma(w) && !unrolls_by_knob(w, &template) {
            return Err(format!(
                "preprocessor directive `{}` (only `#pragma unroll`, with a number or a knob, is allowed)",
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
    cheats::check(original, region, rewrite, &toks, &o.functions)?;
    Ok(Checked {
        text: rewrite.to_owned(),
        functions: o.functions,
        template,
    })
}

/// `#pragma unroll NAME` for a declared knob: the factor is one of its values.
fn unrolls_by_knob(line: &str, t: &super::params::Template) -> bool {
    let words: Vec<&str> = line.trim_start_matches('#').split_whitespace().collect();
    matches!(words.as_slice(), ["pragma", "unroll", n] if t.knobs.iter().any(|k| k.name == *n))
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

    /// A file like the red team's target (tests/it/fixtures/redteam/target.cu): a float kernel,
    /// a double kernel reading `__constant__` coefficients, and a `__device__` buffer of the
    /// file's that neither kernel uses.
    const CHEAT_FILE: &str = "__constant__ double coeffs[3];\n\
        __device__ float stash[4096];\n\
        __global__ void axpy(int n, float a, const float *x, const float *y, float *z) {\n\
          int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
          if (i < n) z[i] = a * x[i] + y[i];\n\
        }\n\
        __global__ void dpoly(int n, const double *x, double *y) {\n\
          int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
          if (i < n) y[i] = (coeffs[0] * x[i] + coeffs[1]) * x[i] + coeffs[2];\n\
        }\n";

    fn check_cheat(kernel: &str, rw: &str) -> Result<Checked, String> {
        let line = if kernel == "axpy" { 3 } else { 7 };
        let region = source::region(CHEAT_FILE, "t.cu", kernel, line).unwrap();
        check(CHEAT_FILE, &region, rw)
    }

    const AXPY_HEAD: &str = "__global__ void axpy(int n, float a, const float *x, const float *y, float *z) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n";
    const DPOLY_HEAD: &str =
        "__global__ void dpoly(int n, const double *x, double *y) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n";

    /// One case per cheat that text shows: moving work out of the timed launch, keeping state
    /// between launches, computing in a narrower type.
    #[test]
    fn each_cheat_the_text_shows_is_refused_with_its_reason() {
        let axpy = |body: &str| format!("{AXPY_HEAD}{body}\n}}");
        let dpoly = |body: &str| format!("{DPOLY_HEAD}{body}\n}}");
        let cases = [
            // Work outside the timed launch.
            ("axpy", axpy("if (i < 4096 && i < n) z[i] = a * x[i] + y[i]; if (i == 0 && n > 4096) axpy<<<(n - 4096) / 256, 256>>>(n - 4096, a, x + 4096, y + 4096, z + 4096);"), "a kernel launch (`<<<…>>>`) in device code, on line 3"),
            ("axpy", axpy("cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);"), "`cudaStream_t` on line 3: a CUDA stream"),
            ("axpy", axpy("void *args[] = {&n}; cudaLaunchDevice((void *)axpy, args, dim3(1), dim3(1), 0, 0);"), "a kernel launch through the CUDA API"),
            ("axpy", axpy("void *p = cudaGetParameterBuffer(64, 64);"), "a device-side launch"),
            ("axpy", axpy("if (i == 0) cudaDeviceSynchronize();"), "device synchronization"),
            ("axpy", axpy("float *t; cudaMalloc((void **)&t, 4 * n);"), "CUDA memory allocation"),
            ("axpy", axpy("if (i == 0) cudaMemcpyAsync(z, y, 4 * n, cudaMemcpyDeviceToDevice, 0);"), "a CUDA memory copy"),
            ("axpy", axpy("cudaEvent_t e; cudaEventRecord(e, 0);"), "a CUDA event"),
            ("axpy", axpy("cudaGraphExec_t g; cudaGraphLaunch(g, 0);"), "a CUDA graph"),
            ("axpy", axpy("cuLaunchKernel(0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0);"), "the CUDA driver API"),
            ("axpy", axpy("float *t = (float *)malloc(4 * n);"), "device heap memory"),
            // State kept between launches: a result cached, keyed on a pointer.
            ("axpy", axpy("static const float *seen = 0; if (seen == x) return; seen = x; if (i < n) z[i] = a * x[i] + y[i];"), "a function-scope `static` variable on line 3"),
            ("axpy", axpy("static __device__ float cache[4096]; if (i < n) z[i] = cache[i];"), "a function-scope `static` variable"),
            ("axpy", axpy("__device__ float cache[4096]; if (i < n) z[i] = cache[i];"), "a `__device__` variable on line 3"),
            ("axpy", axpy("__constant__ float c[1]; if (i < n) z[i] = c[0];"), "a `__constant__` variable"),
            ("axpy", axpy("__managed__ int hits; if (i < n) z[i] = hits;"), "a `__managed__` variable"),
            ("axpy", axpy("if (i < n) { if (stash[i] != 0) z[i] = stash[i]; else stash[i] = z[i] = a * x[i] + y[i]; }"), "`stash` on line 3 is a file-scope `__device__` variable that the original kernel does not use"),
            ("dpoly", dpoly("if (i == 0) coeffs[1] = 0; if (i < n) y[i] = (coeffs[0] * x[i] + coeffs[1]) * x[i] + coeffs[2];"), "a write to `__constant__` variable `coeffs`"),
            // Narrower arithmetic than the original's.
            ("axpy", axpy("if (i < n) z[i] = __half2float(__hfma(__float2half(a), __float2half(x[i]), __float2half(y[i])));"), "16-bit (half) floating point"),
            ("axpy", axpy("if (i < n) { half h = a; z[i] = h * x[i] + y[i]; }"), "`half` on line 3: 16-bit (half) floating point"),
            ("axpy", axpy("if (i < n) z[i] = __bfloat162float(__float2bfloat16(a * x[i])) + y[i];"), "bfloat16"),
            ("axpy", axpy("if (i < n) z[i] = __nv_fp8_e4m3(a * x[i]) + y[i];"), "8-bit"),
            ("dpoly", dpoly("if (i < n) { float t = x[i]; y[i] = (coeffs[0] * t + coeffs[1]) * t + coeffs[2]; }"), "`float` on line 3: single precision (float) in code whose original computes in double"),
            ("dpoly", dpoly("if (i < n) y[i] = __fmaf_rn(x[i], coeffs[0], coeffs[1]) * x[i] + coeffs[2];"), "single precision"),
            ("dpoly", dpoly("if (i < n) y[i] = (coeffs[0] * x[i] + coeffs[1]) * x[i] + coeffs[2] + 0.1f;"), "`0.1f`"),
        ];
        for (kernel, rw, why) in &cases {
            let err = check_cheat(kernel, rw).expect_err(rw);
            assert!(err.contains(why), "{rw}\n  gave: {err}\n  want: {why}");
            assert!(err.contains("fix: ") || err.contains("read-only"), "{err}");
        }
    }

    /// Every kernel of the corpus (llvm-ir-corpus/programs), given back unchanged as its own
    /// rewrite, passes: the cheats' checks refuse nothing that real kernels are made of.
    #[test]
    fn the_corpus_kernels_unchanged_pass_the_guard() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../llvm-ir-corpus/programs");
        let mut checked = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            let src = std::fs::read_to_string(&path).unwrap();
            let toks = source::lex(&src).unwrap();
            for f in source::outline(&src, &toks)
                .functions
                .iter()
                .filter(|f| f.global && !f.template)
            {
                let Ok(region) = source::region(&src, "p.cu", &f.name, f.line) else {
                    continue;
                };
                let text = region.text(&src);
                if let Err(e) = check(&src, &region, &text) {
                    panic!("{}: kernel {}: {e}", path.display(), f.name);
                }
                checked += 1;
            }
        }
        assert!(checked > 40, "{checked} kernels");
    }

    /// What looks like a cheat and is not: constants, shared memory, the types the original
    /// uses, a variable named `half`, and what replay checks instead of the text (output
    /// copied from an input, constants for the recorded size, half the output written).
    #[test]
    fn honest_code_and_what_only_replay_can_judge_pass_the_guard() {
        let axpy = |body: &str| format!("{AXPY_HEAD}{body}\n}}");
        let dpoly = |body: &str| format!("{DPOLY_HEAD}{body}\n}}");
        let fine = [
            ("axpy", axpy("static constexpr int W = 4; static const int V = 2; static __shared__ float s[256]; __shared__ float t[256]; if (i < n) z[i] = a * x[i] + y[i] + 0.0f * (W + V + s[0] + t[0]);")),
            ("axpy", axpy("int half = n / 2; if (i < half) z[i] = a * x[i] + y[i]; if (i + half < n) z[i + half] = a * x[i + half] + y[i + half];")),
            ("axpy", axpy("if (i < n) z[i] = fmaf(a, x[i], y[i]) + static_cast<float>(0);")),
            ("dpoly", dpoly("if (i < n) y[i] = fma(fma(coeffs[0], x[i], coeffs[1]), x[i], coeffs[2]);")),
            // Only replay can tell these from honest code (tests/it/redteam.rs).
            ("axpy", axpy("if (i < n) z[i] = y[i];")),
            ("axpy", axpy("if (n == 4096 && i < n) { z[i] = (float)(i % 13) + 0.25f * (i % 7); return; }")),
            ("axpy", axpy("if (i < n / 2) z[i] = a * x[i] + y[i];")),
        ];
        for (kernel, rw) in &fine {
            if let Err(e) = check_cheat(kernel, rw) {
                panic!("{rw}\n  refused: {e}");
            }
        }
    }
}
